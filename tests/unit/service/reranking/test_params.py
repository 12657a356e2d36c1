"""A reranker version's stored parameters (``rerank.json``): read back equal, older versions' defaults, refused when
corrupted."""

from __future__ import annotations

import json

import pytest

from service.reranking.params import RerankParams


def test_the_parameters_read_back_as_written_and_older_versions_get_their_defaults() -> None:
    p = RerankParams(weight=0.25, depth=7, scale=0.5, shift=-2.0, max_length=96, titles=True)
    assert RerankParams.from_json(json.loads(json.dumps(p.to_json()))) == p
    assert p.to_json() == {"weight": 0.25, "depth": 7, "scale": 0.5, "shift": -2.0, "max_length": 96, "titles": True}
    assert RerankParams.from_json({"weight": 0.1, "depth": 5}) == RerankParams(0.1, 5, 1.0, 0.0, 128, False)  # saved before the options


@pytest.mark.parametrize(
    ("stored", "field"),
    [({"weight": 0.1}, "depth: Field required"), ({"weight": "heavy", "depth": 5}, "weight: Input should be a valid number")],
)
def test_a_corrupted_file_is_refused_naming_it_and_the_field(stored: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=f"v1/rerank.json: incomplete or invalid .*{field}"):
        RerankParams.from_json(stored, "v1/rerank.json")
