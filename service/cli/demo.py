"""``fedqa demo``: ingest the shipped demo knowledge base and refresh its fitted parts (``fedqa refresh``).

The set-up lives here, with the commands, rather than in :mod:`service.demo` (which only names the
data files), so that service code does not import indexes/ or training/.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from service.cli.common import settings
from service.config import Settings
from service.demo import DOCS, OUT_OF_SCOPE, QUERIES

if TYPE_CHECKING:
    from service.cli.common import Subparsers

log = logging.getLogger("fedqa.demo")

DEMO_VAL_FRACTION = 0.3  # the demo questions held out for the router's fits (as the demo build has always split them)


def register(sub: Subparsers) -> None:
    """Add ``demo`` to the parser."""
    s = sub.add_parser("demo", help="ingest the demo knowledge base and train its router (if not done)")
    s.add_argument("--quiet", action="store_true", help="no progress bars (each step is still announced)")
    s.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    """Set up the demo in this home and say what was done."""
    done = setup_demo(settings(), progress=not args.quiet)
    print("\n".join(done) or "the demo is already set up in this home")
    return 0


def setup_demo(settings: Settings, *, progress: bool = True, router_epochs: int | None = None) -> list[str]:
    """Ingest the demo docs when the home has no index yet, then ``fedqa refresh`` on the demo questions (router,
    answer policy, split, "not covered", activated together) when a part is missing.

    Returns what was done, for the log.
    """
    from indexes.ingest import ingest
    from service.artifacts import Registry
    from training.refresh import RefreshInputs, RefreshOptions, refresh

    registry = Registry(settings.home_dir)
    done = []
    if not registry.active()["index"]:
        log.info("demo 1/2: ingesting the demo's passages (a first run also exports the encoder to ONNX, about a minute)")
        report = ingest([DOCS], settings, progress=progress)
        done.append(f"ingested {sum(report.domains.values())} demo passages into {report.version}")
    if demo_needed(settings):
        log.info("demo 2/2: fedqa refresh on the demo questions (router, ranking model, answer policy, split, not covered)")
        inputs = RefreshInputs(queries=(str(QUERIES),), out_of_scope=(str(OUT_OF_SCOPE),))
        fit = refresh(settings, inputs, RefreshOptions(val_fraction=DEMO_VAL_FRACTION, router_epochs=router_epochs, progress=progress), say=log.info)
        done += [f"{r.stage.value}: {r.outcome.value}{' (' + r.figure + ')' if r.figure else ''}" for r in fit.stages]
    return done


def demo_needed(settings: Settings) -> bool:
    """Whether this home still lacks part of the demo (an index, a router, the answer policy or the not-covered decision)."""
    from service.artifacts import Registry
    from service.generation.abstention import abstention_path
    from service.generation.answer_policy import policy_path

    registry = Registry(settings.home_dir)
    active = registry.active()
    if not active["index"] or not active["router"]:
        return True
    from service.routing.split import split_path

    fitted = (
        policy_path(registry, active["router"], active["index"]),
        abstention_path(registry, active["router"], active["index"]),
        split_path(registry, active["router"]),
    )
    return any(path is not None and not path.is_file() for path in fitted)


def setup_demo_in_subprocess(say: Callable[[str], None]) -> None:
    """Run ``fedqa demo`` in a child process, passing each of its output lines to ``say``: what the build loads
    (the PyTorch model, the ONNX export, training data) is freed with the child instead of staying in the server.
    The child reads the same FEDQA_* environment; RuntimeError when it fails."""
    import signal
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "service.cli", "demo", "--quiet"]
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)  # a stopped server stops the build too
    try:
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1) as child:
            try:
                assert child.stdout is not None
                for line in child.stdout:
                    if line.strip():
                        say(line.rstrip())
            except BaseException:  # Ctrl-C or SIGTERM: the child must not go on alone
                child.terminate()
                raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    if child.returncode != 0:
        raise RuntimeError(f"setting up the demo failed (fedqa demo exited {child.returncode}; its output is above)")


def _exit_on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM while the demo is built: exit through Python, so that the build's child process is stopped first."""
    raise SystemExit(128 + signum)
