"""``fedqa demo``: ingest the shipped demo knowledge base and train its router.

The set-up lives here, with the commands, rather than in :mod:`service.demo` (which only names the
data files), so that service code does not import indexes/ or training/.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from service.cli.common import settings
from service.config import Settings
from service.demo import DOCS, OUT_OF_SCOPE, QUERIES

if TYPE_CHECKING:
    from service.cli.common import Subparsers


def register(sub: Subparsers) -> None:
    """Add ``demo`` to the parser."""
    s = sub.add_parser("demo", help="ingest the demo knowledge base and train its router (if not done)")
    s.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    """Set up the demo in this home and say what was done."""
    done = setup_demo(settings())
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
        report = ingest([DOCS], settings, progress=progress)
        done.append(f"ingested {sum(report.domains.values())} demo passages into {report.version}")
    if not registry.active()["router"]:
        from training.router_data import stratified_split

        train, val = stratified_split(load_queries(QUERIES), 0.3)  # val: calibration and the fused strategy's fit
        version = train_and_activate(settings, train, val=val, epochs=router_epochs, progress=progress)
        done.append(f"trained router {version} on the demo questions")
    from service.generation.answer_policy import policy_path

    active = registry.active()  # the policy first: the abstention evidence reads the answer it quotes
    path = policy_path(registry, active["router"], active["index"])
    if path is not None and not path.is_file():
        from training.answer_policy import fit_answer_policy

        policy = fit_answer_policy(settings, load_queries(QUERIES))
        done.append(f"fitted the answer policy ({policy.path}): token F1 {policy.scores['answer_f1']:.3f} on the demo questions")
    from service.generation.abstention import abstention_path

    path = abstention_path(registry, active["router"], active["index"])
    if path is not None and not path.is_file():
        from training.abstention import fit_abstention

        fit = fit_abstention(settings, load_queries(QUERIES), load_queries(OUT_OF_SCOPE))
        done.append(
            f"fitted the not-covered decision ({fit.path}): held-out false refusals "
            f"{fit.heldout['false_refusal_rate']:.3f}, out-of-scope refused {fit.heldout['abstention_rate']:.3f}"
        )
    return done
