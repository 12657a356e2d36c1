"""``fedqa ask``: answer one or more questions in-process (one model load for all), or through a running service
with ``--url``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from service.cli.common import print_json, settings

if TYPE_CHECKING:
    from service.cli.common import Subparsers


def register(sub: Subparsers) -> None:
    """Add ``ask`` to the parser."""
    s = sub.add_parser("ask", help="answer a question (in-process, or through a running service with --url)")
    s.add_argument("query", nargs="+", help="the question (several: each answered in turn, one JSON object each, the models loaded once)")
    s.add_argument("--top-k", type=int, help="passages in the ranking (default: FEDQA_DEFAULT_TOP_K)")
    s.add_argument("--seed", type=int, help="seed of the stochastic gate")
    s.add_argument("--no-generate", action="store_true", help="ranking only")
    s.add_argument("--strategy", help="retrieval strategy: fused (default), mkpqa, uis, rfs, lfs (checked by the request model)")
    s.add_argument("--domains", help="product filter: comma-separated domains to search (routing given, not predicted)")
    s.add_argument("--url", help="ask a running service, e.g. http://127.0.0.1:8000")
    s.set_defaults(func=cmd_ask)


def request_body(args: argparse.Namespace, query: str) -> dict[str, Any]:
    """The ``/ask`` request for ``query`` the options describe (unset options left to the service's defaults)."""
    body: dict[str, Any] = {"query": query, "generate": not args.no_generate}
    if args.top_k is not None:
        body["top_k"] = args.top_k
    if args.seed is not None:
        body["seed"] = args.seed
    if args.strategy:
        body["strategy"] = args.strategy
    if args.domains:
        body["domains"] = [d.strip() for d in args.domains.split(",") if d.strip()]
    return body


def cmd_ask(args: argparse.Namespace) -> int:
    """Print each question's answer as the service's JSON response, in order (an unreachable or refusing service:
    ServiceError)."""
    bodies = [request_body(args, q) for q in args.query]
    if args.url:
        for body in bodies:
            print_json(ask_remote(args.url, body), ensure_ascii=False)
        return 0
    from service.artifacts import Registry

    s = settings()
    if not Registry(s.home_dir).active()["index"]:  # said at once, before the models are loaded
        raise RuntimeError(f"no index in {s.home_dir}: run 'fedqa ingest PATH' (or 'fedqa demo') first, or ask a running service with --url")
    from service.ask import answer
    from service.loading import load_pipeline
    from service.schemas import AskRequest

    requests = [AskRequest(**body) for body in bodies]  # every question checked before the models load
    # a one-off process: the index's sentences are embedded for the answers given, not in the background for later
    # ones (which competed with them for the cores, and was cut off when the process ended)
    pipeline = load_pipeline(s.model_copy(update={"sentence_vectors_precompute": 0}), with_llm=not args.no_generate)
    try:
        for request in requests:
            print_json(answer(pipeline, request).model_dump(), ensure_ascii=False)
    finally:
        pipeline.close()
    return 0


class ServiceError(RuntimeError):
    """The service could not be reached, or answered with an error."""


def ask_remote(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """The running service's answer to ``body``; ServiceError (one line, what to do) when it is unreachable or refuses."""
    import httpx

    endpoint = url.rstrip("/") + "/ask"
    try:
        r = httpx.post(endpoint, json=body, timeout=120)
    except httpx.TransportError as exc:
        raise ServiceError(f"cannot reach the service at {url} ({type(exc).__name__}): start it with 'fedqa serve' or check --url") from None
    try:
        data = r.json()
    except ValueError:
        data = {"detail": r.text[:200]}
    if r.status_code != 200:
        detail = data.get("detail") if isinstance(data, dict) else data
        raise ServiceError(f"the service at {url} answered {r.status_code}: {detail}")
    return data
