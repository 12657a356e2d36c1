"""The LLM backends behind the :class:`~service.generation.llm.LLM` protocol, chosen once from settings.

One enum of backend names and one dispatch table; the backend modules import only the protocol and
errors of :mod:`service.generation.llm`, so nothing imports in a circle.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

from service.config import Settings
from service.generation.llm import LLM, LLMError


class LLMBackend(str, Enum):
    """Values of FEDQA_LLM_BACKEND."""

    AUTO = "auto"
    LLAMACPP = "llamacpp"
    TRANSFORMERS = "transformers"
    OPENAI = "openai"
    NONE = "none"


def _openai(settings: Settings) -> LLM:
    from service.generation.openai_llm import OpenAILLM

    if not settings.llm_base_url:
        raise LLMError("FEDQA_LLM_BACKEND=openai needs FEDQA_LLM_BASE_URL")
    key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
    return OpenAILLM(settings.llm_base_url, settings.llm_model, api_key=key, api=settings.llm_api)


def _llamacpp(settings: Settings) -> LLM:
    from service.generation.local_llm import LlamaCppLLM

    return LlamaCppLLM(threads=settings.llm_threads)


def _transformers(settings: Settings) -> LLM:
    from service.generation.local_llm import TransformersLLM

    return TransformersLLM(cache_dir=settings.home_dir / "cache" / "llm")


def _auto(settings: Settings) -> LLM | None:
    """An OpenAI-compatible endpoint when FEDQA_LLM_BASE_URL is set; else no LLM (answers are extractive)."""
    return _openai(settings) if settings.llm_base_url else None


_OPENERS: dict[LLMBackend, Callable[[Settings], LLM | None]] = {
    LLMBackend.AUTO: _auto,
    LLMBackend.OPENAI: _openai,
    LLMBackend.LLAMACPP: _llamacpp,
    LLMBackend.TRANSFORMERS: _transformers,
    LLMBackend.NONE: lambda settings: None,
}


def open_llm(settings: Settings) -> LLM | None:
    """The backend the settings choose; None when answers are not generated.

    ``auto`` (the default) uses an OpenAI-compatible endpoint when FEDQA_LLM_BASE_URL is set and no LLM
    otherwise: the embedded SmolLM2 (``transformers`` or ``llamacpp``) runs only when asked for by name.
    """
    return _OPENERS[LLMBackend(settings.llm_backend)](settings)
