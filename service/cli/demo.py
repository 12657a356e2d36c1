"""``fedqa demo``: ingest the shipped demo knowledge base and train its router.

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
    from service.artifacts import Registry
    from service.cli.common import Subparsers

log = logging.getLogger("fedqa.demo")


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
    """Ingest the demo docs and train the router on the demo questions when the home has no index yet.

    Returns what was done, for the log.
    """
    from indexes.ingest import ingest
    from service.artifacts import Registry
    from service.queries import load_queries
    from training.router import train_and_activate

    registry = Registry(settings.home_dir)
    done = []
    if not registry.active()["index"]:
        log.info("demo 1/5: ingesting the demo's passages (a first run also exports the encoder to ONNX, about a minute)")
        report = ingest([DOCS], settings, progress=progress)
        done.append(f"ingested {sum(report.domains.values())} demo passages into {report.version}")
    if not registry.active()["router"]:
        from training.router_data import stratified_split

        log.info("demo 2/5: training the router on the demo questions")
        train, val = stratified_split(load_queries(QUERIES), 0.3)  # val: calibration and the fused strategy's fit
        version = train_and_activate(settings, train, val=val, epochs=router_epochs, progress=progress)
        done.append(f"trained router {version} on the demo questions")
    from service.generation.answer_policy import policy_path

    active = registry.active()  # the policy first: the abstention evidence reads the answer it quotes
    path = policy_path(registry, active["router"], active["index"])
    if path is not None and not path.is_file():
        from training.answer_policy import fit_answer_policy

        log.info("demo 3/5: fitting the answer policy on the demo questions' reference answers")
        policy = fit_answer_policy(settings, load_queries(QUERIES))
        done.append(f"fitted the answer policy ({policy.path}): token F1 {policy.scores['answer_f1']:.3f} on the demo questions")
    from service.generation.abstention import abstention_path

    path = abstention_path(registry, active["router"], active["index"])
    if path is not None and not path.is_file():
        from training.abstention import fit_abstention

        log.info("demo 4/5: fitting the not-covered decision on the demo's in-scope and out-of-scope questions")
        fit = fit_abstention(settings, load_queries(QUERIES), load_queries(OUT_OF_SCOPE))
        done.append(
            f"fitted the not-covered decision ({fit.path}): held-out false refusals "
            f"{fit.heldout['false_refusal_rate']:.3f}, out-of-scope refused {fit.heldout['abstention_rate']:.3f}"
        )
    done += _fit_split(settings, registry, active["router"])
    return done


def _fit_split(settings: Settings, registry: Registry, router: str | None) -> list[str]:
    """Fit when to answer by product on the router's validation questions (those its manifest lists), when not yet."""
    from service.queries import load_queries
    from service.routing.split import split_path
    from training.split import fit_split

    path = split_path(registry, router)
    if router is None or path is None or path.is_file():
        return []
    val_qids = set(registry.manifest("router", router).get("val_qids") or [])
    val = [q for q in load_queries(QUERIES) if q.qid in val_qids]
    if not val:
        return []
    log.info("demo 5/5: fitting when to answer by product on the router's validation questions")
    fit = fit_split(settings, val)
    m = fit.report["on_fit_questions"]["all"]
    return [f"fitted the by-product split ({fit.path}): hit by product {m['hit_by_product']:.3f}, {m['mean_groups']:.2f} products per question"]


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
