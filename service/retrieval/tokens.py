"""The encoder's tokenizer as the Rust ``tokenizers`` library runs it, without transformers or PyTorch.

Gives the same ids as the model's transformers tokenizer called the way sentence-transformers calls
it (stripped text, [CLS] ... [SEP], truncated to the model's max_seq_length), so the ONNX encoder
and the passage segmenter can tokenise without importing transformers (seconds of start-up per
``fedqa ingest``). Padding is left to :meth:`EncoderTokenizer.pad`, so that texts can be batched by
their token length rather than their character length.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

TOKENIZER_FILE = "tokenizer.json"


class EncoderTokenizer:
    """Token ids of texts for the encoder, truncated to ``max_length``; counts of whole texts for segmenting."""

    def __init__(self, backend, *, max_length: int, lower_case: bool = False) -> None:  # noqa: ANN001 - a tokenizers.Tokenizer
        from tokenizers import Tokenizer

        self.max_length = max_length
        self.lower_case = lower_case
        self._counting = Tokenizer.from_str(backend.to_str())
        self._counting.no_truncation()
        self._counting.no_padding()
        self._truncating = Tokenizer.from_str(backend.to_str())
        self._truncating.enable_truncation(max_length)
        self._truncating.no_padding()
        padding = backend.padding
        self.pad_id = int(padding["pad_id"]) if padding else (self._truncating.token_to_id("[PAD]") or 0)

    @classmethod
    def load(cls, model_path: Path, *, max_length: int, lower_case: bool = False) -> EncoderTokenizer:
        """The tokenizer saved with the model (its ``tokenizer.json``; other formats through transformers)."""
        path = Path(model_path) / TOKENIZER_FILE
        if path.is_file():
            from tokenizers import Tokenizer

            try:
                backend = Tokenizer.from_file(str(path))
            except Exception as exc:  # the library raises a bare Exception for a malformed file
                raise OSError(f"cannot read the tokenizer {path}: {exc}") from exc
            return cls(backend, max_length=max_length, lower_case=lower_case)
        from transformers import AutoTokenizer

        fast = AutoTokenizer.from_pretrained(str(model_path), local_files_only=True, use_fast=True)
        return cls(fast.backend_tokenizer, max_length=max_length, lower_case=lower_case)

    def _prepare(self, text: str) -> str:
        text = text.strip()
        return text.lower() if self.lower_case else text

    def ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids of each text, special tokens included, at most ``max_length`` of them."""
        prepared = [self._prepare(t) for t in texts]
        if len(prepared) == 1:
            return [self._truncating.encode(prepared[0]).ids]
        return [e.ids for e in self._truncating.encode_batch(prepared)]

    def count(self, text: str) -> int:
        """Tokens in the whole text as the encoder would see it untruncated, [CLS] and [SEP] included."""
        return len(self._counting.encode(self._prepare(text)).ids)

    def pad(self, rows: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
        """``(input_ids, attention_mask)`` of ``rows`` padded to the longest, int64."""
        width = max((len(r) for r in rows), default=0)
        ids = np.full((len(rows), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = row
            mask[i, : len(row)] = 1
        return ids, mask
