"""``fedqa`` command line: one module per command group, thin wrappers over the functions the API uses.

:mod:`service.cli.main` builds the parser from each group's ``register`` and runs the chosen command.
"""

from __future__ import annotations

from service.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
