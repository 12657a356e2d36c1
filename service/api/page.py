"""``GET /``: the page for people: ask, read the streamed answer with its sources, see the routing,
compare two strategies, open evaluation reports.

One static HTML file with a small plain-JavaScript file and a style sheet (``service/api/static``):
no build step, nothing fetched from elsewhere. The page is open and holds no secret; it calls the
API (``/ask``, ``/evaluate``, ``/feedback`` for its thumbs and "this answered it") with the API key the user types
once, kept in the tab's sessionStorage.
It reads the strategies and answer modes from ``/openapi.json``, so new ones appear without a change here.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

STATIC = Path(__file__).parent / "static"

# Scripts and styles only from this origin. Inline styles are allowed for the evaluation report, which is
# shown in a sandboxed frame (no scripts) and carries its own <style>.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; frame-src 'self' blob:; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "Referrer-Policy": "same-origin",  # the address may hold a question: keep it from other sites
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)


@router.api_route("/", methods=["GET", "HEAD"], response_class=FileResponse)
def page() -> FileResponse:
    """The page (``/?q=...&strategy=...`` asks on load)."""
    return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8", headers=PAGE_HEADERS)


def install(app: FastAPI) -> None:
    """Serve the page at ``/`` and its script and style sheet under ``/static``."""
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
