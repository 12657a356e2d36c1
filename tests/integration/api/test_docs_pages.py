"""``/docs`` and ``/redoc`` work air-gapped: their scripts and styles come from this service, not a CDN."""

from __future__ import annotations

import re

import httpx

from service.api.app import create_app
from tests.utils import make_settings, served_app


def test_docs_and_redoc_load_every_asset_from_the_service(tmp_path):
    app = create_app(make_settings(tmp_path / "home"))  # no pipeline needed: the docs read /openapi.json
    with served_app(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        for path in ("/docs", "/redoc"):
            page = client.get(path)
            assert page.status_code == 200 and "text/html" in page.headers["content-type"]
            refs = re.findall(r"""(?:src|href|spec-url)\s*=\s*["']([^"']+)["']""", page.text) + re.findall(
                r"""(?:url|spec-url)\s*:\s*["']([^"']+)["']""", page.text
            )
            assert refs, page.text
            assert not re.search(r"https?://", page.text), f"{path} refers to another site"
            for ref in refs:
                asset = client.get(ref)
                assert asset.status_code == 200 and asset.content, ref
        assert len(client.get("/docs-assets/swagger-ui-bundle.js").content) > 100_000  # the real Swagger UI, not a stub
        assert client.get("/openapi.json").json()["info"]["title"] == "fedqa"
