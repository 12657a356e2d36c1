"""The arithmetic of a training step: float32, or bfloat16 autocast where the CPU multiplies bf16 matrices in hardware.

On a CPU with AMX tiles (Intel Xeon, 4th generation on) PyTorch's oneDNN kernels run autocast's bf16 matrix products
in the tile unit: a step of either trainer's default shapes took 0.54-0.73 of its float32 time on two cores
(``benchmarks/probes/dropout_step.py --compare precision``), and faq6's refresh flow 887 s instead of 1488. The
weights, the optimiser and the loss stay float32 (autocast casts only the products' inputs), so the saved model and
its ONNX export are as before. Without AMX, bf16 is emulated and slower than float32, so ``auto`` chooses bf16 only
where the CPU has the tiles. Both trainers default to float32: on faq6's fold b the models trained in bf16 refused
fewer of the neighbouring products' questions (docs/quality.md, "Training steps in bfloat16").
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from enum import Enum

from service.retrieval.bf16_encoder import has_bf16_matrix_unit


class TrainingPrecision(str, Enum):
    """What a training step computes in (``--precision``)."""

    AUTO = "auto"  # bf16 on a CPU with AMX tiles, fp32 elsewhere
    BF16 = "bf16"
    FP32 = "fp32"


def resolve(precision: TrainingPrecision, device: str = "cpu") -> TrainingPrecision:
    """``precision`` with ``auto`` decided for this machine (bf16 only on a CPU with AMX tiles)."""
    if precision is not TrainingPrecision.AUTO:
        return precision
    return TrainingPrecision.BF16 if device == "cpu" and has_bf16_matrix_unit() else TrainingPrecision.FP32


def autocast(precision: TrainingPrecision, device: str = "cpu") -> AbstractContextManager:
    """The forward pass's context: bf16 autocast for ``bf16`` (resolved), nothing for ``fp32``."""
    import torch

    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=resolve(precision, device) is TrainingPrecision.BF16)
