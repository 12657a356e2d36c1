"""The stored "not covered" model (``abstention.json``): read back equal (its name, the file's, not stored), refused
naming the file when corrupted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.generation.abstention import EVIDENCE_FORM, FEATURES, AbstentionModel, load_abstention, save_abstention


def _model() -> AbstentionModel:
    return AbstentionModel(
        features=["max_prob", "best_similarity"],
        mean=[0.4, 0.5],
        scale=[0.2, 0.1],
        coef=[1.5, 2.0],
        intercept=-0.3,
        threshold=0.35,
        target_false_refusal=0.05,
        fit={"questions": 40, "decision": {"verdict": "fitted"}},
    )


def test_the_model_reads_back_as_written_named_by_its_file(tmp_path: Path) -> None:
    model = _model()
    save_abstention(model, tmp_path / "r1" / "abstention.json")
    assert "name" not in json.loads((tmp_path / "r1" / "abstention.json").read_text())
    back = load_abstention(tmp_path / "r1" / "abstention.json")
    assert back is not None and back.name == "r1/abstention.json" and back.to_json() == model.to_json()
    assert back == AbstentionModel(**{**model.to_json(), "name": "r1/abstention.json"})


@pytest.mark.parametrize(("change", "field"), [({"threshold": None}, "threshold"), ({"features": "max_prob"}, "features")])
def test_a_corrupted_model_is_refused_naming_its_file_and_field(tmp_path: Path, change: dict[str, object], field: str) -> None:
    stored = {k: v for k, v in {**_model().to_json(), **change}.items() if v is not None}
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / "abstention.json").write_text(json.dumps(stored))
    with pytest.raises(ValueError, match=f"r1/abstention.json: incomplete or invalid \\({field}: "):
        load_abstention(tmp_path / "r1" / "abstention.json")


def test_a_model_stored_before_the_evidence_form_is_stale_only_when_it_reads_the_vocabulary() -> None:
    """A file without ``evidence_form`` was fitted when everyday words no passage holds still counted in ``rare_word``
    and ``uncovered``: stale if it reads either; one the fit writes today is not."""
    import numpy as np

    from training.abstention import fit

    old = AbstentionModel.from_json({k: v for k, v in _model().to_json().items() if k != "evidence_form"})
    assert old.evidence_form == "" and not old.stale  # max_prob and best_similarity only
    reads_vocabulary = AbstentionModel.from_json({**old.to_json(), "features": ["max_prob", "rare_word"], "evidence_form": ""})
    assert reads_vocabulary.stale
    rng = np.random.default_rng(0)
    fitted = fit(rng.normal(1.0, 0.3, (20, len(FEATURES))), rng.normal(0.0, 0.3, (20, len(FEATURES))), false_refusal=0.05)
    assert fitted.evidence_form == EVIDENCE_FORM and "rare_word" in fitted.features and not fitted.stale
    assert AbstentionModel.from_json(fitted.to_json()).evidence_form == EVIDENCE_FORM
