"""The answering component: a ranking in, one named :class:`Answer` out (streamed as it is produced).

Every caller (/ask JSON and SSE, the chat endpoint, evaluation, the CLI) goes through
:meth:`Answerer.stream` (or :meth:`Answerer.answer`, its last item), so they all answer alike.
The mode is chosen once, then one producer per mode (one dispatch table) makes the answer:

- ``retrieval``: the caller asked for the ranking only;
- ``none``: nothing matched (or the LLM failed and FEDQA_ANSWER_FALLBACK=none);
- ``not_covered``: the fitted abstention model says the documentation does not cover the question;
- ``generative``: an LLM is configured; its completion is cited and must pass the grounding check,
  else the extractive answer replaces it (with the reason in ``error``);
- ``extractive``: the span of the top passages closest in meaning to the question.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from service.config import Settings
from service.generation.abstention import AbstentionModel, Confidence, Evidence, undecided
from service.generation.answer_policy import AnswerPolicy
from service.generation.asked import AskedQuestions
from service.generation.extractive import Extract, ExtractConfig, ExtractiveMethod, Extractor, SentenceVectors
from service.generation.llm import LLM, LLMError
from service.generation.modes import AnswerMode
from service.generation.prompt import STOP, attribute, build_prompt, citations, drop_bad_citations, grounding
from service.generation.warmup import warm_sentences
from service.retrieval.encoder import Encoder
from service.retrieval.passage import RankedHit
from service.retrieval.results import Question
from service.retrieval.store import Store
from service.retrieval.vocabulary import Vocabulary

log = logging.getLogger("fedqa.answer")

NOT_COVERED_TEXT = "The documentation does not cover this question; the nearest sources are listed below."


@dataclass
class Answer:
    """One answer: its text with [n] citations, what produced it, the cited sources, the coverage decision."""

    text: str | None
    mode: AnswerMode
    citations: list[int] = field(default_factory=list)
    confidence: Confidence | None = None
    error: str | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Token:
    """A piece of answer text, as streamed; ``reset``: drop what was streamed so far (a generated answer
    was rejected and the fallback follows)."""

    text: str
    reset: bool = False


@dataclass
class _Job:
    """What the producers share for one question."""

    query: str
    parts: Sequence[Question]
    hits: Sequence[RankedHit]
    context_passages: int | None
    incremental: bool = True  # the LLM streams (False: one completion call, for answer())
    extract: Extract | None = None
    confidence: Confidence | None = None
    error: str | None = None


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000.0, 3)


class Answerer:
    """Turns a ranking into an :class:`Answer`: extractive by meaning, an LLM when configured, or
    ``not_covered`` below the fitted abstention threshold."""

    def __init__(
        self,
        settings: Settings,
        encoder: Encoder | None,
        *,
        llm: LLM | None = None,
        llm_error: str | None = None,
        abstention: AbstentionModel | None = None,
        vectors: SentenceVectors | None = None,
        policy: AnswerPolicy | None = None,
        vocabulary: Vocabulary | None = None,
    ) -> None:
        self.settings = settings
        self.vocabulary = vocabulary
        self.llm = llm
        self.llm_error = llm_error
        self.abstention = abstention
        self.encoder = encoder
        # nearest_out's known questions: the abstention model's, with trusted feedback's (Pipeline.learn) added
        self.asked: AskedQuestions | None = abstention.asked if abstention is not None else None
        self.policy = policy  # as stored: it answers only when its fit kept it (AnswerPolicy.serves)
        self.extractor = Extractor(
            encoder,
            ExtractConfig(
                method=ExtractiveMethod(settings.extractive_method),
                max_sources=settings.extractive_sources,
                max_words=settings.extractive_max_words,
                margin=settings.extractive_margin,
            ),
            vectors,
            policy if policy is not None and policy.serves else None,
            # the span score is embedded only when a fitted abstention model reads it
            score_sentences=abstention is not None and "span_score" in abstention.features,
        )

    def with_llm(self, llm: LLM | None, *, settings: Settings | None = None) -> Answerer:
        """A copy that generates with ``llm`` (and ``settings``, when given); extractor and abstention model shared."""
        clone = copy.copy(self)
        clone.llm = llm
        clone.settings = settings or self.settings
        return clone

    def warm_up(self, store: Store, domains: Sequence[str], limit: int, stop: threading.Event) -> threading.Thread | None:
        """Embed the sentences of an index of at most ``limit`` passages in the background, so that answers embed
        none at request time (:func:`~service.generation.warmup.warm_sentences`); the thread, or None."""
        return warm_sentences(self.extractor, store, domains, limit, stop)

    # ------------------------------------------------------------------ decisions
    def evidence(
        self,
        parts: Sequence[Question],
        hits: Sequence[RankedHit],
        probabilities: Mapping[str, float],
        *,
        score_sentences: bool = False,
        allowed: frozenset[str] | None = None,
        product: str | None = None,
    ) -> tuple[Evidence, Extract]:
        """The abstention evidence of a ranking for the questions ``parts``, and the meaning extract it was read from
        (``score_sentences``: compute the span score even when the abstention model does not read it). ``allowed``:
        the caller's products (None: every product); the word counts are theirs only, as the routing and the ranking
        are, so that neither the evidence nor the decision tells the caller about other products' documentation."""
        meaning = self.extractor.meaning(parts, hits, score_sentences=score_sentences)
        nearest = self._nearest_out(parts, allowed, product)
        if self.vocabulary is None:
            return Evidence.of(probabilities, hits, meaning.score, nearest_out=nearest), meaning
        vocabulary = self.vocabulary.within(allowed)
        texts = [q.text for q in parts]
        # one passage a part of the question: the first len(parts) passages of the ranking
        first = [f"{h.passage.title} {h.passage.text}" for h in hits[: max(1, len(parts))]]
        return Evidence.of(probabilities, hits, meaning.score, vocabulary.rarity(texts), vocabulary.uncovered(texts, first), nearest), meaning

    def _nearest_out(self, parts: Sequence[Question], allowed: frozenset[str] | None, product: str | None) -> float:
        """``nearest_out`` of the questions ``parts`` (a question without a vector is embedded) for a caller of
        ``allowed``, answered for ``product`` alone when given; 0 with no known questions (:attr:`asked`)."""
        asked = self.asked
        if asked is None or self.encoder is None or not parts:
            return 0.0
        return asked.nearest_out(self.part_vectors(parts), allowed, product)

    def part_vectors(self, parts: Sequence[Question]) -> np.ndarray:
        """The query vectors of the questions ``parts`` (rows; a question retrieval searched without one is embedded):
        what ``nearest_out`` reads, served and fitted (:func:`training.abstention.question_evidence`)."""
        if self.encoder is None:
            raise ValueError("no encoder: the questions' vectors cannot be computed")
        missing = [q.text for q in parts if q.vector is None]
        embedded = iter(self.encoder.embed_queries(missing)) if missing else iter(())
        return np.stack([q.vector if q.vector is not None else next(embedded) for q in parts])

    def _decide(self, evidence: Evidence) -> Confidence:
        return self.abstention.decide(evidence) if self.abstention else undecided(evidence)

    def _mode(self, job: _Job, generate: bool) -> AnswerMode:
        if not generate:
            return AnswerMode.RETRIEVAL
        if not job.hits:
            job.error = "no passage matched the query"
            return AnswerMode.NONE
        if job.confidence is not None and not job.confidence.covered:
            return AnswerMode.NOT_COVERED
        if self.llm is not None:
            return AnswerMode.GENERATIVE
        if self.llm_error:
            job.error = self.llm_error
            return self._fallback_mode()
        return AnswerMode.EXTRACTIVE

    def _fallback_mode(self) -> AnswerMode:
        return AnswerMode.EXTRACTIVE if self.settings.answer_fallback == "extractive" else AnswerMode.NONE

    # ------------------------------------------------------------------ entry points
    def stream(
        self,
        query: str,
        parts: Sequence[Question],
        hits: Sequence[RankedHit],
        probabilities: Mapping[str, float],
        *,
        generate: bool = True,
        context_passages: int | None = None,
        incremental: bool = True,
        allowed: frozenset[str] | None = None,
        product: str | None = None,
    ) -> Iterator[Token | Answer]:
        """Answer text as it is produced (:class:`Token`), then the :class:`Answer` (always the last item).

        ``parts``: the questions of ``query`` as retrieval split them (:attr:`Retrieval.parts
        <service.retrieval.results.Retrieval.parts>`), quoted for one by one; ``context_passages``: passages in an
        LLM prompt (default FEDQA_LLM_CONTEXT_PASSAGES); ``incremental``: stream the LLM's completion (False: one
        completion call); ``allowed``: the caller's products, whose documentation alone the evidence reads; ``product``:
        the one product the answer is for (an answer by product), whose known questions alone ``nearest_out`` reads."""
        t0 = time.perf_counter()
        job = _Job(query, parts, hits, context_passages, incremental)
        if generate and hits:
            evidence, meaning = self.evidence(parts, hits, probabilities, allowed=allowed, product=product)
            job.confidence = self._decide(evidence)
            job.extract = meaning if self.extractor.config.method == ExtractiveMethod.MEANING else None
        mode = self._mode(job, generate)
        for item in self._produce(mode, job):
            if isinstance(item, Answer):
                item.confidence = item.confidence or job.confidence
                item.timings_ms["answer"] = _ms(t0)
            yield item

    def answer(
        self,
        query: str,
        parts: Sequence[Question],
        hits: Sequence[RankedHit],
        probabilities: Mapping[str, float],
        *,
        generate: bool = True,
        context_passages: int | None = None,
        allowed: frozenset[str] | None = None,
        product: str | None = None,
    ) -> Answer:
        """The :class:`Answer` (what :meth:`stream` ends with)."""
        last: Answer | None = None
        items = self.stream(
            query,
            parts,
            hits,
            probabilities,
            generate=generate,
            context_passages=context_passages,
            incremental=False,
            allowed=allowed,
            product=product,
        )
        for item in items:
            if isinstance(item, Answer):
                last = item
        assert last is not None
        return last

    # ------------------------------------------------------------------ producers
    def _produce(self, mode: AnswerMode, job: _Job) -> Iterator[Token | Answer]:
        """The producer of ``mode`` (one dispatch table, by method name, so that a copy of the Answerer dispatches
        to the copy)."""
        return getattr(self, _PRODUCERS[mode])(job)

    def _retrieval(self, job: _Job) -> Iterator[Token | Answer]:
        return iter([Answer(None, AnswerMode.RETRIEVAL)])

    def _none(self, job: _Job) -> Iterator[Token | Answer]:
        yield Answer(None, AnswerMode.NONE, error=job.error)

    def _not_covered(self, job: _Job) -> Iterator[Token | Answer]:
        yield Token(NOT_COVERED_TEXT)
        yield Answer(NOT_COVERED_TEXT, AnswerMode.NOT_COVERED, error=job.error)

    def _extract(self, job: _Job) -> Extract:
        if job.extract is None:
            job.extract = self.extractor.extract(job.parts, job.hits)
        return job.extract

    def _extractive(self, job: _Job) -> Iterator[Token | Answer]:
        text = self._extract(job).text
        if not text:
            yield Answer(None, AnswerMode.NONE, error=job.error or "nothing to quote in the sources")
            return
        yield Token(text)
        yield Answer(text, AnswerMode.EXTRACTIVE, citations(text, len(job.hits)), error=job.error)

    def _fallback(self, job: _Job, error: str) -> Iterator[Token | Answer]:
        job.error = error
        yield Token("", reset=True)
        yield from self._produce(self._fallback_mode(), job)

    def _generative(self, job: _Job) -> Iterator[Token | Answer]:
        assert self.llm is not None
        context = list(job.hits[: job.context_passages or self.settings.llm_context_passages])
        prompt = build_prompt(job.query, context, passage_words=self.settings.llm_passage_words)
        pieces: list[str] = []
        limits: dict[str, Any] = {"max_tokens": self.settings.llm_max_tokens, "stop": STOP, "timeout_s": self.settings.llm_timeout_s}
        try:
            if not job.incremental:
                pieces.append(self.llm.complete(prompt, **limits))
            else:
                for piece in self.llm.stream(prompt, **limits):
                    pieces.append(piece)
                    yield Token(piece)
        except LLMError as exc:
            log.warning("LLM failed: %s", exc)
            yield from self._fallback(job, f"generation failed: {exc}")
            return
        text = drop_bad_citations("".join(pieces), len(context))
        if text and not citations(text, len(context)):
            text = attribute(text, context)
        if not text:
            yield from self._fallback(job, "the LLM returned an empty answer")
            return
        g = grounding(text, context)
        if g < self.settings.min_grounding:
            yield from self._fallback(
                job,
                f"the generated answer was not supported by the sources (grounding {g:.2f} < {self.settings.min_grounding:.2f}); it was replaced",
            )
            return
        yield Answer(text, AnswerMode.GENERATIVE, citations(text, len(context)))


_PRODUCERS: dict[AnswerMode, str] = {
    AnswerMode.RETRIEVAL: "_retrieval",
    AnswerMode.NONE: "_none",
    AnswerMode.NOT_COVERED: "_not_covered",
    AnswerMode.GENERATIVE: "_generative",
    AnswerMode.EXTRACTIVE: "_extractive",
}
