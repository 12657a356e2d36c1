"""Request and response models of the HTTP API (also printed by the CLI)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from service.choices import Choice
from service.generation.modes import AnswerMode
from service.retrieval.strategies import DEFAULT_STRATEGY, StrategyName
from service.retrieval.strategies.base import StrategyDetail
from service.routing.gate import GateMode

Strategy = StrategyName


class AskRequest(BaseModel):
    """Body of ``POST /ask``. Types are strict: ``"5"`` is not a top_k."""

    model_config = ConfigDict(strict=True, extra="forbid", use_enum_values=True)

    query: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)] = Field(
        description="The question; at most FEDQA_MAX_QUERY_CHARS characters."
    )
    top_k: int | None = Field(default=None, description="Passages in the final ranking (1..FEDQA_MAX_TOP_K).")
    strategy: Strategy = Field(
        default=DEFAULT_STRATEGY,
        strict=False,
        description="Retrieval strategy: fused (default: router + retrieval evidence, fitted gate and weights), "
        "mkpqa (the paper: router + gate, U = p*s), uis (every domain, raw s), "
        "rfs (router's top-1 domain), lfs (an LLM picks the domains).",
    )
    domains: list[Annotated[str, StringConstraints(min_length=1)]] | None = Field(
        default=None,
        min_length=1,
        description="Product filter: search only these domains (ranked by s); routing is reported as given, not predicted.",
    )
    seed: int | None = Field(default=None, ge=0, description="Seed for the stochastic gate (reproducible sampling).")
    stream: bool = Field(default=False, description="Answer as Server-Sent Events.")
    generate: bool = Field(default=True, description="false: return the ranking only (retrieval path).")
    rerank: bool = Field(
        default=True, description="false: keep the strategy's ranking (no reranking by the trained reranker; FEDQA_RERANK=off for every request)."
    )
    gate: GateMode | None = Field(default=None, description="Gate mode; default FEDQA_GATE_MODE. deterministic is for evaluation.")


class Source(BaseModel):
    """A passage of the final ranking; the answer cites it by its 1-based position."""

    doc_id: str
    domain: str
    title: str
    source: str
    text: str
    score: float = Field(description="Similarity s from the domain's collection.")
    domain_prob: float = Field(description="The router's probability p_j of the passage's domain (routing.probabilities).")
    domain_weight: float = Field(description="Weight of the passage's domain in the merge: p_j (mkpqa, rfs), 1 (uis, lfs), c_j * q_j^lambda (fused).")
    unified_score: float = Field(
        description=(
            "U = domain_weight * max(s, 0), the strategy's ranking score (fused, or a product filter: plus the page prior's bonus,"
            " less the known answers' demotion)."
        )
    )
    rank_score: float = Field(
        description="The key the sources are sorted by, non-increasing down the list: unified_score; with the index's lexical "
        "search (FEDQA_LEXICAL) the reciprocal-rank fusion of the passage's rank by unified_score and its rank by "
        "domain_weight * BM25; with a fitted ranking model (fedqa train ranking) for the default strategy, its score w . x "
        "over the features shown; without a ranking model, in the reranked top-N, that key + w * the reranker's logit. Where passages are placed in "
        "turns (those below the reranked top-N, a message's questions in turn, an answer by product) it is at most the "
        "rank_score above it."
    )
    features: dict[str, float] = Field(
        default_factory=dict,
        description="What placed the passage, by name (only those computed for this request): similarity (s), "
        "product_probability (the router's p_j), weight (the strategy's w_j on s, where it is not p_j), page_prior (the "
        "page prior's bonus), known_answer (cosine of the question to the nearest counted question this passage answers) "
        "and known_answer_penalty (what U lost for it), dense_rank and lexical_rank (its ranks in the two fused rankings), "
        "bm25, rerank (the reranker's logit), question_rank (its rank in its own question's ranking, for a message "
        "asking several); with a ranking model, every feature its score reads: log_product_probability (log p_j), "
        "domain_best_gap (its product's best s less the best s of all), page_answers (log(1 + n), n the labelled questions "
        "answered on its page), is_known_answer, known_answer and its square, bm25_share (its BM25 over its product's best), "
        "lexical_only (found by the lexical search alone), dense_reciprocal_rank and lexical_reciprocal_rank (1 / (60 + "
        "its rank by s, by BM25, across the products searched)), and where it reads the reranker, rerank for the default "
        "ranking's top N and reranked (1: scored by the reranker, else 0).",
    )
    rerank_score: float | None = Field(
        default=None,
        description="The reranker's calibrated P(this passage answers the question), for the reranked top-N; without a "
        "serving ranking model the order follows U + w * the reranker's logit (w fitted with the reranker version), with "
        "one its score alone (rank_score), the reranker only scoring its top N. null: not reranked.",
    )


class Routing(BaseModel):
    """What the router and the gate decided."""

    model_config = ConfigDict(use_enum_values=True)

    probabilities: dict[str, float]
    threshold: float
    active_domains: list[str]
    activation: dict[str, float] = Field(description="min(1, p_j / tau) per domain.")
    fallback: bool = Field(description="No domain was chosen (gate drew none, or the lfs LLM said no to all), so the argmax domain was used.")
    mode: Literal["stochastic", "deterministic"]
    router: str = Field(description="Router version, or 'uniform' when none is trained.")
    strategy: Strategy = Field(default=DEFAULT_STRATEGY, strict=False, description="The strategy that chose the active domains.")
    given: bool = Field(default=False, description="The caller gave the domains (product filter); nothing was predicted.")
    scope: list[str] | None = Field(
        default=None,
        description="The API key's products: only they were routed among (probabilities of them alone, the gate "
        "normalised over them) and searched. null: every product.",
    )
    selector: StrategyDetail | None = Field(
        default=None,
        description="The strategy's details: lfs: the LLM's vote per domain, failed calls and their errors; fused: the fused q per "
        "domain and why every domain was searched; a message asking several questions: each question's own routing under 'questions'.",
    )


class AnswerConfidence(BaseModel):
    """The decision whether the documentation covers the question, and what it read."""

    covered: bool = Field(description="false: the answer is not_covered.")
    value: float | None = Field(description="P(covered) under the fitted abstention model; null when none is fitted.")
    threshold: float | None = Field(description="The fitted threshold on value (at a stated false-refusal rate).")
    evidence: dict[str, float] = Field(
        description="max_prob (highest router probability), p_sum (sum of the router's probabilities), best_similarity "
        "(best s), span_score (best sentence of the quoted passage; 0.0 when the fitted model does not read it), rerank_best "
        "(the reranker's best calibrated score; 0.0 when the ranking was not reranked), rare_word and uncovered (from the "
        "word counts of the caller's products only), nearest_out (the highest cosine to a question known to be out of scope "
        "minus the highest to one known to be in scope of the caller's products: those the model was fitted on and trusted "
        "feedback's within the caller's products; 0.0 when the model was fitted without them)."
    )
    model: str | None = Field(default=None, description="The fitted model that decided (version folder/file).")


class ProductAnswer(BaseModel):
    """One product's answer in an answer given by product (``answer_mode: "by_product"``)."""

    model_config = ConfigDict(use_enum_values=True)

    domain: str
    probability: float = Field(description="The router's probability p_j of the product.")
    answer: str | None = Field(description="The product's answer; its [n] are positions in the response's sources.")
    answer_mode: AnswerMode = Field(description="What produced the product's answer (extractive, generative, ...).")
    citations: list[int] = Field(default_factory=list, description="Source numbers (in the response's sources) the answer cites.")
    doc_ids: list[str] = Field(description="The product's passages, its top passage first (they are in the response's sources too).")


class AskResponse(BaseModel):
    """Body of ``POST /ask``."""

    model_config = ConfigDict(use_enum_values=True)

    query: str
    answer: str | None
    answer_mode: AnswerMode
    citations: list[int] = Field(default_factory=list, description="Source numbers the answer cites.")
    confidence: AnswerConfidence | None = Field(default=None, description="Whether the documentation covers the question.")
    sources: list[Source]
    routing: Routing
    strategy: Strategy
    timings_ms: dict[str, float]
    versions: dict[str, str | None]
    error: str | None = None
    products: list[ProductAnswer] | None = Field(
        default=None,
        description="answer_mode by_product: the answer per plausible product, best p_j first (null: one product answers).",
    )


class ErrorBody(BaseModel):
    """Body of every 4xx/5xx answer."""

    detail: str
    errors: list[dict] | None = None


class DomainInfo(BaseModel):
    """One searchable product domain."""

    name: str
    passages: int
    routed: bool = Field(description="The active router knows this domain.")


class DomainsResponse(BaseModel):
    """Body of ``GET /domains``."""

    domains: list[DomainInfo]
    versions: dict[str, str | None]
    warnings: list[str] = Field(default_factory=list)


# --------------------------------------------------------------------------- evaluation
class MetricGroup(Choice):
    """Metric groups of an evaluation; what each one computes: :data:`service.evaluation.groups.GROUPS`."""

    RETRIEVAL = "retrieval"
    ANSWERS = "answers"
    ANSWER = "answer"
    WIXQA = "wixqa"
    RAGEVAL = "rageval"
    RAGXPLAIN = "ragxplain"


def _default_metrics() -> list[MetricGroup]:
    return [MetricGroup.RETRIEVAL]


def _default_strategies() -> list[Strategy]:
    return [StrategyName(s) for s in ("fused", "mkpqa", "uis", "rfs")]


class EvalSpec(BaseModel):
    """What an evaluation runs: strategies, metric groups and retrieval settings."""

    model_config = ConfigDict(extra="forbid", use_enum_values=True)

    strategies: list[Strategy] = Field(default_factory=_default_strategies, min_length=1, validate_default=True)
    domains: list[Annotated[str, StringConstraints(min_length=1)]] | None = Field(
        default=None,
        min_length=1,
        description="Product filter for every question: search only these domains (routing given, not predicted).",
    )
    metrics: list[MetricGroup] = Field(
        default_factory=_default_metrics,
        min_length=1,
        validate_default=True,
        description="retrieval (no LLM); answers (F1, ROUGE-L, BLEU, abstention, latency of the configured answering "
        "path; no judge); answer (relevancy, faithfulness), wixqa, rageval, ragxplain need a judge.",
    )
    top_k: int = Field(default=5, ge=1, le=50, description="Passages in the ranking and in the answer's context.")
    gate: GateMode = Field(default="deterministic", description="Gate mode of mkpqa; evaluation is deterministic unless asked otherwise.")
    seed: int | None = Field(default=None, ge=0, description="Stochastic gate: question i uses seed + i (as /ask's, >= 0).")


class EvalQuery(BaseModel):
    """A labelled question given inline (the queries.jsonl fields)."""

    model_config = ConfigDict(extra="ignore")

    qid: str | None = None
    query: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
    domains: list[str] = Field(default_factory=list)
    gold_doc_ids: list[str] = Field(default_factory=list)
    answer: str | None = None
    kind: str | None = None
    grading_note: str | None = None


class EvaluateRequest(EvalSpec):
    """Body of ``POST /evaluate``: questions inline or a dataset name, plus the spec."""

    queries: list[EvalQuery] | None = Field(default=None, description="Questions inline (exclusive with dataset).")
    dataset: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9_.-]{1,64}$",
        description="A dataset name: 'demo', or NAME for $FEDQA_HOME/eval/datasets/NAME.jsonl.",
    )
    limit: int | None = Field(default=None, ge=1, description="Evaluate only the first N questions.")
    dry_run: bool = Field(default=False, description="Only report how many LLM calls the job would make.")


class EvaluateJob(BaseModel):
    """Body of ``GET /evaluate/{id}`` (and of the answer to POST)."""

    id: str | None
    status: Literal["queued", "running", "done", "failed", "cancelled", "dry_run"]
    progress: dict[str, int]
    dataset: str
    spec: dict
    plan: dict | None = Field(default=None, description="LLM calls the job makes (upper bound).")
    error: str | None = None
    results: dict | None = Field(default=None, description="The summary, once the job is done.")
    report: str | None = Field(default=None, description="URL of the HTML report, once the job is done.")
