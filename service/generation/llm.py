"""The LLM interface and its errors (the backends are chosen in :mod:`service.generation.backends`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol


class LLMError(RuntimeError):
    """The LLM backend failed (down, bad answer)."""


class LLMTimeout(LLMError):
    """The LLM backend did not finish in time."""


class LLM(Protocol):
    """A text-completion model."""

    name: str

    def complete(self, prompt: str, *, max_tokens: int, stop: Sequence[str], timeout_s: float) -> str:
        """The completion of ``prompt`` (greedy); LLMError/LLMTimeout on failure."""
        ...

    def stream(self, prompt: str, *, max_tokens: int, stop: Sequence[str], timeout_s: float) -> Iterator[str]:
        """The completion as it is produced, piece by piece."""
        ...
