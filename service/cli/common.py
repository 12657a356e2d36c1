"""Helpers every command group shares."""

from __future__ import annotations

import argparse
import json
import os
from typing import TYPE_CHECKING, Any

from service.config import Settings, get_settings

if TYPE_CHECKING:
    from typing import TypeAlias

    # The ``add_subparsers`` action: what each group's ``register`` receives.
    Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def settings() -> Settings:
    """The settings of this process (FEDQA_* environment variables)."""
    return get_settings()


def print_json(obj: Any, *, indent: int | None = 2, ensure_ascii: bool = True) -> None:
    """Print one JSON document to stdout (the commands' machine-readable output)."""
    print(json.dumps(obj, indent=indent, ensure_ascii=ensure_ascii))


def split_list(text: str) -> list[str]:
    """``"a, b,a"`` -> ``["a", "b"]``: a comma-separated option, de-duplicated in order."""
    return list(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))


def quiet_threads() -> None:
    """Torch threads for long CPU jobs: FEDQA_TORCH_THREADS, and OpenMP threads that sleep when idle.

    Spinning OpenMP threads slow training many times over on a small machine that other work
    shares; passive waiting costs little when the machine is quiet. Takes effect only when torch
    is not imported yet (it is imported lazily by these commands).
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from service.compute import configure_threads

    configure_threads(settings().torch_threads)
