"""Request and response models of the HTTP API (also printed by the CLI)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

Strategy = Literal["mkpqa"]
AnswerMode = Literal["generative", "extractive", "retrieval", "none"]


class AskRequest(BaseModel):
    """Body of ``POST /ask``. Types are strict: ``"5"`` is not a top_k."""

    model_config = ConfigDict(strict=True, extra="forbid")

    query: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)] = Field(
        description="The question; at most FEDQA_MAX_QUERY_CHARS characters."
    )
    top_k: int | None = Field(default=None, description="Passages in the final ranking (1..FEDQA_MAX_TOP_K).")
    strategy: Strategy = Field(default="mkpqa", description="Retrieval strategy.")
    seed: int | None = Field(default=None, ge=0, description="Seed for the stochastic gate (reproducible sampling).")
    stream: bool = Field(default=False, description="Answer as Server-Sent Events.")
    generate: bool = Field(default=True, description="false: return the ranking only (retrieval path).")
    gate: Literal["stochastic", "deterministic"] | None = Field(
        default=None, description="Gate mode; default FEDQA_GATE_MODE. deterministic is for evaluation."
    )


class Source(BaseModel):
    """A passage of the final ranking; the answer cites it by its 1-based position."""

    doc_id: str
    domain: str
    title: str
    source: str
    text: str
    score: float = Field(description="Similarity s from the domain's collection.")
    domain_prob: float = Field(description="Router probability p_j of the passage's domain.")
    unified_score: float = Field(description="U = p_j * s.")


class Routing(BaseModel):
    """What the router and the gate decided."""

    probabilities: dict[str, float]
    threshold: float
    active_domains: list[str]
    activation: dict[str, float] = Field(description="min(1, p_j / tau) per domain.")
    fallback: bool = Field(description="No domain was drawn, so the argmax domain was used.")
    mode: Literal["stochastic", "deterministic"]
    router: str = Field(description="Router version, or 'uniform' when none is trained.")


class AskResponse(BaseModel):
    """Body of ``POST /ask``."""

    query: str
    answer: str | None
    answer_mode: AnswerMode
    citations: list[int] = Field(default_factory=list, description="Source numbers the answer cites.")
    sources: list[Source]
    routing: Routing
    strategy: Strategy
    timings_ms: dict[str, float]
    versions: dict[str, str | None]
    error: str | None = None


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
