"""Command-line options generated from a config dataclass's fields, so that a training default lives once, in the config.

``ConfigOptions(RetrieverConfig, ("epochs", ...)).add(parser)`` adds ``--epochs`` with the field's default, its type
(``int``, ``float``; a ``bool`` as ``--x/--no-x``, an ``Enum`` as its values) and the help in the field's
``metadata["help"]`` (``training/configs.py``); ``values(args)`` reads them back as the config's keyword arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any


@dataclass(frozen=True)
class ConfigOptions:
    """Options for the ``names`` fields of ``config``, in that order (``--help``'s)."""

    config: type
    names: tuple[str, ...]
    #: field -> option name where they differ (``negatives_per_query`` -> ``negatives``)
    rename: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: fields whose option defaults to None: the config's default applies unless the option is given
    unset: Collection[str] = ()

    def flag(self, name: str) -> str:
        """The option of field ``name``: ``--batch-size`` for ``batch_size``."""
        return "--" + self.rename.get(name, name).replace("_", "-")

    def dest(self, name: str) -> str:
        """Where argparse stores field ``name``'s option."""
        return self.flag(name)[2:].replace("-", "_")

    def field_type(self, name: str) -> type:
        """The field's type, ``X`` for ``X | None``."""
        hint = typing.get_type_hints(self.config)[name]
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0] if args else hint

    def add(self, parser: argparse.ArgumentParser) -> None:
        """Add the options to ``parser``."""
        fields = {f.name: f for f in dataclasses.fields(self.config)}
        for name in self.names:
            f, kind = fields[name], self.field_type(name)
            default = None if name in self.unset else f.default
            help_ = f.metadata["help"].replace("%", "%%")
            if kind is bool:
                parser.add_argument(self.flag(name), action=argparse.BooleanOptionalAction, default=default, help=help_)
            elif issubclass(kind, Enum):
                default = default.value if isinstance(default, Enum) else default
                parser.add_argument(self.flag(name), choices=[m.value for m in kind], default=default, help=help_)
            elif kind in (int, float):
                parser.add_argument(self.flag(name), type=kind, default=default, help=help_)
            else:
                raise TypeError(f"{self.config.__name__}.{name}: no option for a {kind}")

    def values(self, args: argparse.Namespace) -> dict[str, Any]:
        """The options' values as the config's keyword arguments (an ``unset`` one only when given)."""
        out: dict[str, Any] = {}
        for name in self.names:
            value = getattr(args, self.dest(name))
            if value is None and name in self.unset:
                continue
            kind = self.field_type(name)
            out[name] = kind(value) if issubclass(kind, Enum) else value
        return out
