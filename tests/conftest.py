"""Shared fixtures: one real encoder, one demo home (index + trained router), one ONNX export of the encoder per test
session; the tiers' markers; no evaluation job worker outlives its test module.

Each test is marked by the folder it lies in: ``unit`` (tests/unit/, mirroring the packages: no real MiniLM, no demo
home, no training, no server process), ``integration`` (tests/integration/: real MiniLM, real stores, training,
servers) or ``e2e`` (tests/e2e/: the README's commands, the browser, Locust, real service processes);
``pytest -m unit`` runs the fast tier. Tests that need the demo home (an ingest and a router training), the pipeline
on it, the embedded LLM or the session's ONNX export are also marked ``slow`` here (``pytest -m "not slow"``).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from filelock import FileLock

from service.compute import available_cpus  # os and threading only: PyTorch is not loaded yet

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Under pytest-xdist, each worker and every process its tests start compute on its share of the CPUs: PyTorch's
# OpenMP pool otherwise takes every core in every worker, and on 2 cores the two workers' pools spin against each
# other (the whole suite, 2 quiet cores: 1461 s of CPU and 775 s before, 1202 s and 663 s after). Set before
# PyTorch is imported; OMP_NUM_THREADS set by the caller wins.
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, available_cpus() // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))))

from service.files import copytree_sparse  # noqa: E402
from service.retrieval.encoder import Encoder  # noqa: E402
from tests.utils import make_settings  # noqa: E402  (also imported from here by test modules)

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "faq6"

# Session fixtures that cost tens of seconds: a test using one is slow.
SLOW_FIXTURES = frozenset({"demo_home", "demo_pipeline", "embedded_llm", "demo_onnx_dir"})
DEMO_FIXTURES = frozenset({"demo_home", "demo_pipeline", "reranker_home"})  # built from the demo home
TIERS = ("unit", "integration", "e2e")  # the folders under tests/, each the name of its marker
TESTS = Path(__file__).resolve().parent
FEWLABEL_DOCS = TESTS / "data" / "fewlabel" / "docs"  # six Markdown pages of two products


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (pyproject's addopts): a worker per CPU this process may run on, at most 4 (each holds its copy of
    the demo home, a MiniLM and, for some files, the embedded LLM)."""
    return max(1, min(4, available_cpus()))


def tier(path: Path) -> str | None:
    """The tier of a test module: the first folder of its path under tests/ (None outside the tiers)."""
    try:
        first = Path(path).resolve().relative_to(TESTS).parts[0]
    except ValueError:
        return None
    return first if first in TIERS else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    misplaced = []
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if SLOW_FIXTURES & fixtures:
            item.add_marker(pytest.mark.slow)
        name = tier(item.path)
        if name is not None:
            item.add_marker(getattr(pytest.mark, name))
        if name == "unit" and ((SLOW_FIXTURES | {"encoder"}) & fixtures or item.get_closest_marker("slow")):
            misplaced.append(item.nodeid)
    if misplaced:  # the fast tier stays fast: a test on the real encoder or the demo home belongs to tests/integration/
        raise pytest.UsageError("unit tests that load the real encoder or the demo home, or are marked slow:\n" + "\n".join(misplaced))
    items.sort(key=_run_order)


def _run_order(item: pytest.Item) -> int:
    """Unit tests first, the tests on the demo home last (a stable sort: each group in collection order): while the
    first worker to need the demo home builds it, the others run tests that do not wait for it."""
    if tier(item.path) == "unit":
        return 0
    return 2 if DEMO_FIXTURES & set(getattr(item, "fixturenames", ())) else 1


def _job_workers() -> set[threading.Thread]:
    """The evaluation job workers' threads alive in this process (:class:`service.evaluation.worker.EvalWorker`)."""
    return {t for t in threading.enumerate() if t.name == "fedqa-eval" and t.is_alive()}


@pytest.fixture(scope="module", autouse=True)
def no_job_worker_outlives_its_module() -> Iterator[None]:
    """A test module stops every job worker it started (``POST /evaluate`` starts one; lifespan or ``worker.stop()``
    stops it): one left running polls its home's jobs database for the rest of the session, and after the home is
    removed logs a traceback a second."""
    from tests.utils import wait_until

    before = _job_workers()
    yield
    if not wait_until(lambda: not (_job_workers() - before), timeout=10):
        left = len(_job_workers() - before)
        pytest.fail(f"{left} evaluation job worker(s) started by this module still run (stop: the app's lifespan, worker.stop())", pytrace=False)


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None], *, copied: bool = False) -> Path:
    """The folder ``name``, made by ``build`` once per test run: in this process, or under pytest-xdist by the first
    worker that asks, while the others wait on a file lock and then read the same folder (copy it to change it);
    ``copied``: under pytest-xdist each worker gets its own copy (a home: a pipeline locks its embedded index)."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        path = tmp_path_factory.mktemp(name)
        build(path)
        return path
    root = tmp_path_factory.getbasetemp().parent  # the run's folder, above each worker's
    path, done = root / name, root / f"{name}.built"
    with FileLock(root / f"{name}.lock"):
        if not done.exists():  # not built, or a worker's build failed (then this one tries again and fails too)
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir()
            build(path)
            done.touch()
    if copied:
        return copytree_sparse(path, tmp_path_factory.mktemp(name), dirs_exist_ok=True)
    return path


@pytest.fixture(scope="session")
def encoder() -> Encoder:
    return Encoder()


@pytest.fixture(scope="session")
def demo_onnx_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The base encoder's ONNX export a first ingest of the shipped demo makes (calibrated on a sample of its passages),
    made once per run (30-70 s on 2 cores; :func:`built_once`) for every test that loads it: read it; copy it to
    change it."""
    from service.demo import DOCS
    from service.retrieval.encoder import EncoderBackend
    from tests.utils import ingest_calibration

    def build(root: Path) -> None:
        made = Encoder(backend="onnx", onnx_dir=root / "onnx", calibration=ingest_calibration(DOCS))
        assert made.backend is EncoderBackend.ONNX, made.backend_error

    return built_once(tmp_path_factory, "demo-onnx", build) / "onnx"


@pytest.fixture(scope="session")
def demo_home(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    """A home with the shipped demo knowledge base ingested and a router trained on its questions, as ``fedqa demo``
    builds it: embedded by the ONNX encoder (the default runtime), whose export lies in the home's ``cache/`` (the
    session's, copied: the same calibration). A process on a copy finds it with FEDQA_CACHE=<copy>/cache; without
    it, it would export again from the home's calibration passages (30-70 s).
    Built once per run (:func:`built_once`); under pytest-xdist each worker copies it.
    FEDQA_TEST_DEMO_HOME: copy one built before by this fixture (its ``cache/`` too) instead, to iterate quickly on
    a busy machine."""
    from indexes.ingest import ingest
    from service.cli.demo import setup_demo
    from service.demo import DOCS
    from service.retrieval.encoder import base_onnx_dir, packaged_minilm_path
    from tests.utils import ingest_calibration

    prebuilt = os.environ.get("FEDQA_TEST_DEMO_HOME")
    if prebuilt:  # a demo home built by an earlier session (copied: the session's pipeline locks its index)
        home = tmp_path_factory.mktemp("demo-home")
        copytree_sparse(Path(prebuilt), home, dirs_exist_ok=True)
        split_in_force(home)
        return home

    def build(built: Path) -> None:
        settings = make_settings(built)
        demo_onnx_dir = request.getfixturevalue("demo_onnx_dir")  # not made for a prebuilt home
        shutil.copytree(demo_onnx_dir, base_onnx_dir(settings, packaged_minilm_path(), ingest_calibration(DOCS).fingerprint))
        ingest([DOCS], settings, progress=False)  # a first ingest: the ONNX runtime, its export found in the cache
        setup_demo(settings, progress=False)  # then what 'fedqa demo' does: router (held-out split), "not covered" fit
        split_in_force(built)

    return built_once(tmp_path_factory, "demo-home", build, copied=True)


def split_in_force(home: Path) -> None:
    """Store the split rule the fit chose where the few-labels rule kept "never split" (on the demo's 56 validation
    questions the chosen rule splits two and measured one question worse out of sample): the tests of answers by
    product exercise the mechanism, not whether it pays on the demo. Where a ranking model serves, the rule is the one
    chosen with the default ranking serving (the rule reads the router's p and each product's own search, which the
    model leaves alone; beside the model's better top passage the fit keeps "never split"). Its ``fit`` holds the
    figures of the ranking that serves and no verdict, as a rule stored before the verdicts existed."""
    from service.artifacts import Registry
    from service.demo import QUERIES
    from service.loading import load_pipeline
    from service.queries import load_queries
    from service.routing.split import load_split, save_split, split_path
    from training.ranking import default_ranking
    from training.split import METRICS_KEY, choose, collect_cases, report
    from training.versions import report_in_metrics

    registry = Registry(home)
    router = registry.active()["router"]
    path = split_path(registry, router)
    stored = load_split(path)
    if router is None or path is None or stored is None or stored.min_ratio is not None:
        return
    val_qids = set(registry.manifest("router", router).get("val_qids") or [])
    pipeline = load_pipeline(make_settings(home), with_llm=False)
    try:
        questions = [q for q in load_queries(QUERIES) if q.qid in val_qids]
        cases = collect_cases(pipeline, questions)
        chosen_on = cases
        if pipeline.ranking is not None:  # a model that serves: no rule beats its top passage on the demo's questions
            with default_ranking(pipeline):
                chosen_on = collect_cases(pipeline, questions)
    finally:
        pipeline.close()
    rule = choose(chosen_on)
    rule.fit = {k: v for k, v in stored.fit.items() if k != "decision"} | report(rule, cases)
    save_split(rule, path)
    report_in_metrics(registry, "router", router, METRICS_KEY, rule.fit)


@pytest.fixture(scope="session")
def demo_pipeline(demo_home: Path, encoder: Encoder):
    """A retrieval pipeline on the demo home (LLM off: extractive answers)."""
    from service.loading import load_pipeline

    pipeline = load_pipeline(make_settings(demo_home), with_llm=False)
    yield pipeline
    pipeline.close()


@pytest.fixture
def default_ranking_serves(demo_pipeline) -> Iterator[None]:  # noqa: ANN001
    """The demo pipeline ranks with its default merge (U) for one test, whether or not the demo's fit stored a ranking
    model that serves: for the tests of a property of the default ranking (the fused strategy's U, the page prior's
    bonus in it), which a serving model replaces by its own score."""
    from training.ranking import default_ranking

    with default_ranking(demo_pipeline):
        yield


@pytest.fixture(scope="session")
def faq6_sample() -> list[dict]:
    """Real passages, 20 per domain: the faq6 set's when ../shared is present (120), else the shipped demo's (80),
    so the store and training-data tests run in any clone."""
    from service.demo import DOCS

    path = SHARED / "docs.jsonl"
    if not path.is_file():
        path = DOCS
    per: dict[str, list[dict]] = {}
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            bucket = per.setdefault(rec["domain"], [])
            if len(bucket) < 20:
                bucket.append(rec)
    return [r for recs in per.values() for r in recs]


@pytest.fixture(scope="session")
def fewlabel_onnx_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The base encoder's ONNX export a first ingest of :data:`FEWLABEL_DOCS` makes: another corpus than the demo's,
    calibrated on its own passages (a small one: ~15 s on 2 cores, where faq6's sample takes ~50).
    Made once per run (:func:`built_once`): read it; copy it to change it."""
    from service.retrieval.encoder import EncoderBackend
    from tests.utils import ingest_calibration

    def build(root: Path) -> None:
        made = Encoder(backend="onnx", onnx_dir=root / "onnx", calibration=ingest_calibration(FEWLABEL_DOCS))
        assert made.backend is EncoderBackend.ONNX, made.backend_error

    return built_once(tmp_path_factory, "fewlabel-onnx", build) / "onnx"


@pytest.fixture(scope="session")
def fewlabel_cache(tmp_path_factory: pytest.TempPathFactory, fewlabel_onnx_dir: Path) -> Path:
    """A per-user cache (FEDQA_CACHE) holding :func:`fewlabel_onnx_dir` where a home ingesting :data:`FEWLABEL_DOCS`
    on the ONNX encoder looks for it, so processes on such homes export nothing. Shared by every worker: read it."""
    from service.retrieval.encoder import base_onnx_dir, packaged_minilm_path
    from tests.utils import ingest_calibration

    def build(root: Path) -> None:
        target = base_onnx_dir(
            make_settings(root / "home", cache=root / "cache"), packaged_minilm_path(), ingest_calibration(FEWLABEL_DOCS).fingerprint
        )
        shutil.copytree(fewlabel_onnx_dir, target)

    return built_once(tmp_path_factory, "fewlabel-cache", build) / "cache"


@pytest.fixture(scope="session")
def embedded_llm(tmp_path_factory: pytest.TempPathFactory):
    """The real embedded LLM (SmolLM2-135M through transformers), dequantised once per run."""
    from service.generation.local_llm import TransformersLLM

    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return TransformersLLM(cache_dir=tmp_path_factory.mktemp("llm-cache"))
    root = tmp_path_factory.getbasetemp().parent  # shared by the workers: the first dequantises, the others read it
    with FileLock(root / "llm-cache.lock"):
        return TransformersLLM(cache_dir=root / "llm-cache")


@pytest.fixture()
def selector_llm():
    """(lfs tests) An OpenAI-protocol endpoint that says yes for the products in ``yes`` and answers junk for ``junk``."""
    servers = []

    def make(yes: set[str], junk: set[str] | frozenset[str] = frozenset()):
        def reply(prompt: str) -> str:
            product = prompt.split("Product: ")[1].split("\n")[0]
            return "perhaps" if product in junk else ("Yes" if product in yes else "No")

        from tests.scripted_llm import ScriptedServer

        servers.append(ScriptedServer(reply))
        return servers[-1].llm("selector")

    yield make
    for s in servers:
        s.close()


@pytest.fixture(scope="module")
def demo_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped demo corpus in faq6's layout (docs.jsonl, queries_dev.jsonl)."""
    from service.demo import DOCS, QUERIES

    root = tmp_path_factory.mktemp("demo-corpus")
    shutil.copy(DOCS, root / "docs.jsonl")
    shutil.copy(QUERIES, root / "queries_dev.jsonl")
    return root
