"""Training data: hard negatives, synthetic queries, relevance labels, splits, the data-set folder."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence

import pytest

from service.queries import LabelledQuery
from service.retrieval.passage import Passage
from training.data.build import DataConfig, build_training_data, fingerprint
from training.data.dataset import TrainingData
from training.data.negatives import HardNegativeSampler
from training.data.relevance import LLMRelevanceJudge, parse_judgement
from training.data.split import join_cross, split_queries
from training.data.synthetic import HeuristicQueryGenerator, LLMQueryGenerator, clean_generated_question


def _corpus() -> list[Passage]:
    pages = {
        ("orbit", "orbit/guide/contacts.md"): [
            "Import contacts from CSV files of up to 50,000 rows.",
            "Merge duplicate contacts.",
            "Export contacts.",
        ],
        ("orbit", "orbit/guide/deals.md"): ["Deals move through pipeline stages.", "Close a deal as won or lost."],
        ("orbit", "orbit/admin/sso.md"): ["Enforce single sign-on for every user of the workspace."],
        ("ledger", "ledger/refunds.md"): ["Refund a payment from the invoice page.", "Partial refunds take an amount lower than the total."],
        ("ledger", "ledger/invoices.md"): ["Invoices are kept for seven years.", "Send an invoice by email."],
    }
    out = []
    for (domain, source), texts in pages.items():
        stem = source.rsplit(".", 1)[0]
        for i, t in enumerate(texts):
            heading = t.split()[0] + "ing things" if i % 2 else "Overview"
            out.append(
                Passage(f"{stem}#{i:03d}", domain, f"{stem.split('/')[-1].title()} > {heading}", source, t + " More words here to pass the limit.")
            )
    return out


def test_hard_negatives_come_from_the_same_page_first_then_nearby_pages():
    corpus = _corpus()
    sampler = HardNegativeSampler(corpus)
    negs = sampler.candidates(["orbit/guide/contacts#000"])
    same_page = {"orbit/guide/contacts#001", "orbit/guide/contacts#002"}
    assert set(negs[:2]) == same_page
    assert set(negs[2:4]) == {"orbit/guide/deals#000", "orbit/guide/deals#001"}  # same folder before other folders
    assert negs[4:] == ["orbit/admin/sso#000"]
    assert all(sampler.by_id[n].domain == "orbit" for n in negs)  # never another product's page
    assert sampler.sample(["orbit/guide/contacts#000"], 2) == negs[:2]


def test_hard_negative_sampler_never_returns_a_gold_passage(faq6_sample):
    corpus = _corpus() + [Passage(**r) for r in faq6_sample]
    sampler = HardNegativeSampler(corpus)
    rng = random.Random(7)
    ids = [p.doc_id for p in corpus]
    for trial in range(300):
        golds = rng.sample(ids, rng.randint(1, 4))
        negs = sampler.sample(golds, rng.randint(1, 40), seed=trial)
        assert not set(negs) & set(golds)
        assert len(negs) == len(set(negs))
    # Every passage of a page gold: the negatives come from other pages only.
    whole_page = [p.doc_id for p in corpus if p.source == "orbit/guide/contacts.md"]
    assert not set(sampler.candidates(whole_page)) & set(whole_page)


def test_heuristic_generator_makes_questions_from_titles_and_first_sentences():
    p = Passage("x/a#001", "x", "Git User Manual > Undoing a commit", "x/a.html", "Use git revert to undo a commit. It makes a new commit.")
    got = list(HeuristicQueryGenerator().generate([p]))
    assert {q.generator for q in got} == {"heuristic:title", "heuristic:first-sentence"}
    title_q = next(q.query for q in got if q.generator == "heuristic:title")
    assert "Undoing a commit".lower() in title_q.lower() or "undoing a commit" in title_q
    assert next(q.query for q in got if q.generator == "heuristic:first-sentence") == "Use git revert to undo a commit"
    # Generic headings fall back to the page title; reruns give the same queries.
    g = Passage("x/b#000", "x", "perlfaq4 - Data Manipulation > DESCRIPTION", "x/b.pod", "Numbers are hard.")
    assert "perlfaq4 - Data Manipulation" in HeuristicQueryGenerator().title_question(g)
    assert [q.query for q in HeuristicQueryGenerator().generate([p])] == [q.query for q in got]


class _ScriptedLLM:
    """An LLM that answers from a script (the tests check prompt handling and parsing, not the model)."""

    name = "scripted"

    def __init__(self, answers: Sequence[str | Exception]) -> None:
        self.answers = list(answers)
        self.prompts: list[str] = []

    def complete(self, prompt: str, *, max_tokens: int, stop: Sequence[str], timeout_s: float) -> str:
        self.prompts.append(prompt)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def stream(self, prompt: str, *, max_tokens: int, stop: Sequence[str], timeout_s: float) -> Iterator[str]:
        yield self.complete(prompt, max_tokens=max_tokens, stop=stop, timeout_s=timeout_s)


def test_llm_generator_uses_the_query_generation_prompt_and_tags_its_rows():
    from service.generation.llm import LLMError

    passages = _corpus()[:3]
    llm = _ScriptedLLM(["Question: How many rows can a CSV import have?\n", "ok", LLMError("down")])
    gen = LLMQueryGenerator(llm)
    got = list(gen.generate(passages))
    assert [q.query for q in got] == ["How many rows can a CSV import have?"]
    assert got[0].generator == "llm:scripted" and got[0].doc_id == passages[0].doc_id
    assert gen.failures == 2
    assert "Write one question that a customer of orbit would ask" in llm.prompts[0]
    assert passages[0].text.split()[0] in llm.prompts[0]
    assert clean_generated_question("1. What is SSO for me?") == "What is SSO for me?"
    assert clean_generated_question("What does the passage explain?\nHow does the above passage answer?") == ""


def test_relevance_judge_parses_yes_and_no():
    assert parse_judgement(" Yes.") is True and parse_judgement("No, it does not") is False and parse_judgement("maybe") is None
    p = _corpus()[0]
    llm = _ScriptedLLM(["Yes", "No"])
    judge = LLMRelevanceJudge(llm)
    assert judge.label("q1", "import contacts", p).relevant is True
    assert judge.label("q1", "refunds", p).relevant is False
    assert judge.llm is llm and "Does the passage contain the answer" in llm.prompts[0]


def _queries() -> list[LabelledQuery]:
    qs = []
    for i in range(10):
        qs.append(LabelledQuery(f"orbit-q{i:02d}", f"orbit question {i}", ["orbit"], ["orbit/guide/contacts#000"]))
        qs.append(LabelledQuery(f"ledger-q{i:02d}", f"ledger question {i}", ["ledger"], ["ledger/refunds#001"]))
    qs.append(
        LabelledQuery(
            "cross-1",
            "orbit q And, ledger q",
            ["orbit", "ledger"],
            ["orbit/guide/contacts#000", "ledger/refunds#001"],
            kind="cross",
            parts=["orbit-q00", "ledger-q00"],
        )
    )
    return qs


def test_split_is_stratified_seeded_and_keeps_cross_questions_with_their_parts():
    train, val = split_queries(_queries(), 0.3, seed=0)
    val_ids = {q.qid for q in val}
    assert sum(q.qid.startswith("orbit") for q in val) == 3 and sum(q.qid.startswith("ledger") for q in val) == 3
    assert (
        split_queries(list(reversed(_queries())), 0.3, seed=0)[1]
        and {q.qid for q in split_queries(list(reversed(_queries())), 0.3, seed=0)[1]} == val_ids
    )
    cross_in_val = "cross-1" in val_ids
    assert cross_in_val == bool({"orbit-q00", "ledger-q00"} & val_ids)
    joined = join_cross(train, 5, seed=0)
    assert len(joined) == 5 and all(len(q.domains) == 2 and len(q.parts) == 2 for q in joined)
    assert all(set(q.gold_doc_ids) >= {"orbit/guide/contacts#000", "ledger/refunds#001"} for q in joined)


def test_the_complement_split_holds_out_the_other_fold():
    """Two builds, with and without ``complement``, hold out every single-domain question exactly once."""
    queries = _queries()
    single = {q.qid for q in queries if not q.is_cross}
    train, val = split_queries(queries, 0.5, seed=3)
    train_c, val_c = split_queries(queries, 0.5, seed=3, complement=True)
    held, held_c = {q.qid for q in val if not q.is_cross}, {q.qid for q in val_c if not q.is_cross}
    assert held and held_c and not held & held_c and held | held_c == single
    assert {q.qid for q in train_c if not q.is_cross} == held
    # A joined question follows its parts: held out wherever one of its parts is.
    for part_val, ids in ((val, held), (val_c, held_c)):
        assert ("cross-1" in {q.qid for q in part_val}) == bool({"orbit-q00", "ledger-q00"} & ids)


def test_build_writes_a_training_set_with_fingerprint_generators_and_no_gold_negatives(tmp_path):
    corpus = _corpus()
    out = tmp_path / "data"
    report = build_training_data(
        corpus,
        _queries(),
        out,
        generators=[HeuristicQueryGenerator()],
        config=DataConfig(val_fraction=0.3, synthetic_per_domain=3, negatives=2, cross_examples=4, pool_random=3),
        progress=False,
    )
    data = TrainingData.load(out)
    assert data.fingerprint == report.fingerprint == fingerprint(out)
    assert data.domains == ["ledger", "orbit"]
    assert len(data.val) == 6 + ("cross-1" in data.manifest["val_qids"])
    origins = {r.origin for r in data.retriever_rows}
    assert origins == {"labelled", "synthetic", "cross"}
    assert all(r.generator and r.generator.startswith("heuristic:") for r in data.retriever_rows if r.origin == "synthetic")
    for r in data.retriever_rows:
        assert not set(r.negatives) & set(r.positives)
        assert all(d in data.passages for d in r.positives + r.negatives)
    assert all(g in data.val_pool for q in data.val for g in q.gold_doc_ids)
    val_ids = {q.qid for q in data.val}
    assert not val_ids & {r.qid for r in data.retriever_rows}  # held-out questions never trained on
    synthetic_rows = [json.loads(line) for line in (out / "synthetic.jsonl").read_text().splitlines()]
    assert synthetic_rows and all("generator" in r for r in synthetic_rows)
    with pytest.raises(FileExistsError):
        build_training_data(corpus, _queries(), out, generators=[HeuristicQueryGenerator()], progress=False)
    # With relevance labels, a rejected synthetic pair is dropped and a relevant "negative" removed.
    judge = LLMRelevanceJudge(_ScriptedLLM(["No"] * 200))
    build_training_data(
        corpus,
        _queries(),
        tmp_path / "labelled",
        generators=[HeuristicQueryGenerator()],
        judge=judge,
        config=DataConfig(synthetic_per_domain=3, label_relevance=True, label_limit=1000, cross_examples=0),
        progress=False,
    )
    labelled = TrainingData.load(tmp_path / "labelled")
    assert not [r for r in labelled.retriever_rows if r.origin == "synthetic"]  # every synthetic pair judged "No"
    assert labelled.manifest["counts"]["relevance_labels"] > 0
