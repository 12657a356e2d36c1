"""The LLM interface and the choice of backend from settings."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator, Sequence
from typing import Protocol

from service.config import Settings


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


def open_llm(settings: Settings) -> LLM | None:
    """The backend the settings choose; None when generation is off.

    ``auto``: an OpenAI-compatible endpoint when FEDQA_LLM_BASE_URL is set, else the embedded
    SmolLM2 GGUF through llama.cpp when llama-cpp-python is installed, else through transformers.
    """
    backend = settings.llm_backend
    if backend == "none":
        return None
    if backend == "openai" or (backend == "auto" and settings.llm_base_url):
        from service.generation.openai_llm import OpenAILLM

        if not settings.llm_base_url:
            raise LLMError("FEDQA_LLM_BACKEND=openai needs FEDQA_LLM_BASE_URL")
        key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
        return OpenAILLM(settings.llm_base_url, settings.llm_model, api_key=key, api=settings.llm_api)
    if backend == "llamacpp" or (backend == "auto" and importlib.util.find_spec("llama_cpp") is not None):
        from service.generation.local_llm import LlamaCppLLM

        return LlamaCppLLM(threads=settings.llm_threads)
    from service.generation.local_llm import TransformersLLM

    return TransformersLLM(cache_dir=settings.home_dir / "cache" / "llm")
