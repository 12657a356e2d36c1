"""Router training: independent sigmoid outputs, metrics, versions with metrics, Ctrl-C checkpoints."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from service.artifacts import Registry
from service.queries import LabelledQuery
from service.routing.router import BertRouter
from training.checkpoint import StopFlag, TrainingInterrupted, load_checkpoint_state
from training.metrics import expected_calibration_error, retrieval_metrics, router_metrics
from training.router import train_and_activate, train_router
from tests.conftest import make_settings

DOMAINS = ["ledger", "orbit", "pulse"]


def _queries(n: int = 4) -> list[LabelledQuery]:
    texts = {
        "orbit": ["import contacts from csv", "merge duplicate contacts", "enforce sso for users", "move a deal stage"],
        "ledger": ["refund a payment", "send an invoice by email", "partial refund amount", "invoice retention years"],
        "pulse": ["create a survey", "share survey results", "anonymous survey answers", "survey reminder emails"],
    }
    return [LabelledQuery(f"{d}-{i}", t, [d]) for d, ts in texts.items() for i, t in enumerate(ts[:n])]


def test_router_outputs_independent_sigmoid_probabilities_not_a_softmax(demo_pipeline):
    router: BertRouter = demo_pipeline.router
    queries = ["How do I import contacts?", "refund", "zzz qqq"]
    p = router.predict(queries)
    assert p.shape == (3, len(router.domains))
    assert ((p >= 0) & (p <= 1)).all()
    assert not np.allclose(p.sum(axis=1), 1.0, atol=1e-3)  # rows need not sum to 1
    with torch.no_grad():
        logits = router.logits(queries)
    assert np.allclose(p, torch.sigmoid(logits).double().numpy(), atol=1e-6)
    # Raising one domain's logit (its bias) changes that domain's probability only.
    bias = router.model.classifier.bias
    j = 1
    with torch.no_grad():
        bias[j] += 3.0
    try:
        q = router.predict(queries)
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


def test_retrieval_metrics_against_hand_counts():
    m = retrieval_metrics([["a", "b", "c"], ["x", "y", "g"], ["n"]], [["a"], ["g", "h"], ["z"]], ks=(1, 2, 3))
    assert m["acc@1"] == pytest.approx(1 / 3, abs=1e-4)
    assert m["recall@3"] == pytest.approx((1 + 0.5 + 0) / 3, abs=1e-4)
    assert m["recall@1"] == pytest.approx(1 / 3, abs=1e-4)
    assert m["mrr"] == pytest.approx((1 + 1 / 3 + 0) / 3, abs=1e-4)


@pytest.mark.slow
def test_train_and_activate_saves_metrics_fingerprint_and_base_model(tmp_path):
    from indexes.build import build_index
    from service.retrieval.edge_store import EdgeBackend
    from service.retrieval.passage import Passage

    settings = make_settings(tmp_path / "home")
    registry = Registry(settings.home_dir)

    class _TinyEncoder:  # an index needs domains only here; vectors are not searched
        version, dim, path = "base", 4, "none"

        def embed_passages(self, texts):
            return np.ones((len(texts), 4), dtype=np.float32) / 2

    build_index(
        [Passage(f"{d}/p#000", d, d, f"{d}/p", "text") for d in DOMAINS],
        registry=registry, backend=EdgeBackend(registry), encoder=_TinyEncoder(), base=None, progress=False,
    )
    train = _queries(3)
    val = [q for q in _queries(4) if q.qid.endswith("-3")]
    version = train_and_activate(settings, train, epochs=1, progress=False, val=val, data_fingerprint="abc123")
    assert registry.active()["router"] == version
    manifest = registry.manifest("router", version)
    assert manifest["data_fingerprint"] == "abc123" and manifest["base_model"]
    metrics = json.loads((registry.path("router", version) / "metrics.json").read_text())
    assert metrics["validation"]["queries"] == 3
    assert set(metrics["validation"]["per_domain"]) == set(DOMAINS)
    assert {"micro_f1", "macro_f1", "top1_accuracy", "ece", "top1_ece"} <= set(metrics["validation"])


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_and_keeps_the_last_checkpoint(tmp_path, monkeypatch):
    stop = StopFlag()
    steps = {"n": 0}
    original = BertRouter.logits

    def counting_logits(self, qs):  # asks for a stop during step 2, as the Ctrl-C handler does
        steps["n"] += 1
        if steps["n"] == 2:
            stop.request()
        return original(self, qs)

    monkeypatch.setattr(BertRouter, "logits", counting_logits)
    queries = _queries(4)
    ckpt = tmp_path / "ckpt"
    with pytest.raises(TrainingInterrupted) as info:
        train_router(queries, DOMAINS, epochs=3, batch_size=4, progress=False, stop=stop, checkpoint_dir=ckpt)
    assert info.value.checkpoint == ckpt / "last"
    state = load_checkpoint_state(ckpt / "last")
    assert state["global_step"] == 2 and state["epoch"] == 0 and state["step_in_epoch"] == 2
    # The checkpoint is a loadable router, and training resumes from it to the end.
    resumed = train_router(queries, DOMAINS, epochs=1, batch_size=4, progress=False, checkpoint_dir=ckpt, resume=ckpt / "last")
    assert steps["n"] == 3  # one step left of epoch 1
    assert resumed.predict(["refund a payment"]).shape == (1, 3)
