"""LLM judges: a Judge over the LLM protocol and structured-output parsing with retries. The judged
metrics are in one module per family: :mod:`.mkpqa` (relevancy, faithfulness), :mod:`.wixqa`,
:mod:`.rageval`, :mod:`.ragxplain`.

Structured output = the prompt asks for one JSON object; :func:`extract_json` finds it in the reply
(code fences, text around it, single quotes, trailing commas tolerated) and a per-metric validator
checks its fields. A reply that cannot be parsed is retried (``FEDQA_JUDGE_RETRIES``); when every try
fails the metric is recorded as a *failure* with its kind (``parse`` or ``call``) and the last reply,
and left out of the mean. It is never scored as 0.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from service.config import Settings
from service.evaluation.record import FailureKind
from service.generation.llm import LLM, LLMError

T = TypeVar("T")


class ParseError(ValueError):
    """A judge reply that does not hold the expected structure."""


# --------------------------------------------------------------------------- parsing
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")


def _balanced(text: str, start: int) -> str | None:
    """The bracketed span starting at ``text[start]`` ('{' or '['), honouring strings; None if unclosed."""
    opening = text[start]
    closing = "}" if opening == "{" else "]"
    depth, in_str, esc, quote = 0, False, False, ""
    for i in range(start, len(text)):
        c = text[i]
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == quote:
                in_str = False
            continue
        if c in "\"'":
            in_str, quote = True, c
        elif c == opening:
            depth += 1
        elif c == closing:
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
    return None


def _loads(candidate: str) -> Any:
    for attempt in (candidate, _TRAILING_COMMA.sub(r"\1", candidate)):
        try:
            return json.loads(attempt)
        except json.JSONDecodeError:
            pass
    # Python-style dicts (single quotes, True/False/None) from small models.
    import ast

    try:
        return ast.literal_eval(_TRAILING_COMMA.sub(r"\1", candidate))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise ParseError("not JSON") from None


def extract_json(text: str) -> Any:
    """The first JSON object (or array) in a model reply; ParseError when there is none."""
    if not text or not text.strip():
        raise ParseError("empty reply")
    sources = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    for src in sources:
        src = src.strip()
        for i, c in enumerate(src):
            if c in "{[":
                span = _balanced(src, i)
                if span is None:
                    continue
                try:
                    return _loads(span)
                except ParseError:
                    continue
    raise ParseError(f"no JSON object in the reply: {text[:120]!r}")


def field_number(obj: Any, names: Sequence[str], lo: float, hi: float) -> float:
    """A number in [lo, hi] under one of ``names`` of a JSON object (strings like "7/10" accepted)."""
    if not isinstance(obj, dict):
        raise ParseError("expected a JSON object")
    lowered = {str(k).lower(): v for k, v in obj.items()}
    for name in names:
        if name in lowered:
            v = lowered[name]
            if isinstance(v, str):
                m = re.match(r"\s*(-?\d+(?:\.\d+)?)", v)
                if not m:
                    raise ParseError(f"{name} is not a number: {v!r}")
                v = float(m.group(1))
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ParseError(f"{name} is not a number: {v!r}")
            if not lo <= float(v) <= hi:
                raise ParseError(f"{name}={v} is outside [{lo}, {hi}]")
            return float(v)
    raise ParseError(f"missing field {names[0]!r}")


def field_text(obj: Any, names: Sequence[str], default: str = "") -> str:
    """A string field of a JSON object (the first of ``names`` present)."""
    if isinstance(obj, dict):
        lowered = {str(k).lower(): v for k, v in obj.items()}
        for name in names:
            if name in lowered and lowered[name] is not None:
                return str(lowered[name])
    return default


# --------------------------------------------------------------------------- the judge
@dataclass
class JudgeCall:
    """Result of one structured judge request."""

    value: Any = None
    error: str | None = None
    kind: FailureKind | None = None
    attempts: int = 0
    raw: str | None = None


@dataclass
class Outcome:
    """One metric for one question: a value, or a counted failure with its kind and error."""

    value: float | None
    explanation: str | None = None
    error: str | None = None
    kind: FailureKind | None = None
    calls: int = 0
    detail: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def failed(cls, call: JudgeCall, calls: int | None = None) -> Outcome:
        return cls(None, error=call.error, kind=call.kind, calls=call.attempts if calls is None else calls, detail={"raw": (call.raw or "")[:400]})

    @classmethod
    def skipped(cls, reason: str) -> Outcome:
        return cls(None, error=reason, kind="skipped")

    def as_dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "explanation": self.explanation,
            "error": self.error,
            "kind": self.kind,
            "calls": self.calls,
            **({"detail": self.detail} if self.detail else {}),
        }


class Judge:
    """An LLM used as a judge: bounded concurrency, a timeout per call, retries on parse and call failures."""

    def __init__(
        self,
        llm: LLM,
        *,
        name: str | None = None,
        timeout_s: float = 60.0,
        retries: int = 2,
        concurrency: int = 2,
        max_tokens: int = 384,
    ) -> None:
        self.llm = llm
        self.name = name or getattr(llm, "name", "llm")
        self.timeout_s = timeout_s
        self.retries = retries
        self.concurrency = concurrency
        self.max_tokens = max_tokens
        self._slots = threading.BoundedSemaphore(concurrency)
        self._lock = threading.Lock()
        self.stats = {"requests": 0, "llm_calls": 0, "parse_failures": 0, "call_failures": 0, "retries": 0}

    def _count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.stats[key] += n

    def ask(self, prompt: str, parse: Callable[[Any], T], *, max_tokens: int | None = None) -> JudgeCall:
        """Send ``prompt``, extract its JSON and ``parse`` it (raising ParseError when invalid); retry on failure."""
        self._count("requests")
        last = JudgeCall()
        for attempt in range(1, self.retries + 2):
            if attempt > 1:
                self._count("retries")
            self._count("llm_calls")
            try:
                with self._slots:
                    raw = self.llm.complete(prompt, max_tokens=max_tokens or self.max_tokens, stop=[], timeout_s=self.timeout_s)
            except LLMError as exc:
                last = JudgeCall(error=f"judge call failed: {exc}", kind="call", attempts=attempt)
                time.sleep(min(0.2 * attempt, 1.0))
                continue
            try:
                return JudgeCall(value=parse(extract_json(raw)), attempts=attempt, raw=raw)
            except ParseError as exc:
                last = JudgeCall(error=f"unparseable judge reply: {exc}", kind="parse", attempts=attempt, raw=raw)
        self._count("parse_failures" if last.kind == "parse" else "call_failures")
        return last

    def info(self) -> dict[str, Any]:
        """Name and counters, for reports."""
        with self._lock:
            return {"model": self.name, **self.stats}


def open_judge(settings: Settings, llm: LLM | None) -> Judge | None:
    """The judge the settings choose: FEDQA_JUDGE_BASE_URL's endpoint, else the configured LLM (None if neither)."""
    if settings.judge_base_url:
        from service.generation.openai_llm import OpenAILLM

        key = settings.judge_api_key.get_secret_value() if settings.judge_api_key else None
        model = settings.judge_model or settings.llm_model
        llm = OpenAILLM(settings.judge_base_url, model, api_key=key, api=settings.judge_api)
    if llm is None:
        return None
    return Judge(
        llm,
        timeout_s=settings.judge_timeout_s,
        retries=settings.judge_retries,
        concurrency=settings.judge_concurrency,
        max_tokens=settings.judge_max_tokens,
    )


def format_context(passages: Sequence[tuple[str, str]], *, words: int = 180) -> str:
    """Numbered context passages (title, text), each clipped to ``words`` words."""
    out = []
    for i, (title, text) in enumerate(passages, 1):
        parts = text.split()
        clipped = " ".join(parts[:words]) + (" ..." if len(parts) > words else "")
        out.append(f"[{i}] ({title}) {clipped}")
    return "\n".join(out)
