"""Screenshots of the page answering a question, at desktop width and at 360 px (docs/page.png, docs/page-360.png).

Needs a running service and Debian's chromium (scripts/setup.sh installs it):

    FEDQA_HOME=/tmp/demo FEDQA_LLM_BACKEND=none fedqa serve --demo &
    .venv/bin/python scripts/page_screenshots.py --url http://127.0.0.1:8000
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from urllib.parse import urlencode

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]


def shoot(url: str, question: str, out: Path, width: int, key: str | None, compare: str | None) -> None:
    """Ask ``question`` on the page at ``url`` in a ``width``-pixel window and save a full-page screenshot."""
    params = {"q": question, "seed": "7", **({"compare": compare} if compare else {})}
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium)
        page = browser.new_page(viewport={"width": width, "height": 900})
        if key:
            page.add_init_script(f"if (window.top === window) sessionStorage.setItem('fedqa.apiKey', {key!r})")
        page.goto(f"{url}/?{urlencode(params)}")
        page.wait_for_selector("#answer-section[data-state=done]", timeout=60_000)
        if compare:
            page.wait_for_selector("#compare-grid[data-state=done]", timeout=60_000)
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(out), full_page=True)
        browser.close()
    print(f"wrote {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--question", default="How do I import contacts from a spreadsheet?")
    ap.add_argument("--key", default=None, help="API key, when the service has keys on")
    ap.add_argument("--out", type=Path, default=ROOT / "docs")
    args = ap.parse_args()
    shoot(args.url, args.question, args.out / "page.png", 1280, args.key, "mkpqa,uis")
    shoot(args.url, args.question, args.out / "page-360.png", 360, args.key, None)


if __name__ == "__main__":
    main()
