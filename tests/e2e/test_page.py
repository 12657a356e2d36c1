"""The page at ``GET /`` driven in a real headless browser: Debian's chromium through Playwright.

The app is the real one (create_app on the demo pipeline) served by uvicorn on a free port, with
API keys on. What the page shows is checked against the API's own answers to the same requests.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlencode

import httpx
import pytest

from service.api.app import create_app
from service.api.state import ServiceState
from service.feedback.store import FeedbackStore
from tests.utils import ambiguous_question, make_settings, served_app

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the test extra (./scripts/setup.sh)")
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").is_file() else None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed: run ./scripts/setup.sh as root (or with sudo)")

KEY = "page-test-key"
QUESTION = "How do I import contacts from a spreadsheet?"
SEED = 11
OFF_TOPIC = (
    "What is the boiling point of mercury in kelvin?",
    "Who won the football world cup in 1998?",
    "How long should sourdough bread proof before baking?",
)


@pytest.fixture(scope="module")
def server(demo_pipeline, tmp_path_factory):
    """The real app with API keys on, on the shared demo pipeline; evaluation jobs go to a home of its own."""
    settings = make_settings(tmp_path_factory.mktemp("page-home"), api_keys=KEY, rate_limit_per_minute=0)
    state = ServiceState(settings)
    state.pipeline = demo_pipeline
    app = create_app(settings, state)
    with served_app(app) as url:
        yield SimpleNamespace(url=url, schema=httpx.get(f"{url}/openapi.json", timeout=10).json(), settings=settings)
        worker = getattr(app.state, "eval_worker", None)
        if worker is not None:
            worker.stop()


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM)
        yield b
        b.close()


def _open(browser, *, width: int = 1280, key: str | None = None):
    """A fresh tab (its own session storage) that records script errors and CSP violations."""
    context = browser.new_context(viewport={"width": width, "height": 900})
    if key:
        # top window only: the report's sandboxed frame may not touch storage
        context.add_init_script(f"if (window.top === window) sessionStorage.setItem('fedqa.apiKey', {key!r})")
    page = context.new_page()
    page.problems = []
    page.on("pageerror", lambda e: page.problems.append(f"script error: {e}"))
    page.on("console", lambda m: page.problems.append(m.text) if "Content Security Policy" in m.text else None)
    return context, page


@pytest.fixture
def page(browser):
    context, page = _open(browser)
    yield page
    problems = page.problems
    context.close()
    assert not problems


@pytest.fixture
def keyed_page(browser):
    context, page = _open(browser, key=KEY)
    yield page
    problems = page.problems
    context.close()
    assert not problems


def _ask(server, **body) -> dict:
    r = httpx.post(f"{server.url}/ask", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def _enum(schema: dict, node: dict) -> list:
    """The values a schema node admits (through $ref / allOf / anyOf)."""
    if "$ref" in node:
        return _enum(schema, schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]])
    if "enum" in node:
        return list(node["enum"])
    return [v for k in ("allOf", "anyOf", "oneOf") for sub in node.get(k, []) for v in _enum(schema, sub)]


def _strategies(server) -> tuple[str, list[str]]:
    prop = server.schema["components"]["schemas"]["AskRequest"]["properties"]["strategy"]
    return prop.get("default"), _enum(server.schema, prop)


def _wait_answer(page) -> None:
    page.wait_for_selector("#answer-section[data-state=done], #answer-section[data-state=error]", timeout=90_000)
    assert page.get_attribute("#answer-section", "data-state") == "done", page.text_content("#answer-error")


def _doc_ids(page, selector: str) -> list[str]:
    return page.eval_on_selector_all(selector, "els => els.map(e => e.dataset.docId)")


def test_page_streams_an_answer_with_cited_sources_and_routing(server, page):
    default, strategies = _strategies(server)
    asks = []
    page.on("request", lambda r: asks.append(r) if r.url.endswith("/ask") else None)
    page.goto(f"{server.url}/")
    page.wait_for_selector("body[data-ready=true]")
    assert page.eval_on_selector_all("#strategy option", "os => os.map(o => o.value)") == strategies
    assert page.input_value("#strategy") == default

    page.fill("#question", QUESTION)
    page.fill("#seed", str(SEED))
    page.click("#ask-button")
    page.wait_for_selector("#key-dialog[open]")  # keys are on: the page asks for one, once
    page.fill("#key-input", KEY)
    page.click("#key-save")
    _wait_answer(page)

    assert asks and asks[-1].post_data_json["stream"] is True
    assert asks[-1].headers["authorization"] == f"Bearer {KEY}"
    assert asks[-1].response().headers["content-type"].startswith("text/event-stream")
    expected = _ask(server, query=QUESTION, seed=SEED, strategy=default)

    assert expected["answer"] and page.text_content("#answer") == expected["answer"]
    assert page.get_attribute("#answer-mode", "data-mode") == expected["answer_mode"]
    assert _doc_ids(page, "#sources .card") == [s["doc_id"] for s in expected["sources"]]
    first = expected["sources"][0]
    assert page.text_content("#source-1 .product") == first["domain"]
    assert page.text_content("#source-1 .title") == first["title"]
    assert page.text_content("#source-1 [data-score=u]") == f"{first['unified_score']:.3f}"
    # p_j is the router's probability of the source's product (as the bars show it), the merge weight is w_j
    assert page.text_content("#source-1 [data-score=p]") == f"{expected['routing']['probabilities'][first['domain']]:.3f}"
    assert page.text_content("#source-1 [data-score=w]") == f"{first['domain_weight']:.3f}"
    # "why this passage": the key the sources are sorted by and the features that gave it, behind a disclosure
    assert not page.is_visible("#source-1 .why .features")
    page.click("#source-1 .why summary")
    assert float(page.text_content("#source-1 [data-score=rank]")) == pytest.approx(first["rank_score"], rel=1e-3)
    shown = page.eval_on_selector_all("#source-1 .features [data-feature]", "ds => ds.map(d => d.dataset.feature)")
    assert shown == list(first["features"]) and "similarity" in shown
    assert page.text_content("#source-1 [data-feature=similarity] dd") == f"{first['features']['similarity']:.3f}"

    cite = page.locator("#answer a.cite").first
    href = cite.get_attribute("href")
    assert int(href.removeprefix("#source-")) in expected["citations"]
    assert page.locator(f"#sources {href}.card.cited").count() == 1
    cite.focus()
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == href[1:]

    bars = page.eval_on_selector_all("#routing-bars .bar", "bs => bs.map(b => [b.dataset.domain, Number(b.getAttribute('aria-valuenow'))])")
    routing = expected["routing"]
    assert dict(bars) == routing["probabilities"] and len(bars) == len(routing["probabilities"])
    assert set(page.eval_on_selector_all("#routing-bars .route.active", "ls => ls.map(l => l.dataset.domain)")) == set(routing["active_domains"])
    if 0 < routing["threshold"] <= 1:
        taus = page.eval_on_selector_all("#routing-bars .tau", "ts => ts.map(t => Number(t.dataset.tau))")
        assert taus == [routing["threshold"]] * len(bars)

    # The key stays in this tab's session storage; the page itself holds no secret and a strict CSP.
    assert page.evaluate("sessionStorage.getItem('fedqa.apiKey')") == KEY
    served = httpx.get(f"{server.url}/", timeout=10)
    assert KEY not in served.text and "script-src 'self'" in served.headers["content-security-policy"]

    # The address asks on load (a link to a question can be shared); same tab, so no second key prompt.
    other = next((s for s in strategies if s != default), default)
    shared_q = {"q": "How long do sessions last?", "strategy": other, "seed": SEED, "generate": "0"}
    page.goto(f"{server.url}/?{urlencode(shared_q)}")
    _wait_answer(page)
    assert not page.is_visible("#key-dialog")
    assert page.input_value("#strategy") == other and not page.is_checked("#generate")
    shared = _ask(server, query=shared_q["q"], seed=SEED, strategy=other, generate=False)
    assert _doc_ids(page, "#sources .card") == [s["doc_id"] for s in shared["sources"]]
    assert shared["answer_mode"] == page.get_attribute("#answer-mode", "data-mode") == "retrieval"
    assert "Retrieval only" in page.text_content("#answer-mode") and page.text_content("#answer") == ""


def test_strategies_that_skip_the_gate_draw_no_gate_threshold(server, keyed_page):
    """Issue 29, item 7: uis and rfs report the gate's threshold in ``routing`` but do not use it; the page draws no
    tau mark and no gate chance for them, while mkpqa (which gates with the same threshold) draws tau on every bar."""
    page = keyed_page
    drawn = {}
    for strategy in ("mkpqa", "uis", "rfs"):
        page.goto(f"{server.url}/?{urlencode({'q': QUESTION, 'strategy': strategy, 'seed': SEED, 'generate': '0'})}")
        _wait_answer(page)
        routing = _ask(server, query=QUESTION, strategy=strategy, seed=SEED, generate=False)["routing"]
        assert routing["strategy"] == strategy and 0 < routing["threshold"] <= 1, routing  # reported by the API
        assert page.locator("#routing-bars .bar").count() == len(routing["probabilities"])
        drawn[strategy] = (page.locator("#routing-bars .tau").count(), "gate chance" in page.text_content("#routing-bars"))
    assert drawn["mkpqa"][0] == len(routing["probabilities"]), drawn  # the gated strategy draws tau on every bar
    assert drawn["uis"] == (0, False) and drawn["rfs"] == (0, False), drawn


def test_compare_view_and_keyboard_use(server, keyed_page):
    page = keyed_page
    default, strategies = _strategies(server)
    a, b = default, next(s for s in strategies if s != default)
    page.goto(f"{server.url}/")
    page.wait_for_selector("body[data-ready=true]")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.className") == "skip"

    # Keyboard only: type the question, Enter asks; the focused button shows a visible outline.
    page.focus("#question")
    page.keyboard.type("Can I get a refund and will the help desk ticket be closed?")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "ask-button"
    outline = page.evaluate("(e => [getComputedStyle(e).outlineStyle, getComputedStyle(e).outlineWidth])(document.activeElement)")
    assert outline[0] != "none" and outline[1] != "0px"
    page.focus("#question")
    page.keyboard.press("Enter")
    _wait_answer(page)

    page.fill("#seed", str(SEED))
    page.select_option("#compare-a", a)
    page.select_option("#compare-b", b)
    page.focus("#compare-button")
    page.keyboard.press("Enter")
    page.wait_for_selector("#compare-grid[data-state=done]", timeout=60_000)
    query = "Can I get a refund and will the help desk ticket be closed?"
    left = [s["doc_id"] for s in _ask(server, query=query, seed=SEED, strategy=a, generate=False)["sources"]]
    right = [s["doc_id"] for s in _ask(server, query=query, seed=SEED, strategy=b, generate=False)["sources"]]
    assert page.get_attribute("#compare-left h3", "data-strategy") == a
    assert page.get_attribute("#compare-right h3", "data-strategy") == b
    assert _doc_ids(page, "#compare-left li") == left
    assert _doc_ids(page, "#compare-right li") == right
    shared = page.eval_on_selector_all("#compare-left li.shared", "ls => ls.map(l => l.dataset.docId)")
    assert shared == [d for d in left if d in right]
    assert f"compare={a}%2C{b}" in page.url or f"compare={a},{b}" in page.url


def test_not_covered_is_shown_plainly(server, keyed_page):
    modes = _enum(server.schema, server.schema["components"]["schemas"]["AskResponse"]["properties"]["answer_mode"])
    assert "not_covered" in modes, f"AskResponse.answer_mode admits {modes}"
    answers = {q: _ask(server, query=q, seed=SEED) for q in OFF_TOPIC}
    question = next((q for q, body in answers.items() if body["answer_mode"] == "not_covered"), None)
    assert question, f"no off-topic question was answered not_covered: {[b['answer_mode'] for b in answers.values()]}"
    page = keyed_page
    page.goto(f"{server.url}/?{urlencode({'q': question, 'seed': SEED})}")
    _wait_answer(page)
    assert page.get_attribute("#answer-mode", "data-mode") == "not_covered"
    assert "Not covered" in page.text_content("#answer-mode")
    assert "does not cover" in page.text_content("#answer-mode")
    assert "not-covered" in page.get_attribute("#answer-section", "class")


def test_page_fits_360_px(server, browser):
    context, page = _open(browser, width=360, key=KEY)
    try:
        page.goto(f"{server.url}/?{urlencode({'q': QUESTION, 'seed': SEED})}")
        _wait_answer(page)
        assert page.evaluate("document.documentElement.scrollWidth") <= 360
        for selector in ("#question", "#ask-button", "#source-1", "#routing-bars .bar", "#compare-button"):
            box = page.locator(selector).first.bounding_box()
            assert box and box["x"] >= 0 and box["x"] + box["width"] <= 360, selector
        assert not page.problems
    finally:
        context.close()


def test_evaluation_reports_are_listed_and_opened(server, keyed_page):
    r = httpx.post(
        f"{server.url}/evaluate",
        json={"dataset": "demo", "limit": 3, "metrics": ["retrieval"]},
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=30,
    )
    assert r.status_code == 202, r.text
    job = r.json()["id"]
    deadline = time.monotonic() + 120
    while (status := httpx.get(f"{server.url}/evaluate/{job}", headers={"Authorization": f"Bearer {KEY}"}, timeout=10).json()["status"]) != "done":
        assert status in ("queued", "running") and time.monotonic() < deadline, status
        time.sleep(0.2)
    page = keyed_page
    page.goto(f"{server.url}/")
    item = page.locator(f"#eval-list li[data-job='{job}']")
    item.wait_for(timeout=30_000)
    assert "done" in item.text_content() and "demo" in item.text_content()
    item.get_by_role("button", name="Open report").click()
    page.wait_for_selector("#report-view:not([hidden])")
    assert page.evaluate("document.activeElement.id") == "report-title"
    assert page.get_attribute("#report-frame", "sandbox") == ""  # the report runs no script
    report = page.frame_locator("#report-frame")
    report.locator("text=Worst questions").first.wait_for(timeout=10_000)
    assert report.locator("svg").count() >= 1


def test_page_shows_the_answers_of_several_products_side_by_side(server, keyed_page, demo_pipeline):
    """Issue 27: a question that fits several products is answered per product, one column each."""
    page, question = keyed_page, ambiguous_question(demo_pipeline)
    page.goto(f"{server.url}/?{urlencode({'q': question, 'seed': SEED})}")
    _wait_answer(page)
    expected = _ask(server, query=question, seed=SEED)
    assert expected["answer_mode"] == "by_product" == page.get_attribute("#answer-mode", "data-mode")
    columns = page.eval_on_selector_all("#answer .products .product", "ps => ps.map(p => p.dataset.domain)")
    assert columns == [p["domain"] for p in expected["products"]]
    for p in expected["products"]:
        column = page.locator(f"#answer .product[data-domain={p['domain']}]")
        assert column.locator(".answer-text").text_content() == p["answer"]
        assert p["doc_ids"][0] in column.locator(".product-docs").text_content()
    assert _doc_ids(page, "#sources .card") == [s["doc_id"] for s in expected["sources"]]
    boxes = page.eval_on_selector_all("#answer .product", "ps => ps.map(p => p.getBoundingClientRect().top)")
    assert len(set(boxes)) == 1  # side by side on a wide screen


def _stored(server, query: str) -> dict:
    """The stored rows on ``query`` by passage (doc_id, "" for none): the store the server writes."""
    return {v.vote.doc_id or "": v for v in FeedbackStore(server.settings.feedback_path).votes() if v.vote.query == query}


def _feedback(server, query: str) -> dict:
    """The stored votes on ``query`` by passage (doc_id, "" for none)."""
    return {doc: v.vote for doc, v in _stored(server, query).items()}


def _sent(page, selector: str) -> str:
    page.wait_for_selector(f"{selector}[data-state=sent], {selector}[data-state=error]", timeout=30_000)
    assert page.get_attribute(selector, "data-state") == "sent", page.text_content(selector)
    return page.text_content(selector)


def test_thumbs_and_this_answered_it_reach_the_feedback_store(server, keyed_page):
    """Issue 49, item 5: the answer's thumbs rate the passage it quoted, a source card's "this answered it" rates that
    passage up; both are sent with the tab's key, confirmed on the page, and stored with the key's name."""
    page, question = keyed_page, "How do I export my contacts to a CSV file?"
    sent = []
    page.on("request", lambda r: sent.append(r) if r.url.endswith("/feedback") else None)
    page.goto(f"{server.url}/?{urlencode({'q': question, 'seed': SEED})}")
    _wait_answer(page)
    expected = _ask(server, query=question, seed=SEED)
    assert expected["answer_mode"] != "not_covered" and expected["citations"], expected["answer_mode"]
    quoted = expected["sources"][expected["citations"][0] - 1]["doc_id"]
    assert page.is_visible("#rate-answer") and not page.is_visible("#rate-refusal")
    assert not _feedback(server, question)

    page.click("#fb-up")
    assert "answered your question" in _sent(page, "#feedback-status")
    assert page.get_attribute("#fb-up", "aria-pressed") == "true" and page.get_attribute("#fb-down", "aria-pressed") == "false"
    assert sent[-1].headers["authorization"] == f"Bearer {KEY}"
    assert sent[-1].post_data_json == {"query": question, "rating": "up", "doc_id": quoted}
    row = _feedback(server, question)[quoted]
    assert (row.rating, row.key_name, row.trusted, row.not_covered) == ("up", "FEDQA_API_KEYS[0]", False, False)
    assert page.get_attribute("#feedback-status", "data-feedback-id") == _stored(server, question)[quoted].id  # the 202's id

    page.click("#fb-down")  # a change of mind replaces the key's vote
    _sent(page, "#feedback-status")
    assert _feedback(server, question)[quoted].rating == "down"

    other = expected["sources"][1]["doc_id"]
    page.click("#source-2 button.answered")
    assert "source 2 answered" in _sent(page, "#source-2 .feedback-status")
    assert sent[-1].post_data_json == {"query": question, "rating": "up", "doc_id": other}
    stored = _feedback(server, question)
    assert (stored[other].rating, stored[other].domain) == ("up", expected["sources"][1]["domain"])
    assert set(stored) == {quoted, other}


def test_a_not_covered_answer_is_confirmed_or_disputed_from_the_page(server, keyed_page):
    answers = {q: _ask(server, query=q, seed=SEED) for q in OFF_TOPIC}
    question = next((q for q, body in answers.items() if body["answer_mode"] == "not_covered"), None)
    assert question, f"no off-topic question was answered not_covered: {[b['answer_mode'] for b in answers.values()]}"
    page = keyed_page
    page.goto(f"{server.url}/?{urlencode({'q': question, 'seed': SEED})}")
    _wait_answer(page)
    assert page.is_visible("#rate-refusal") and not page.is_visible("#rate-answer")
    page.click("#fb-not-covered")
    assert "does not cover" in _sent(page, "#feedback-status")
    row = _feedback(server, question)[""]
    assert (row.not_covered, row.rating, row.doc_id) == (True, None, None)
    page.click("#fb-covered")
    assert "does cover" in _sent(page, "#feedback-status")
    row = _feedback(server, question)[""]  # the same key's verdict, replaced
    assert (row.not_covered, row.rating, row.doc_id) == (False, "down", None)


def test_feedback_errors_are_shown_on_the_page(demo_pipeline, tmp_path, browser):
    """Over the key's rate limit the page says so (429, with the wait) and stores nothing."""
    settings = make_settings(tmp_path / "home", api_keys=KEY, rate_limit_per_minute=30)
    state = ServiceState(settings)
    state.pipeline = demo_pipeline
    with served_app(create_app(settings, state)) as url:
        context, page = _open(browser, key=KEY)
        try:
            page.goto(f"{url}/?{urlencode({'q': QUESTION, 'seed': SEED, 'generate': '0'})}")
            _wait_answer(page)
            spent = (httpx.get(f"{url}/domains", headers={"Authorization": f"Bearer {KEY}"}, timeout=10).status_code for _ in range(40))
            assert 429 in spent  # the key's quota for this minute
            page.click("#source-1 button.answered")
            note = "#source-1 .feedback-status"
            page.wait_for_selector(f"{note}[data-state=error]", timeout=30_000)
            assert "error 429" in page.text_content(note) and "retry in" in page.text_content(note)
            assert page.get_attribute("#source-1 button.answered", "aria-pressed") == "false"
            assert not FeedbackStore(settings.feedback_path).votes()
            assert not page.problems
        finally:
            context.close()
