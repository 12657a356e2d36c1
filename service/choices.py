"""The base of fedqa's choice enums: a choice is its value (``str(choice)``), as settings, schemas and responses carry it."""

from __future__ import annotations

from enum import Enum


class Choice(str, Enum):
    """A named choice whose ``str`` is its value (Python 3.10 has no ``StrEnum``)."""

    def __str__(self) -> str:
        return self.value
