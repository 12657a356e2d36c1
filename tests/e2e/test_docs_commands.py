"""Every command the docs show works (issue 51, item 5), and every link between the pages resolves.

Each ``bash`` block of README.md and docs/ (the decision logs under docs/decisions/ record commands as they were run
then, and are left out) carries a marker on the line before it:

- ``<!-- run: tests/e2e/test_docs_commands.py -->``: this test runs the block, in bash, from the clone, with a fresh
  ``HOME``; when a ``text`` block marked ``<!-- output: ... -->`` follows it, the output must be that block.
- ``<!-- run: PATH -->``: another test or script (PATH, which exists) runs it: ``tests/e2e/test_readme.py`` the README's
  own-documentation block, ``.ci/run`` the test command.
- ``<!-- not run: WHY -->``: it needs what a test cannot have cheaply (a running service, a trained home, faq6).

Whatever the marker, every ``fedqa`` command in a block must parse with the ``fedqa`` parser (its command and
options exist), and every ``python`` script it names must exist and define the options it is given.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.utils import ROOT

FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)
MARKER = re.compile(r"<!-- (run|not run|output): ?(.*?) -->$")
THIS = "tests/e2e/test_docs_commands.py"


def pages(root: Path = ROOT) -> list[Path]:
    """README.md and the pages of docs/, the decision logs left out."""
    return [root / "README.md", *(p for p in sorted((root / "docs").rglob("*.md")) if "decisions" not in p.relative_to(root).parts)]


def blocks(path: Path) -> list[tuple[int, str, str, tuple[str, str] | None]]:
    """(line, language, text, marker) of every fenced block of a page; marker = (kind, rest) of the line before it."""
    text = path.read_text(encoding="utf-8")
    found = []
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = MARKER.search(before.strip())
        found.append((text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2), (marker.group(1), marker.group(2)) if marker else None))
    return found


def bash_blocks() -> list[tuple[str, int, str, tuple[str, str] | None]]:
    return [(p.relative_to(ROOT).as_posix(), line, body, marker) for p in pages() for line, lang, body, marker in blocks(p) if lang in ("bash", "sh")]


def test_every_bash_block_says_whether_and_where_it_runs():
    bad = []
    for page, line, _body, marker in bash_blocks():
        if marker is None or marker[0] == "output":
            bad.append(f"{page}:{line}: no <!-- run: ... --> or <!-- not run: ... --> marker before the block")
        elif marker[0] == "run" and not (ROOT / marker[1]).exists():
            bad.append(f"{page}:{line}: run by {marker[1]}, which does not exist")
        elif marker[0] == "not run" and len(marker[1]) < 10:
            bad.append(f"{page}:{line}: say why the block is not run")
    assert not bad, "\n".join(bad)


def test_blocks_run_elsewhere_are_the_commands_that_run_there():
    """A block marked as run by .ci/run is in it verbatim; one run by tests/e2e/test_readme.py is the block it reads."""
    from tests.e2e.test_readme import own_documentation_block

    for page, line, body, marker in bash_blocks():
        if marker and marker[0] == "run" and marker[1] == ".ci/run":
            assert body.strip() in (ROOT / ".ci/run").read_text(encoding="utf-8"), f"{page}:{line}"
        if marker and marker[0] == "run" and marker[1] == "tests/e2e/test_readme.py":
            assert body == own_documentation_block(), f"{page}:{line}: not the block tests/e2e/test_readme.py runs"


def commands(body: str) -> list[list[str]]:
    """The simple commands of a block: lines joined at backslashes, comments dropped, split at pipes and lists,
    leading ``VAR=value`` assignments and ``export``/``time`` dropped."""
    out = []
    for line in body.replace("\\\n", " ").splitlines():
        line = re.sub(r"\$\([^()]*\)", "SUBST", line)  # a command substitution is one word's worth
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:
            continue  # a line shlex cannot read (an unbalanced quote inside $(...)): nothing to check
        cmd: list[str] = []
        for tok in [*tokens, ";"]:
            if tok in ("|", "||", "&&", ";", "&"):
                while cmd and (re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", cmd[0]) or cmd[0] in ("export", "time")):
                    cmd.pop(0)
                if cmd:
                    out.append(cmd)
                cmd = []
            else:
                cmd.append(tok.rstrip("&;") if tok.endswith(("&", ";")) and len(tok) > 1 else tok)
    return out


def _fedqa_problem(cmd: list[str]) -> str | None:
    from service.cli.main import build_parser

    args = [a for a in cmd[1:] if a != "..."]
    if len(args) < len(cmd) - 1:
        return None  # an elided command ("fedqa evaluate ..."): shown as a variant of the one above it
    try:
        build_parser().parse_args(args)
    except SystemExit as exc:
        return None if exc.code == 0 else "does not parse"
    return None


def _script_problem(cmd: list[str]) -> str | None:
    args = cmd[1:]
    if args[:1] == ["-m"]:
        module = args[1]
        path = ROOT / (module.replace(".", "/") + ".py")
        return None if path.exists() or module in ("pytest", "ruff", "mypy", "pip") else f"no module {module}"
    if not args or not args[0].endswith(".py"):
        return None
    script = ROOT / args[0]
    if not script.is_file():
        return f"no script {args[0]}"
    source = script.read_text(encoding="utf-8")
    missing = [o for o in (a.strip("[]").split("=")[0] for a in args[1:]) if o.startswith("--") and f'"{o}"' not in source]
    return f"{args[0]} has no option {missing}" if missing else None


def test_every_command_shown_exists_with_its_options(capsys):
    bad = []
    for page, line, body, _ in bash_blocks():
        for cmd in commands(body):
            name = Path(cmd[0]).name
            problem = _fedqa_problem(cmd) if name == "fedqa" else _script_problem(cmd) if name in ("python", "python3") else None
            if problem:
                bad.append(f"{page}:{line}: {' '.join(cmd)}: {problem}")
    capsys.readouterr()  # argparse's usage messages
    assert not bad, "\n".join(bad)


def test_the_command_check_finds_a_wrong_command_and_option():
    body = "export FEDQA_HOME=~/h\nfedqa ingest ~/docs   # ok\nfedqa train rooter --queries q.jsonl\n"
    body += "python benchmarks/quality.py --queries a --no-such-flag | head\nFOO=1 fedqa evaluate ...\n"
    cmds = commands(body)
    assert cmds[0] == ["fedqa", "ingest", "~/docs"] and cmds[-1] == ["fedqa", "evaluate", "..."]
    assert [bool(_fedqa_problem(c)) for c in cmds if c[0] == "fedqa"] == [False, True, False]
    assert "--no-such-flag" in (_script_problem(cmds[2]) or "")


def runnable() -> list[tuple[str, int, str, str | None]]:
    """(page, line, block, the output block after it or None) of every block this test runs."""
    found = []
    for p in pages():
        page = blocks(p)
        for i, (line, lang, body, marker) in enumerate(page):
            if lang in ("bash", "sh") and marker == ("run", THIS):
                after = page[i + 1] if i + 1 < len(page) else None
                output = after[2] if after and after[1] == "text" and after[3] and after[3][0] == "output" else None
                found.append((p.relative_to(ROOT).as_posix(), line, body, output))
    return found


@pytest.mark.parametrize("page, line, body, output", runnable(), ids=lambda v: v if isinstance(v, str) and v.endswith(".md") else "")
def test_the_runnable_blocks_run_as_written(tmp_path, page, line, body, output):
    venv_bin = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEDQA_")}
    env.update(HOME=str(tmp_path), PATH=f"{venv_bin}:{env.get('PATH', '')}", PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    r = subprocess.run(["bash", "-e", "-c", body], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{page}:{line}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    if output is not None:
        assert r.stdout.replace(str(tmp_path), "~") == output, f"{page}:{line}: the output shown is not what it prints:\n{r.stdout}"


LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.M)}


def test_every_link_between_the_pages_resolves():
    bad = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for target in LINK.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
            if re.match(r"[a-z]+:", target):
                continue  # another site
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                bad.append(f"{path.relative_to(ROOT)}: {target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                bad.append(f"{path.relative_to(ROOT)}: {target}: no such heading")
    assert not bad, "\n".join(bad)
