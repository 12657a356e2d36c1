"""``fedqa status``: what this home has, what is missing, and the command that adds each missing part."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from service.artifacts import ArtifactError, Registry
from service.cli.common import settings
from service.config import Settings
from service.decisions import decision_of

if TYPE_CHECKING:
    from service.cli.common import Subparsers


@dataclass(frozen=True)
class Part:
    """One part of a home: whether it is there, what it is (or what the service does without it), the command that adds it."""

    name: str
    present: bool
    says: str
    add: str | None = None

    def line(self) -> str:
        """The part in plain words, one line."""
        if self.present:
            return f"  has      {self.name}: {self.says}"
        return f"  missing  {self.name}: {self.says}" + (f"\n           add it: {self.add}" if self.add else "")


def register(sub: Subparsers) -> None:
    """Add ``status`` to the parser."""
    s = sub.add_parser("status", help="what this home has, what is missing and the command that adds it")
    s.set_defaults(func=cmd_status)


def cmd_status(args: argparse.Namespace) -> int:
    """Print the home's parts in plain words."""
    s = settings()
    print(f"fedqa home {s.home_dir}")
    for part in home_parts(s):
        print(part.line())
    return 0


def home_parts(s: Settings) -> list[Part]:
    """The index, router, ranking model, answer policy, "not covered" decision, by-product split and LLM of a home, in
    the order they are made."""
    registry = Registry(s.home_dir)
    active = registry.active()
    index = _manifest(registry, "index", active["index"])
    if index is None:
        return [
            Part(
                "index", False, "nothing to search: the service answers 503", "fedqa ingest PATH (folders of pages, one per product, or a docs.jsonl)"
            ),
            Part("router", False, "trained after the index", "fedqa refresh --queries FILE (qid, query, domains)"),
        ]
    parts = [_index_part(active["index"] or "", index), _router_part(registry, active["router"], index)]
    parts.append(_ranking_part(registry, active, index, reranking=s.rerank == "on"))
    parts += _fitted_parts(registry, active["router"], active["index"])
    parts.append(_llm_part(s))
    return parts


def _manifest(registry: Registry, kind: Any, version: str | None) -> dict[str, Any] | None:
    """The manifest of a version, None when there is none or it is incomplete."""
    try:
        return registry.manifest(kind, version) if version else None
    except ArtifactError:
        return None


def _index_part(version: str, index: dict[str, Any]) -> Part:
    domains = index.get("domains") or {}
    products = ", ".join(f"{d} {n}" for d, n in sorted(domains.items()))
    retriever = index.get("retriever") or "base"
    return Part(
        "index", True, f"{version}: {index.get('passages', sum(domains.values()))} passages ({products}), embedded with retriever {retriever}"
    )


def _router_part(registry: Registry, version: str | None, index: dict[str, Any]) -> Part:
    add = "fedqa refresh --queries FILE (qid, query, domains), or --corpus too to fine-tune the retriever"
    router = _manifest(registry, "router", version)
    if router is None:
        return Part("router", False, "every question searches every product (no routing probabilities)", add)
    retriever = index.get("retriever") or "base"
    if (router.get("retriever") or "base") != retriever:
        return Part("router", False, f"{version} was trained on another retriever's vectors: every product is searched", add)
    fused = "fused strategy fitted" if (router.get("metrics") or {}).get("fusion", {}).get("params") else "fused strategy not fitted (ranks as uis)"
    held = "calibrated out of fold" if (router.get("metrics") or {}).get("held_out") == "kfold" else f"{router.get('val_queries')} held out"
    prior = (router.get("metrics") or {}).get("page_prior") or {}
    if prior.get("weight") or prior.get("penalty"):
        fused += f"; page prior weight {prior['weight']} over {prior.get('pages')} pages of {prior.get('counted_questions')} questions"
        if prior.get("penalty"):
            fused += f", their {prior.get('known_answers')} answers demoted below cosine {prior.get('match')} (penalty {prior['penalty']})"
    elif prior:
        fused += f"; page prior not used ({prior.get('reason', 'it did not pay on the held-out questions')})"
    return Part("router", True, f"{version}: {router.get('train_queries')} training questions, {held}; {fused}")


def _ranking_part(registry: Registry, active: dict[str, str | None], index: dict[str, Any], *, reranking: bool) -> Part:
    """The ranking model stored beside the active router: whether it or the default ranking orders the passages, and
    why (:meth:`service.ranking.model.RankingModel.says`; ``reranking``: FEDQA_RERANK on, the reranker serving)."""
    from service.ranking.model import load_ranking, ranking_path

    try:
        model = load_ranking(ranking_path(registry, active["router"]))
    except ValueError as exc:
        return Part("ranking model", False, f"the default ranking orders the passages ({exc})", "fedqa refresh --queries FILE")
    if model is None:
        return Part(
            "ranking model",
            False,
            "the default ranking orders the passages",
            "fedqa refresh --queries FILE (the router's held-out questions with gold_doc_ids fit it)",
        )
    versions = {
        "index": active["index"],
        "retriever": index.get("retriever") or "base",
        "router": active["router"],
        "reranker": active.get("reranker") if reranking else None,
    }
    return Part("ranking model", True, model.says(versions))


def _fitted_parts(registry: Registry, router: str | None, index: str | None) -> list[Part]:
    from service.generation.abstention import abstention_path
    from service.generation.answer_policy import policy_path
    from service.routing.split import split_path

    policy, abstention = policy_path(registry, router, index), abstention_path(registry, router, index)
    split = split_path(registry, router)
    return [
        _decision_part(
            "answer policy",
            policy,
            "how much the extractive answer quotes, fitted on reference answers",
            "extractive answers use the unfitted rule (FEDQA_EXTRACTIVE_*)",
            "extractive answers use the unfitted rule (FEDQA_EXTRACTIVE_*)",
            "fedqa refresh --queries FILE (questions with reference answers: qid, query, domains, answer)",
        ),
        _decision_part(
            "not-covered decision",
            abstention,
            "questions the documentation does not cover are answered not_covered",
            "questions the documentation does not cover are answered not_covered",
            "every question is answered, even one the documentation does not cover",
            "fedqa train abstention --queries FILE --out-of-scope FILE (questions the documentation does not answer)",
        ),
        _decision_part(
            "by-product split",
            split,
            "a question that fits several products is answered per product",
            "every question is answered for one product",
            "every question is answered for one product, even one that fits several",
            "fedqa train split --queries FILE (the router's validation questions: qid, query, domains, gold_doc_ids)",
        ),
    ]


def _decision_part(name: str, path: Path | None, fitted: str, default: str, without: str, add: str) -> Part:
    """A decision fitted beside the ranking: what the one that serves does (the fitted one or its default), and why
    (:class:`service.decisions.FitDecision`, stored in its ``fit``); ``without``: the service with none stored."""
    if path is None or not path.is_file():
        return Part(name, False, without, add)
    decision = decision_of(json.loads(path.read_text(encoding="utf-8")).get("fit"))
    if decision is None:
        return Part(name, True, fitted)
    return Part(name, True, f"{fitted if decision.serves_fitted else default} ({decision.says()})")


def _llm_part(s: Settings) -> Part:
    if s.llm_backend == "none" or (s.llm_backend == "auto" and not s.llm_base_url):
        return Part(
            "LLM", False, "answers quote the sources (extractive); that is the default", "set FEDQA_LLM_BASE_URL (an OpenAI-compatible endpoint)"
        )
    return Part("LLM", True, f"backend {s.llm_backend}" + (f" at {s.llm_base_url}" if s.llm_base_url else ""))
