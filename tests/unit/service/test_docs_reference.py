"""The reference pages (docs/reference/) are written from the code by ``python -m service.cli.docs_gen``: every setting
and every option says what it does, the committed pages are what the code gives now, and no other page keeps a
hand-written copy of a setting's or an option's description (issue 51, item 3)."""

from __future__ import annotations

import argparse
import re

from service.cli import docs_gen
from tests.utils import ROOT


def test_every_setting_has_a_description():
    from service.config import Settings

    missing = [f"FEDQA_{name.upper()}" for name, field in Settings.model_fields.items() if not (field.description or "").strip()]
    assert not missing, f"settings without a description (Field(description=...) in service/config.py): {missing}"


def test_every_command_and_option_has_a_help_text():
    from service.cli.main import build_parser

    missing = []
    for path, text, parser in docs_gen.commands(build_parser()):
        if not text.strip():
            missing.append(" ".join(path))
        missing += [f"{' '.join(path)} {names}" for names, _, help_ in docs_gen.options(parser) if not help_.strip()]
    assert not missing, f"commands or options without help= (service/cli/): {missing}"


def test_the_generated_reference_is_up_to_date():
    stale = docs_gen.stale()
    assert not stale, f"docs/reference/ out of date ({stale}): run python -m service.cli.docs_gen and commit the pages"


def test_the_check_finds_a_stale_page(tmp_path, capsys):
    (tmp_path / docs_gen.REFERENCE).mkdir(parents=True)
    for name, page in docs_gen.PAGES.items():
        (tmp_path / docs_gen.REFERENCE / name).write_text(page(), encoding="utf-8")
    assert docs_gen.stale(tmp_path) == []
    settings = tmp_path / docs_gen.REFERENCE / "settings.md"
    settings.write_text(settings.read_text(encoding="utf-8").replace("FEDQA_TAU0", "FEDQA_TAU"), encoding="utf-8")
    (tmp_path / docs_gen.REFERENCE / "cli.md").unlink()
    assert docs_gen.stale(tmp_path) == ["settings.md", "cli.md"]


def test_the_reference_names_every_setting_command_and_route():
    from service.cli.main import build_parser
    from service.config import Settings

    settings = (ROOT / "docs/reference/settings.md").read_text(encoding="utf-8")
    assert all(f"`FEDQA_{name.upper()}`" in settings for name in Settings.model_fields)
    cli = (ROOT / "docs/reference/cli.md").read_text(encoding="utf-8")
    for path, _, parser in docs_gen.commands(build_parser()):
        assert f"## {' '.join(path)}\n" in cli
        for action in parser._actions:
            assert isinstance(action, argparse._HelpAction) or all(o in cli for o in action.option_strings)
    http = (ROOT / "docs/reference/http.md").read_text(encoding="utf-8")
    for route in ("/ask", "/readyz", "/evaluate/{job_id}", "/v1/chat/completions", "/admin/reload"):
        assert f" {route}\n" in http, route


# A row of a Markdown table whose first cell is a setting or an option: a hand-written copy of its description.
COPIED_ROW = re.compile(r"^\|\s*`(?:FEDQA_[A-Z0-9_]+|--[a-z][a-z-]*)")


def test_no_page_but_the_reference_describes_settings_or_options_in_a_table():
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        if docs_gen.REFERENCE.as_posix() in path.relative_to(ROOT).as_posix():
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if COPIED_ROW.match(line):
                found.append(f"{path.relative_to(ROOT).as_posix()}:{n}: {line[:100]}")
    assert not found, "describe settings and options in the code and link docs/reference/ instead:\n" + "\n".join(found)
