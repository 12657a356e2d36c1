"""Training steps in bf16 autocast: chosen by ``auto`` only on a CPU with AMX tiles, applied to both trainers' forward
passes, with float32 weights kept and saved."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch

import training.precision as precision_module
from service.retrieval.passage import Passage
from training.data.dataset import RetrieverExample
from training.precision import TrainingPrecision, resolve
from training.reranker import RerankerConfig, train_reranker
from training.reranker_data import Candidates
from training.retriever import RetrieverConfig, train_retriever

REFUND, INVOICE = "Refunds are made from the payments page.", "Invoices are listed under billing."


def test_auto_is_bf16_only_on_a_cpu_with_amx_tiles(monkeypatch):
    monkeypatch.setattr(precision_module, "has_bf16_matrix_unit", lambda: True)
    assert resolve(TrainingPrecision.AUTO) is TrainingPrecision.BF16
    assert resolve(TrainingPrecision.AUTO, "cuda") is TrainingPrecision.FP32
    assert resolve(TrainingPrecision.FP32) is TrainingPrecision.FP32
    monkeypatch.setattr(precision_module, "has_bf16_matrix_unit", lambda: False)
    assert resolve(TrainingPrecision.AUTO) is TrainingPrecision.FP32
    assert resolve(TrainingPrecision.BF16) is TrainingPrecision.BF16  # asked for: emulated, slower, still bf16


@contextmanager
def linear_output_dtypes() -> Iterator[set[torch.dtype]]:
    """The dtypes of every ``nn.Linear`` output computed while the context is open (a global forward hook)."""
    seen: set[torch.dtype] = set()

    def hook(module: torch.nn.Module, _inputs: object, output: object) -> None:
        if isinstance(module, torch.nn.Linear) and isinstance(output, torch.Tensor):
            seen.add(output.dtype)

    handle = torch.nn.modules.module.register_module_forward_hook(hook)
    try:
        yield seen
    finally:
        handle.remove()


@pytest.mark.parametrize("precision", [TrainingPrecision.BF16, TrainingPrecision.FP32])
def test_the_retriever_trains_in_its_precision_and_keeps_float32_weights(precision):
    passages = {d: Passage(d, "billing", d, "faq", text) for d, text in (("refund", REFUND), ("invoice", INVOICE))}
    examples = [
        RetrieverExample("q1", "How do I refund a payment?", ["refund"], ["invoice"], "expert"),
        RetrieverExample("q2", "Where are my invoices?", ["invoice"], ["refund"], "expert"),
    ]
    cfg = RetrieverConfig(epochs=1, batch_size=2, max_seq_length=32, checkpoint_every=0, negative_margin=None, precision=precision)
    with linear_output_dtypes() as seen:
        model = train_retriever(examples, passages, config=cfg, progress=False)
    assert seen == {torch.bfloat16 if precision is TrainingPrecision.BF16 else torch.float32}
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_a_reranker_trained_in_bf16_multiplies_in_bf16_and_keeps_float32_weights():
    in_scope = [
        Candidates("How do I refund a payment?", [REFUND, INVOICE], [0.9, 0.5], [True, False], "expert"),
        Candidates("Where are my invoices?", [INVOICE, REFUND], [0.8, 0.4], [True, False], "expert"),
    ]
    oos = [Candidates("How do I bake bread?", [INVOICE, REFUND], [0.3, 0.2], [False, False], "out-of-scope")]
    cfg = RerankerConfig(steps=1, batch_size=2, negatives=1, oos_per_step=1, max_length=32, checkpoint_every=0, precision=TrainingPrecision.BF16)
    with linear_output_dtypes() as seen:
        model = train_reranker(in_scope, oos, config=cfg, progress=False)
    assert seen == {torch.bfloat16}
    assert all(p.dtype == torch.float32 for p in model.model.parameters())
