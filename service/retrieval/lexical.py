"""The lexical index beside the vectors: BM25 per product over each passage's title and text.

A question that names an option, a keyword or a command ("relayhost", "timeout connect", "set logscale") is often
found by its words where the bi-encoder, which reads meaning, ranks a near paraphrase first. Each index version stores
one BM25 index per domain (bm25s, the Lucene variant, English stop words and Snowball stemming) in its folder under
:data:`LEXICAL_DIR`, written by every build (``fedqa ingest``, ``fedqa index build``); the pipeline searches it beside
the vectors and fuses the two rankings (:mod:`service.retrieval.fusion`). A version built before it has none and is
served by its vectors alone (rebuild it to add one). It lives in the data home, so the Qdrant server path has it too.
"""

from __future__ import annotations

import functools
import json
import logging
import shutil
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from service.retrieval.passage import Hit, Passage
from service.text import english_stemmer

log = logging.getLogger("fedqa.store")

LEXICAL_DIR = "lexical"
_IDS = "point_ids.json"


@functools.cache
def _bm25s():  # noqa: ANN202 - the bm25s module
    """bm25s, imported on first use; its logger (which bm25s sets to DEBUG on import) says warnings only (set once:
    a logger's level change clears every logger's cache, and questions are tokenised through here)."""
    import bm25s

    logging.getLogger("bm25s").setLevel(logging.WARNING)
    return bm25s


def _tokens(texts: Sequence[str], stemmer, *, ids: bool):  # noqa: ANN001, ANN202 - bm25s's Tokenized or token lists
    bm25s = _bm25s()
    return bm25s.tokenize(list(texts), stopwords="en", stemmer=stemmer, return_ids=ids, show_progress=False)


@dataclass(frozen=True)
class RankFusion:
    """Reciprocal rank fusion of the dense and the lexical ranking (Cormack, Clarke and Buttcher, SIGIR 2009):
    a passage scores sum(weight / (k + rank)) over the rankings it is in. k = 60 is that paper's constant, not a value
    fitted here; ``lexical_weight`` 1 weighs both rankings alike."""

    k: float = 60.0
    lexical_weight: float = 1.0


@dataclass(frozen=True)
class LexicalHits:
    """One question's BM25 hits per domain, and how their ranking joins the dense one."""

    hits: dict[str, list[Hit]]
    fusion: RankFusion = RankFusion()


@dataclass
class DomainIndex:
    """One domain's BM25 index and the point id of each of its rows."""

    model: object  # bm25s.BM25
    point_ids: list[str]

    def search(self, tokens: list[str], limit: int) -> list[Hit]:
        """The ``limit`` best passages with a positive BM25 score for the question's ``tokens``."""
        if not tokens or not self.point_ids:
            return []
        rows, scores = self.model.retrieve([tokens], k=min(limit, len(self.point_ids)), show_progress=False)  # type: ignore[attr-defined]
        return [Hit(self.point_ids[int(r)], float(s)) for r, s in zip(rows[0], scores[0], strict=True) if s > 0]


class LexicalIndex:
    """The BM25 indexes of one index version, one per domain."""

    def __init__(self, domains: dict[str, DomainIndex], fusion: RankFusion = RankFusion()) -> None:
        self.domains = domains
        self.fusion = fusion
        self._stemmer = english_stemmer()
        self._lock = threading.Lock()  # PyStemmer's stemmer is not thread-safe

    @classmethod
    def build(cls, passages: Iterable[Passage]) -> LexicalIndex:
        """Index ``passages`` (title and text), one BM25 index per domain."""
        bm25s = _bm25s()

        by_domain: dict[str, list[Passage]] = {}
        for p in passages:
            by_domain.setdefault(p.domain, []).append(p)
        stemmer = english_stemmer()
        domains: dict[str, DomainIndex] = {}
        for domain, items in sorted(by_domain.items()):
            model = bm25s.BM25()
            model.index(_tokens([f"{p.title}\n{p.text}" for p in items], stemmer, ids=True), show_progress=False)
            domains[domain] = DomainIndex(model, [p.point_id for p in items])
        return cls(domains)

    def query_tokens(self, query: str) -> list[str]:
        """The question's terms as the index reads them (stop words dropped, stemmed)."""
        with self._lock:
            return list(_tokens([query], self._stemmer, ids=False)[0])

    def search(self, domain: str, tokens: list[str], limit: int) -> list[Hit]:
        """One domain's best ``limit`` passages by BM25 ([] for a domain it has no index for)."""
        index = self.domains.get(domain)
        return index.search(tokens, limit) if index is not None else []

    def save(self, folder: Path) -> Path:
        """Write the indexes under ``folder``/:data:`LEXICAL_DIR` (replacing any there)."""
        root = Path(folder) / LEXICAL_DIR
        shutil.rmtree(root, ignore_errors=True)
        for domain, index in self.domains.items():
            path = root / domain
            path.mkdir(parents=True, exist_ok=True)
            index.model.save(str(path))  # type: ignore[attr-defined]
            (path / _IDS).write_text(json.dumps(index.point_ids), encoding="utf-8")
        return root

    @classmethod
    def load(cls, folder: Path) -> LexicalIndex | None:
        """The indexes stored with an index version, or None when it has none (built before them)."""
        bm25s = _bm25s()

        root = Path(folder) / LEXICAL_DIR
        if not root.is_dir():
            return None
        domains: dict[str, DomainIndex] = {}
        try:
            for path in sorted(p for p in root.iterdir() if p.is_dir()):
                ids = json.loads((path / _IDS).read_text(encoding="utf-8"))
                domains[path.name] = DomainIndex(bm25s.BM25.load(str(path)), [str(i) for i in ids])
        except (OSError, ValueError) as exc:
            log.warning("the lexical index in %s could not be read (%s): serving by the vectors alone", root, exc)
            return None
        return cls(domains)


def search_lexical(index: LexicalIndex | None, query: str, domains: Sequence[str], limit: int, timings: dict[str, float]) -> LexicalHits | None:
    """Each of ``domains``' best ``limit`` BM25 hits for ``query`` (``timings["lexical"]``: its milliseconds), or None
    without a lexical index."""
    if index is None:
        return None
    t0 = time.perf_counter()
    tokens = index.query_tokens(query)
    hits = LexicalHits({d: index.search(d, tokens, limit) for d in domains}, index.fusion)
    timings["lexical"] = round((time.perf_counter() - t0) * 1000.0, 3)
    return hits


def fused_lexical(index: LexicalIndex | None, setting: str, fitted_ranks: bool, default_ranking: bool) -> LexicalIndex | None:
    """The lexical index a request fuses: only for the default strategy or a product filter (the MKP-QA baselines rank
    as the paper does), and not while a ranking fitted on labelled questions serves (``fitted_ranks``: fused with those
    at an unfitted weight it undid them: faq6 fold b 0.564 -> 0.409 Acc@1, docs/quality.md) unless FEDQA_LEXICAL is
    ``always``."""
    if index is None or setting == "off" or not default_ranking or (fitted_ranks and setting != "always"):
        return None
    return index
