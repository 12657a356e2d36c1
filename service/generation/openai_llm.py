"""Any OpenAI-compatible endpoint (vLLM, Ollama, llama.cpp server, `transformers serve`, OpenAI) through the
official ``openai`` client."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import openai

from service.generation.llm import LLMError, LLMTimeout


class OpenAILLM:
    """Chat or legacy completions API at ``base_url`` (which includes ``/v1``); greedy, no client retries."""

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, api: Literal["chat", "completions"] = "chat") -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api = api
        self.name = f"openai:{model}"
        # The client insists on a key; endpoints without auth ignore it.
        self.client = openai.OpenAI(base_url=self.base_url, api_key=api_key or "unused", max_retries=0)

    def _create(self, prompt: str, max_tokens: int, stop: Sequence[str], timeout_s: float, stream: bool) -> Any:
        kwargs: dict[str, Any] = {"model": self.model, "max_tokens": max_tokens, "temperature": 0.0, "stream": stream, "timeout": timeout_s}
        if stop:
            kwargs["stop"] = list(stop)[:4]
        if self.api == "chat":
            return self.client.chat.completions.create(messages=[{"role": "user", "content": prompt}], **kwargs)
        return self.client.completions.create(prompt=prompt, **kwargs)

    def _text(self, choice: Any, delta: bool) -> str:
        if self.api == "chat":
            part = choice.delta if delta else choice.message
            return (part.content if part is not None else None) or ""
        return choice.text or ""

    def complete(self, prompt: str, *, max_tokens: int, stop: Sequence[str], timeout_s: float) -> str:
        with _errors(timeout_s):
            response = self._create(prompt, max_tokens, stop, timeout_s, stream=False)
            try:
                return self._text(response.choices[0], delta=False)
            except (AttributeError, IndexError, TypeError) as exc:
                raise LLMError("LLM endpoint sent a malformed completion") from exc

    def stream(self, prompt: str, *, max_tokens: int, stop: Sequence[str], timeout_s: float) -> Iterator[str]:
        """The completion's pieces as they come. The HTTP response is closed when the generator ends, however it
        ends: closed early (the client of a streamed answer gone), the upstream generation stops with it."""
        with _errors(timeout_s), self._create(prompt, max_tokens, stop, timeout_s, stream=True) as chunks:
            for chunk in chunks:
                if not chunk.choices:
                    continue
                text = self._text(chunk.choices[0], delta=True)
                if text:
                    yield text


@contextmanager
def _errors(timeout_s: float) -> Iterator[None]:
    """Map the client's exceptions to LLMError / LLMTimeout with a short message."""
    try:
        yield
    except openai.APITimeoutError as exc:
        raise LLMTimeout(f"LLM endpoint timed out after {timeout_s:.0f} s") from exc
    except openai.APIConnectionError as exc:
        raise LLMError(f"LLM endpoint unreachable: {type(exc.__cause__ or exc).__name__}") from exc
    except openai.APIStatusError as exc:
        raise LLMError(f"LLM endpoint answered HTTP {exc.status_code}") from exc
    except openai.OpenAIError as exc:
        raise LLMError(f"LLM endpoint sent a malformed reply: {type(exc).__name__}") from exc
