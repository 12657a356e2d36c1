"""An ONNX encoder with a stored export loads neither PyTorch nor transformers (a real export, a real process)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.utils import ROOT


def test_onnx_encoder_with_a_stored_export_loads_neither_pytorch_nor_transformers(demo_onnx_dir: Path):
    """Start-up of `fedqa ingest` and `serve` on ONNX: importing PyTorch and transformers cost ~3 s (docs/speed.md).
    ``demo_onnx_dir``: the session's stored export (made in this process, which has PyTorch loaded)."""
    onnx_dir = demo_onnx_dir
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from service.retrieval.encoder import Encoder\n"
        f"e = Encoder(backend='onnx', onnx_dir=Path({str(onnx_dir)!r}))\n"
        "v = e.embed_passages(['a passage', 'another passage']); q = e.embed_query('a question')\n"
        "assert e.backend.value == 'onnx' and v.shape == (2, 384) and q.shape == (384,)\n"
        "print(sorted(m for m in ('torch', 'transformers', 'sentence_transformers') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
