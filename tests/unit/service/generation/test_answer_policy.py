"""The stored answer policy (``answer.json``): read back equal (its name, the file's, not stored), refused naming the
file when corrupted (the policy's choices on the real encoder: tests/integration/generation/test_answer_policy.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.generation.answer_policy import AnswerPolicy, load_policy, save_policy


def test_the_policy_reads_back_as_written_named_by_its_file(tmp_path: Path) -> None:
    policy = AnswerPolicy(sources=3, term_weight=0.2, margin=2.0, continue_gap=None, fit={"decision": {"verdict": "worse"}})
    save_policy(policy, tmp_path / "r1" / "answer.json")
    stored = json.loads((tmp_path / "r1" / "answer.json").read_text())
    assert stored == {"sources": 3, "term_weight": 0.2, "margin": 2.0, "continue_gap": None, "fit": {"decision": {"verdict": "worse"}}}
    back = load_policy(tmp_path / "r1" / "answer.json")
    assert back is not None and back.name == "r1/answer.json" and back.to_json() == stored and back.whole and back.continue_gap is None


@pytest.mark.parametrize(("change", "field"), [({"sources": None}, "sources"), ({"continue_gap": "far"}, "continue_gap")])
def test_a_corrupted_policy_is_refused_naming_its_file_and_field(tmp_path: Path, change: dict[str, object], field: str) -> None:
    policy = AnswerPolicy(sources=3, term_weight=0.2, margin=0.1, continue_gap=0.05)
    stored = {k: v for k, v in {**policy.to_json(), **change}.items() if v is not None}
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / "answer.json").write_text(json.dumps(stored))
    with pytest.raises(ValueError, match=f"r1/answer.json: incomplete or invalid \\({field}: "):
        load_policy(tmp_path / "r1" / "answer.json")
