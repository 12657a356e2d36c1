"""An older router on the demo home is refused with a message and the service searches everything."""

from __future__ import annotations

import json

import pytest

from service.routing.router import HeadRouter, RouterFormatError
from tests.utils import present


def test_an_older_bert_router_is_refused_with_a_message_and_the_service_searches_everything(tmp_path, demo_home):
    old = tmp_path / "router-old"
    old.mkdir()
    (old / "config.json").write_text(json.dumps({"architectures": ["BertForSequenceClassification"]}))
    with pytest.raises(RouterFormatError, match="earlier fedqa release.*fedqa train router"):
        HeadRouter.load(old, version="router-old")

    from service.artifacts import Registry
    from service.loading import load_router

    warnings: list[str] = []
    registry = Registry(demo_home)
    version = present(registry.active()["router"])
    ok = load_router(registry, version, "base", ["ledger"], warnings)
    assert ok.version == version and not warnings
    other = load_router(registry, version, "retriever-other", ["ledger"], warnings)
    assert other.version is None and "retriever-other" in warnings[0]
