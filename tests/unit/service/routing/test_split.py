"""The stored by-product split rule (``split.json``): read back equal (its name, the file's, not stored), refused
naming the file when corrupted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.routing.split import MAX_GROUPS, SplitRule, load_split, save_split


def test_the_rule_reads_back_as_written_named_by_its_file(tmp_path: Path) -> None:
    rule = SplitRule(min_ratio=0.4, max_gap=None, fit={"questions": 12})
    save_split(rule, tmp_path / "r1" / "split.json")
    stored = json.loads((tmp_path / "r1" / "split.json").read_text())
    assert stored == {"min_ratio": 0.4, "max_gap": None, "max_groups": MAX_GROUPS, "fit": {"questions": 12}}
    back = load_split(tmp_path / "r1" / "split.json")
    assert back is not None and back.name == "r1/split.json" and back.to_json() == stored
    assert back.candidates({"a": 0.9, "b": 0.4, "c": 0.3}) == ["a", "b"]


@pytest.mark.parametrize(
    ("stored", "field"), [({"max_gap": 0.1}, "min_ratio"), ({"min_ratio": 0.4, "max_gap": None, "max_groups": [3]}, "max_groups")]
)
def test_a_corrupted_rule_is_refused_naming_its_file_and_field(tmp_path: Path, stored: dict[str, object], field: str) -> None:
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / "split.json").write_text(json.dumps(stored))
    with pytest.raises(ValueError, match=f"r1/split.json: incomplete or invalid \\({field}: "):
        load_split(tmp_path / "r1" / "split.json")
