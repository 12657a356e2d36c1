"""Bulk passage embedding in bfloat16 on CPUs whose cores multiply bf16 matrices natively (AMX), opt-in.

Ingest and index builds embed every passage once: on a CPU with AMX tiles (Intel Xeon 4th generation and
later) PyTorch's oneDNN kernels run the model's bf16 matrix products in the tile unit, several times faster
than fp32 and faster than the ONNX Runtime int8 encoder (faq6 passages, 2 cores: ~160 passages/s against 48 in
fp32 and ~100 in ONNX int8; docs/speed.md), with vectors closer to fp32 (1 - cos <= 3.5e-3 against 1.8e-2).
The queries stay on ONNX int8, though, and int8 queries rank bf16 passages worse than int8 ones: Acc@1 on
the faq6 dev questions fell 1.8 points (int8 on both sides matches fp32; their quantisation errors are alike).
Hence off by default (FEDQA_PASSAGE_BF16): for corpora where re-embedding time matters more.

Without AMX, bf16 is emulated and slower than fp32: ``auto`` turns it on only where the CPU has it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from service.compute import available_cpus
from service.retrieval.batching import by_length, unit_rows

log = logging.getLogger("fedqa.encoder")

#: What an index records for passages embedded here (``passage_runtime`` in its manifest).
RUNTIME = "torch-bf16"
#: Passages per forward (faq6, one batch per core: 16 gave 173/s, 32 gave 146/s).
BATCH = 16


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The feature flags of the first CPU in ``cpuinfo`` (empty where it cannot be read: not Linux)."""
    try:
        with cpuinfo.open() as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        pass
    return set()


def has_bf16_matrix_unit(flags: set[str] | None = None) -> bool:
    """True when the CPU multiplies bf16 matrices in hardware tiles (AMX-BF16), where bf16 pays on a CPU."""
    return {"amx_bf16", "amx_tile"} <= (cpu_flags() if flags is None else flags)


class Bf16PassageEncoder:
    """The sentence-transformers model with every weight in bfloat16; vectors come back float32, unit length.

    Batches of similar length run one per core, each on one PyTorch thread (the kernels release the GIL): on
    2 cores 1.5x the throughput of one batch at a time on two threads, which wait for each other at every op.
    """

    def __init__(self, path: Path, *, max_seq_length: int, threads: int | None = None) -> None:
        import torch
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(str(path), device="cpu", local_files_only=True).to(torch.bfloat16)
        # The same truncation as the query runtime's (the model's own setting, or the export's).
        self.model.max_seq_length = max_seq_length
        self.threads = threads or available_cpus()

    def encode(self, texts: Sequence[str], *, batch_size: int = BATCH, bar=None) -> np.ndarray:  # noqa: ANN001 - a tqdm bar
        """Unit-length float32 vectors of ``texts``, in their order.

        Sets PyTorch's intra-op threads to one while it runs (callers hold the process's model lock).
        """
        import torch

        def run(idx: np.ndarray) -> np.ndarray:
            with torch.inference_mode():
                vecs = self.model.encode([texts[i] for i in idx], batch_size=len(idx), convert_to_tensor=True)
            return vecs.float().numpy()

        previous = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            dim = self.model.get_embedding_dimension()
            out = by_length([len(t) for t in texts], batch_size=batch_size, threads=self.threads, dim=dim, run=run, name="bf16-encode", bar=bar)
        finally:
            torch.set_num_threads(previous)
        return unit_rows(out)  # in float32: a bf16 norm is off by up to ~0.4 %
