"""What placed each passage (:class:`~service.retrieval.passage.RankFeatures`) and the key its ranking is sorted by
(``rank_score``), as the merge, the reranker and the interleaving of a message's questions carry them to a source
(the served /ask, streamed and chat: tests/integration/api/test_rank_features.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from service.ask import sources
from service.retrieval.federated import merge
from service.retrieval.lexical import LexicalHits
from service.retrieval.page_prior import PagePrior
from service.retrieval.passage import Hit, Passage, RankedHit, RankFeatures, descending, point_id
from service.retrieval.questions import interleave


def _unit(*xs: float) -> np.ndarray:
    v = np.array(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def _hits(domain: str, *scores: float) -> list[Hit]:
    return [Hit(point_id(f"{domain}#{i}"), s) for i, s in enumerate(scores)]


def _ranked(doc_id: str, u: float, *, fused_score: float | None = None, rank_score: float | None = None) -> RankedHit:
    return RankedHit(Passage(doc_id, doc_id[0], doc_id, doc_id, f"text of {doc_id}"), u, 1.0, u, fused_score=fused_score, rank_score=rank_score)


def test_the_merge_carries_s_p_and_w_and_shows_w_only_where_it_is_not_p():
    per = {"a": _hits("a", 0.8, 0.4), "b": _hits("b", 0.7)}
    router = {"a": 0.9, "b": 0.3}
    ranked = merge(per, {"a": 0.9, "b": 1.0}, 3, router=router)
    f = {c.point_id: c.features for c in ranked}
    assert f[point_id("a#0")] == RankFeatures(similarity=0.8, product_probability=0.9)  # w_j = p_j: not repeated
    assert f[point_id("b#0")] == RankFeatures(similarity=0.7, product_probability=0.3, weight=1.0)
    assert all(c.rank_score is None for c in ranked)  # no fusion: U is the merge's key
    assert merge(per, {"a": 0.9, "b": 1.0}, 1)[0].features.values() == {"similarity": 0.8, "weight": 0.9}  # no router given


def test_the_page_prior_and_known_answers_are_features_with_the_terms_u_was_changed_by():
    members = {"faq": ["faq#0", "faq#1"], "ref": ["ref#0"]}
    answers = {"q1": ["faq#0"], "q2": ["faq#0"]}
    questions = {"q1": _unit(1, 0, 0), "q2": _unit(0, 1, 0)}
    prior = PagePrior(weight=0.1, depth=10, members=members, answers=answers, penalty=1.0, match=0.9, questions=questions)
    bonus = prior.bonus_for(_unit(0.6, 0.8, 0))
    hits = {"a": [Hit(point_id(d), 0.5) for d in ("faq#0", "faq#1", "ref#0")]}
    ranked = {c.point_id: c for c in merge(hits, {"a": 1.0}, 3, bonus, router={"a": 1.0})}
    known, page, other = (ranked[point_id(d)] for d in ("faq#0", "faq#1", "ref#0"))
    assert page.features.page_prior == pytest.approx(0.1 * math.log(3)) and page.features.known_answer is None
    assert known.features.known_answer == pytest.approx(0.8)  # the nearer of q1 (0.6) and q2 (0.8)
    assert known.features.known_answer_penalty == pytest.approx(0.1)  # 1.0 * (0.9 - 0.8)
    assert known.unified_score == pytest.approx(0.5 + 0.1 * math.log(3) - 0.1)  # U = w * s + page prior - penalty
    assert other.features == RankFeatures(similarity=0.5, product_probability=1.0)  # no page counted, no known answer
    assert merge(hits, {"a": 1.0}, 3, {point_id("ref#0"): 0.2})[0].features.page_prior == 0.2  # a plain bonus: its value


def test_a_fused_merge_shows_both_ranks_and_the_bm25_score():
    dense = {"a": _hits("a", 0.9, 0.8, 0.7)}
    lexical = LexicalHits({"a": [Hit(point_id("a#2"), 7.5), Hit(point_id("a#9"), 3.0)]})
    ranked = {c.point_id: c for c in merge(dense, {"a": 1.0}, 4, lexical=lexical)}
    both, only_dense, only_lexical = ranked[point_id("a#2")], ranked[point_id("a#1")], ranked[point_id("a#9")]
    assert (both.features.dense_rank, both.features.lexical_rank, both.features.bm25) == (3, 1, 7.5)
    assert both.rank_score == pytest.approx(1 / 63 + 1 / 61)
    assert (only_dense.features.dense_rank, only_dense.features.lexical_rank, only_dense.features.bm25) == (2, None, None)
    assert only_lexical.features.dense_rank is None and only_lexical.features.similarity == 0.7  # its domain's lowest s


def test_descending_caps_each_rank_score_at_the_one_above():
    hits = [_ranked("a1", 0.9), _ranked("a2", 0.5, rank_score=0.4), _ranked("a3", 0.6), _ranked("a4", 0.1, fused_score=0.3)]
    assert [h.final_key for h in descending(hits)] == [0.9, 0.4, 0.4, 0.3]
    assert descending(hits)[1] is hits[1] and descending(hits)[0].rank_score == 0.9  # a key in order and set is kept


def test_interleaved_questions_show_their_rank_and_a_non_increasing_key():
    first = [_ranked("a1", 0.9), _ranked("a2", 0.8)]
    second = [_ranked("b1", 0.5), _ranked("b2", 0.2)]
    out = interleave([first, second], 4)
    assert [h.passage.doc_id for h in out] == ["a1", "b1", "a2", "b2"]
    assert [h.features.question_rank for h in out] == [1, 1, 2, 2]
    assert [h.final_key for h in out] == [0.9, 0.5, 0.5, 0.2]


def test_a_source_shows_the_final_key_and_the_features_computed():
    hit = RankedHit(
        Passage("a#0", "a", "t", "s", "x"), 0.5, 1.0, 0.5, fused_score=0.03, features=RankFeatures(similarity=0.5, dense_rank=2, bm25=1.23456789)
    )
    [source] = sources([hit, _ranked("a#1", 0.2)], {"a": 0.25})[:1]
    assert source.rank_score == 0.03 and source.unified_score == 0.5
    assert source.features == {"similarity": 0.5, "dense_rank": 2.0, "bm25": 1.234568}
    assert sources([_ranked("a#1", 0.2)], {})[0].rank_score == 0.2  # no fusion, no rerank: U
