"""``/docs`` (Swagger UI) and ``/redoc`` with their scripts and styles served from this service.

FastAPI's own docs pages load Swagger UI and ReDoc from a CDN, so they are blank on a machine without
internet. Following FastAPI's documented self-hosting of the docs assets, the pages are built here with
local URLs, and the assets come from the installed ``fastapi-offline`` package (which ships them).
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = Path(fastapi_offline.__file__).parent / "static"
PREFIX = "/docs-assets"


def install(app: FastAPI) -> None:
    """Serve ``/docs``, ``/redoc`` and their assets under ``/docs-assets`` (the app is made with docs_url=None, redoc_url=None)."""
    title = f"{app.title} API"
    openapi_url = app.openapi_url or "/openapi.json"
    redirect_url = "/docs/oauth2-redirect"
    favicon = f"{PREFIX}/favicon.png"

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=title,
            oauth2_redirect_url=redirect_url,
            swagger_js_url=f"{PREFIX}/swagger-ui-bundle.js",
            swagger_css_url=f"{PREFIX}/swagger-ui.css",
            swagger_favicon_url=favicon,
        )

    @app.get(redirect_url, include_in_schema=False)
    def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url, title=title, redoc_js_url=f"{PREFIX}/redoc.standalone.js", redoc_favicon_url=favicon, with_google_fonts=False
        )

    app.mount(PREFIX, StaticFiles(directory=ASSETS), name="docs-assets")
