"""The page prior: counting the pages the labelled questions were answered from, the bonus in the merge, its fit
(leave-one-out counts, the cross-fit's sign test), and its stored form (where the served ranking applies it:
tests/integration/retrieval/test_page_prior_served.py)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from service.queries import LabelledQuery
from service.retrieval.federated import merge
from service.retrieval.page_prior import PagePrior
from service.retrieval.passage import Hit, Passage, point_id
from service.routing.fitted import RouterFitted
from service.routing.fusion import FusionParams
from training.fusion import FitQuestion
from training.page_prior import Pages, PriorQuestion, counted, fit_page_prior, prior_questions, top1


def _passage(doc_id: str, page: str, domain: str = "a") -> Passage:
    return Passage(doc_id, domain, page, page, f"text of {doc_id}")


def _q(qid: str, *gold: str, domain: str = "a") -> LabelledQuery:
    return LabelledQuery(qid, f"question {qid}", [domain], list(gold))


def test_a_question_counts_once_per_page_and_the_questions_sharing_its_answer_are_left_out_of_its_bonus():
    passages = [_passage("faq#0", "faq"), _passage("faq#1", "faq"), _passage("ref#0", "ref"), _passage("other#0", "other")]
    joined = _q("cross", "faq#0", "ref#0")  # a joined question: the answers of q1 and q3
    prior = counted(passages, [_q("q1", "faq#0", "faq#1"), _q("q2", "faq#1"), _q("q3", "ref#0"), joined, _q("q4", "nowhere#0")])
    assert prior.pages == {"faq": 3, "ref": 2}  # q1's two gold passages are on one page: one count; q4's is not indexed
    assert set(prior.members) == {"faq", "ref"} and prior.members["faq"] == ["faq#0", "faq#1"] and "q4" not in prior.answers
    pages = Pages.of(prior)
    ids = [point_id(d) for d in ("faq#0", "ref#0", "other#0")]
    assert pages.bonus(ids, 0.1) == pytest.approx({ids[0]: 0.1 * math.log(4), ids[1]: 0.1 * math.log(3)})
    # scored as q3: q3 and the joined question (which shares ref#0) are not counted; the joined one counted faq too
    assert pages.bonus(ids, 0.1, ["ref#0"]) == pytest.approx({ids[0]: 0.1 * math.log(3)})
    assert pages.bonus(ids, 0.1, ["faq#1"]) == pytest.approx({ids[0]: 0.1 * math.log(2), ids[1]: 0.1 * math.log(3)})
    assert prior.without(["ref#0"]).pages == {"faq": 2}  # the served form of the same: what quality.py scores with


def test_the_bonus_reorders_the_merge_and_reaches_below_a_domains_top_k():
    a = [Hit(point_id(f"a{i}"), 0.9 - 0.05 * i) for i in range(6)]
    b = [Hit(point_id("b0"), 0.88)]
    weights = {"a": 1.0, "b": 1.0}
    plain = [c.point_id for c in merge({"a": a, "b": b}, weights, 2)]
    assert plain == [point_id("a0"), point_id("b0")]
    assert [c.point_id for c in merge({"a": a, "b": b}, weights, 2, {})] == plain  # no bonus: the same ranking
    lifted = merge({"a": a, "b": b}, weights, 2, {point_id("a5"): 0.5})
    assert lifted[0].point_id == point_id("a5")  # sixth of its domain, first with its bonus
    assert lifted[0].unified_score == pytest.approx(0.65 + 0.5)


def test_a_prior_reads_back_as_it_was_written_and_old_routers_have_none():
    answers = {"q1": ["faq#0"], "q2": ["faq#1"], "q3": ["faq#1", "faq#0"]}
    prior = PagePrior(weight=0.05, depth=20, members={"faq": ["faq#0", "faq#1"]}, answers=answers)
    assert prior.active and prior.bonus == pytest.approx({point_id("faq#0"): 0.05 * math.log(4), point_id("faq#1"): 0.05 * math.log(4)})
    stored = RouterFitted(page_prior=prior).to_json()
    back = RouterFitted.from_json(json.loads(json.dumps(stored)))
    assert back.page_prior == prior and back.page_prior is not None and back.page_prior.bonus == prior.bonus
    assert RouterFitted.from_json({"calibration": {"temperature": 1.0}}).page_prior is None  # a router of an older release
    assert not PagePrior(weight=0.0, depth=10, members={"faq": ["faq#0"]}, answers={"q1": ["faq#0"]}).active
    with pytest.raises(ValueError, match="page_prior.members: Field required"):
        RouterFitted.from_json({"page_prior": {"weight": 0.1, "depth": 10}})


def _faq_questions(n: int, rng: np.random.Generator, *, gold_on_faq: bool) -> tuple[list[FitQuestion], list[LabelledQuery], list[Passage]]:
    """Questions whose gold passage is (``gold_on_faq``) on the page "faq", ranked second or third by s behind
    passages of pages no question was answered from; plus training questions answered on "faq"."""
    passages, fit = [], []
    for i in range(n):
        gold = f"faq#{i}" if gold_on_faq else f"ref{i}#0"
        passages += [_passage(gold, "faq" if gold_on_faq else f"ref{i}"), _passage(f"noise{i}#0", f"noise{i}"), _passage(f"noise{i}#1", f"noise{i}")]
        s_gold = 0.60 + 0.01 * rng.random()
        hits = [Hit(point_id(f"noise{i}#0"), s_gold + 0.02 + 0.01 * rng.random()), Hit(point_id(gold), s_gold)]
        if i % 2:
            hits.append(Hit(point_id(f"noise{i}#1"), s_gold + 0.01))
        fit.append(FitQuestion(np.array([1.0]), {"a": hits}, ["a"], {gold}))
    passages += [_passage(f"faq#t{j}", "faq") for j in range(5)]
    train = [_q(f"t{j}", f"faq#t{j}") for j in range(5)]
    return fit, train, passages


def test_the_fit_adopts_the_prior_when_the_gold_pages_were_counted_and_not_otherwise():
    rng = np.random.default_rng(0)
    fit, train, passages = _faq_questions(30, rng, gold_on_faq=True)
    questions = prior_questions(fit, ["a"], None)
    pages = Pages.of(counted(passages, train))
    assert len(questions) == 30 and top1(questions, pages, 0.0, 10).sum() == 0  # U puts a passage of another page first
    prior, report = fit_page_prior(questions, pages)
    assert prior.weight > 0 and report["chosen"] == "page prior" and report["crossfit"]["pays"]
    assert report["acc_at_top1"] == 1.0 and report["acc_at_top1_without"] == 0.0
    assert prior.pages == {"faq": 5} and len(prior.members["faq"]) == 35

    fit, train, passages = _faq_questions(30, rng, gold_on_faq=False)  # answered elsewhere: the prior only misleads
    prior, report = fit_page_prior(prior_questions(fit, ["a"], None), Pages.of(counted(passages, train)))
    assert prior.weight == 0.0 and not prior.active and report["chosen"] == "none"


def test_a_held_out_question_gets_no_bonus_from_its_own_count():
    """The held-out questions are counted too (the served prior knows them): each is scored as if it were not."""
    rng = np.random.default_rng(1)
    fit, _, passages = _faq_questions(20, rng, gold_on_faq=True)
    fit = [replace(q, gold={f"only{i}#0"}, hits={"a": [*q.hits["a"], Hit(point_id(f"only{i}#0"), 0.5)]}) for i, q in enumerate(fit)]
    passages += [_passage(f"only{i}#0", f"only{i}") for i in range(20)]
    own = [_q(f"held{i}", f"only{i}#0") for i in range(20)]  # each page counted by its own question alone
    prior, report = fit_page_prior(prior_questions(fit, ["a"], None), Pages.of(counted(passages, own)))
    assert report["acc_at_top1"] == report["acc_at_top1_without"] == 0.0 and prior.weight == 0.0


def test_the_fit_ranks_as_the_fused_strategy_serves():
    """prior_questions selects with the served strategy: a domain the gate drops is not in the ranking."""
    params = replace(FusionParams.paper(0.9), unsure=0.0)
    hits = {"a": [Hit(point_id("x"), 0.9)], "b": [Hit(point_id("y"), 0.5)]}
    q = FitQuestion(np.array([0.02, 0.98]), hits, ["b"], {"y"})
    [served] = prior_questions([q], ["a", "b"], params)
    assert isinstance(served, PriorQuestion) and set(served.weights) == {"b"}  # the paper's gate keeps b alone
    assert top1([served], Pages.of(counted([], [])), 0.0, 10).tolist() == [1.0]


def _unit(*xs: float) -> np.ndarray:
    v = np.array(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_a_known_answer_loses_u_by_how_far_the_question_is_from_the_one_it_answers():
    members = {"faq": ["faq#0", "faq#1", "faq#2"]}
    answers = {"q1": ["faq#0"], "q2": ["faq#1"], "q3": ["faq#1"]}
    questions = {"q1": _unit(1, 0, 0), "q2": _unit(0, 1, 0), "q3": _unit(0, 0.6, 0.8)}
    prior = PagePrior(weight=0.0, depth=10, members=members, answers=answers, penalty=1.0, match=0.9, questions=questions)
    assert prior.active and prior.demotes and set(prior.known) == {point_id("faq#0"), point_id("faq#1")}
    near = dict(zip(prior.known, prior.nearest(_unit(0, 0.6, 0.8)).tolist(), strict=True))
    assert near[point_id("faq#0")] == pytest.approx(0.0) and near[point_id("faq#1")] == pytest.approx(1.0)  # q3, not q2
    bonus = prior.bonus_for(_unit(0, 0.6, 0.8) * 3)  # any length: cosines
    assert bonus == pytest.approx({point_id("faq#0"): -0.9})  # faq#1 answers a question asked again; faq#2 none known
    with_pages = replace(prior, weight=0.1)
    assert with_pages.bonus_for(_unit(1, 0, 0))[point_id("faq#1")] == pytest.approx(0.1 * math.log(4) - 0.9)
    assert replace(prior, penalty=0.0).bonus_for(_unit(1, 0, 0)) == {}  # no penalty: the page bonus alone (weight 0)
    without_vectors = PagePrior(weight=0.1, depth=10, members=members, answers=answers, penalty=1.0, match=0.9)
    assert not without_vectors.demotes and without_vectors.bonus_for(_unit(1, 0, 0)) == without_vectors.bonus
    assert not prior.without(["faq#0", "faq#1"]).active  # every counted question left out: nothing known


def test_the_known_answers_read_back_as_written_and_older_priors_demote_nothing():
    questions = {"q1": _unit(0.3, -0.2, 0.9), "q2": _unit(1, 2, 3)}
    prior = PagePrior(0.05, 20, {"faq": ["faq#0", "faq#1"]}, {"q1": ["faq#0"], "q2": ["faq#1"]}, penalty=0.3, match=0.8, questions=questions)
    back = RouterFitted.from_json(json.loads(json.dumps(RouterFitted(page_prior=prior).to_json()))).page_prior
    assert back is not None and back == prior and back.known == prior.known
    for q, v in questions.items():
        assert np.allclose(back.questions[q], v, atol=1e-3)  # stored as float16
    v = _unit(0.5, 0.5, 0.1)
    assert back.bonus_for(v) == pytest.approx(prior.bonus_for(v), abs=1e-3)
    stored = prior.to_json()
    old = {k: stored[k] for k in ("weight", "depth", "members", "answers")}  # a router of the previous release
    assert PagePrior.from_json(old).penalty == 0.0 and not PagePrior.from_json(old).demotes
    with pytest.raises(ValueError, match="page prior"):
        PagePrior.from_json({**stored, "questions": {"q1": "not base64!"}})
    with pytest.raises(ValueError, match="page prior: incomplete or invalid \\(questions.q1: Value error, a question's vector is stored as base64"):
        PagePrior.from_json({**stored, "questions": {"q1": [0.1, 0.2]}})


def _known_answer_questions(n: int, rng: np.random.Generator, *, first_known: bool) -> tuple[list[FitQuestion], Pages]:
    """Each question's gold passage ranked second on an FAQ page, behind a passage that (``first_known``) answers
    another labelled question, or not (a passage ranked third does)."""
    fit, passages, train, vectors = [], [], [], []
    for i in range(n):
        first, gold, third = f"faq#{i}a", f"faq#{i}b", f"faq#{i}c"
        passages += [_passage(d, "faq") for d in (first, gold, third)]
        s = 0.6 + 0.01 * rng.random()
        hits = [Hit(point_id(first), s + 0.02), Hit(point_id(gold), s), Hit(point_id(third), s - 0.01)]
        fit.append(FitQuestion(np.array([1.0]), {"a": hits}, ["a"], {gold}, vector=_unit(*rng.normal(size=8))))
        train.append(_q(f"t{i}", first if first_known else third))
        vectors.append(_unit(*rng.normal(size=8)))  # another question
    return fit, Pages.of(counted(passages, train, np.stack(vectors)))


def test_the_fit_demotes_known_answers_when_new_questions_are_answered_elsewhere_on_the_page():
    rng = np.random.default_rng(2)
    fit, pages = _known_answer_questions(30, rng, first_known=True)
    questions = prior_questions(fit, ["a"], None)
    assert top1(questions, pages, 0.05, 10).sum() == 0  # one page: the page bonus alone does not reorder
    prior, report = fit_page_prior(questions, pages)
    assert prior.penalty > 0 and prior.demotes and report["chosen"] == "page prior" and report["acc_at_top1"] == 1.0
    assert report["known_answers"] == 30 and report["crossfit"]["pays"]

    fit, pages = _known_answer_questions(30, rng, first_known=False)  # what is put first answers nobody known
    prior, report = fit_page_prior(prior_questions(fit, ["a"], None), pages)
    assert prior.penalty == 0.0 and not prior.active and report["chosen"] == "none"


def test_a_held_out_question_is_not_demoted_by_its_own_count():
    """The held-out questions are counted too, with their vectors: scored, a question's gold passage is not a known
    answer (its own count is left out), however far the counted phrasing is from the scored one."""
    rng = np.random.default_rng(3)
    fit, _ = _known_answer_questions(10, rng, first_known=False)
    fit = [replace(q, hits={"a": q.hits["a"][1:]}) for q in fit]  # the gold passage first
    passages = [_passage(d, "faq") for i in range(10) for d in (f"faq#{i}b", f"faq#{i}c")]
    own = [_q(f"held{i}", f"faq#{i}b") for i in range(10)]
    pages = Pages.of(counted(passages, own, np.stack([-np.asarray(q.vector) for q in fit])))  # counted at cosine -1
    assert top1(prior_questions(fit, ["a"], None), pages, 0.0, 10, penalty=1.0, match=0.9).tolist() == [1.0] * 10


def test_the_grid_scores_every_setting_as_the_merge_ranks_it():
    """The fit scores a depth's settings at once (training.page_prior.Ranked); each equals the top of the served merge
    with that setting's bonus, over the whole grid: ties of s, a point in two domains, known answers near and far."""
    from service.retrieval.federated import merge
    from training.page_prior import DEPTH_GRID, Ranked, _evidence, _grid

    rng = np.random.default_rng(11)
    passages = [_passage(f"p{k}#{j}", f"p{k}", domain=d) for k in range(6) for j in range(8) for d in ("a",)]
    counted_qs = [_q(f"c{i}", f"p{int(rng.integers(3))}#{int(rng.integers(8))}") for i in range(12)]
    vectors = rng.normal(size=(12, 4)).astype(np.float32)
    pages = Pages.of(counted(passages, counted_qs, vectors))
    questions = []
    for i in range(25):
        hits = {d: [Hit(point_id(f"p{int(rng.integers(6))}#{k}"), float(np.round(rng.uniform(-0.1, 0.7), 1))) for k in range(35)] for d in ("a", "b")}
        hits = {d: sorted(hs, key=lambda h: -h.score) for d, hs in hits.items()}
        gold = next(iter(hits["a"])).point_id if i % 3 else hits["b"][2].point_id
        weights = {"a": float(rng.uniform(0.5, 1.0)), "b": float(rng.uniform(0.5, 1.0))}
        questions.append(PriorQuestion(hits, weights, frozenset({gold}), frozenset(), rng.normal(size=4).astype(np.float32)))
    evidence = _evidence(questions, pages)
    assert any(ev.nearest for ev in evidence) and any(ev.counts for ev in evidence)
    for depth in DEPTH_GRID:
        settings = [s for s in _grid(True) if s.depth == depth]
        for q, ev in zip(questions, evidence, strict=True):
            served = []
            for s in settings:
                first = merge({d: h[:depth] for d, h in q.per_domain.items()}, q.weights, 1, ev.bonus(s) if s.weight > 0 or s.penalty > 0 else None)
                served.append(float(bool(first) and first[0].point_id in q.gold))
            assert Ranked.of(q, ev, depth).top1(settings).tolist() == served
