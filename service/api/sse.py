"""Server-Sent Events framing, one encoder for the streams of ``/ask`` (named events) and the chat (OpenAI chunks)."""

from __future__ import annotations

import json
from typing import Any


def sse(data: Any, *, event: str | None = None) -> str:
    """One event: an ``event:`` line when it is named, then its data as one line of JSON (a str as it is)."""
    head = f"event: {event}\n" if event else ""
    body = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"{head}data: {body}\n\n"
