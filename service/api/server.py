"""How ``fedqa serve`` runs the app under uvicorn: its settings, the proxies whose ``X-Forwarded-For`` is believed
(``FEDQA_TRUSTED_PROXIES``), and the cap on open connections per client address (``FEDQA_MAX_CONNECTIONS_PER_ADDRESS``).

uvicorn caps neither the connections of one address nor the time a request's body takes (that one is
:class:`~service.api.middleware.BodyLimitMiddleware`'s), so one client could hold any number of connections,
each sending a byte now and then. The cap lives in the HTTP protocol (a subclass of uvicorn's), where connections
are made and lost: a connection beyond it gets a 503 and is closed before a byte of its request is read.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

import uvicorn

from service.config import Settings

log = logging.getLogger("fedqa.api")


class AddressConnections:
    """Open connections per client address, at most ``limit`` each (0: no cap). Used on the event loop's thread only."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open: Counter[str] = Counter()

    def admit(self, address: str) -> bool:
        """Count a new connection from ``address``: False (not counted) when the address holds ``limit`` already."""
        if self.limit > 0 and self.open[address] >= self.limit:
            return False
        self.open[address] += 1
        return True

    def leave(self, address: str) -> None:
        self.open[address] -= 1
        if self.open[address] <= 0:
            del self.open[address]


def _refusal(limit: int) -> bytes:
    body = json.dumps({"detail": f"too many connections from this address: {limit} open (FEDQA_MAX_CONNECTIONS_PER_ADDRESS)"}).encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nretry-after: 1\r\nconnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


def capped_protocol(connections: AddressConnections, on_refuse: Callable[[], None] | None = None) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (httptools, else h11: its ``auto``), refusing a connection from an address that holds
    ``connections.limit`` open ones already."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    class CappedHTTPProtocol(AutoHTTPProtocol):  # type: ignore[misc,valid-type]
        _fedqa_address: str | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            peer = transport.get_extra_info("peername")
            address = str(peer[0]) if isinstance(peer, (tuple, list)) and peer else None
            if address is None:
                return  # a Unix socket: nothing to count by
            if connections.admit(address):
                self._fedqa_address = address
                return
            if on_refuse is not None:
                on_refuse()
            log.debug("refused a connection from %s: %d open", address, connections.limit)
            transport.write(_refusal(connections.limit))  # type: ignore[attr-defined]
            transport.close()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._fedqa_address is not None:
                connections.leave(self._fedqa_address)
                self._fedqa_address = None
            super().connection_lost(exc)

    return CappedHTTPProtocol


def server_config(app: Any, settings: Settings, *, host: str | None = None, port: int | None = None, **options: Any) -> uvicorn.Config:
    """The uvicorn configuration of ``fedqa serve`` for ``app`` (a fedqa app: its metrics count refused connections);
    ``options``: more of uvicorn's (tests pass ``lifespan`` and ``log_level``)."""
    metrics = getattr(getattr(app, "state", None), "metrics", None)
    on_refuse = (lambda: metrics.rejected.labels("connections").inc()) if metrics is not None else None
    protocol = capped_protocol(AddressConnections(settings.max_connections_per_address), on_refuse)
    return uvicorn.Config(
        app,
        host=host or settings.host,
        port=port or settings.port,
        http=protocol,
        # X-Forwarded-For only from FEDQA_TRUSTED_PROXIES (uvicorn's own default trusts 127.0.0.1: any local process
        # could pose as any number of clients and evade the per-address limits).
        proxy_headers=bool(settings.trusted_proxies.strip()),
        forwarded_allow_ips=settings.trusted_proxies.strip() or None,
        log_config=None,  # logging is configured by the caller (JSON lines); uvicorn's access log is replaced by fedqa.access
        access_log=False,
        **options,
    )
