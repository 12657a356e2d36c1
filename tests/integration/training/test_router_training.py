"""Router training: independent sigmoid outputs, metrics, versions with metrics, Ctrl-C stops cleanly."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from service.artifacts import Registry
from service.queries import LabelledQuery
from service.routing.router import HeadRouter
from tests.conftest import make_settings
from training.checkpoint import StopFlag, TrainingInterrupted
from training.metrics import expected_calibration_error, router_metrics
from training.router import RouterConfig, train_and_activate, train_head

DOMAINS = ["ledger", "orbit", "pulse"]


def _queries(n: int = 4) -> list[LabelledQuery]:
    texts = {
        "orbit": ["import contacts from csv", "merge duplicate contacts", "enforce sso for users", "move a deal stage"],
        "ledger": ["refund a payment", "send an invoice by email", "partial refund amount", "invoice retention years"],
        "pulse": ["create a survey", "share survey results", "anonymous survey answers", "survey reminder emails"],
    }
    return [LabelledQuery(f"{d}-{i}", t, [d]) for d, ts in texts.items() for i, t in enumerate(ts[:n])]


def test_router_predicts_independent_per_domain_probabilities(demo_pipeline):
    """Behaviour of the trained demo router: p in [0, 1], its training domains ranked first, several domains
    likely at once for a cross question (independent per domain, not a softmax), stable for a query in any batch."""
    from service.demo import QUERIES
    from service.queries import load_queries

    router = demo_pipeline.router

    def predict(texts: list[str]) -> np.ndarray:
        return router.predict_vectors(demo_pipeline.encoder.embed_queries(texts))

    labelled = load_queries(QUERIES)
    uni = [q for q in labelled if not q.is_cross]
    cross = [q for q in labelled if q.is_cross]
    p = predict([q.query for q in uni])
    assert p.shape == (len(uni), len(router.domains))
    assert np.isfinite(p).all() and ((p >= 0) & (p <= 1)).all()
    top = [router.domains[i] for i in p.argmax(axis=1)]
    assert np.mean([t in q.domains for t, q in zip(top, uni, strict=True)]) >= 0.9  # questions it was trained on
    pc = predict([q.query for q in cross])
    gold_mask = np.array([[d in q.domains for d in router.domains] for q in cross])
    # A cross question: each of its domains on its own tends to be likely (not competing for one unit of mass).
    assert np.mean(pc[gold_mask]) > 0.5
    assert (pc > 0.5).sum(axis=1).max() >= 2  # two domains above 0.5 at once: impossible for a softmax over domains
    assert not np.allclose(pc.sum(axis=1), 1.0, atol=0.05)
    assert np.mean(pc[gold_mask]) > np.mean(pc[~gold_mask]) + 0.3
    # Off-topic text is not forced onto a product: no softmax over domains pushes one of them up.
    noise = predict(["zzz qqq", "the weather in lisbon tomorrow"])
    assert noise.shape == (2, len(router.domains))
    # One query's probabilities do not depend on the rest of its batch.
    alone = predict([uni[0].query])
    assert np.allclose(alone[0], p[0], atol=1e-5)


def test_raising_one_domain_logit_changes_only_that_domain(demo_pipeline):
    router: HeadRouter = demo_pipeline.router
    vectors = demo_pipeline.encoder.embed_queries(["How do I import contacts?", "refund", "zzz qqq"])
    p = router.predict_vectors(vectors)
    assert p.shape == (3, len(router.domains))
    assert ((p >= 0) & (p <= 1)).all()
    assert not np.allclose(p.sum(axis=1), 1.0, atol=1e-3)  # rows need not sum to 1
    # Raising one domain's logit (its bias) changes that domain's probability only.
    bias = list(router.module.parameters())[-1]
    j = 1
    with torch.no_grad():
        bias[j] += 3.0
    try:
        q = router.predict_vectors(vectors)
    finally:
        with torch.no_grad():
            bias[j] -= 3.0
    others = [i for i in range(len(router.domains)) if i != j]
    assert np.allclose(q[:, others], p[:, others], atol=1e-6)
    assert (q[:, j] > p[:, j]).all()


def test_router_metrics_against_hand_counts():
    probs = np.array([[0.9, 0.2, 0.1], [0.7, 0.6, 0.1], [0.2, 0.4, 0.3], [0.1, 0.1, 0.8]])
    labels = np.array([[1, 0, 0], [0, 1, 0], [0, 1, 1], [0, 0, 1]])
    m = router_metrics(probs, labels, DOMAINS)
    # ledger: predicted rows 0,1 -> tp 1 fp 1 fn 0; orbit: predicted row 1 -> tp 1, fn 1 (row 2); pulse: row 3 tp, row 2 fn
    assert m["per_domain"]["ledger"] == {"precision": 0.5, "recall": 1.0, "f1": 0.6667, "support": 1, "predicted": 2}
    assert m["per_domain"]["orbit"]["recall"] == 0.5 and m["per_domain"]["pulse"]["precision"] == 1.0
    assert m["micro_precision"] == 0.75 and m["micro_recall"] == 0.6 and m["micro_f1"] == pytest.approx(0.6667, abs=1e-4)
    assert m["macro_f1"] == pytest.approx((2 / 3 + 2 / 3 + 2 / 3) / 3, abs=1e-4)
    assert m["top1_accuracy"] == 0.75  # only row 1's most probable domain (ledger) is not a gold one
    # ECE: two bins of two items each
    assert expected_calibration_error(np.array([0.1, 0.1, 0.9, 0.9]), np.array([0, 1, 1, 1])) == pytest.approx(0.5 * 0.4 + 0.5 * 0.1)


def _tiny_home(tmp_path, encoder):
    """A home with a three-passage index of three products."""
    from indexes.build import build_index
    from service.retrieval.edge_store import EdgeBackend
    from service.retrieval.passage import Passage

    settings = make_settings(tmp_path / "home")
    registry = Registry(settings.home_dir)
    texts = {
        "ledger": "Refunds and invoices are issued from the billing page.",
        "orbit": "Contacts are imported from CSV files.",
        "pulse": "Surveys collect anonymous answers and send reminders.",
    }
    build_index(
        [Passage(f"{d}/p#000", d, d, f"{d}/p", t) for d, t in texts.items()],
        registry=registry,
        backend=EdgeBackend(registry),
        encoder=encoder,
        base=None,
        progress=False,
    )
    return settings, registry


def _tiny_val() -> list[LabelledQuery]:
    """One held-out question per product and one out-of-scope question."""
    val = [q for q in _queries(4) if q.qid.endswith("-3")] + [LabelledQuery("oos-1", "how do I tune a guitar", [])]
    return [LabelledQuery(q.qid, q.query, q.domains, [f"{q.domains[0]}/p#000"] if q.domains else []) for q in val]


def test_train_and_activate_saves_metrics_fingerprint_and_retriever(tmp_path, encoder):
    settings, registry = _tiny_home(tmp_path, encoder)
    train, val = _queries(3), _tiny_val()
    config = RouterConfig(min_val_per_domain=1)  # this split is taken as big enough: fitted on it
    version = train_and_activate(settings, train, config=config, epochs=5, progress=False, val=val, data_fingerprint="abc123")
    assert registry.active()["router"] == version
    manifest = registry.manifest("router", version)
    assert manifest["data_fingerprint"] == "abc123" and manifest["retriever"] == "base"
    metrics = json.loads((registry.path("router", version) / "metrics.json").read_text())
    assert metrics["validation"]["queries"] == 3 and metrics["validation"]["out_of_scope"]["queries"] == 1
    assert set(metrics["validation"]["per_domain"]) == set(DOMAINS)
    assert {"micro_f1", "macro_f1", "top1_accuracy", "ece", "top1_ece"} <= set(metrics["validation"])
    assert {"temperature", "nll_before", "nll_after", "ece_before", "ece_after"} <= set(metrics["calibration"])
    assert metrics["fusion"]["questions"] == 3
    router = HeadRouter.load(registry.path("router", version))
    assert router.retriever == "base" and router.temperature == pytest.approx(metrics["calibration"]["temperature"], abs=1e-5)
    assert router.fitted.calibration is not None and router.fitted.fusion is not None and not router.fitted.extra
    assert set(router.fitted.to_json()) == {"calibration", "fusion", "page_prior"}
    prior = router.fitted.page_prior  # counted on the questions with gold passages: here the validation ones alone
    assert prior is not None and set(prior.answers) == {q.qid for q in val if q.gold_doc_ids} and prior.pages == {f"{d}/p": 1 for d in DOMAINS}
    assert metrics["page_prior"]["questions"] == 3 and metrics["page_prior"]["weight"] == prior.weight


def test_a_too_small_validation_split_is_warned_about_and_fitted_out_of_fold(tmp_path, encoder, caplog):
    """One validation question per product cannot fit a temperature and the fused parameters: train router says so
    and fits them on every labelled question scored out of fold (the validation questions then train too)."""
    settings, registry = _tiny_home(tmp_path, encoder)
    train, val = _queries(3), _tiny_val()
    with caplog.at_level("WARNING", logger="fedqa.training.router"):
        version = train_and_activate(settings, train, epochs=5, progress=False, val=val)
    warned = [r.getMessage() for r in caplog.records if "too few to fit" in r.getMessage()]
    assert warned and "out of fold" in warned[0]
    metrics = json.loads((registry.path("router", version) / "metrics.json").read_text())
    assert metrics["held_out"] == "kfold" and metrics["warnings"] == warned[:1]
    assert metrics["calibration"]["questions"] == len(train) + len(val)  # every labelled question, out-of-scope one included
    assert metrics["validation"]["queries"] == len(train) + 3 and metrics["fusion"]["questions"] == 3  # gold passages: val's
    manifest = registry.manifest("router", version)
    assert manifest["val_queries"] == 0 and manifest["train_queries"] >= len(train) + len(val)


def test_ctrl_c_stops_cleanly_without_a_version():
    stop = StopFlag()
    stop.request()
    x = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
    y = np.eye(3, dtype=np.float32)[np.arange(8) % 3]
    with pytest.raises(TrainingInterrupted):
        train_head(x, y, np.ones(8), DOMAINS, RouterConfig(epochs=2, batch_size=4), retriever=None, stop=stop)
    router = train_head(x, y, np.ones(8), DOMAINS, RouterConfig(epochs=2, batch_size=4), retriever=None)
    assert router.predict_vectors(x).shape == (8, 3)


@pytest.mark.parametrize("hidden", [0, 16])
def test_numpy_logits_follow_the_torch_head_through_training(hidden):
    """The request path computes the head with numpy; it must equal the module (no dropout) and follow its updates."""
    torch.manual_seed(0)
    router = HeadRouter.new(DOMAINS, 8, hidden=hidden)
    x = np.random.default_rng(1).normal(size=(5, 8)).astype(np.float32)

    def torch_logits() -> np.ndarray:
        router.module.eval()
        with torch.inference_mode():
            return router.module(torch.as_tensor(x)).double().numpy()

    before = router.raw_logits(x)
    assert np.allclose(before, torch_logits(), atol=1e-5)
    router.module.train()
    opt = torch.optim.SGD(router.module.parameters(), lr=0.5)
    opt.zero_grad()
    router.logits(x).sum().backward()
    opt.step()  # in place: the numpy copy must notice
    after = router.raw_logits(x)
    assert not np.allclose(after, before) and np.allclose(after, torch_logits(), atol=1e-5)
