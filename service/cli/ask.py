"""``fedqa ask``: answer a question in-process, or through a running service with ``--url``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from service.cli.common import print_json, settings

if TYPE_CHECKING:
    from service.cli.common import Subparsers


def register(sub: Subparsers) -> None:
    """Add ``ask`` to the parser."""
    s = sub.add_parser("ask", help="answer a question (in-process, or through a running service with --url)")
    s.add_argument("query")
    s.add_argument("--top-k", type=int)
    s.add_argument("--seed", type=int)
    s.add_argument("--no-generate", action="store_true", help="ranking only")
    s.add_argument("--strategy", help="retrieval strategy: fused (default), mkpqa, uis, rfs, lfs (checked by the request model)")
    s.add_argument("--domains", help="product filter: comma-separated domains to search (routing given, not predicted)")
    s.add_argument("--url", help="ask a running service, e.g. http://127.0.0.1:8000")
    s.set_defaults(func=cmd_ask)


def request_body(args: argparse.Namespace) -> dict[str, Any]:
    """The ``/ask`` request the options describe (unset options left to the service's defaults)."""
    body: dict[str, Any] = {"query": args.query, "generate": not args.no_generate}
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
    """Print the answer as the service's JSON response; 1 when a remote service answers with an error."""
    body = request_body(args)
    if args.url:
        import httpx

        r = httpx.post(args.url.rstrip("/") + "/ask", json=body, timeout=120)
        print_json(r.json(), ensure_ascii=False)
        return 0 if r.status_code == 200 else 1
    from service.loading import load_pipeline
    from service.schemas import AskRequest

    pipeline = load_pipeline(settings(), with_llm=not args.no_generate)
    try:
        resp = pipeline.answer(AskRequest(**body))
    finally:
        pipeline.close()
    print_json(resp.model_dump(), ensure_ascii=False)
    return 0
