"""The encoder's Rust tokenizer: the ids transformers gives, thread-safe (an ONNX path without PyTorch:
tests/integration/retrieval/test_tokens_onnx.py)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from transformers import AutoTokenizer

from service.demo import DOCS
from service.retrieval.encoder import packaged_minilm_path
from service.retrieval.tokens import EncoderTokenizer

TRICKY = [
    "  Ünïcode façade: naïve café, 中文, emoji 🙂 and accents  ",
    "tabs\tand\nnewlines\r\n kept apart",
    "UPPER and lower Case, hyphen-ated words, e-mail@example.com, v2.3.1",
    "",
    "x",
    "word " * 400,
]


@pytest.fixture(scope="module")
def reference():  # noqa: ANN201 - the transformers tokenizer sentence-transformers uses
    return AutoTokenizer.from_pretrained(str(packaged_minilm_path()), local_files_only=True)


def _texts() -> list[str]:
    docs = [json.loads(line)["text"] for line in DOCS.read_text(encoding="utf-8").splitlines() if line.strip()]
    return TRICKY + docs[:200]


def test_ids_and_counts_match_the_transformers_tokenizer(reference):
    tok = EncoderTokenizer.load(packaged_minilm_path(), max_length=64)
    texts = _texts()
    for text, ids in zip(texts, tok.ids(texts), strict=True):
        assert ids == reference(text.strip(), truncation=True, max_length=64)["input_ids"], text
        whole = reference(text.strip(), add_special_tokens=True, truncation=False, verbose=False)["input_ids"]
        assert tok.count(text) == len(whole), text
    assert tok.ids(["word " * 400])[0][-1] == reference.sep_token_id and len(tok.ids(["word " * 400])[0]) == 64
    assert tok.count("word " * 400) > 400  # counting never truncates


def test_pad_gives_ids_and_mask_of_the_longest_row():
    tok = EncoderTokenizer.load(packaged_minilm_path(), max_length=32)
    rows = tok.ids(["a short one", "a somewhat longer text than the first one"])
    ids, mask = tok.pad(rows)
    assert ids.shape == mask.shape == (2, len(rows[1])) and ids.dtype == mask.dtype == np.int64
    assert mask.sum(axis=1).tolist() == [len(rows[0]), len(rows[1])]
    assert ids[0, : len(rows[0])].tolist() == rows[0] and set(ids[0, len(rows[0]) :].tolist()) == {tok.pad_id}


def test_lower_case_model_tokenises_lowered_text():
    upper = EncoderTokenizer.load(packaged_minilm_path(), max_length=32, lower_case=True)
    plain = EncoderTokenizer.load(packaged_minilm_path(), max_length=32)
    assert upper.ids(["Export THE Survey"]) == plain.ids(["export the survey"])


def test_concurrent_tokenising_gives_the_same_ids():
    """Concurrent /ask requests tokenise at once: a shared tokenizer must not mix them up."""
    tok = EncoderTokenizer.load(packaged_minilm_path(), max_length=48)
    texts = _texts()
    alone = [tok.ids([t])[0] for t in texts]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda t: tok.ids([t])[0], texts * 3))
    assert together == alone * 3
