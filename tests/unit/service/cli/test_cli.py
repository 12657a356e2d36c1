"""The fedqa command line: its command groups, exit codes and the commands that need no index."""

from __future__ import annotations

import json

from service.cli import build_parser, main

GROUPS = ("serve", "demo", "ingest", "refresh", "train", "data", "index", "models", "ask", "evaluate", "feedback", "domains", "status")


def test_every_command_group_is_registered_and_errors_exit_2(tmp_path, monkeypatch, capsys):
    parser = build_parser()
    assert "{" + ",".join(GROUPS) + "}" in parser.format_usage()  # every group, in --help's order
    args = parser.parse_args(["evaluate", "--dataset", "demo"])
    assert (args.strategies, args.metrics, args.top_k, args.gate) == ("fused,mkpqa,uis,rfs", "retrieval", 5, "deterministic")
    monkeypatch.setenv("FEDQA_HOME", str(tmp_path / "home"))
    from service.config import get_settings

    get_settings.cache_clear()
    try:
        assert main(["models", "activate", "nonsense-1"]) == 2
        assert "cannot tell the kind of 'nonsense-1'" in capsys.readouterr().err
        assert main(["domains"]) == 0
        assert json.loads(capsys.readouterr().out)["domains"] == {}
        assert main(["models", "list"]) == 0
        assert json.loads(capsys.readouterr().out)["active"]["retriever"] == "base"  # as /readyz names it, not null
    finally:
        get_settings.cache_clear()
