"""The ``fedqa`` parser (one ``register`` per command group) and its entry point."""

from __future__ import annotations

import argparse
import logging
import sys

from service.cli import ask, data, demo, domains, evaluate, feedback, index, ingest, models, refresh, serve, status, train
from service.cli.common import quiet_threads
from service.logs import no_progress_bars
from service.queries import LabelError
from training.checkpoint import TrainingInterrupted

# Each group adds its subcommands; the order is the order of ``fedqa --help``.
GROUPS = (serve, demo, ingest, refresh, train, data, index, models, ask, evaluate, feedback, domains, status)

# Long CPU jobs: quiet OpenMP threads and FEDQA_TORCH_THREADS before torch is imported.
COMPUTE_COMMANDS = ("refresh", "train", "data", "index", "models")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``fedqa``."""
    p = argparse.ArgumentParser(prog="fedqa", description="Federated multi-product question answering (MKP-QA).")
    sub = p.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        group.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fedqa`` command."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "sentence_transformers", "transformers", "absl"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    args = build_parser().parse_args(argv)
    if args.command in COMPUTE_COMMANDS:
        quiet_threads()
    if getattr(args, "quiet", False):  # no library's bar either (model loading, the model card's examples)
        no_progress_bars()
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted; the active versions are unchanged", file=sys.stderr)
        return 130
    except TrainingInterrupted as exc:
        print(f"fedqa: {exc}", file=sys.stderr)
        return 130
    except LabelError as exc:  # bad labels: one line each (file:line first), then what to do
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        print(f"fedqa: error: {one_line(ValueError(exc.summary))}", file=sys.stderr)
        return 2
    except (ValueError, OSError, RuntimeError) as exc:  # expected failures: one line that says what to do
        print(f"fedqa: error: {one_line(exc)}", file=sys.stderr)
        return 2


def one_line(exc: BaseException) -> str:
    """An expected failure as one line: its message with line breaks folded (a validation error spans several)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, OSError) and exc.filename and str(exc.filename) not in text:
        text = f"{text}: {exc.filename}"
    return text
