"""Issue 48, "Bad input": labelled questions naming products or passages the index does not have, and questions
without ``domains`` given to an evaluation, are refused before a model loads (each bad line named), or with
``--lenient`` warned about and left out; through real ``fedqa`` processes and a real server on a two-product home."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from service.queries import Catalogue, LabelError, LabelledQuery, check_labels, load_files
from tests.integration.cli.test_cli_errors import assert_one_line_failure, fedqa
from tests.utils import make_settings, served_app

PAGES = {
    "orbit": "# Contacts\n\n## Import\n\nImport contacts from a CSV file under Contacts > Import.\n",
    "ledger": "# Refunds\n\n## Refund a payment\n\nOpen the invoice and click Refund to return money to the card.\n",
}
GOOD = [
    {"qid": "g1", "query": "How do I import contacts?", "domains": ["orbit"], "gold_doc_ids": ["orbit/page#000"], "answer": "Contacts > Import."},
    {"qid": "g2", "query": "How do I refund a payment?", "domains": ["ledger"], "gold_doc_ids": ["ledger/page#000"], "answer": "Click Refund."},
    {"qid": "g3", "query": "Can I upload a CSV of contacts?", "domains": ["orbit"]},
    {"qid": "g4", "query": "Return money to the card", "domains": ["ledger"]},
    {"qid": "g5", "query": "Where is contacts import?", "domains": ["orbit"]},
    {"qid": "g6", "query": "Refund an invoice", "domains": ["ledger"]},
]
# line 2: a misspelt product; line 3: a product and a passage the index does not have
BAD = [
    GOOD[0],
    {"qid": "b2", "query": "How do I refund a card payment?", "domains": ["ledgr"]},
    {"qid": "b3", "query": "Refund and import", "domains": ["ledger", "billing"], "gold_doc_ids": ["ledger/page#000", "ledger/page#009"]},
    *GOOD[1:],
]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _expected_lines(bad: Path) -> list[str]:
    return [
        f"{bad}:2: qid b2: unknown product 'ledgr' (the index has: ledger, orbit)",
        f"{bad}:3: qid b3: unknown product 'billing' (the index has: ledger, orbit)",
        f"{bad}:3: qid b3: gold_doc_id 'ledger/page#009' is not in the index",
    ]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home with two products (orbit, ledger) of one page each, ingested by ``fedqa ingest``; no router."""
    root = tmp_path_factory.mktemp("bad-labels")
    for domain, text in PAGES.items():
        (root / "site" / domain).mkdir(parents=True)
        (root / "site" / domain / "page.md").write_text(text, encoding="utf-8")
    out = fedqa("ingest", str(root / "site"), "--quiet", home=root / "home")
    assert out.returncode == 0, out.stderr[-2000:]
    return root / "home"


# ------------------------------------------------------------------ the check itself (no home)
def test_lenient_check_leaves_out_unknown_labels_and_drops_questions_left_without_a_product():
    catalogue = Catalogue.of("the index", ["orbit", "ledger"], ["orbit/page#000", "ledger/page#000"])
    queries = [
        LabelledQuery("ok", "a", ["orbit"], ["orbit/page#000"], where="q.jsonl:1"),
        LabelledQuery("gone", "b", ["ledgr"], where="q.jsonl:2"),
        LabelledQuery("trimmed", "c", ["ledger", "billing"], ["ledger/page#000", "ledger/page#009"], answer="x", where="q.jsonl:3"),
        LabelledQuery("oos", "d", [], where="q.jsonl:4"),  # out of scope on purpose: nothing to check, kept
    ]
    result = check_labels(queries, catalogue, lenient=True)
    assert [(q.qid, q.domains, q.gold_doc_ids) for q in result.queries] == [
        ("ok", ["orbit"], ["orbit/page#000"]),
        ("trimmed", ["ledger"], ["ledger/page#000"]),
        ("oos", [], []),
    ]
    assert result.queries[1].answer == "x"
    assert [str(p) for p in result.problems] == [
        "q.jsonl:2: qid gone: unknown product 'ledgr' (the index has: ledger, orbit)",
        "q.jsonl:3: qid trimmed: unknown product 'billing' (the index has: ledger, orbit)",
        "q.jsonl:3: qid trimmed: gold_doc_id 'ledger/page#009' is not in the index",
    ]
    with pytest.raises(LabelError) as err:
        check_labels(queries, catalogue)
    assert err.value.problems == result.problems and "2 labelled question(s)" in err.value.summary and "--lenient" in err.value.summary
    assert check_labels(queries[::3], catalogue).queries == [queries[0], queries[3]]  # nothing to say: all kept


def test_questions_without_domains_are_listed_across_files(tmp_path):
    a = _write(tmp_path / "a.jsonl", [{"qid": "x", "query": "sso?"}, {"qid": "y", "query": "off topic", "domains": []}])
    b = _write(tmp_path / "b.jsonl", [{"qid": "z", "query": "refunds?", "domains": ["ledger"]}, {"query": "import?"}])
    assert len(load_files([a, b])) == 4  # training reads them as before (no domains: out of scope)
    with pytest.raises(LabelError) as err:
        load_files([a, b], require_domains=True)
    assert [str(p) for p in err.value.problems] == [f'{a}:1: qid x: no "domains" field', f'{b}:2: qid b-2: no "domains" field']
    assert err.value.summary.startswith("2 of 4 questions") and '"domains": []' in err.value.summary


# ------------------------------------------------------------------ the commands, as real processes
def _commands(tmp_path: Path, bad: Path, good: Path) -> list[list[str]]:
    # no --quiet: a model loaded would show its "Loading weights" bar, which the tests look for
    return [
        ["train", "router", "--queries", str(bad), "--epochs", "1"],
        ["train", "answer", "--queries", str(good), str(bad), "--dry-run"],
        ["train", "split", "--queries", str(bad), "--dry-run"],
        ["train", "abstention", "--queries", str(good), "--out-of-scope", str(bad), "--dry-run"],
        ["data", "build", "--queries", str(bad), "--out", str(tmp_path / "data")],
        ["models", "evaluate", "--queries", str(bad)],
    ]


@pytest.mark.slow
def test_every_command_refuses_unknown_products_and_gold_ids_before_a_model_loads(home, tmp_path):
    bad, good = _write(tmp_path / "bad.jsonl", BAD), _write(tmp_path / "good.jsonl", GOOD)
    for command in _commands(tmp_path, bad, good):
        out = fedqa(*command, home=home)
        assert_one_line_failure(out, "2 labelled question(s)", "the index does not have", "--lenient")
        lines = out.stderr.strip().splitlines()
        assert lines[-4:-1] == _expected_lines(bad), (command, out.stderr[-3000:])
        assert "Loading weights" not in out.stderr, command  # refused before the encoder (or a pipeline) loaded
    assert not (home / "routers").exists() and not (tmp_path / "data").exists()


@pytest.mark.slow
def test_lenient_warns_with_the_same_lines_and_leaves_those_labels_out(home, tmp_path):
    bad = _write(tmp_path / "bad.jsonl", BAD)
    out = fedqa("data", "build", "--queries", str(bad), "--out", str(tmp_path / "data"), "--lenient", "--quiet", "--val-fraction", "0", home=home)
    assert out.returncode == 0, out.stderr[-3000:]
    warned = [line for line in out.stderr.splitlines() if line.startswith("fedqa: warning: ")]
    assert warned[:3] == [f"fedqa: warning: {line} (left out)" for line in _expected_lines(bad)]
    assert "3 label(s) left out, 1 question(s) with no product left dropped" in warned[3]
    rows = {r["qid"]: r for r in map(json.loads, (tmp_path / "data" / "router_train.jsonl").read_text().splitlines())}
    assert "b2" not in rows and rows["b3"]["domains"] == ["ledger"] and rows["g1"]["domains"] == ["orbit"]

    out = fedqa("train", "router", "--queries", str(bad), "--lenient", "--epochs", "1", "--no-activate", home=home)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"fedqa: warning: {_expected_lines(bad)[0]} (left out)" in out.stderr
    assert "Loading weights" in out.stderr  # the strict runs above would show this line had they loaded the encoder
    assert json.loads(out.stdout)["router"].startswith("router-")


@pytest.mark.slow
def test_evaluate_refuses_questions_without_domains_before_the_pipeline_loads(home, tmp_path):
    none = _write(tmp_path / "none.jsonl", [{"qid": "a", "query": "How do I import contacts?"}, {"qid": "b", "query": "Refunds?"}])
    mixed = _write(tmp_path / "mixed.jsonl", [GOOD[0], {"qid": "m2", "query": "Refunds?"}, {"qid": "m3", "query": "Weather?", "domains": []}])
    out = fedqa("evaluate", "--queries", str(none), "--strategies", "uis", home=home)  # no --quiet: see _commands
    assert_one_line_failure(out, "2 of 2 questions", 'no "domains" field', '"domains": []', "out of scope")
    assert out.stderr.strip().splitlines()[:2] == [f'{none}:1: qid a: no "domains" field', f'{none}:2: qid b: no "domains" field']
    assert "Loading weights" not in out.stderr
    out = fedqa("evaluate", "--queries", str(mixed), "--strategies", "uis", "--quiet", home=home)
    assert_one_line_failure(out, "1 of 3 questions")
    assert out.stderr.strip().splitlines()[0] == f'{mixed}:2: qid m2: no "domains" field'  # m3 is out of scope on purpose

    good = _write(tmp_path / "good.jsonl", GOOD)
    out = fedqa("evaluate", "--queries", str(good), "--strategies", "uis", "--out", str(mixed), home=home)
    assert_one_line_failure(out, f"--out {mixed} is a file")  # not found after the whole evaluation ran
    assert "Loading weights" not in out.stderr


@pytest.mark.slow
def test_the_evaluate_api_answers_422_naming_the_questions_without_domains(home):
    """Inline questions and a named dataset alike: what is missing and what ``domains: []`` would mean; a question
    with ``domains: []`` is accepted (out of scope on purpose)."""
    from service.api.app import create_app
    from service.api.state import ServiceState

    settings = make_settings(home, encoder_backend="torch", rate_limit_per_minute=0)
    (home / "eval" / "datasets").mkdir(parents=True, exist_ok=True)
    _write(home / "eval" / "datasets" / "nodomains.jsonl", [GOOD[0], {"qid": "d2", "query": "Refunds?"}])
    with served_app(create_app(settings, ServiceState(settings)), lifespan="on") as url, httpx.Client(base_url=url, timeout=120) as c:
        inline: list[dict[str, object]] = [{"query": "How do I import contacts?", "domains": ["orbit"]}, {"qid": "n2", "query": "Refunds?"}]
        r = c.post("/evaluate", json={"queries": inline, "strategies": ["uis"], "dry_run": True})
        assert r.status_code == 422, r.text
        detail = r.json()["detail"]
        assert "queries[1] (qid n2)" in detail and 'no "domains" field' in detail and '"domains": []' in detail and "queries[0]" not in detail
        inline[1]["domains"] = []
        assert c.post("/evaluate", json={"queries": inline, "strategies": ["uis"], "dry_run": True}).status_code == 200
        r = c.post("/evaluate", json={"dataset": "nodomains", "strategies": ["uis"], "dry_run": True})
        assert r.status_code == 422 and 'nodomains.jsonl:2: qid d2: no "domains" field' in r.json()["detail"], r.text
        assert str(home) not in r.text
