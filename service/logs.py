"""Logging set-up: one JSON object a line (python-json-logger), the request id on every record, secrets scrubbed.

The request id lives in a context variable set by the HTTP middleware, so every record logged
while a request is handled (routes, pipeline, worker threads started through Starlette's
thread pool, which copies the context) carries it without being passed around.

Keys never reach the log in the first place (no header is ever logged); :class:`RedactFilter`
is the second line of defence: it blanks configured keys and ``Bearer ...`` tokens in any record, and the formatters
blank them in tracebacks (an exception's text may quote a header or a URL with a key).
"""

from __future__ import annotations

import contextvars
import logging
import re
import sys
from collections.abc import Callable, Iterable
from typing import IO, Any

REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("fedqa_request_id", default=None)

_BEARER = re.compile(r"(?i)(bearer\s+)[^\s\"',;]+")
_KEY_FIELDS = re.compile(r"(?i)((?:x-api-key|authorization|api[_-]?key|admin[_-]?key)[\"']?\s*[:=]\s*[\"']?)[^\s\"',;}]+")
REDACTED = "[redacted]"


class RequestIdFilter(logging.Filter):
    """Adds ``request_id`` (the current request's, or None) to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = REQUEST_ID.get()
        return True


class RedactFilter(logging.Filter):
    """Blanks secrets in a record's message: the given keys, bearer tokens and ``api_key=...`` pairs. A record's
    traceback is formatted later, by the handler's formatter: :func:`configure_logging` gives it :meth:`scrub` too."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def scrub(self, text: str) -> str:
        for s in self.secrets:
            text = text.replace(s, REDACTED)
        text = _BEARER.sub(lambda m: m.group(1) + REDACTED, text)
        return _KEY_FIELDS.sub(lambda m: m.group(1) + REDACTED, text)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = self.scrub(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


def _unchanged(text: str) -> str:
    return text


def json_formatter(scrub: Callable[[str], str] = _unchanged) -> logging.Formatter:
    """One JSON object a line: time, level, logger, message, request_id and any ``extra`` fields; ``scrub`` is applied
    to every text field before it is written, the traceback (``exc_info``) and ``stack_info`` included."""
    from pythonjsonlogger.json import JsonFormatter

    class ScrubbedJsonFormatter(JsonFormatter):
        def process_log_record(self, log_data: dict[str, Any]) -> dict[str, Any]:
            return {k: scrub(v) if isinstance(v, str) else v for k, v in super().process_log_record(log_data).items()}

    return ScrubbedJsonFormatter(
        "{asctime}{levelname}{name}{message}{request_id}",
        style="{",
        rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
        datefmt="%Y-%m-%dT%H:%M:%S%z",
    )


class _ScrubbedFormatter(logging.Formatter):
    """A plain formatter whose whole output (message, traceback, stack) passes through ``scrub``."""

    def __init__(self, fmt: str, scrub: Callable[[str], str]) -> None:
        super().__init__(fmt)
        self.scrub = scrub

    def format(self, record: logging.LogRecord) -> str:
        return self.scrub(super().format(record))


def text_formatter(scrub: Callable[[str], str] = _unchanged) -> logging.Formatter:
    """Plain lines for a terminal (``scrub``: as :func:`json_formatter`)."""
    return _ScrubbedFormatter("%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s", scrub)


def configure_logging(fmt: str = "json", level: str | int = "INFO", *, secrets: Iterable[str] = (), stream: IO[str] | None = None) -> logging.Handler:
    """Replace the root logger's handlers with one that writes ``fmt`` ("json" or "text") lines to ``stream``."""
    handler = logging.StreamHandler(stream or sys.stderr)
    redact = RedactFilter(secrets)
    handler.setFormatter(json_formatter(redact.scrub) if fmt == "json" else text_formatter(redact.scrub))  # tracebacks too
    handler.addFilter(RequestIdFilter())
    handler.addFilter(redact)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level if isinstance(level, int) else level.upper())
    for noisy in ("httpx", "httpcore", "sentence_transformers", "transformers", "urllib3", "absl"):  # absl: rouge-score's INFO lines
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # uvicorn's own loggers go through the root handler; its access log is replaced by fedqa.access.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        lg.handlers.clear()
        lg.propagate = True
    logging.getLogger("uvicorn.access").disabled = True
    if fmt == "json":
        quiet_progress_bars()
    return handler


def quiet_progress_bars() -> None:
    """Keep a JSON log parseable: no progress bars (model loading, tqdm defaults), warnings as log records.

    Commands run on a terminal keep their bars; ``fedqa serve`` with JSON logs calls this.
    """
    no_progress_bars()
    logging.captureWarnings(True)


def no_progress_bars() -> None:
    """No library's progress bar in this process or its children: tqdm's default (``TQDM_DISABLE``), Hugging Face
    Hub's and transformers' (``HF_HUB_DISABLE_PROGRESS_BARS``, read when transformers is imported; switched off in
    place where it already is). What a command's ``--quiet`` asks beside its own bars."""
    import os
    import sys

    os.environ["TQDM_DISABLE"] = "1"
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
