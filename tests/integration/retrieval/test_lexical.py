"""The lexical index beside the vectors: built by every ingest, searched per product, fused by reciprocal rank."""

from __future__ import annotations

from pathlib import Path

from indexes.ingest import ingest
from service.artifacts import Registry
from service.loading import load_pipeline
from service.retrieval.federated import merge
from service.retrieval.lexical import LEXICAL_DIR, LexicalHits, LexicalIndex, RankFusion
from service.retrieval.passage import Hit, Passage
from tests.utils import make_settings, present

_PASSAGES = [
    Passage("mail/relay#000", "mail", "Relaying", "mail/relay.html", "Set relayhost to the host name of your provider's mail hub."),
    Passage("mail/relay#001", "mail", "Relaying", "mail/relay.html", "Mail to other domains is delivered directly by looking up MX records."),
    Passage("proxy/timeouts#000", "proxy", "Timeouts", "proxy/timeouts.html", "timeout connect sets the maximum time to wait for a connection."),
]


def test_bm25_finds_the_passage_holding_the_words_and_survives_a_save(tmp_path: Path) -> None:
    index = LexicalIndex.build(_PASSAGES)
    index.save(tmp_path)
    loaded = present(LexicalIndex.load(tmp_path))
    for idx in (index, loaded):
        hits = idx.search("mail", idx.query_tokens("which setting is relayhost"), 5)
        assert [h.point_id for h in hits] == [_PASSAGES[0].point_id]  # only passages with a positive score
        assert idx.search("proxy", idx.query_tokens("timeouts for connections"), 5)[0].point_id == _PASSAGES[2].point_id
        assert idx.search("mail", idx.query_tokens("the of and"), 5) == []  # stop words alone find nothing
        assert idx.search("nowhere", idx.query_tokens("relayhost"), 5) == []
    assert LexicalIndex.load(tmp_path / "none") is None


def test_merge_fuses_the_dense_and_lexical_rankings_by_reciprocal_rank() -> None:
    dense = {"mail": [Hit("a", 0.80), Hit("b", 0.70), Hit("c", 0.60)], "proxy": [Hit("x", 0.75)]}
    lexical = LexicalHits({"mail": [Hit("c", 9.0), Hit("a", 2.0)], "proxy": [Hit("y", 5.0)]})
    weights = {"mail": 1.0, "proxy": 1.0}
    plain = merge(dense, weights, 3)
    assert [c.point_id for c in plain] == ["a", "x", "b"]
    fused = merge(dense, weights, 5, lexical=lexical)
    k = RankFusion().k
    want = {"a": 1 / (k + 1) + 1 / (k + 3), "c": 1 / (k + 4) + 1 / (k + 1), "x": 1 / (k + 2), "y": 1 / (k + 2), "b": 1 / (k + 3)}
    assert [c.point_id for c in fused] == ["a", "c", "x", "y", "b"]
    assert {c.point_id: round(c.rank_score or 0.0, 9) for c in fused} == {p: round(v, 9) for p, v in want.items()}
    assert {c.point_id: c.unified_score for c in fused}["a"] == 0.80  # U itself is kept
    only_lexical = next(c for c in fused if c.point_id == "y")
    assert only_lexical.score == 0.75  # its s is bounded by the lowest its domain's dense search returned
    # the router's weights order the lexical ranking too: a product it rules out loses its lexical lead
    ruled_out = merge(dense, {"mail": 1.0, "proxy": 0.01}, 5, lexical=LexicalHits({"mail": [Hit("c", 2.0)], "proxy": [Hit("y", 50.0)]}))
    assert [c.point_id for c in ruled_out][:2] == ["c", "a"]


def _site(root: Path) -> Path:
    (root / "mail").mkdir(parents=True)
    (root / "mail" / "relay.md").write_text(
        "# Relaying\n\nMail for other domains is delivered by looking up the MX records of the recipient domain, "
        "then connecting to the best of them on port 25.\n\n"
        "## Smarthost\n\nSet relayhost = [mail.isp.example] to send everything through the mail hub your provider "
        "gave you; the brackets turn off MX lookups for that name.\n",
        encoding="utf-8",
    )
    (root / "proxy").mkdir()
    (root / "proxy" / "timeouts.md").write_text(
        "# Timeouts\n\nThe timeout connect keyword sets the maximum time to wait for a connection attempt to a "
        "server to succeed; the timeout client keyword the maximum inactivity time on the client side.\n",
        encoding="utf-8",
    )
    return root


def test_an_ingest_builds_the_lexical_index_and_the_pipeline_fuses_it(tmp_path: Path, encoder) -> None:
    settings = make_settings(tmp_path / "home", min_passage_chars=0)
    version = present(ingest([_site(tmp_path / "site")], settings, encoder=encoder, progress=False).version)
    assert (Registry(settings.home_dir).path("index", version) / LEXICAL_DIR / "mail").is_dir()
    pipeline = load_pipeline(settings, with_llm=False)
    try:
        ret = pipeline.retrieve("relayhost", top_k=3, gate_mode="deterministic")
        assert ret.hits[0].passage.doc_id == "mail/relay#001" and "lexical" in ret.timings_ms
        keys = [h.order_key for h in ret.hits]
        assert keys == sorted(keys, reverse=True) and all(h.fused_score is not None for h in ret.hits)
    finally:
        pipeline.close()
    off = load_pipeline(make_settings(tmp_path / "home", lexical="off"), with_llm=False)
    try:
        assert off.lexical is None and "lexical" not in off.retrieve("relayhost", top_k=3).timings_ms
    finally:
        off.close()


def test_an_index_built_without_a_lexical_index_is_served_by_its_vectors_with_a_warning(tmp_path: Path, encoder) -> None:
    import shutil

    settings = make_settings(tmp_path / "home")
    version = present(ingest([_site(tmp_path / "site")], settings, encoder=encoder, progress=False).version)
    shutil.rmtree(Registry(settings.home_dir).path("index", version) / LEXICAL_DIR)
    pipeline = load_pipeline(settings, with_llm=False)
    try:
        assert pipeline.lexical is None
        assert any("no lexical index" in w for w in pipeline.warnings)
        assert pipeline.retrieve("relayhost", top_k=2).hits
    finally:
        pipeline.close()
