"""The ``fedqa`` parser (one ``register`` per command group) and its entry point."""

from __future__ import annotations

import argparse
import logging
import sys

from service.cli import ask, data, demo, domains, evaluate, index, ingest, models, serve, train
from service.cli.common import quiet_threads
from training.checkpoint import TrainingInterrupted

# Each group adds its subcommands; the order is the order of ``fedqa --help``.
GROUPS = (serve, demo, ingest, train, data, index, models, ask, evaluate, domains)

# Long CPU jobs: quiet OpenMP threads and FEDQA_TORCH_THREADS before torch is imported.
COMPUTE_COMMANDS = ("train", "data", "index", "models")


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
    for noisy in ("httpx", "sentence_transformers", "transformers"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    args = build_parser().parse_args(argv)
    if args.command in COMPUTE_COMMANDS:
        quiet_threads()
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted; the active versions are unchanged", file=sys.stderr)
        return 130
    except TrainingInterrupted as exc:
        print(f"fedqa: {exc}", file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError, FileExistsError, RuntimeError) as exc:
        print(f"fedqa: error: {exc}", file=sys.stderr)
        return 2
