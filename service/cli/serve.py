"""``fedqa serve``: run the HTTP service."""

from __future__ import annotations

import argparse
import logging
from typing import TYPE_CHECKING

from pydantic import SecretStr

from service.cli.common import settings
from service.config import Settings

if TYPE_CHECKING:
    from service.cli.common import Subparsers


def register(sub: Subparsers) -> None:
    """Add ``serve`` to the parser."""
    s = sub.add_parser("serve", help="run the HTTP service")
    s.add_argument("--host", help="address to listen on (default: FEDQA_HOST)")
    s.add_argument("--port", type=int, help="port to listen on (default: FEDQA_PORT)")
    s.add_argument("--demo", action="store_true", help="set up the shipped demo first if this home has no index")
    s.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    """Configure JSON logging, refuse an open API on the network or placeholder secrets
    (:func:`~service.api.exposure.check_exposure`), set up the demo when asked, and serve with uvicorn
    (:func:`~service.api.server.server_config`)."""
    import uvicorn
    from uvicorn.config import STARTUP_FAILURE

    from service.api.app import create_app
    from service.api.exposure import check_exposure, log_exposure
    from service.api.keys import key_ring
    from service.api.server import server_config
    from service.logs import configure_logging

    s = settings()
    configure_logging(s.log_format, s.log_level, secrets=secrets_of(s))
    exposure = check_exposure(s, key_ring(s), args.host or s.host)  # before the demo's minutes: refused at once
    if args.demo:
        from service.cli.demo import demo_needed, setup_demo_in_subprocess

        if demo_needed(s):  # built in a child process, so that what the build loads does not stay resident here
            log = logging.getLogger("fedqa.demo")
            log.info("setting up the demo in %s (a first run takes about a minute or two)", s.home_dir)
            setup_demo_in_subprocess(log.info)
    app = create_app(s)
    log_exposure(exposure)
    server = uvicorn.Server(server_config(app, s, host=args.host, port=args.port))
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    return 0 if server.started else STARTUP_FAILURE  # as uvicorn.run exits when the app could not start


def secrets_of(s: Settings) -> list[str]:
    """Every configured secret (each SecretStr setting, so a new one cannot be missed), for the log's redaction filter."""
    out = list(s.api_key_set())
    for name in type(s).model_fields:
        secret = getattr(s, name)
        if isinstance(secret, SecretStr) and secret.get_secret_value():
            out.append(secret.get_secret_value())
    return out
