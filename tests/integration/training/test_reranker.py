"""The trained reranker: its combination with the strategy's score, its link to the index, serving it, and the
"not covered" decision a home gets without an out-of-scope file."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.api.state import ServiceState
from service.artifacts import Registry
from service.files import copytree_sparse
from service.loading import load_pipeline
from service.reranking.params import RerankParams, reranked_order
from tests.conftest import make_settings
from tests.integration.api.test_rank_features import QUESTIONS
from tests.integration.api.test_rank_features import _ask as ask_both_ways
from tests.integration.api.test_rank_features import _check as check_sources
from tests.integration.api.test_rank_features import _client as rank_client
from tests.integration.api.test_rank_features import _rrf as rrf
from tests.utils import present
from training.data.general import general_negatives
from training.reranker_data import Candidates
from training.reranker_fit import fit_combination, top1_correct


# ------------------------------------------------------------------ the combination (pure functions)
def test_weight_zero_keeps_the_strategys_order_and_a_large_weight_follows_the_reranker():
    unified = [0.9, 0.8, 0.7, 0.6]
    ce = [-3.0, 4.0, 1.0, 2.0]
    assert reranked_order(unified, ce, 0.0) == [0, 1, 2, 3]
    assert reranked_order(unified, ce, 1000.0) == [1, 3, 2, 0]
    assert reranked_order(unified, ce, 0.02) == [1, 0, 2, 3]  # 0.8 + 0.08 > 0.9 - 0.06


def test_params_round_trip_and_calibration_is_monotone():
    p = RerankParams(weight=0.2, depth=10, scale=1.5, shift=-2.0, max_length=96)
    assert RerankParams.from_json(json.loads(json.dumps(p.to_json()))) == p
    assert 0.0 < p.calibrated(-5.0) < p.calibrated(0.0) < p.calibrated(5.0) < 1.0


def _cands(golds: list[int], n: int = 6) -> list[Candidates]:
    return [
        Candidates(f"q{i}", [f"p{j}" for j in range(n)], [1.0 - 0.01 * j for j in range(n)], [j == g for j in range(n)], "labelled")
        for i, g in enumerate(golds)
    ]


def test_fit_chooses_no_reranking_when_the_reranker_only_misleads():
    cands = _cands([0] * 12)  # the strategy already puts every gold passage first
    ces = [np.array([0.0, 5.0, 0, 0, 0, 0]) for _ in cands]  # the reranker prefers a wrong passage
    fit = fit_combination(cands, ces, max_depth=20)
    assert fit.weight == 0.0 and fit.acc1 == 1.0 == fit.acc1_before


def test_fit_chooses_a_weight_and_the_smallest_depth_that_pays():
    cands = _cands([3] * 12)  # gold fourth in every ranking
    ces = [np.array([0.0, 0, 0, 6.0, 0, 0]) for _ in cands]
    fit = fit_combination(cands, ces, max_depth=20)
    assert fit.weight > 0 and fit.depth == 5 and fit.acc1 == 1.0 and fit.acc1_before == 0.0
    assert fit.acc1_crossfit == 1.0 and fit.pays and (fit.wins, fit.losses) == (12, 0)
    assert top1_correct(cands, ces, 0.0, 20).sum() == 0


def test_fit_keeps_the_strategys_order_when_its_cross_fit_does_not_pass_the_guard():
    cands = _cands([1] * 3 + [0] * 17)  # gold second for three questions, first for the rest
    ces = [np.array([0.0, 5.0, 0, 0, 0, 0]) if i < 5 else np.zeros(6) for i in range(20)]  # puts 3 right, 2 wrong
    assert top1_correct(cands, ces, 1.0, 5).sum() == 18 > top1_correct(cands, ces, 0.0, 5).sum() == 17  # pays in sample
    fit = fit_combination(cands, ces, max_depth=20)
    assert fit.weight == 0.0 and fit.depth == 5 and not fit.pays and fit.wins <= 3 and fit.losses <= 2
    assert fit.acc1 == fit.acc1_before == 17 / 20


# ------------------------------------------------------------------ the shipped out-of-scope questions
EXCLUDED = re.compile(
    r"\b(git|mercurial|svn|python|perl|sql|sqlite|postgres\w*|bash|zsh|ksh|shell|sed|awk|debian|ubuntu|apt|regex|vim|emacs|nano|curl)\b", re.I
)


def test_shipped_general_negatives_are_out_of_scope_and_avoid_the_measured_families():
    qs = general_negatives()
    assert len(qs) >= 200 and len({q.query for q in qs}) == len(qs)
    assert all(not q.domains and not q.gold_doc_ids for q in qs)
    assert [q.query for q in qs if EXCLUDED.search(q.query)] == []


# ------------------------------------------------------------------ a reranker trained on the demo home
def test_a_reranker_cut_to_fewer_layers_is_saved_and_loaded_cut(tmp_path):
    """``layers``: the cross-encoder keeps the MiniLM's first N transformer layers, and its saved config says so,
    so the version (and its export) loads as cut and scores as trained."""
    from training.reranker import cross_encoder

    model = cross_encoder(None, 32, layers=2)
    assert model.model.config.num_hidden_layers == 2 and len(model.model.bert.encoder.layer) == 2
    model.save(str(tmp_path))
    again = cross_encoder(tmp_path, 32)
    assert len(again.model.bert.encoder.layer) == 2
    pairs = [("How do I rotate an API key?", "Rotate keys from the settings page."), ("What is a ledger?", "A ledger records entries.")]
    assert again.predict(pairs) == pytest.approx(model.predict(pairs), abs=1e-5)
    assert len(cross_encoder(None, 32).model.bert.encoder.layer) == 6
    with pytest.raises(ValueError, match="at least one layer"):
        cross_encoder(None, 32, layers=0)


def test_a_reranker_trained_without_dropout_scores_a_pair_the_same_on_every_pass(tmp_path):
    """``dropout=False``: no dropout in training mode (a training step scores as serving will), and the saved config
    says so; the shipped MiniLM's dropout makes two training-mode passes differ."""
    import torch

    from training.reranker import cross_encoder

    pairs = [("How do I rotate an API key?", "Rotate keys from the settings page.")]
    for dropout in (False, True):
        model = cross_encoder(None, 32, dropout=dropout)
        model.model.train()
        inputs = model.preprocess(pairs)
        with torch.no_grad():
            first, second = (model.model(**inputs).logits for _ in range(2))
        assert torch.allclose(first, second, atol=1e-6) is not dropout
        model.save(str(tmp_path / str(dropout)))
        saved = json.loads((tmp_path / str(dropout) / "config.json").read_text())
        assert (saved["attention_probs_dropout_prob"] == 0.0) is not dropout


@pytest.mark.slow
def test_a_reranker_version_records_its_index_and_fit(reranker_home):
    settings, version, metrics = reranker_home
    registry = Registry(settings.home_dir)
    manifest = registry.manifest("reranker", version)
    active = registry.active()
    assert active["reranker"] == version
    assert manifest["index"] == active["index"] and manifest["retriever"] == "base"
    assert sorted(manifest["domains"]) == ["beacon", "ledger", "orbit", "relay"]
    assert manifest["data_fingerprint"] and metrics["runtime"] == "onnx"
    assert (registry.path("reranker", version) / "onnx" / "model_qint8.onnx").is_file()
    fit = metrics["fit"]
    assert fit["questions"] == metrics["validation_questions"] > 0 and fit["acc1"] >= fit["acc1_before"]
    assert metrics["train_questions"]["labelled"] > 0 and metrics["out_of_scope_questions"] >= len(general_negatives())


@pytest.mark.slow
def test_onnx_int8_logits_follow_pytorch(reranker_home):
    from service.reranking.model import RerankBackend, Reranker

    settings, version, _ = reranker_home
    path = Registry(settings.home_dir).path("reranker", version)
    onnx, torch = Reranker.load(path, version), Reranker.load(path, version, backend=RerankBackend.TORCH)
    texts = ["Import contacts from a CSV file under Contacts > Import.", "Invoices are kept for seven years.", "Rotate an API key in Settings."]
    a, b = onnx.logits("How do I import contacts?", texts), torch.logits("How do I import contacts?", texts)
    assert onnx.backend is RerankBackend.ONNX and torch.backend is RerankBackend.TORCH
    assert np.max(np.abs(a - b)) < 0.05 * max(1.0, float(np.max(np.abs(b))))


@pytest.mark.slow
def test_rerank_threads_set_the_sessions_pool_and_leave_the_logits_alone(reranker_home):
    from service.reranking.model import Reranker, default_threads

    settings, version, _ = reranker_home
    path = Registry(settings.home_dir).path("reranker", version)
    one, two = Reranker.load(path, version, threads=1), Reranker.load(path, version, threads=2)
    assert one._session.get_session_options().intra_op_num_threads == 1
    assert two._session.get_session_options().intra_op_num_threads == 2
    assert Reranker.load(path, version).threads == default_threads() >= 1
    texts = ["Import contacts from a CSV file under Contacts > Import.", "Rotate an API key in Settings."]
    np.testing.assert_allclose(one.logits("How do I import contacts?", texts), two.logits("How do I import contacts?", texts), atol=1e-4)
    pipeline = load_pipeline(make_settings(settings.home_dir, rerank_threads=1), with_llm=False)
    try:
        assert pipeline.reranker is not None and pipeline.reranker.threads == 1
    finally:
        pipeline.close()


@pytest.mark.slow
def test_served_ranking_is_reranked_unless_asked_not_to(reranker_home):
    settings, version, _ = reranker_home
    with TestClient(create_app(settings, ServiceState(settings))) as client:
        ready = client.get("/readyz").json()
        assert ready["versions"]["reranker"] == version and ready["decisions"]["rerank"]["in_force"] is True
        q = {"query": "How do I rotate an API key?", "generate": False, "top_k": 5}
        on = client.post("/ask", json=q).json()
        off = client.post("/ask", json={**q, "rerank": False}).json()
    assert "rerank" in on["timings_ms"] and "rerank" not in off["timings_ms"]
    assert all(s["rerank_score"] is not None for s in on["sources"][: ready["decisions"]["rerank"]["depth"]])
    assert all(s["rerank_score"] is None for s in off["sources"])
    # without reranking the order is the strategy's own: U descending, or the fused rank score with the lexical index
    keys = [s["unified_score"] if s["rank_score"] is None else s["rank_score"] for s in off["sources"]]
    assert keys == sorted(keys, reverse=True)


@pytest.mark.parametrize("lexical", ["off", "always"])
def test_reranked_sources_carry_the_combined_score_and_the_logit(reranker_home, lexical):
    """rank_score: the merge's key (U, or its fusion with the lexical ranking) + w * the trained cross-encoder's logit in
    the reranked top-N, at most the source above it below; features["rerank"] is that logit. The default ranking's
    merge: a ranking model, where the demo's fit stored one that serves, orders by its own score."""
    settings, _, _ = reranker_home
    pipeline = load_pipeline(settings.model_copy(update={"lexical": lexical}), with_llm=False)
    try:
        if lexical == "always" and pipeline.lexical is None:
            pytest.skip("the demo index has no lexical index")
        params = RerankParams(weight=0.05, depth=3)
        pipeline.reranker = present(pipeline.reranker).with_params(params)
        pipeline.ranking = None  # the default ranking serves
        client = rank_client(pipeline)
        for query in QUESTIONS[:3]:
            sources = ask_both_ways(client, query=query, top_k=6)
            check_sources(sources)
            head, tail = sources[: params.depth], sources[params.depth :]
            assert all("rerank" in s["features"] and s["rerank_score"] is not None for s in head)
            assert all("rerank" not in s["features"] and s["rerank_score"] is None for s in tail)
            for s in head:
                merge_key = rrf(s["features"]) if lexical == "always" else s["unified_score"]
                assert s["rank_score"] == pytest.approx(merge_key + params.weight * s["features"]["rerank"], abs=2e-6)
            for s, above in zip(tail, sources[params.depth - 1 :], strict=False):
                merge_key = rrf(s["features"]) if lexical == "always" else s["unified_score"]
                assert s["rank_score"] == pytest.approx(min(merge_key, above["rank_score"]), abs=2e-6)
    finally:
        pipeline.close()


@pytest.mark.slow
def test_weight_zero_reproduces_the_unreranked_ranking(reranker_home):
    settings, _, _ = reranker_home
    pipeline = load_pipeline(settings, with_llm=False)
    try:
        zero = present(pipeline.reranker).with_params(RerankParams(weight=0.0, depth=10))
        for q in ["How do I rotate an API key?", "Can I export invoices as PDF?", "enforce SSO for users"]:
            plain = pipeline.retrieve(q, top_k=5, gate_mode="deterministic", rerank=False)
            pipeline.reranker = zero
            reranked = pipeline.retrieve(q, top_k=5, gate_mode="deterministic")
            assert [h.passage.doc_id for h in reranked.hits] == [h.passage.doc_id for h in plain.hits]
            assert all(h.rerank_score is not None for h in reranked.hits)
    finally:
        pipeline.close()


@pytest.mark.slow
def test_a_reranker_with_titles_reads_each_passages_title_in_training_and_serving(reranker_home):
    """``titles``: the candidates it is trained and fitted on, and the passages it scores when serving, are read as
    ``title: text``; without, as the text alone."""
    from dataclasses import replace

    from service.queries import LabelledQuery
    from training.reranker_data import with_candidates

    settings, _, _ = reranker_home
    pipeline = load_pipeline(settings, with_llm=False)
    try:
        q = "How do I rotate an API key?"
        hits = pipeline.retrieve(q, top_k=5, gate_mode="deterministic", rerank=False).hits
        base = present(pipeline.reranker)
        for titles in (False, True):
            reranker = base.with_params(replace(base.params, titles=titles, depth=5))
            read = [f"{h.passage.title}: {h.passage.text}" if titles else h.passage.text for h in hits]
            expected = {h.passage.doc_id: reranker.params.calibrated(float(ce)) for h, ce in zip(hits, reranker.logits(q, read), strict=True)}
            served = reranker.rerank(q, hits, 5)
            assert {h.passage.doc_id: h.rerank_score for h in served} == pytest.approx(expected, abs=1e-5)
            (cands,) = with_candidates(pipeline, [LabelledQuery("r1", q, ["beacon"])], ["labelled"], depth=5, passages=None, titles=titles)
            assert cands.texts == read
        assert RerankParams.from_json(replace(base.params, titles=True).to_json()).titles is True
        assert RerankParams.from_json({"weight": 0.1, "depth": 5}).titles is False  # versions saved before the option
    finally:
        pipeline.close()


@pytest.mark.slow
def test_a_reranker_trained_for_another_retriever_is_not_used(reranker_home, tmp_path):
    settings, version, _ = reranker_home
    home = tmp_path / "other"
    copytree_sparse(settings.home_dir, home)
    manifest_file = Registry(home).path("reranker", version) / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    manifest_file.write_text(json.dumps({**manifest, "retriever": "retriever-elsewhere"}))
    other = make_settings(home)
    with TestClient(create_app(other, ServiceState(other))) as client:
        ready = client.get("/readyz").json()
        body = client.post("/ask", json={"query": "How do I rotate an API key?", "generate": False}).json()
    assert ready["versions"]["reranker"] is None and ready["decisions"]["rerank"] is None
    assert any(f"reranker {version} was trained on" in w for w in ready["warnings"])
    assert all(s["rerank_score"] is None for s in body["sources"])


@pytest.mark.slow
def test_rerank_off_setting_keeps_the_strategys_ranking(reranker_home):
    settings, _, _ = reranker_home
    off = make_settings(settings.home_dir, rerank="off")
    with TestClient(create_app(off, ServiceState(off))) as client:
        ready = client.get("/readyz").json()
        body = client.post("/ask", json={"query": "How do I rotate an API key?", "generate": False}).json()
    assert ready["decisions"]["rerank"]["in_force"] is False
    assert "rerank" not in body["timings_ms"] and all(s["rerank_score"] is None for s in body["sources"])


# ------------------------------------------------------------------ "not covered" without an out-of-scope file
@pytest.mark.slow
def test_a_home_without_out_of_scope_questions_still_refuses_off_topic_ones(demo_home, tmp_path, monkeypatch, capsys):
    """The README's own-documentation path: labelled questions only (``train router --queries``), no out-of-scope
    file; the decision is fitted against the shipped general questions, and says so."""
    from service.cli import main
    from service.config import get_settings
    from service.demo import QUERIES

    home = tmp_path / "own"
    copytree_sparse(demo_home, home)
    monkeypatch.setenv("FEDQA_HOME", str(home))
    monkeypatch.setenv("FEDQA_CACHE", str(home / "cache"))
    monkeypatch.setenv("FEDQA_LLM_BACKEND", "none")
    get_settings.cache_clear()
    try:
        assert main(["train", "router", "--queries", str(QUERIES), "--quiet"]) == 0
        printed = json.loads(capsys.readouterr().out)
        assert printed["abstention"] is not None
        settings = make_settings(home)
        with TestClient(create_app(settings, ServiceState(settings))) as client:
            ready = client.get("/readyz").json()
            off = client.post("/ask", json={"query": "How do I bake sourdough bread?"}).json()
            on = client.post("/ask", json={"query": "How do I import contacts from a spreadsheet?"}).json()
    finally:
        get_settings.cache_clear()
    sources = ready["decisions"]["not_covered"]["out_of_scope_sources"]
    assert sources["validation"] == 0 and sources["shipped_general"] == len(general_negatives())
    assert off["answer_mode"] == "not_covered" and off["confidence"]["covered"] is False
    assert on["answer_mode"] == "extractive" and on["confidence"]["covered"] is True


def test_ctrl_c_keeps_a_checkpoint_that_training_resumes_from(tmp_path):
    """A stop request ends training after the current step with a checkpoint (the trainer's ``checkpoint-<step>``);
    --resume continues from its step and ends where an uninterrupted run does (same batches, optimizer and dropout)."""
    from training.checkpoint import StopFlag, TrainingInterrupted
    from training.reranker import RerankerConfig, train_reranker

    texts = ["Import contacts from a CSV file.", "Invoices are kept for seven years.", "Rotate keys in Settings.", "Refund from the invoice."]
    qs = [("How do I import contacts?", 0), ("How long are invoices kept?", 1), ("How do I rotate a key?", 2), ("How do I refund?", 3)]
    in_scope = [Candidates(q, texts, [0.5] * 4, [j == g for j in range(4)], "labelled") for q, g in qs]
    oos = [Candidates("How do I bake bread?", texts, [0.1] * 4, [False] * 4, "out-of-scope")]
    cfg = RerankerConfig(steps=3, batch_size=2, negatives=2, oos_per_step=1, max_length=32, checkpoint_every=0)
    stop = StopFlag()
    stop.request()
    with pytest.raises(TrainingInterrupted) as info:
        train_reranker(in_scope, oos, config=cfg, progress=False, stop=stop, checkpoint_dir=tmp_path / "ckpt")
    checkpoint = info.value.checkpoint
    assert checkpoint is not None and checkpoint.name == "checkpoint-1" and (checkpoint / "config.json").is_file()
    assert json.loads((checkpoint / "trainer_state.json").read_text())["global_step"] == 1
    model = train_reranker(in_scope, oos, config=cfg, progress=False, resume=checkpoint)
    whole = train_reranker(in_scope, oos, config=cfg, progress=False)
    pairs = [(q, t) for q, _ in qs for t in texts]
    assert model.predict(pairs) == pytest.approx(whole.predict(pairs), abs=1e-5)
