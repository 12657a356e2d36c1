"""Both store backends on real passages and real embeddings: qdrant-edge and qdrant-client ``:memory:``."""

from __future__ import annotations

import numpy as np
import pytest

from service.artifacts import Registry
from service.retrieval.client_store import ClientBackend
from service.retrieval.edge_store import EdgeBackend
from service.retrieval.passage import Passage
from service.retrieval.store import StoreError, StoreUnavailable


@pytest.fixture(params=["qdrant-edge", "qdrant-client"])
def backend(request, tmp_path):
    if request.param == "qdrant-edge":
        return EdgeBackend(Registry(tmp_path))
    return ClientBackend.from_url(":memory:")


@pytest.fixture(scope="module")
def embedded(faq6_sample, encoder):
    passages = [Passage(**{k: r[k] for k in ("doc_id", "domain", "title", "source", "text")}) for r in faq6_sample]
    return passages, encoder.embed_passages([p.text for p in passages])


def _fill(store, passages, vectors):
    by_domain: dict[str, list[int]] = {}
    for i, p in enumerate(passages):
        by_domain.setdefault(p.domain, []).append(i)
    for domain, idx in by_domain.items():
        store.create_domain(domain, vectors.shape[1])
        store.upsert(domain, [passages[i] for i in idx], vectors[idx])
    store.finish()


def test_upsert_search_count_iterate(backend, embedded, encoder):
    passages, vectors = embedded
    store = backend.open("v1", create=True)
    _fill(store, passages, vectors)
    assert store.domains() == sorted({p.domain for p in passages})
    assert sum(store.count(d) for d in store.domains()) == len(passages)

    first, last = store.domains()[0], store.domains()[-1]
    target = next(p for p in passages if p.domain == first)
    hits = store.search(first, encoder.embed_query(target.text), 3)
    assert hits[0].point_id == target.point_id
    assert hits[0].score == pytest.approx(1.0, abs=1e-3)  # unit vectors: a passage is its own best match
    assert hits[0].score >= hits[1].score >= hits[2].score
    found = store.passages(first, [h.point_id for h in hits] + [Passage("nowhere", first, "", "", "").point_id])
    assert found[target.point_id] == target and set(found) == {h.point_id for h in hits}  # an unknown id is left out
    assert all(p.domain == first and p.point_id == i for i, p in found.items())

    assert {p.doc_id for p in store.iter_passages(last)} == {p.doc_id for p in passages if p.domain == last}
    store.close()


def test_upsert_same_doc_id_overwrites(backend, embedded):
    passages, vectors = embedded
    store = backend.open("v1", create=True)
    _fill(store, passages[:5], vectors[:5])
    changed = Passage(**{**passages[0].payload(), "text": "rewritten"})
    store.upsert(changed.domain, [changed], vectors[:1])
    assert store.count(changed.domain) == sum(1 for p in passages[:5] if p.domain == changed.domain)
    assert changed in list(store.iter_passages(changed.domain))
    store.close()


def test_clone_copies_every_collection_and_drop_removes_it(backend, embedded):
    passages, vectors = embedded
    store = backend.open("v1", create=True)
    _fill(store, passages, vectors)
    counts = {d: store.count(d) for d in store.domains()}
    store.close()
    backend.clone("v1", "v2")
    copy = backend.open("v2")
    assert {d: copy.count(d) for d in copy.domains()} == counts
    q = vectors[3]
    hit = copy.search(passages[3].domain, q, 1)[0]
    assert copy.passages(passages[3].domain, [hit.point_id]) == {hit.point_id: passages[3]}
    copy.close()
    backend.drop("v2")
    with pytest.raises(StoreUnavailable):
        backend.open("v2")


def test_unknown_domain_is_an_error(backend, embedded):
    passages, vectors = embedded
    store = backend.open("v1", create=True)
    _fill(store, passages[:3], vectors[:3])
    with pytest.raises(StoreError):
        store.search("no-such-domain", np.zeros(vectors.shape[1], dtype=np.float32), 3)
    store.close()


def test_edge_shard_is_locked_while_open(tmp_path, embedded):
    passages, vectors = embedded
    backend = EdgeBackend(Registry(tmp_path))
    store = backend.open("v1", create=True)
    _fill(store, passages[:3], vectors[:3])
    import subprocess
    import sys

    code = (
        "from service.artifacts import Registry; from service.retrieval.edge_store import EdgeBackend;"
        f"EdgeBackend(Registry({str(tmp_path)!r})).open('v1')"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode != 0 and "open in another process" in r.stderr
    store.close()


def test_unreachable_qdrant_server_is_unavailable():
    backend = ClientBackend.from_url("http://127.0.0.1:9", prefer_grpc=False, timeout_s=1)
    with pytest.raises(StoreUnavailable):
        backend.open("v1")


def test_domains_are_searched_in_the_request_thread_on_the_embedded_store(backend, embedded, encoder, tmp_path):
    """Embedded searches take about a millisecond: a thread hand-off costs more (docs/speed.md); a server's do not."""
    from concurrent.futures import ThreadPoolExecutor

    from service.retrieval.federated import search_domains, search_threads
    from tests.conftest import make_settings

    passages, vectors = embedded
    store = backend.open("v1", create=True)
    _fill(store, passages, vectors)
    domains = store.domains()
    threads = search_threads(make_settings(tmp_path / "home"), store, len(domains))
    assert threads == (1 if backend.name == "qdrant-edge" else min(8, len(domains)))
    assert search_threads(make_settings(tmp_path / "home", search_threads=3), store, len(domains)) == 3
    query = encoder.embed_query(passages[0].text)
    in_thread, _ = search_domains(store, query, domains, 3, None)
    with ThreadPoolExecutor(2) as pool:
        pooled, ms = search_domains(store, query, domains, 3, pool)
    assert in_thread == pooled and set(ms) == set(domains)
    store.close()


def test_embedded_search_scans_an_int8_copy_and_rescores_to_exact_scores(embedded, encoder, tmp_path):
    passages, vectors = embedded
    backend = EdgeBackend(Registry(tmp_path))
    store = backend.open("v1", create=True)
    _fill(store, passages, vectors)  # finish() builds each shard's int8 copy
    shards = tmp_path / "indexes" / "v1" / "shards"
    assert {p.parts[-5] for p in shards.glob("*/segments/*/vector_storage/quantized.data")} == set(store.domains())
    store.close()
    store = backend.open("v1")  # reopened: the stored settings (and the int8 copy) are kept
    assert all('"int8"' in (shards / d / "edge_config.json").read_text() for d in store.domains())

    stored = vectors.astype(np.float16).astype(np.float64)  # the shards keep float16 vectors
    for target in passages[::7]:
        query = encoder.embed_query(target.title)
        idx = [i for i, p in enumerate(passages) if p.domain == target.domain]
        exact = stored[idx] @ query.astype(np.float64)
        order = np.argsort(-exact)[:5]
        hits = store.search(target.domain, query, 5)
        assert [h.point_id for h in hits] == [passages[idx[i]].point_id for i in order]
        assert [h.score for h in hits] == pytest.approx(exact[order].tolist(), abs=2e-4)  # re-scored, not int8 scores

    # A passage added after the last optimize sits in the appendable segment, which is scanned exactly.
    added = Passage("added-after-finish", passages[0].domain, "Added", "test", "A passage upserted after the index was finished.")
    store.upsert(added.domain, [added], encoder.embed_passages([added.text]))
    assert store.search(added.domain, encoder.embed_query(added.text), 1)[0].point_id == added.point_id
    store.close()


class _Counting:
    """A store whose passage reads are counted (everything else goes to the real store)."""

    def __init__(self, store) -> None:
        self.store, self.reads = store, 0

    def passages(self, domain, ids):
        self.reads += 1
        return self.store.passages(domain, ids)

    def __getattr__(self, name):
        return getattr(self.store, name)


def test_passage_cache_serves_rankings_from_memory_and_evicts_least_recent(backend, embedded):
    from service.retrieval.federated import Candidate, with_passages
    from service.retrieval.passage_cache import PassageCache

    passages, vectors = embedded
    store = backend.open("v1", create=True)
    _fill(store, passages, vectors)
    counting = _Counting(store)
    domain = store.domains()[0]
    mine = [p for p in passages if p.domain == domain]
    ranked = [Candidate(p.domain, p.point_id, 0.5, 1.0, 0.5) for p in passages[::7]]
    plain = with_passages(counting, ranked)
    assert counting.reads == len({c.domain for c in ranked}) and [h.passage for h in plain] == passages[::7]

    whole = PassageCache(len(passages))
    assert whole.warm(counting, store.domains()) == len(passages)
    counting.reads = 0
    assert with_passages(counting, ranked, whole) == plain and counting.reads == 0  # all from memory

    small = PassageCache(2)
    assert small.warm(counting, store.domains()) == 0  # the index does not fit: filled by reads
    ids = [p.point_id for p in mine[:3]]
    assert small.passages(counting, domain, ids[:2]) == {p.point_id: p for p in mine[:2]} and counting.reads == 1
    assert small.passages(counting, domain, ids[:1]) == {ids[0]: mine[0]} and counting.reads == 1  # a hit
    small.passages(counting, domain, ids[2:3])  # evicts the least recent (ids[1]), not ids[0]
    assert len(small) == 2 and counting.reads == 2
    small.passages(counting, domain, ids[:1])
    assert counting.reads == 2
    small.passages(counting, domain, ids[1:2])
    assert counting.reads == 3
    off = PassageCache(0)
    assert off.warm(counting, store.domains()) == 0 and off.passages(counting, domain, ids[:1]) == {ids[0]: mine[0]} and len(off) == 0
    store.close()


def test_passage_cache_that_cannot_read_the_index_at_load_reads_per_ranking(backend, embedded, caplog):
    from service.retrieval.passage_cache import PassageCache

    passages, vectors = embedded
    store = backend.open("v1", create=True)
    _fill(store, passages, vectors)

    class Unscannable(_Counting):
        def iter_passages(self, domain):
            raise ConnectionError("Qdrant did not answer (scroll)")

    broken = Unscannable(store)
    cache = PassageCache(len(passages))
    with caplog.at_level("WARNING", logger="fedqa.store"):
        assert cache.warm(broken, store.domains()) == 0
    assert "not cached at load" in caplog.text
    first = passages[0]
    assert cache.passages(broken, first.domain, [first.point_id]) == {first.point_id: first} and broken.reads == 1
    store.close()


def test_pipeline_reads_an_embedded_index_whole_at_load_and_a_servers_passages_as_it_ranks(backend, embedded, encoder, tmp_path):
    from service.pipeline import Pipeline
    from service.routing.router import UniformRouter
    from tests.conftest import make_settings

    passages, vectors = embedded
    store = backend.open("v1", create=True)
    _fill(store, passages, vectors)
    pipeline = Pipeline(make_settings(tmp_path / "home"), router=UniformRouter(store.domains()), encoder=encoder, store=store)
    try:
        embedded_store = store.backend == "qdrant-edge"
        assert len(pipeline.passage_cache) == (len(passages) if embedded_store else 0)
        hits = pipeline.retrieve(passages[3].text, top_k=3, strategy="uis").hits
        assert hits[0].passage == passages[3]
        assert len(pipeline.passage_cache) == (len(passages) if embedded_store else 3)
    finally:
        pipeline.close()


def test_an_embedded_shard_past_the_threshold_gets_an_hnsw_graph_and_a_smaller_one_does_not(tmp_path):
    import json

    from service.retrieval.edge_store import HnswPlan

    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((600, 32)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    store = EdgeBackend(Registry(tmp_path), HnswPlan(min_passages=500, m=8, ef=64)).open("v1", create=True)
    for domain, n in (("large", 600), ("small", 100)):
        store.create_domain(domain, 32)
        store.upsert(domain, [Passage(f"{domain}{i}", domain, "", "", "") for i in range(n)], vectors[:n])
    store.finish()
    shards = tmp_path / "indexes" / "v1" / "shards"
    degree = {d: json.loads((shards / d / "edge_config.json").read_text())["hnsw_config"]["m"] for d in ("large", "small")}
    assert degree == {"large": 8, "small": 0}
    for i in range(0, 600, 37):  # every vector finds itself first through the graph, scores re-scored exactly
        hit = store.search("large", vectors[i], 10)[0]
        assert hit.point_id == Passage(f"large{i}", "large", "", "", "").point_id and hit.score == pytest.approx(1.0, abs=2e-3)
    store.close()
    store = EdgeBackend(Registry(tmp_path)).open("v1")  # reopened with its stored settings: the graph is kept
    assert json.loads((shards / "large" / "edge_config.json").read_text())["hnsw_config"]["m"] == 8
    assert store.search("large", vectors[5], 1)[0].point_id == Passage("large5", "large", "", "", "").point_id
    store.close()
