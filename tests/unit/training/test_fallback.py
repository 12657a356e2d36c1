"""The fall-back rule of issue 53 item 4 (training/fallback.py) and the three decisions it guards: a fitted decision
serves only with enough labelled questions and a cross-fitted figure no lower than its default's on the same
questions. Evidence rows are drawn from seeded distributions; every figure compared is computed by the fits."""

from __future__ import annotations

import numpy as np
import pytest

from service.decisions import FitDecision, Verdict, decision_of
from service.evaluation.wixqa import token_f1
from service.generation.abstention import FEATURES
from training.abstention import (
    HEADING_FALSE_REFUSAL,
    NotCoveredEvidence,
    balanced_accuracy,
    choose_features,
    choose_not_covered,
    confidences,
    fit,
    home_weighed,
    out_of_fold,
)
from training.answer_policy import best_row, cross_fitted_f1
from training.fallback import decide


def rows(rng: np.random.Generator, n: int, *, prob: float, sim: float, span: float, rare: float, unsaid: float, spread: float) -> np.ndarray:
    """``n`` evidence rows (FEATURES order) around the given means."""
    out = np.zeros((n, len(FEATURES)))
    out[:, 0] = np.clip(rng.normal(prob, spread / 2, n), 0, 1)
    out[:, 1] = out[:, 0] + np.abs(rng.normal(0, 0.05, n))
    out[:, 2] = rng.normal(sim, spread, n)
    out[:, 3] = rng.normal(span, spread, n)
    out[:, 5] = np.clip(rng.normal(rare, spread * 2, n), 0, 1)
    out[:, 6] = np.clip(rng.normal(unsaid, spread * 2, n), 0, 1)
    return out


def evidence(labelled: int, *, seed: int = 0, known: int = 12) -> NotCoveredEvidence:
    """Heading questions (easy), users' in-scope questions (harder), general off-topic ones."""
    rng = np.random.default_rng(seed)

    def users(n: int) -> np.ndarray:
        return rows(rng, n, prob=0.95, sim=0.6, span=0.7, rare=0.7, unsaid=0.4, spread=0.1)

    return NotCoveredEvidence(
        labelled=users(labelled),
        out_of_scope=rows(rng, 3, prob=0.6, sim=0.2, span=0.2, rare=1.0, unsaid=0.9, spread=0.05),
        headings=rows(rng, 30, prob=0.98, sim=0.65, span=0.9, rare=0.5, unsaid=0.3, spread=0.05),
        general=rows(rng, 120, prob=0.6, sim=0.15, span=0.15, rare=1.0, unsaid=0.95, spread=0.05),
        known=users(known),
    )


def test_too_few_questions_keep_the_default_without_measuring_the_fit() -> None:
    calls: list[int] = []

    def measure() -> tuple[float, float]:
        calls.append(1)
        return 1.0, 0.0

    d = decide(4, 30, "balanced accuracy", measure)
    assert d.verdict is Verdict.TOO_FEW and not d.serves_fitted and calls == []
    assert d.says() == "default: 4 labelled questions, too few to fit (need 30)"
    # a setting of 0 still needs one question per fold of the cross-fit
    assert decide(3, 0, "answer F1", measure, folds=5).needed == 5 and calls == []
    assert FitDecision.from_json(d.to_json()) == d and decision_of({"decision": d.to_json()}) == d and decision_of({}) is None


def test_a_stored_decision_says_its_verdict_reads_back_without_it_and_is_refused_when_corrupted() -> None:
    d = FitDecision(Verdict.WORSE, 40, 30, "answer F1", 0.41, 0.45)
    stored = d.to_json()
    assert stored["says"] == d.says() and stored["verdict"] == "worse"  # for its readers; not read back
    assert FitDecision.from_json({**stored, "says": "anything"}) == d
    with pytest.raises(ValueError, match=r"fit.decision: incomplete or invalid \(verdict: Input should be 'fitted', 'too_few' or 'worse'"):
        decision_of({"decision": {**stored, "verdict": "better"}})
    with pytest.raises(ValueError, match=r"r1/answer.json: incomplete or invalid \(needed: Field required"):
        FitDecision.from_json({k: v for k, v in stored.items() if k != "needed"}, "r1/answer.json")


def test_four_validation_questions_serve_the_default_that_fits_headings_and_the_training_questions() -> None:
    """The done-when's case: 16 labelled questions, 4 held out. The default serves, fitted on the heading questions
    and every labelled in-scope question against the home's out-of-scope questions and the general ones at the
    heading target."""
    ev = evidence(4)
    choice = choose_not_covered(ev, needed=30)
    assert choice.decision.verdict is Verdict.TOO_FEW and choice.decision.questions == 4
    assert choice.model is not None
    every, beyond = np.vstack([ev.headings, ev.known, ev.labelled]), np.vstack([ev.out_of_scope, ev.general])
    expected = fit(every, beyond, false_refusal=HEADING_FALSE_REFUSAL, features=choice.model.features, out_weight=home_weighed(ev))
    assert choice.model.threshold == pytest.approx(expected.threshold) and choice.model.coef == pytest.approx(expected.coef)
    assert np.all(confidences(choice.model, ev.labelled) >= choice.model.threshold)  # no labelled question refused


def test_the_homes_few_out_of_scope_questions_weigh_as_much_as_the_general_ones() -> None:
    """Issue 49: four questions a curator marked not covered, near the documentation (its words, a product the router
    is unsure of), weigh together as much as the 120 general ones in the default's fit: questions like them fall further
    below its threshold than under a fit where each of the four weighs one general question, and the labelled ones are
    answered (the few-labels e2e test shows it through the README's commands)."""
    rng = np.random.default_rng(0)
    ev = evidence(4)

    def near(n: int) -> np.ndarray:
        return rows(rng, n, prob=0.5, sim=0.55, span=0.7, rare=0.7, unsaid=0.4, spread=0.1)

    ev = NotCoveredEvidence(ev.labelled, near(4), ev.headings, ev.general, ev.known)
    weight = home_weighed(ev)
    assert weight[:4] == pytest.approx([30.0] * 4) and weight[4:] == pytest.approx([1.0] * 120)
    choice = choose_not_covered(ev, needed=30)
    assert choice.model is not None
    every, beyond = np.vstack([ev.headings, ev.known, ev.labelled]), np.vstack([ev.out_of_scope, ev.general])
    flat = fit(every, beyond, false_refusal=HEADING_FALSE_REFUSAL, features=choice.model.features)
    asked = near(50)
    weighed_margin = confidences(choice.model, asked) - choice.model.threshold
    flat_margin = confidences(flat, asked) - flat.threshold
    assert np.mean(weighed_margin) < np.mean(flat_margin) - 0.05
    assert np.all(confidences(choice.model, ev.labelled) >= choice.model.threshold)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_fitted_model_serves_only_when_no_worse_out_of_sample(seed: int) -> None:
    ev = evidence(60, seed=seed)
    choice = choose_not_covered(ev, needed=30, seed=seed)
    d = choice.decision
    assert d.verdict in (Verdict.FITTED, Verdict.WORSE) and d.fitted is not None and d.default is not None
    # the fitted figure recomputed: k-fold decisions on the labelled questions and the out-of-scope side
    outside, w = np.vstack([ev.out_of_scope, ev.general]), home_weighed(ev)  # the default weighs the home's 3; the fit does not
    feats = choose_features(ev.labelled, outside, false_refusal=0.03, seed=seed)["features"]
    refused, abstained, _ = out_of_fold(ev.labelled, outside, false_refusal=0.03, seed=seed, features=feats)
    assert d.fitted == pytest.approx(balanced_accuracy(refused, abstained), abs=1e-4)
    assert (d.verdict is Verdict.FITTED) == (d.fitted >= d.default)
    assert choice.model is not None
    # the default's figure recomputed: the labelled questions by the default, every out-of-scope one out of fold
    inside = np.vstack([ev.headings, ev.known])
    d_feats = choose_features(inside, outside, false_refusal=HEADING_FALSE_REFUSAL, seed=seed, out_weight=w)["features"]
    default = fit(inside, outside, false_refusal=HEADING_FALSE_REFUSAL, features=d_feats, out_weight=w)
    _, d_abstained, _ = out_of_fold(inside, outside, false_refusal=HEADING_FALSE_REFUSAL, seed=seed, features=d_feats, out_weight=w)
    d_refused = confidences(default, ev.labelled) < default.threshold
    assert d.default == pytest.approx(balanced_accuracy(d_refused, d_abstained), abs=1e-4)
    served_on = ev.labelled if d.serves_fitted else np.vstack([inside, ev.labelled])
    assert choice.model.threshold == pytest.approx(
        fit(
            served_on,
            outside,
            false_refusal=0.03 if d.serves_fitted else HEADING_FALSE_REFUSAL,
            features=choice.model.features,
            out_weight=None if d.serves_fitted else w,
        ).threshold
    )


def test_without_out_of_scope_questions_the_default_fits_on_the_general_ones_alone() -> None:
    """No out-of-scope question of the home: the default is the fit of the headings and labelled questions against the
    general ones (what it was before the home's out-of-scope questions joined it)."""
    ev = evidence(4)
    ev = NotCoveredEvidence(ev.labelled, ev.out_of_scope[:0], ev.headings, ev.general, ev.known)
    choice = choose_not_covered(ev, needed=30)
    assert choice.model is not None
    every = np.vstack([ev.headings, ev.known, ev.labelled])
    expected = fit(every, ev.general, false_refusal=HEADING_FALSE_REFUSAL, features=choice.model.features)
    assert choice.model.coef == pytest.approx(expected.coef) and choice.model.threshold == pytest.approx(expected.threshold)
    assert home_weighed(ev) == pytest.approx(np.ones(len(ev.general)))


def test_a_fit_that_refuses_more_out_of_sample_is_not_served() -> None:
    """A fit asked to refuse half its in-scope questions measures worse than the default: the default serves."""
    ev = evidence(60)
    choice = choose_not_covered(ev, needed=30, false_refusal=0.5)
    d = choice.decision
    assert d.verdict is Verdict.WORSE and d.fitted is not None and d.default is not None and d.fitted < d.default
    assert choice.model is not None
    assert d.says().startswith(f"default: fitted one measured worse out of sample (balanced accuracy {d.fitted:.3f} vs {d.default:.3f}")
    assert choice.model.target_false_refusal == HEADING_FALSE_REFUSAL


def test_the_answer_policy_is_chosen_out_of_fold() -> None:
    """Cross-fitted F1: each question answered by the policy best on the other folds, never by one chosen on it."""
    references = ["Run sitewright build.", "Click Import.", "Use the drafts flag.", "Open Audience.", "Pick a theme.", "Click Export."] * 2
    short = [token_f1(r, r) for r in references]
    long = [token_f1(r + " and then read the rest of this page to the end", r) for r in references]
    matrix = np.array([long, short])
    assert best_row(matrix) == 1 and cross_fitted_f1(matrix) == pytest.approx(1.0)
    # a policy best on one question only: out of fold it cannot be chosen for it
    lucky = np.array([[0.5] * 12, [1.0] + [0.0] * 11])
    assert best_row(lucky, np.arange(12) == 0) == 1 and cross_fitted_f1(lucky) == pytest.approx(0.5)
    d = decide(12, 10, "answer F1", lambda: (cross_fitted_f1(lucky), float(np.mean(long))))
    assert d.verdict is (Verdict.FITTED if 0.5 >= np.mean(long) else Verdict.WORSE)
