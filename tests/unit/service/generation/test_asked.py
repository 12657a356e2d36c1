"""The "not covered" evidence ``nearest_out`` (:mod:`service.generation.asked`): nearer a known out-of-scope question
than any known in-scope one is positive; feedback's questions count only within their scope; a fitting question's
value leaves its own text out; the fitted rows are stored with the model and read back equal."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from service.generation.abstention import AbstentionModel, load_abstention, save_abstention
from service.generation.asked import AskedQuestions, leave_one_out, unit_rows

E = np.eye(4, dtype=np.float32)  # four orthogonal directions: cosines of 1 or 0


def _asked() -> AskedQuestions:
    return AskedQuestions(inside=E[[0]], outside=E[[1]])


def test_nearer_an_out_of_scope_question_is_positive_and_a_message_reads_its_least_out_of_scope_question() -> None:
    asked = _asked()
    assert asked.nearest_out(E[1]) == pytest.approx(1.0)
    assert asked.nearest_out(E[0]) == pytest.approx(-1.0)
    assert asked.nearest_out(unit_rows(np.array([[1.0, 1.0, 0, 0]]))) == pytest.approx(0.0)
    assert asked.nearest_out(np.stack([E[1], E[0]])) == pytest.approx(-1.0)  # one of its questions is in scope


def test_feedback_counts_within_its_scope_and_replaces_the_feedback_before() -> None:
    asked = _asked()
    marked = asked.with_feedback(np.zeros((0, 4)), [], [], E[[2]], [frozenset({"a"})])
    assert marked.nearest_out(E[2], frozenset({"a"})) == pytest.approx(1.0)  # a caller of the curator's product
    assert marked.nearest_out(E[2], None) == pytest.approx(0.0)  # every product: more than the curator sees
    assert marked.nearest_out(E[2], frozenset({"a", "b"})) == pytest.approx(0.0)
    everyone = asked.with_feedback(E[[3]], [None], [frozenset({"b"})], E[[2]], [None])
    assert everyone.nearest_out(E[2]) == pytest.approx(1.0) and everyone.nearest_out(E[3]) == pytest.approx(-1.0)
    again = everyone.with_feedback(np.zeros((0, 4)), [], [], np.zeros((0, 4)), [])
    assert again == asked and again.nearest_out(E[2]) == pytest.approx(0.0)  # unlearnt: the fitted rows alone
    assert everyone.fitted[0].shape == (1, 4) and everyone.fitted[1].shape == (1, 4)


def test_the_in_scope_questions_read_are_those_of_the_callers_products_or_of_the_product_answered() -> None:
    asked = AskedQuestions(inside=E[[0, 2]], outside=E[[1]], inside_domains=(frozenset({"a"}), frozenset({"b"})))
    assert asked.nearest_out(E[2]) == pytest.approx(-1.0)  # b's question: in scope for a caller of every product
    assert asked.nearest_out(E[2], frozenset({"a"})) == pytest.approx(0.0)  # a caller of a reads a's questions only
    assert asked.nearest_out(E[2], None, product="a") == pytest.approx(0.0)  # the answer for product a alone
    assert asked.nearest_out(E[2], None, product="b") == pytest.approx(-1.0)
    learnt = asked.with_feedback(E[[3]], [None], [frozenset({"a"})], np.zeros((0, 4)), [])
    assert learnt.nearest_out(E[3], frozenset({"a"})) == pytest.approx(-1.0) and learnt.nearest_out(E[3], None, "b") == 0.0
    assert AskedQuestions.from_json(asked.to_json()).inside_domains == asked.inside_domains


def test_a_fitting_question_is_measured_without_its_own_text() -> None:
    inside, outside = E[[0, 0]], E[[1, 2]]
    values = leave_one_out([E[[0]], E[[1]], E[[3]]], ["in", "out", "new"], inside, ["in", "in"], outside, ["out", "other"])
    # "in" has no other in-scope question (its repeat is left out too), "out" no other out-of-scope one like it
    assert values.tolist() == pytest.approx([0.0, 0.0, 0.0])
    values = leave_one_out([E[[0]], E[[1]]], ["new in", "new out"], inside, ["in", "in"], outside, ["out", "other"])
    assert values.tolist() == pytest.approx([-1.0, 1.0])


def test_a_fitting_message_of_several_questions_reads_its_least_out_of_scope_one_as_served() -> None:
    inside, outside = E[[0]], E[[1]]
    asked = AskedQuestions(inside=inside, outside=outside)
    message = np.stack([E[1], E[2]])  # one question like the out-of-scope one, one like neither
    fitted = leave_one_out([message, E[[1]]], ["both?", "one"], inside, ["in"], outside, ["out"])
    assert fitted.tolist() == pytest.approx([asked.nearest_out(message), asked.nearest_out(E[1])]) == [0.0, 1.0]


def test_the_fitted_rows_are_stored_with_the_model_and_read_back_equal(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    asked = AskedQuestions(unit_rows(rng.normal(size=(3, 8))), unit_rows(rng.normal(size=(2, 8))))
    model = AbstentionModel(["max_prob", "nearest_out"], [0.5, 0.0], [0.2, 0.1], [1.0, -2.0], 0.1, 0.4, 0.03, asked=asked)
    save_abstention(model, tmp_path / "r" / "abstention.json")
    back = load_abstention(tmp_path / "r" / "abstention.json")
    assert back is not None and back.asked is not None
    assert np.allclose(back.asked.inside, asked.inside, atol=1e-3) and back.asked.outside.shape == (2, 8)  # float16
    assert back.to_json() == model.to_json()
    with_feedback = back.asked.with_feedback(np.zeros((0, 8)), [], [], asked.outside[:1], [None])
    assert with_feedback.to_json() == back.asked.to_json()  # feedback is never stored with the model


def test_stored_rows_that_do_not_fit_the_dimension_are_refused() -> None:
    stored = AskedQuestions(E[[0]], E[[1]]).to_json()
    with pytest.raises(ValueError, match="rows of 3"):
        AskedQuestions.from_json({**stored, "dim": 3})
