"""The retriever's symmetric InfoNCE equals sentence-transformers' symmetric MNRL for one positive, on the real encoder."""

from __future__ import annotations

import pytest
import torch

from training.losses.symmetric_infonce import positive_mask, symmetric_infonce


def test_with_one_positive_each_it_equals_sentence_transformers_symmetric_loss(encoder):
    """One gold per query, hard negatives after the positives: identical to MNRL(q2d + d2q, per direction)."""
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    g = torch.Generator().manual_seed(0)
    q, pos, neg = (torch.randn(4, 8, generator=g, dtype=torch.float64) for _ in range(3))
    st = MultipleNegativesRankingLoss(encoder.model, scale=20.0, directions=("query_to_doc", "doc_to_query"), partition_mode="per_direction")
    theirs = st.compute_loss_from_embeddings([q, pos, neg], None)
    ids = [f"p{i}" for i in range(4)] + [f"n{i}" for i in range(4)]
    ours = symmetric_infonce(q, torch.cat([pos, neg]), positive_mask([{f"p{i}"} for i in range(4)], ids), temperature=0.05)
    assert float(ours) == pytest.approx(float(theirs), rel=1e-9)
