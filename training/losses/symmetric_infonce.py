"""Symmetric supervised InfoNCE with several positives per query: L = (L_q2d + L_d2q) / 2.

For a batch of queries q_i and (deduplicated) passages d_j, with s_ij = cos(q_i, d_j) / tau and a
positive mask M (M_ij = 1 when d_j is an annotated gold passage of q_i):

    L_q2d = mean_i  -log( sum_{j: M_ij} exp(s_ij) / sum_j exp(s_ij) )      every passage in the batch
    L_d2q = mean_j  -log( sum_{i: M_ij} exp(s_ij) / sum_i exp(s_ij) )      over passages that are some query's positive

Passages that are nobody's positive (the hard negatives) only enter L_q2d's denominators, as in
sentence-transformers' ``MultipleNegativesSymmetricRankingLoss``. With one positive per query
and no passage shared between queries this *is* that loss (the tests check both against a hand
computation). It exists because that loss takes fixed (anchor, positive, negative) columns: a
query with several gold passages would appear in several rows, and each row would push the
query away from its own other gold passages as if they were negatives. Here a gold passage of a
query is never its negative, whichever row brought it into the batch.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def symmetric_infonce(queries: Tensor, docs: Tensor, positive_mask: Tensor, temperature: float = 0.05) -> Tensor:
    """The loss for query embeddings (n, dim), passage embeddings (p, dim) and a boolean mask (n, p).

    Embeddings need not be normalised (cosine similarity is used). Every query needs at least one
    positive passage in the batch.
    """
    mask = positive_mask.bool()
    if mask.shape != (queries.shape[0], docs.shape[0]):
        raise ValueError(f"positive_mask has shape {tuple(mask.shape)}, expected {(queries.shape[0], docs.shape[0])}")
    if not bool(mask.any(dim=1).all()):
        raise ValueError("every query needs at least one positive passage in the batch")
    scores = F.normalize(queries, dim=-1) @ F.normalize(docs, dim=-1).T / temperature
    neg_inf = torch.finfo(scores.dtype).min
    # query -> passage: softmax over every passage in the batch
    q2d = torch.logsumexp(scores, dim=1) - torch.logsumexp(scores.masked_fill(~mask, neg_inf), dim=1)
    # passage -> query: softmax over every query, for passages that are a positive of some query
    anchors = mask.any(dim=0)
    s_t, m_t = scores.T[anchors], mask.T[anchors]
    d2q = torch.logsumexp(s_t, dim=1) - torch.logsumexp(s_t.masked_fill(~m_t, neg_inf), dim=1)
    return (q2d.mean() + d2q.mean()) / 2


class SymmetricInfoNCELoss(nn.Module):
    """:func:`symmetric_infonce` on a sentence-transformers model (shared weights for queries and passages).

    A sentence-transformers loss: ``forward`` takes the batch's tokenised columns (the queries, then the batch's
    passages) and its labels (the positive mask), as ``SentenceTransformerTrainer`` hands them over; the bi-encoder is
    the model's own modules (transformer, pooling, normalisation), so the trained model is saved and served unchanged.
    """

    def __init__(self, model: nn.Module, temperature: float = 0.05) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError("temperature must be positive")
        self.model = model
        self.temperature = temperature

    def embed(self, features: dict[str, Tensor]) -> Tensor:
        """Sentence embeddings of one tokenised batch."""
        return self.model(features)["sentence_embedding"]

    def forward(self, sentence_features: Sequence[dict[str, Tensor]], labels: Tensor) -> Tensor:
        """The loss of one batch: ``sentence_features`` the tokenised queries and passages, ``labels`` the (queries,
        passages) positive mask."""
        queries, docs = sentence_features
        return symmetric_infonce(self.embed(queries), self.embed(docs), labels, self.temperature)

    def get_config_dict(self) -> dict[str, float | str]:
        """What the loss was configured with (saved beside the model)."""
        return {"loss": "symmetric_infonce", "temperature": self.temperature, "similarity": "cosine"}


def positive_mask(golds: Sequence[set[str]], doc_ids: Sequence[str]) -> Tensor:
    """The (queries, passages) mask: True where the passage is one of the query's gold passages."""
    return torch.tensor([[d in g for d in doc_ids] for g in golds], dtype=torch.bool)
