"""Every metric on hand-made cases whose values were computed by hand."""

from __future__ import annotations

from typing import Any

import pytest

from service.evaluation import ragxplain
from service.evaluation.judges import ParseError, extract_json
from service.evaluation.mkpqa import faithfulness_score, parse_verdicts
from service.evaluation.rageval import keypoint_scores
from service.evaluation.record import QuestionRecord, RankedPassage
from service.evaluation.retrieval_metrics import (
    acc_at_top1,
    effective_information_rate,
    mrr,
    ranking_means,
    ranking_scores,
    recall_at_k,
    routing_accuracy,
    routing_exact,
)
from service.evaluation.runner import plan, summarize
from service.evaluation.spec import JobQuestion
from service.evaluation.stats import mean_ci
from service.evaluation.wixqa import bleu, context_recall_score, lexical, reference_sentences, rouge, token_f1
from service.retrieval.strategies import StrategyName
from service.schemas import EvalSpec, MetricGroup


# ------------------------------------------------------------------ retrieval
def test_acc_at_top1_with_multi_passage_gold_sets():
    gold = ["git/commit#003", "git/commit#004"]  # an answer spanning two passages
    assert acc_at_top1(["git/commit#004", "x"], gold) == 1.0  # the second gold passage first still counts
    assert acc_at_top1(["git/commit#003"], gold) == 1.0
    assert acc_at_top1(["x", "git/commit#003"], gold) == 0.0  # gold at rank 2 is not top-1
    assert acc_at_top1([], gold) == 0.0
    assert acc_at_top1(["x"], []) is None  # no gold: not scored, not 0


def test_recall_at_k_and_mrr():
    ranked = ["g1", "x", "y", "g3", "z", "g2"]
    gold = {"g1", "g2", "g3"}
    assert recall_at_k(ranked, gold, 5) == pytest.approx(2 / 3)
    assert recall_at_k(ranked, gold, 6) == 1.0
    assert recall_at_k(ranked, gold, 1) == pytest.approx(1 / 3)
    assert mrr(["x", "y", "g2"], gold) == pytest.approx(1 / 3)
    assert mrr(["g3"], gold) == 1.0
    assert mrr(["x", "y"], gold) == 0.0
    assert mrr(["x"], []) is None and recall_at_k(["x"], [], 5) is None


def test_routing_accuracy_and_exact():
    assert routing_accuracy(["python", "perl"], ["python"]) == 1.0
    assert routing_exact(["python", "perl"], ["python"]) == 0.0
    assert routing_accuracy(["python"], ["python", "perl"]) == 0.0  # a cross question needs both
    assert routing_exact(["perl", "python"], ["python", "perl"]) == 1.0


def test_effective_information_rate():
    passages = [("g1", "a b c d"), ("x", "e f"), ("g2", "g h i j")]
    assert effective_information_rate(passages, {"g1", "g2"}) == pytest.approx(8 / 10)
    assert effective_information_rate([("x", "a b")], {"g1"}) == 0.0


def test_ranking_scores_name_the_retrieval_metrics_of_one_question():
    m = ranking_scores(["x", "g1", "g2"], ["g1", "g2"], ["git", "perl"], ["git"], 2)
    assert m == {"acc_at_top1": 0.0, "recall_at_2": 0.5, "mrr": 0.5, "routing_accuracy": 1.0, "routing_exact": 0.0, "domains_searched": 2.0}


def test_ranking_means_against_hand_counts():
    """The retriever's and the index's training reports: questions without gold are skipped, not scored 0."""
    m = ranking_means([["a", "b", "c"], ["x", "y", "g"], ["n"], ["q"]], [["a"], ["g", "h"], ["z"], []], ks=(1, 2, 3))
    assert m["queries"] == 3
    assert m["acc@1"] == pytest.approx(1 / 3, abs=1e-4)
    assert m["recall@3"] == pytest.approx((1 + 0.5 + 0) / 3, abs=1e-4)
    assert m["recall@1"] == pytest.approx(1 / 3, abs=1e-4)
    assert m["mrr"] == pytest.approx((1 + 1 / 3 + 0) / 3, abs=1e-4)
    assert list(m) == ["queries", "acc@1", "recall@1", "recall@2", "recall@3", "mrr"]  # the order the reports store


# ------------------------------------------------------------------ aggregates
def test_mean_and_bootstrap_interval():
    agg = mean_ci([1, 0, 1, 1, None])
    assert agg["mean"] == 0.75 and agg["n"] == 4  # None is left out, not counted as 0
    lo, hi = agg["ci95"]
    assert 0.0 <= lo <= 0.75 <= hi <= 1.0 and lo < hi
    assert mean_ci([1, 0, 1, 1, None]) == agg  # fixed seed: reproducible
    assert mean_ci([1.0, 1.0, 1.0]) == {"mean": 1.0, "ci95": [1.0, 1.0], "n": 3}
    assert mean_ci([None]) == {"mean": None, "ci95": [None, None], "n": 0}
    wide, narrow = mean_ci([0, 1] * 5), mean_ci([0, 1] * 200)
    assert (wide["ci95"][1] - wide["ci95"][0]) > (narrow["ci95"][1] - narrow["ci95"][0])


# ------------------------------------------------------------------ WixQA
def test_token_f1_by_hand():
    # tokens after normalisation: pred [cat, sat], ref [cat, sat, down]: P = 1, R = 2/3, F1 = 0.8
    assert token_f1("The cat sat.", "a cat sat down") == pytest.approx(0.8)
    assert token_f1("dog", "cat") == 0.0
    assert token_f1("Same words here", "same words, here!") == 1.0


def test_bleu_by_hand():
    # pred "the cat sat on the mat" vs ref "the cat sat on a mat": n-gram precisions 5/6, 3/5, 2/4, 1/3,
    # same length so BP = 1: BLEU = (5/6 * 3/5 * 1/2 * 1/3) ** (1/4)
    expected = (5 / 6 * 3 / 5 * 1 / 2 * 1 / 3) ** 0.25
    assert bleu("the cat sat on the mat", "the cat sat on a mat") == pytest.approx(expected, abs=1e-4)
    assert bleu("the cat sat on the mat", "the cat sat on the mat") == pytest.approx(1.0)


def test_rouge_by_hand():
    # unigrams 3 of 3 predicted, 3 of 4 reference: F = 6/7; bigrams 2/2 and 2/3: F = 0.8
    r = rouge("the cat sat", "the cat sat down")
    assert r["rouge1"] == pytest.approx(6 / 7) and r["rouge2"] == pytest.approx(0.8)
    # A missing answer to a question with a reference is a failure of the system (0); no reference: not scored.
    assert lexical(None, "x") == {"token_f1": 0.0, "bleu": 0.0, "rouge1": 0.0, "rouge2": 0.0}
    assert lexical("x", None) == {"token_f1": None, "bleu": None, "rouge1": None, "rouge2": None}


def test_context_recall_score_and_reference_sentences():
    assert context_recall_score([1, 0, 1, 1]) == 0.75
    assert context_recall_score([]) is None
    assert reference_sentences("Use int(). It converts strings.\n\nSee also float.") == ["Use int().", "It converts strings.", "See also float."]


# ------------------------------------------------------------------ MKP-QA faithfulness, RAGEval
def test_faithfulness_from_verdicts():
    assert faithfulness_score([1, 0, 1]) == pytest.approx(2 / 3)
    assert faithfulness_score([]) is None
    verdicts = parse_verdicts({"verdicts": [{"statement": 1, "verdict": 1}, {"statement": 2, "verdict": "0"}]}, 2)
    assert [v for v, _ in verdicts] == [1, 0]
    with pytest.raises(ParseError):
        parse_verdicts({"verdicts": [{"verdict": 1}]}, 2)  # one verdict per statement or a parse failure
    with pytest.raises(ParseError):
        parse_verdicts({"verdicts": [{"verdict": 0.5}]}, 1)


def test_rageval_keypoint_scores():
    s = keypoint_scores(["covered", "contradicted", "missing", "covered"])
    assert s == {"completeness": 0.5, "hallucination": 0.25, "irrelevance": 0.25}
    assert keypoint_scores([]) == {"completeness": None, "hallucination": None, "irrelevance": None}


def test_ragxplain_rule_actions_prioritise_the_lowest_metrics():
    means = {
        "rx_context_relevancy": 0.4,
        "rx_context_recall": 0.2,
        "rx_factuality": 0.9,
        "rx_grading_note": None,
        "rx_answer_relevancy": 0.7,
        "rx_context_adherence": 0.6,
    }
    actions = ragxplain.rule_actions(means)
    assert [a["metric"] for a in actions] == ["rx_context_recall", "rx_context_relevancy", "rx_context_adherence", "rx_answer_relevancy"]
    assert [a["priority"] for a in actions] == [1, 2, 3, 4] and all(a["source"] == "rules" for a in actions)


# ------------------------------------------------------------------ structured output
@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('{"score": 7, "reason": "ok"}', {"score": 7, "reason": "ok"}),
        ('Sure! ```json\n{"score": 8}\n``` hope that helps', {"score": 8}),
        ("Here: {'score': 3, 'reason': 'weak',}", {"score": 3, "reason": "weak"}),
        ('text {"verdicts": [{"verdict": 1, "reason": "has } brace"}]} more', {"verdicts": [{"verdict": 1, "reason": "has } brace"}]}),
        ('["a", "b"]', ["a", "b"]),
    ],
)
def test_extract_json(reply, expected):
    assert extract_json(reply) == expected


@pytest.mark.parametrize("reply", ["", "The answer is good. Score: seven", "{unclosed"])
def test_extract_json_failures(reply):
    with pytest.raises(ParseError):
        extract_json(reply)


# ------------------------------------------------------------------ summary and dry run
def _rec(qid, strategy, domains, acc, rel=None, rel_kind=None, **fields: Any) -> QuestionRecord:
    """A hand-made record (``fields``: more of its fields, e.g. its ranking or answer)."""
    return QuestionRecord.model_validate(
        {
            "qid": qid,
            "query": qid,
            "domains": domains,
            "kind": "cross" if len(domains) > 1 else "uni",
            "strategy": strategy,
            "position": 0,
            "gold_doc_ids": ["g"],
            "ranking": [],
            "active_domains": domains,
            "fallback": False,
            "probabilities": {},
            "metrics": {"acc_at_top1": acc, "relevancy": rel},
            "outcomes": {"relevancy": {"value": rel, "explanation": None, "error": None, "kind": rel_kind, "calls": 1}},
            "judge": "judge-x",
            **fields,
        }
    )


def _top(doc_id: str) -> list[RankedPassage]:
    """A ranking of one passage."""
    return [RankedPassage(doc_id=doc_id, domain="git", title=doc_id, score=0.5, unified_score=0.5)]


def _questions(*labels: dict) -> list[JobQuestion]:
    """Questions of a job from their labels (the text is the qid)."""
    return [JobQuestion(query=q["qid"], **q) for q in labels]


def test_summary_groups_means_and_failures():
    spec = EvalSpec.model_validate({"strategies": ["mkpqa"], "metrics": ["retrieval", "answer"], "top_k": 5, "gate": "deterministic", "seed": None})
    queries = _questions({"qid": "a", "domains": ["git"]}, {"qid": "b", "domains": ["git"]}, {"qid": "c", "domains": ["git", "perl"]})
    records = [
        _rec("a", "mkpqa", ["git"], 1.0, 8.0),
        _rec("b", "mkpqa", ["git"], 0.0, None, "parse"),  # a judge parse failure: counted, not scored 0
        _rec("c", "mkpqa", ["git", "perl"], 1.0, 4.0),
    ]
    s = summarize(spec, queries, records, dataset="hand")
    r = s["results"]["mkpqa"]
    assert s["n"] == 3 and s["dataset"] == "hand"
    assert r["all"]["acc_at_top1"] == pytest.approx(2 / 3)
    assert r["uni"]["acc_at_top1"] == 0.5 and r["cross"]["acc_at_top1"] == 1.0
    assert r["domain:git"]["acc_at_top1"] == pytest.approx(2 / 3) and r["domain:perl"]["acc_at_top1"] == 1.0
    assert r["all"]["relevancy"] == 6.0  # (8 + 4) / 2: the failed question is left out
    assert s["counts"]["mkpqa"]["all"]["relevancy"] == 2
    assert s["failures"]["mkpqa"]["relevancy"] == {"parse": 1}
    assert s["judge"]["model"] == "judge-x" and "relevancy" in s["judge"]["metrics"]
    assert s["n_by_group"] == {"all": 3, "uni": 2, "cross": 1, "domain:git": 3, "domain:perl": 1}


def test_dry_run_counts_llm_calls():
    spec = EvalSpec.model_validate({"strategies": ["mkpqa", "lfs"], "metrics": ["retrieval", "answer", "rageval"], "top_k": 5})
    p = plan(spec, n_questions=3, n_domains=4, retries=2)
    # per question and strategy: 1 generation + 1 relevancy + 2 faithfulness + 1 rageval labels = 5, x 3 x 2 = 30;
    # lfs: 4 domains x 3 questions = 12; key points once per question = 3
    assert p["llm_calls"] == {"generation": 6, "relevancy": 6, "faithfulness": 12, "rageval_labels": 6, "lfs_selection": 12, "rageval_key_points": 3}
    assert p["total_llm_calls"] == 45 and p["judge_calls"] == 27
    assert p["max_llm_calls_with_retries"] == 18 + 27 * 3
    assert plan(EvalSpec(strategies=[StrategyName.UIS], metrics=[MetricGroup.RETRIEVAL]), 10, 6, 2)["total_llm_calls"] == 0


def test_report_is_self_contained_html_with_charts_and_failures():
    from service.evaluation.report import render

    spec = EvalSpec.model_validate({"strategies": ["mkpqa", "uis"], "metrics": ["retrieval", "answer"], "top_k": 5})
    queries = _questions({"qid": "a", "domains": ["git"]}, {"qid": "c", "domains": ["git", "perl"]})
    records = [
        _rec("a", s, ["git"], acc, None, "parse", ranking=_top("x"), answer="<b>raw</b> answer", answer_mode="generative")
        for s, acc in (("mkpqa", 1.0), ("uis", 0.0))
    ] + [_rec("c", s, ["git", "perl"], 0.0, None, "parse", ranking=_top("y")) for s in ("mkpqa", "uis")]
    page = render(summarize(spec, queries, records, dataset="hand"), records)
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page and "http" not in page.split("</style>")[0]
    assert page.count("<svg") == 7  # acc, recall, mrr, routing x2, relevancy, faithfulness; domains_searched not charted
    assert "uni (n=1)" in page and "cross (n=1)" in page
    assert "no value: every question failed" in page  # relevancy: all parse failures, shown not hidden
    assert "&lt;b&gt;raw&lt;/b&gt;" in page  # answers are escaped
    assert "judged by <b>judge-x</b>" in page


def test_report_names_lfs_votes_only_where_there_are_votes():
    """A fused record's selector (its q per domain) has no votes: its line must not end in "lfs votes None"."""
    from service.evaluation.report import render

    spec = EvalSpec.model_validate({"strategies": ["fused", "lfs"], "metrics": ["retrieval"], "top_k": 5, "gate": "deterministic", "seed": None})
    queries = _questions({"qid": "a", "domains": ["git"]})
    records = [
        _rec("a", "fused", ["git"], 0.0, ranking=_top("x"), selector={"fused": {"git": 0.9}, "errors": []}),
        _rec("a", "lfs", ["git"], 0.0, ranking=_top("x"), selector={"votes": {"git": True}, "failures": 0, "errors": []}),
    ]
    page = render(summarize(spec, queries, records, dataset="hand"), records)
    assert "lfs votes None" not in page
    assert page.count("lfs votes {") == 1  # the lfs line keeps its votes


def test_the_demo_datasets_report_says_its_figures_are_in_sample():
    """The demo's home was fitted on the demo's questions: its evaluation says so (another dataset's does not)."""
    from service.evaluation.report import render

    spec = EvalSpec.model_validate({"strategies": ["uis"], "metrics": ["retrieval"], "top_k": 5, "gate": "deterministic", "seed": None})
    records = [_rec("a", "uis", ["git"], 1.0, ranking=_top("x"))]
    demo = summarize(spec, _questions({"qid": "a", "domains": ["git"]}), records, dataset="demo")
    assert any(n.startswith("in-sample") for n in demo["notes"]) and "in-sample" in render(demo, records)
    assert not any("in-sample" in n for n in summarize(spec, _questions({"qid": "a", "domains": ["git"]}), records, dataset="hand")["notes"])
