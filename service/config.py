"""Settings for every part of fedqa, read once from ``FEDQA_*`` environment variables."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from service.routing.gate import GateMode

# Nothing in fedqa may reach a model hub at run time.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


class Settings(BaseSettings):
    """All configuration; defaults work with nothing set."""

    model_config = SettingsConfigDict(env_prefix="FEDQA_", env_file=None, extra="ignore")

    home: Path = Field(default=Path("~/.fedqa"), description="Data home: indexes, models, caches.")
    cache: Path | None = Field(
        default=None,
        description="Per-user cache shared by every home (the base encoder's ONNX export, keyed by model and recipe); "
        "default: $XDG_CACHE_HOME/fedqa, else ~/.cache/fedqa.",
    )

    # Store
    qdrant_url: str | None = Field(
        default=None, description="Qdrant server/cluster URL; ':memory:' for qdrant-client local mode. Unset: embedded qdrant-edge."
    )
    qdrant_api_key: SecretStr | None = Field(default=None, description="API key of the Qdrant deployment (FEDQA_QDRANT_URL).")
    qdrant_prefer_grpc: bool = Field(default=True, description="Talk to a Qdrant server over gRPC where it offers it (else HTTP).")
    qdrant_timeout_s: float = Field(default=5.0, description="Seconds one call to a Qdrant server may take.")
    collection_prefix: str = Field(default="fedqa_", description="Prefix of the collections fedqa creates on a Qdrant server.")
    qdrant_replication_factor: int | None = Field(
        default=None,
        ge=1,
        description="Copies of each shard of the collections fedqa creates on a Qdrant server. Unset: 2 when the server "
        "is a cluster of two nodes or more (a node restart leaves every product searchable), else 1.",
    )
    qdrant_shard_number: int | None = Field(
        default=None, ge=1, description="Shards of each collection fedqa creates on a Qdrant server. Unset: the server's default."
    )
    serve_lease_s: float = Field(
        default=120.0,
        ge=3.0,
        description="On a Qdrant server: how long the lease a process records on the index version it serves holds after "
        "its last renewal (renewed every third of this; removed when the process closes it). 'fedqa index prune' keeps "
        "every version with a lease that has not lapsed, whichever replica or home holds it; a killed process's lapses.",
    )
    qdrant_lease_api_key: SecretStr | None = Field(
        default=None,
        description="Key the serving leases are written with (a Qdrant JWT with write access to the <prefix>leases "
        "collection only, so serving pods keep the read-only FEDQA_QDRANT_API_KEY for the rest). Unset: FEDQA_QDRANT_API_KEY.",
    )

    hnsw_min_passages: int = Field(
        default=100_000,
        ge=1,
        description="An embedded shard (one product) of at least this many passages gets an HNSW graph at the end of a "
        "build; smaller ones are scanned whole (int8, re-scored exactly), which is faster there (docs/scale.md).",
    )
    min_free_mb: int = Field(
        default=128,
        ge=0,
        description="MiB the embedded store keeps free on the home's file system: a shard write, copy or optimize that "
        "would leave less is refused with an error, and an index is not opened for writing (the engine writes into "
        "memory-mapped holes, and on a full disk or tmpfs that kills the process with SIGBUS). 0: no check.",
    )
    hnsw_m: int = Field(default=16, ge=0, description="Degree of the embedded HNSW graphs (0: never build one).")
    hnsw_ef: int = Field(default=128, ge=1, description="Candidates an HNSW search keeps (higher: better recall, slower).")

    # Models
    encoder_model: str | None = Field(default=None, description="Path of a sentence-transformers model; default: shipped MiniLM.")
    router_base_model: str | None = Field(
        default=None, description="Unused: the router is a head over the retriever's query vectors (a BERT router's base model once)."
    )
    max_passage_tokens: int = Field(
        default=256,
        ge=32,
        le=4096,
        description="Longest passage cut from a page, in the retriever's tokens (the shipped MiniLM reads 256: a longer "
        "passage is embedded by its first 256 tokens only). docs.jsonl records are kept as given.",
    )
    lexical: Literal["on", "off", "always"] = Field(
        default="on",
        description="Search each product's BM25 index beside its vectors and fuse the two rankings (reciprocal rank "
        "fusion) for the default strategy while no ranking fitted on labelled questions serves; always: with one too; "
        "off: the vectors alone. An index version built without a lexical index is served by its vectors.",
    )
    not_covered_min_questions: int = Field(
        default=30,
        ge=0,
        description="'fedqa train router' fits 'not covered' on its in-scope validation questions only with at least this "
        "many, and keeps it only when it measures no worse out of sample than the default (the index's section "
        "headings and the labelled training questions against the home's out-of-scope and the shipped general "
        "questions), which serves otherwise (a "
        "threshold placed on a dozen questions refused 18% of manuals_dev's in-scope questions).",
    )
    decision_min_questions: int = Field(
        default=30,
        ge=0,
        description="Labelled questions the answer policy ('fedqa train answer') and the by-product split need before "
        "a fitted one may replace its default (the unfitted extractive rule; one product per answer); with enough, the "
        "fitted one serves only when its cross-fitted figure is no lower than the default's on the same questions.",
    )
    min_passage_chars: int = Field(
        default=200,
        ge=0,
        description="A page's section with less text than this (a heading and one line) is merged into the next section "
        "of its page rather than made a passage of its own.",
    )
    torch_threads: int | None = Field(
        default=None, ge=1, description="PyTorch intra-op threads (training, the PyTorch encoder); default: torch's choice."
    )
    encoder_backend: Literal["onnx", "torch"] = Field(
        default="onnx",
        description="Runtime of the bi-encoder for new indexes: ONNX Runtime int8 (exported once per model version) "
        "or PyTorch fp32. Queries always use the backend recorded in the active index.",
    )
    passage_bf16: Literal["auto", "on", "off"] = Field(
        default="off",
        description="Embed passages in bulk (ingest, index build) with the PyTorch model in bfloat16: 'on', or 'auto' on "
        "the ONNX backend where the CPU multiplies bf16 matrices natively (AMX). There it embeds faq6 3.2x as fast as "
        "fp32 (ONNX int8: ~2x), but against int8 queries Acc@1 drops ~1.8 points (int8 on both sides: as fp32).",
    )
    encoder_cache_size: int = Field(default=1024, ge=0, description="Queries whose vectors are kept in an LRU cache (0: off).")
    passage_cache_size: int = Field(
        default=50_000,
        ge=0,
        description="Passages kept in memory for the rankings (an embedded index of at most this many is read in whole "
        "at load; with a Qdrant server, the passages of past rankings; "
        "faq6: 21k passages, +69 MiB; 0: every ranking reads its passages from the store).",
    )
    search_threads: int | None = Field(
        default=None,
        ge=1,
        description="Threads that search one request's domains at once. Default: 1 (one after another in the request's "
        "thread) for the embedded qdrant-edge store, whose in-process searches take about a millisecond each, less "
        "than a thread hand-off on a small or busy CPU; one per domain (at most 8) for a Qdrant server (network waits).",
    )

    # Routing and retrieval
    tau0: float = Field(default=0.5, gt=0.0, le=1.0, description="The gate's base threshold tau0 (mkpqa; the fused strategy fits its own).")
    gate_mode: GateMode = Field(default="stochastic", description="The gate of /ask: stochastic (the paper's) or deterministic (as evaluation).")
    default_top_k: int = Field(default=5, ge=1, description="Passages in the final ranking when a request names no top_k.")
    max_top_k: int = Field(default=50, ge=1, description="Largest top_k a request may ask for.")
    max_query_chars: int = Field(default=2000, ge=1, description="Longest accepted question, in characters (422 above it).")
    rerank: Literal["on", "off"] = Field(
        default="on",
        description="Rerank the merged top-N with the trained reranker (fedqa train reranker) when one fits the active index; "
        "off: rank as the strategy does ('rerank': false on a request does the same for it).",
    )
    rank_rerank_depth: int = Field(
        default=20,
        ge=1,
        description="Candidates whose reranker logit a ranking model's pool reads (fedqa train ranking --rerank-depth; a "
        "served model keeps the N it was fitted with): the top N of the pool by the default ranking, as the reranker is "
        "trained on the served top 20 (fedqa train reranker --depth); the others get 0 and the indicator 'reranked' 0.",
    )
    rerank_threads: int | None = Field(
        default=None,
        ge=1,
        description="ONNX Runtime threads that score one request's (question, passage) pairs. Default: the CPUs this "
        "process may use. On 2 cores 2 threads take ~40% off a depth-5 reranking of one request (docs/quality.md); "
        "1 leaves the other cores to concurrent requests.",
    )
    domain_descriptions: dict[str, str] = Field(
        default_factory=dict,
        description='JSON {"domain": "description"} for the lfs resource-selection prompt; '
        "domains not listed get a description derived from their passage titles.",
    )

    # Generation
    llm_backend: Literal["auto", "llamacpp", "transformers", "openai", "none"] = Field(
        default="auto",
        description="auto: the endpoint when FEDQA_LLM_BASE_URL is set, else no LLM (extractive answers); transformers or "
        "llamacpp: the embedded SmolLM2 (llamacpp: pip install -e '.[llama]'); openai: the endpoint; none: no LLM.",
    )
    llm_base_url: str | None = Field(default=None, description="OpenAI-compatible endpoint (vLLM, Ollama, OpenAI), base URL including /v1.")
    llm_model: str = Field(
        default="SmolLM2-135M-Instruct", description="Model name sent to the OpenAI-compatible endpoint (and the judge's default model)."
    )
    llm_api_key: SecretStr | None = Field(default=None, description="API key of the LLM endpoint.")
    llm_api: Literal["chat", "completions"] = Field(default="chat", description="The endpoint's API: chat completions or plain completions.")
    llm_max_tokens: int = Field(default=128, ge=1, description="Longest generated answer, in tokens.")
    llm_timeout_s: float = Field(default=30.0, gt=0, description="Seconds a generation may take; then the fallback answers.")
    llm_threads: int = Field(default=1, ge=1, description="Threads of the embedded llama.cpp model.")
    llm_context_passages: int = Field(default=3, ge=1, description="Top passages put in the LLM's prompt.")
    llm_passage_words: int = Field(default=120, ge=10, description="Words of each passage put in the LLM's prompt.")
    min_grounding: float = Field(
        default=0.5,
        ge=0.0,
        le=1.0,
        description="A generated answer with fewer of its content words in the sources is replaced by the fallback (0: off).",
    )
    extractive_method: Literal["meaning", "terms", "passage"] = Field(
        default="meaning",
        description="Extractive answer: the span closest in meaning to the question (meaning), sentences sharing "
        "most words with it (terms), or the top passage verbatim (passage).",
    )
    extractive_sources: int = Field(default=3, ge=1, description="Top passages the extractive answer may quote (without a fitted answer policy).")
    extractive_max_words: int = Field(default=400, ge=5, description="Longest extractive answer, in words.")
    extractive_margin: float = Field(
        default=2.0,
        ge=0.0,
        le=2.0,
        description="A sentence joins the extractive span while its similarity is within this margin of the best one "
        "(without a fitted answer policy, answer.json: fedqa train answer).",
    )
    sentence_vectors_precompute: int = Field(
        default=2000,
        ge=0,
        description="Indexes with at most this many passages get every sentence embedded in the background at start-up "
        "(0: never); larger ones embed the top passages' sentences per request (cached).",
    )
    answer_fallback: Literal["extractive", "none"] = Field(
        default="extractive", description="What answers when the LLM fails or times out: quoted sentences, or null."
    )

    # Evaluation judges: any OpenAI-compatible endpoint; unset base URL = the configured LLM above.
    judge_base_url: str | None = Field(default=None, description="OpenAI-compatible endpoint of the evaluation judge; default: the LLM's.")
    judge_model: str | None = Field(default=None, description="Judge model name; default FEDQA_LLM_MODEL.")
    judge_api_key: SecretStr | None = Field(default=None, description="API key of the judge's endpoint.")
    judge_api: Literal["chat", "completions"] = Field(default="chat", description="The judge endpoint's API: chat or completions.")
    judge_timeout_s: float = Field(default=60.0, gt=0, description="Limit of one judge call.")
    judge_retries: int = Field(default=2, ge=0, description="Extra tries when a judge reply cannot be parsed or fails.")
    judge_concurrency: int = Field(default=2, ge=1, description="Judge calls in flight at once.")
    judge_max_tokens: int = Field(default=384, ge=16, description="Longest judge reply, in tokens.")
    jobs_db: Path | None = Field(
        default=None,
        description="SQLite file of evaluation jobs; default $FEDQA_HOME/eval/jobs.sqlite. Must be on a local, "
        "writable file system (per pod in k8s); when it cannot be written the service runs without the job worker.",
    )
    jobs_max_unfinished_per_key: int = Field(
        default=10,
        ge=1,
        description="Evaluation jobs one API key (one client address when keys are off) may have queued or running; "
        "POST /evaluate beyond it answers 429 with Retry-After.",
    )
    jobs_keep_days: float = Field(
        default=30.0,
        ge=0.0,
        description="Finished evaluation jobs (done, failed, cancelled) are deleted with their results this many days "
        "after they finished (0: kept forever).",
    )
    jobs_max_questions: int = Field(default=10_000, ge=1, description="Most questions one evaluation job may hold (422 above it).")
    jobs_results_page: int = Field(
        default=500,
        ge=1,
        description="Per-question records GET /evaluate/{id}/questions reads from the jobs database at a time: its "
        "memory holds one page of them, not the job's (a job of the most questions: some 50,000 records, 300-400 MB of JSON).",
    )
    jobs_keep_finished_per_key: int = Field(
        default=20,
        ge=1,
        description="Finished evaluation jobs kept per API key (per client address when keys are off): when the key "
        "creates a job, its older finished jobs are deleted with their results.",
    )
    jobs_max_question_bytes_per_key: int = Field(
        default=16 * 1024 * 1024,
        ge=1024,
        description="Bytes of questions (as stored, JSON) that one key's evaluation jobs may hold in the jobs database: "
        "a new job first deletes the key's oldest finished jobs to fit; 429 when its unfinished jobs alone would pass "
        "it, 422 when the new job alone would. A cancelled job drops its questions at once.",
    )
    jobs_slice_s: float = Field(
        default=10.0,
        ge=0.0,
        description="Seconds an evaluation job runs before it pauses, after the question in flight, for another key's "
        "waiting job (it resumes on its next turn, on the pipeline it started with; 0: after every question).",
    )

    # Feedback (POST /feedback; $FEDQA_HOME/feedback/feedback.sqlite)
    feedback_keep_days: float = Field(
        default=365.0,
        ge=0.0,
        description="Feedback (POST /feedback) is deleted this many days after its key last sent it (0: kept forever); "
        "export what curators confirmed (fedqa feedback export) before it goes.",
    )
    feedback_max_per_key: int = Field(
        default=10_000,
        ge=1,
        description="Feedback rows one API key (one client address when keys are off) may hold: a new one beyond it "
        "deletes the key's oldest. A key's repeated votes on one question and passage are one row.",
    )
    feedback_min_keys: int = Field(
        default=3,
        ge=1,
        description="Distinct keys that must agree before feedback from keys that are not trusted (neither curator nor "
        "admin) becomes a label in 'fedqa refresh' and 'fedqa feedback export' (a passage that answered, a question not covered); one "
        "trusted key's word is enough.",
    )

    # HTTP
    host: str = Field(default="127.0.0.1", description="Address 'fedqa serve' listens on (non-loopback needs an API key or FEDQA_ALLOW_OPEN).")
    port: int = Field(default=8000, description="Port 'fedqa serve' listens on.")
    api_keys: SecretStr | None = Field(default=None, description="Comma-separated API keys; when set, /ask and /evaluate need one of them.")
    admin_key: SecretStr | None = Field(default=None, description="Key for admin routes (never a normal API key).")
    api_keys_file: Path | None = Field(
        default=None,
        description='JSON list of keys, stored hashed: [{"name", "key_sha256", "domains": [...] or "*", "admin": false, '
        '"rate_limit_per_minute": null, "curator": false}]; a key sees only its products; a curator key\'s feedback is '
        "trusted. Re-read on POST /admin/reload. When set, the API needs a key even if the list is empty.",
    )
    auth_failures_per_minute: int = Field(
        default=10,
        ge=0,
        description="Wrong keys one client address may send (and times one wrong key may be sent from anywhere) in any "
        "60-second window; above it, 429 for wrong keys until the window frees; a right key is never refused (0: no limit).",
    )
    trusted_proxies: str = Field(
        default="",
        description="Comma-separated addresses or networks (CIDR) of the proxies in front of 'fedqa serve' whose "
        "X-Forwarded-For names the client (uvicorn's forwarded_allow_ips; '*': any peer). Empty: none, the TCP peer "
        "is the client and X-Forwarded-For is ignored.",
    )
    allow_open: bool = Field(
        default=False,
        description="Let 'fedqa serve' listen on a non-loopback address without an API key (the API, /evaluate and "
        "/metrics then open to whoever reaches it); without it such a start is refused.",
    )
    rate_limit_per_minute: int = Field(
        default=600, ge=0, description="Requests per minute per API key (per client IP when keys are off) on keyed routes; 0: no limit."
    )
    max_body_bytes: int = Field(default=1_048_576, ge=1024, description="Largest accepted request body (413 above it).")
    body_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="Seconds a request's whole body may take to arrive once its headers are in; a slower one gets 408 and its connection is closed.",
    )
    max_connections_per_address: int = Field(
        default=100,
        ge=0,
        description="Open connections one client address may hold on 'fedqa serve'; beyond, a new one gets 503 and is "
        "closed at once (0: no cap). Counted per TCP peer: behind a proxy every client has the proxy's address, so "
        "raise it there (or 0).",
    )
    max_concurrent_answers: int = Field(
        default=64,
        ge=0,
        description="Answering requests (/ask, /v1/chat/completions) handled at once; beyond, 503 with Retry-After at once "
        "(0: no cap). Probes (/healthz, /readyz) and /metrics are never counted.",
    )
    chat_turns: int = Field(
        default=8,
        ge=2,
        description="User turns of a chat request that are read, the last ones (the question and the turns before it "
        "that give it context); earlier ones are ignored, however many the body holds.",
    )
    cors_origins: str = Field(default="", description="Comma-separated origins allowed by CORS; empty: CORS off.")
    log_format: Literal["json", "text"] = Field(default="json", description="Log line format of 'fedqa serve'.")
    log_level: str = Field(default="INFO", description="Log level of 'fedqa serve' (DEBUG, INFO, WARNING, ERROR).")

    def api_key_set(self) -> frozenset[str]:
        """The configured API keys (empty: the API is open)."""
        raw = self.api_keys.get_secret_value() if self.api_keys else ""
        return frozenset(k.strip() for k in raw.split(",") if k.strip())

    def cors_origin_list(self) -> list[str]:
        """The configured CORS origins (empty: CORS off)."""
        return [o.strip() for o in self.cors_origins.split(",") if o.strip()]

    @property
    def home_dir(self) -> Path:
        """The expanded data home."""
        return self.home.expanduser()

    @property
    def cache_dir(self) -> Path:
        """The per-user cache (FEDQA_CACHE, else $XDG_CACHE_HOME/fedqa, else ~/.cache/fedqa)."""
        if self.cache is not None:
            return self.cache.expanduser()
        xdg = os.environ.get("XDG_CACHE_HOME")
        return (Path(xdg) if xdg else Path("~/.cache").expanduser()) / "fedqa"

    @property
    def feedback_path(self) -> Path:
        """Where feedback is stored (under the home)."""
        return self.home_dir / "feedback" / "feedback.sqlite"

    @property
    def jobs_path(self) -> Path:
        """Where evaluation jobs are stored (FEDQA_JOBS_DB, else under the home)."""
        return self.jobs_db.expanduser() if self.jobs_db else self.home_dir / "eval" / "jobs.sqlite"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Settings from the environment, read once per process."""
    return Settings()
