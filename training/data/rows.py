"""The training rows of a training set: router rows, and retriever rows with gold passages and hard negatives.

:func:`training.data.build.build_training_data` adds the questions (labelled, joined cross-domain,
synthetic, then the router-only heuristic and out-of-scope ones), optionally lets an LLM judge drop
rows and negatives, and writes :attr:`TrainingRows.router` and :attr:`TrainingRows.retriever`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from tqdm.auto import tqdm

from service.queries import LabelledQuery
from service.retrieval.passage import Passage
from training.data.negatives import HardNegativeSampler
from training.data.relevance import LLMRelevanceJudge, RelevanceLabel
from training.data.split import join_cross
from training.data.synthetic import SyntheticQuery


@dataclass
class TrainingRows:
    """The router's and the retriever's training rows (a retriever row: a router row with gold passages and
    ``negatives`` hard negatives from ``sampler``)."""

    sampler: HardNegativeSampler
    negatives: int
    seed: int = 0
    router: list[dict] = field(default_factory=list)
    retriever: list[dict] = field(default_factory=list)

    def add(self, qid: str, query: str, doms: list[str], golds: list[str], origin: str, generator: str | None = None) -> None:
        """One question: a router row, and a retriever row when it has gold passages."""
        base = {"qid": qid, "query": query, "domains": doms, "origin": origin}
        if generator:
            base["generator"] = generator
        self.router.append(dict(base))
        if golds:
            negs = self.sampler.sample(golds, self.negatives, seed=self.seed)
            self.retriever.append({**base, "positives": list(golds), "negatives": negs})

    def add_questions(self, train_q: list[LabelledQuery], synthetic: list[SyntheticQuery], *, cross_examples: int) -> None:
        """The labelled training questions, up to ``cross_examples`` pairs of them joined into cross-domain ones,
        and the synthetic questions."""
        for q in train_q:
            self.add(q.qid, q.query, q.domains, q.gold_doc_ids, "cross" if q.is_cross else "labelled")
        for q in join_cross([q for q in train_q if q.gold_doc_ids], cross_examples, seed=self.seed):
            self.add(q.qid, q.query, q.domains, q.gold_doc_ids, "cross", "joined")
        for i, s in enumerate(synthetic):
            self.add(f"syn-{i:06d}", s.query, [s.domain], [s.doc_id], "synthetic", s.generator)

    def add_router_only(self, router_synthetic: list[SyntheticQuery], oos_train: list[LabelledQuery]) -> None:
        """Router rows only: heuristic questions for every domain's vocabulary, and out-of-scope questions (no domain)."""
        for i, s in enumerate(router_synthetic):
            self.router.append({"qid": f"rsyn-{i:06d}", "query": s.query, "domains": [s.domain], "origin": "synthetic", "generator": s.generator})
        for q in oos_train:
            self.router.append({"qid": q.qid, "query": q.query, "domains": [], "origin": "out-of-scope"})

    def label_relevance(self, judge: LLMRelevanceJudge, by_id: dict[str, Passage], limit: int, *, progress: bool) -> list[RelevanceLabel]:
        """LLM relevance labels for up to ``limit`` seeded (row, passage) pairs: drop synthetic rows whose positive
        the judge rejects, and hard negatives it finds relevant. Returns the labels."""
        relevance: list[RelevanceLabel] = []
        pairs = []
        for r in self.retriever:
            if r["origin"] == "synthetic":
                pairs.append((r, r["positives"][0], "positive"))
            pairs.extend((r, n, "negative") for n in r["negatives"])
        rng = random.Random(f"{self.seed}:relevance")
        rng.shuffle(pairs)
        drop_rows: set[str] = set()
        for r, doc, role in tqdm(pairs[:limit], desc="relevance labels", unit="pair", disable=not progress):
            lab = judge.label(r["qid"], r["query"], by_id[doc])
            relevance.append(lab)
            if role == "positive" and lab.relevant is False:
                drop_rows.add(r["qid"])
            elif role == "negative" and lab.relevant is True:
                r["negatives"].remove(doc)
        if drop_rows:
            self.retriever = [r for r in self.retriever if r["qid"] not in drop_rows]
            self.router = [r for r in self.router if r["qid"] not in drop_rows]
        return relevance
