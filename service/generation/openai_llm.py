"""Any OpenAI-compatible endpoint (vLLM, Ollama, OpenAI...) over HTTP."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import httpx

from service.generation.llm import LLMError, LLMTimeout


class OpenAILLM:
    """Chat or legacy completions API at ``base_url`` (which includes ``/v1``)."""

    def __init__(
        self, base_url: str, model: str, *, api_key: str | None = None, api: Literal["chat", "completions"] = "chat"
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api = api
        self.name = f"openai:{model}"
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def _request(self, prompt: str, max_tokens: int, stop: Sequence[str], stream: bool) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {"model": self.model, "max_tokens": max_tokens, "temperature": 0.0, "stream": stream}
        if stop:
            body["stop"] = list(stop)[:4]
        if self.api == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
            return f"{self.base_url}/chat/completions", body
        body["prompt"] = prompt
        return f"{self.base_url}/completions", body

    def _text(self, choice: dict[str, Any], delta: bool) -> str:
        if self.api == "chat":
            part = choice.get("delta" if delta else "message") or {}
            return part.get("content") or ""
        return choice.get("text") or ""

    def complete(self, prompt: str, *, max_tokens: int, stop: Sequence[str], timeout_s: float) -> str:
        url, body = self._request(prompt, max_tokens, stop, stream=False)
        try:
            r = httpx.post(url, json=body, headers=self._headers, timeout=timeout_s)
        except httpx.TimeoutException as exc:
            raise LLMTimeout(f"LLM endpoint timed out after {timeout_s:.0f} s") from exc
        except httpx.HTTPError as exc:
            raise LLMError(f"LLM endpoint unreachable: {type(exc).__name__}") from exc
        if r.status_code != 200:
            raise LLMError(f"LLM endpoint answered HTTP {r.status_code}")
        try:
            return self._text(r.json()["choices"][0], delta=False)
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise LLMError("LLM endpoint sent a malformed completion") from exc

    def stream(self, prompt: str, *, max_tokens: int, stop: Sequence[str], timeout_s: float) -> Iterator[str]:
        url, body = self._request(prompt, max_tokens, stop, stream=True)
        try:
            with httpx.stream("POST", url, json=body, headers=self._headers, timeout=timeout_s) as r:
                if r.status_code != 200:
                    raise LLMError(f"LLM endpoint answered HTTP {r.status_code}")
                for line in r.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    try:
                        choice = json.loads(data)["choices"][0]
                    except (ValueError, KeyError, IndexError) as exc:
                        raise LLMError("LLM endpoint sent a malformed stream event") from exc
                    text = self._text(choice, delta=True)
                    if text:
                        yield text
        except httpx.TimeoutException as exc:
            raise LLMTimeout(f"LLM endpoint timed out after {timeout_s:.0f} s") from exc
        except httpx.HTTPError as exc:
            raise LLMError(f"LLM endpoint unreachable: {type(exc).__name__}") from exc
