"""Extractive answers: spans quoted from the top passages, each cited as [n].

Three methods (FEDQA_EXTRACTIVE_METHOD), one dispatch table:

- ``meaning`` (default): with a fitted :class:`~service.generation.answer_policy.AnswerPolicy` (``answer.json``),
  the candidate passage the policy chooses (similarity and the question's words), the span of its sentences
  the policy's margin keeps (scored against the question with the retriever's encoder; its margin may keep
  the whole passage), and the ranked passages that continue it on its page. Without a fitted policy: every
  sentence of the top passages is scored; the passage holding the best sentence gives the answer, a
  contiguous span grown around that sentence (in source order) while its neighbours stay within ``margin``
  of the best score and the span stays under ``max_words``.
- ``terms``: the earlier answer, sentences sharing most content words with the question.
- ``passage``: the top passage verbatim (a baseline for evaluation).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import TYPE_CHECKING

import numpy as np

from service.cache import LRUCache
from service.retrieval.passage import RankedHit
from service.retrieval.results import Question
from service.text import sentence_bounds, sentences, terms

if TYPE_CHECKING:
    from service.generation.answer_policy import AnswerPolicy
    from service.retrieval.encoder import Encoder


class ExtractiveMethod(str, Enum):
    """How the extractive answer is chosen (FEDQA_EXTRACTIVE_METHOD)."""

    MEANING = "meaning"
    TERMS = "terms"
    PASSAGE = "passage"


@dataclass(frozen=True)
class Span:
    """Contiguous text of one source: its 1-based number in the ranking and its score."""

    source: int
    text: str
    score: float


@dataclass(frozen=True)
class Extract:
    """An extractive answer: its spans in source order, and the best sentence's score (the span score)."""

    spans: list[Span] = field(default_factory=list)
    score: float = 0.0

    @property
    def text(self) -> str | None:
        """The spans joined, each followed by its citation; None when nothing was found."""
        return " ".join(f"{s.text} [{s.source}]" for s in self.spans) or None


class SentenceVectors:
    """Sentence offsets and unit vectors of passages, computed once per passage (LRU by domain and doc_id)."""

    def __init__(self, encoder: Encoder, *, capacity: int = 4096) -> None:
        self.encoder = encoder
        self.capacity = capacity
        self._cache: LRUCache[tuple[str, str], tuple[list[tuple[int, int]], np.ndarray]] = LRUCache(capacity)
        self.filling = False  # a background fill was started (once per cache)

    def fill(self, passages: Sequence, *, batch: int = 16, stop: Callable[[], bool] = lambda: False) -> int:
        """Compute and cache the sentence vectors of ``passages`` (objects with doc_id and text), a few at a
        time so that requests interleave; returns how many were added."""
        added = 0
        for start in range(0, len(passages), batch):
            if stop():
                break
            chunk = [RankedHit(p, 0.0, 0.0, 0.0) for p in passages[start : start + batch]]
            self.get(chunk)
            added += len(chunk)
        return added

    def __len__(self) -> int:
        """Passages cached."""
        return len(self._cache)

    def clear(self) -> None:
        """Forget every cached passage."""
        self._cache.clear()

    def get(self, hits: Sequence[RankedHit]) -> list[tuple[list[tuple[int, int]], np.ndarray]]:
        """Per hit: its sentence bounds and their vectors (one encoder call for every passage not cached)."""
        keys = [(h.passage.domain, h.passage.doc_id) for h in hits]  # a doc_id is unique within its domain
        cached = self._cache.get_many(keys)
        missing = list({key: h for key, h in zip(keys, hits, strict=True) if key not in cached}.items())
        if missing:
            bounds = [sentence_bounds(h.passage.text) for _, h in missing]
            texts = [h.passage.text[a:b] for (_, h), bs in zip(missing, bounds, strict=True) for a, b in bs]
            vecs = self.encoder.embed_passages(texts, batch_size=64)
            k = 0
            computed = []
            for (key, _), bs in zip(missing, bounds, strict=True):
                computed.append((key, (bs, vecs[k : k + len(bs)])))
                k += len(bs)
            cached.update(computed)
            self._cache.put_many(computed)
        return [cached[key] for key in keys]


def grow_span(scores: np.ndarray, words: Sequence[int], *, margin: float, max_words: int) -> tuple[int, int]:
    """[i, j) around the best sentence, grown one neighbour at a time (the better-scored side first)
    while the neighbour scores within ``margin`` of the best and the span stays within ``max_words``."""
    best = int(np.argmax(scores))
    floor = float(scores[best]) - margin
    i, j, n_words = best, best + 1, words[best]
    while True:
        options = [(float(scores[k]), k) for k in (i - 1, j) if 0 <= k < len(scores) and scores[k] >= floor]
        options = [(s, k) for s, k in options if n_words + words[k] <= max_words]
        if not options:
            return i, j
        _, k = max(options)
        n_words += words[k]
        i, j = (k, j) if k < i else (i, k + 1)


@dataclass(frozen=True)
class ExtractConfig:
    """Limits of the extractive answer (FEDQA_EXTRACTIVE_*)."""

    method: ExtractiveMethod = ExtractiveMethod.MEANING
    max_sources: int = 3
    max_words: int = 400
    margin: float = 2.0


def by_meaning(query_vector: np.ndarray, hits: Sequence[RankedHit], vectors: SentenceVectors, config: ExtractConfig) -> Extract:
    """The span of the top passages closest in meaning to the question (see the module docstring)."""
    top = list(hits[: config.max_sources])
    if not top:
        return Extract()
    per_hit = vectors.get(top)
    best: tuple[float, int] | None = None
    sims: list[np.ndarray] = []
    for n, (bounds, vecs) in enumerate(per_hit):
        s = vecs @ query_vector if len(bounds) else np.zeros(0, dtype=np.float32)
        sims.append(s)
        if len(s) and (best is None or float(s.max()) > best[0]):
            best = (float(s.max()), n)
    if best is None:
        return Extract()
    n = best[1]
    bounds, text = per_hit[n][0], top[n].passage.text
    words = [len(text[a:b].split()) for a, b in bounds]
    i, j = grow_span(sims[n], words, margin=config.margin, max_words=config.max_words)
    span = Span(source=n + 1, text=text[bounds[i][0] : bounds[j - 1][1]], score=best[0])
    return Extract(spans=[span], score=best[0])


def by_policy(
    query: str,
    query_vector: np.ndarray | None,
    hits: Sequence[RankedHit],
    vectors: SentenceVectors | None,
    policy: AnswerPolicy,
    *,
    max_words: int,
) -> Extract:
    """The answer the fitted policy quotes (see the module docstring); its score is the best sentence's
    similarity in the chosen passage (0.0 when no sentence vectors are available)."""
    top = list(hits[: policy.sources])
    if not top:
        return Extract()
    i = policy.choose(terms(query), top, [terms(h.passage.text) for h in top])
    text = top[i].passage.text.strip()
    score = 0.0
    if vectors is not None and query_vector is not None:
        bounds, vecs = vectors.get([top[i]])[0]
        if len(bounds):
            sims = vecs @ query_vector
            score = float(sims.max())
            if not policy.whole:
                words = [len(text[a:b].split()) for a, b in bounds]
                a, b = grow_span(sims, words, margin=policy.margin, max_words=max_words)
                text = top[i].passage.text[bounds[a][0] : bounds[b - 1][1]]
    spans = [Span(i + 1, text, score)]
    spans += [Span(k + 1, hits[k].passage.text.strip(), hits[k].score) for k in policy.continuation(hits, i)]
    return Extract(spans=spans, score=score)


def by_terms(query: str, hits: Sequence[RankedHit], *, max_sentences: int = 3, max_sources: int = 3) -> Extract:
    """Quote the sentences of the top passages that share most terms with the query (the earlier answer)."""
    q = terms(query)
    scored: list[tuple[float, int, int, str]] = []
    for i, h in enumerate(hits[:max_sources], 1):
        for j, sent in enumerate(sentences(h.passage.text)):
            overlap = len(q & terms(sent))
            # Prefer overlap, then higher-ranked sources, then earlier sentences.
            scored.append((overlap + 1.0 / (i + 1) + 0.01 / (j + 1), i, j, sent))
    if not scored:
        return Extract()
    best = sorted(scored, key=lambda t: -t[0])[:max_sentences]
    best.sort(key=lambda t: (t[1], t[2]))
    return Extract(spans=[Span(i, s, float(sc)) for sc, i, _, s in best], score=float(best[0][0]))


def top_passage(hits: Sequence[RankedHit]) -> Extract:
    """The top passage verbatim."""
    if not hits:
        return Extract()
    return Extract(spans=[Span(1, hits[0].passage.text.strip(), hits[0].score)], score=hits[0].score)


def extractive_answer(query: str, hits: Sequence[RankedHit], *, max_sentences: int = 3, max_sources: int = 3) -> str | None:
    """Sentences sharing most terms with the query, cited as [n] (the ``terms`` method as text)."""
    return by_terms(query, hits, max_sentences=max_sentences, max_sources=max_sources).text


class Extractor:
    """Chooses the extractive answer by the configured method (one dispatch table)."""

    def __init__(
        self,
        encoder: Encoder | None,
        config: ExtractConfig | None = None,
        vectors: SentenceVectors | None = None,
        policy: AnswerPolicy | None = None,
        *,
        score_sentences: bool = True,
    ) -> None:
        self.encoder = encoder
        self.config = config or ExtractConfig()
        self.vectors = vectors if vectors is not None else (SentenceVectors(encoder) if encoder is not None else None)
        self.policy = policy
        # False: a policy that quotes whole passages embeds no sentence (the span score is then 0.0)
        self.score_sentences = score_sentences
        self._methods: dict[ExtractiveMethod, Callable[[str, np.ndarray | None, Sequence[RankedHit]], Extract]] = {
            ExtractiveMethod.MEANING: self._meaning,
            ExtractiveMethod.TERMS: lambda q, v, hits: by_terms(q, hits, max_sources=self.config.max_sources),
            ExtractiveMethod.PASSAGE: lambda q, v, hits: top_passage(hits),
        }

    @property
    def embeds_sentences(self) -> bool:
        """Whether answering embeds sentences (a fitted policy that quotes whole passages, with no span score read,
        does not: then there is nothing to pre-compute either)."""
        return self.vectors is not None and not (self.policy is not None and self.policy.whole and not self.score_sentences)

    def meaning(self, parts: Sequence[Question], hits: Sequence[RankedHit], *, score_sentences: bool = False) -> Extract:
        """The ``meaning`` extract of the questions ``parts`` (also the evidence for abstention, whatever the configured
        method); ``score_sentences``: score the chosen passage's sentences even when the policy quotes it whole."""
        return _per_question(lambda q, v, own: self._meaning(q, v, own, score_sentences=score_sentences), parts, hits)

    def _meaning(self, query: str, vector: np.ndarray | None, hits: Sequence[RankedHit], *, score_sentences: bool = False) -> Extract:
        if self.vectors is None:
            return by_terms(query, hits, max_sources=self.config.max_sources)
        if self.policy is not None and not (self.embeds_sentences or score_sentences):
            return by_policy(query, None, hits, None, self.policy, max_words=self.config.max_words)
        if vector is None:
            vector = self.vectors.encoder.embed_queries([query])[0]
        if self.policy is not None:
            return by_policy(query, vector, hits, self.vectors, self.policy, max_words=self.config.max_words)
        return by_meaning(vector, hits, self.vectors, self.config)

    def extract(self, parts: Sequence[Question], hits: Sequence[RankedHit]) -> Extract:
        """The extractive answer of ``hits`` for the questions ``parts`` (:attr:`Retrieval.parts
        <service.retrieval.results.Retrieval.parts>`; a vector of None is embedded here)."""
        method = self._methods[self.config.method]
        return _per_question(lambda q, v, own: method(q, v, own), parts, hits)


def _per_question(
    extract_one: Callable[[str, np.ndarray | None, Sequence[RankedHit]], Extract], parts: Sequence[Question], hits: Sequence[RankedHit]
) -> Extract:
    """``extract_one(text, vector, hits)`` of the one question; for a message asking several (as retrieval split it) an
    extract per question joined in order, each passage quoted once, scored by its best question (one quote
    cannot answer both halves of "How do I X? And, how do I Y?"). A question retrieved on its own reads the message's
    passages in its own ranking's order (:attr:`Question.ranking`): its top passage is its own, whatever the policy's
    number of candidates; its spans cite their places in ``hits``."""
    if len(parts) == 1:
        return extract_one(parts[0].text, parts[0].vector, hits)
    extracts = [_own_extract(extract_one, q, hits) for q in parts]
    spans: list[Span] = []
    for span in (s for e in extracts for s in e.spans):
        if all(span.source != kept.source for kept in spans):
            spans.append(span)
    return Extract(spans=spans, score=max(e.score for e in extracts))


def _own_extract(extract_one: Callable[[str, np.ndarray | None, Sequence[RankedHit]], Extract], q: Question, hits: Sequence[RankedHit]) -> Extract:
    """``q``'s extract of the passages of ``hits`` in its own ranking's order (all of ``hits``, in their order, when it
    has none), its spans citing their places in ``hits``."""
    if not q.ranking:
        return extract_one(q.text, q.vector, hits)
    at = {(h.passage.domain, h.passage.doc_id): i for i, h in enumerate(hits)}
    own = [at[key] for key in q.ranking if key in at]
    e = extract_one(q.text, q.vector, [hits[i] for i in own])
    return Extract(spans=[replace(s, source=own[s.source - 1] + 1) for s in e.spans], score=e.score)


_SHARED: weakref.WeakValueDictionary[tuple[int, str], SentenceVectors] = weakref.WeakValueDictionary()
_SHARED_LOCK = threading.Lock()


def shared_vectors(encoder: Encoder, index_version: str) -> SentenceVectors:
    """One sentence-vector cache per (encoder, index version), shared by the pipelines that use both
    (a reload that keeps the index keeps its cache)."""
    key = (id(encoder), index_version)
    with _SHARED_LOCK:
        vectors = _SHARED.get(key)
        if vectors is None or vectors.encoder is not encoder:
            vectors = SentenceVectors(encoder)
            _SHARED[key] = vectors
        return vectors
