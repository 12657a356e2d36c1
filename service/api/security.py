"""API-key and admin-key checks, what a key may see, and the rate limits, as FastAPI dependencies.

Keys come in ``Authorization: Bearer <key>`` or ``X-API-Key: <key>`` and are checked against the app's
:class:`~service.api.keys.KeyRing` (digests only, constant-time compares, never logged). When no API key is
configured the API is open; admin routes are closed unless an admin key is configured. The checks run on
the event loop (``async def``: in-memory work only), not as a thread-pool hand-off per dependency.

A key sees only its products (:func:`caller_scope`): the routes hand its scope to the pipeline, which routes
and searches within it and answers 403 for a ``domains`` filter outside it.

Every route that depends on :func:`require_api_key` or :func:`require_admin` is rate limited:
``FEDQA_RATE_LIMIT_PER_MINUTE`` requests (or the key's own ``rate_limit_per_minute``) in any 60-second window
per key (per client IP when keys are off), 429 with ``Retry-After`` above it. Wrong keys are limited per
client address and per presented key: after ``FEDQA_AUTH_FAILURES_PER_MINUTE`` of them in 60 s from one address
(or of one wrong key from anywhere), wrong keys get 429 until the window frees, so keys cannot be guessed at
speed; a right key is never refused (an ingress or a guesser cannot lock out the other users). The client
address is the TCP peer, or ``X-Forwarded-For`` from ``FEDQA_TRUSTED_PROXIES`` only. The limiter is the
``limits`` library's moving window over in-process memory, so with several replicas the limits apply per replica.
"""

from __future__ import annotations

import hashlib
import math
import time

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from service.api.keys import ApiKey, KeyRing

_bearer = HTTPBearer(auto_error=False, description="API key as a bearer token")
_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="API key")


async def presented_key(bearer: HTTPAuthorizationCredentials | None = Depends(_bearer), header: str | None = Depends(_header)) -> str | None:
    """The key the client sent, if any."""
    if bearer and bearer.credentials:
        return bearer.credentials
    return header or None


class RateLimiter:
    """``per_minute`` requests in any 60 s window per identity (or an identity's own limit); identities are
    hashed, never raw keys."""

    def __init__(self, per_minute: int) -> None:
        from limits.storage import MemoryStorage
        from limits.strategies import MovingWindowRateLimiter

        self.per_minute = per_minute
        self._limiter = MovingWindowRateLimiter(MemoryStorage())

    @staticmethod
    def identity(kind: str, value: str) -> str:
        """A stable, non-reversible name for a key or an address."""
        return kind + ":" + hashlib.sha256(value.encode()).hexdigest()[:24]

    def check(self, identity: str, per_minute: int | None = None) -> float | None:
        """Count one request: None when it may go on, else the seconds until it may be retried
        (``per_minute``: this identity's own limit instead of the default; 0: none)."""
        from limits import RateLimitItemPerMinute

        limit = self.per_minute if per_minute is None else per_minute
        if limit <= 0:
            return None
        item = RateLimitItemPerMinute(limit)
        if self._limiter.hit(item, identity):
            return None
        return max(1.0, self._limiter.get_window_stats(item, identity).reset_time - time.time())

    def full(self, identity: str) -> float | None:
        """Without counting: None while ``identity`` is under the limit, else the seconds until it is again."""
        from limits import RateLimitItemPerMinute

        if self.per_minute <= 0:
            return None
        item = RateLimitItemPerMinute(self.per_minute)
        if self._limiter.test(item, identity):
            return None
        return max(1.0, self._limiter.get_window_stats(item, identity).reset_time - time.time())


def key_ring(request: Request) -> KeyRing:
    """The app's keys (swapped by /admin/reload)."""
    return request.app.state.keys


def _client(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def _too_many(request: Request, wait: float, reason: str, detail: str) -> HTTPException:
    metrics = getattr(request.app.state, "metrics", None)
    if metrics is not None:
        metrics.rejected.labels(reason).inc()
    return HTTPException(status.HTTP_429_TOO_MANY_REQUESTS, f"{detail}; retry in {math.ceil(wait)} s", headers={"Retry-After": str(math.ceil(wait))})


def enforce_rate_limit(request: Request, key: ApiKey | None) -> None:
    """429 when the caller (its key, else its address) is over its rate limit."""
    limiter: RateLimiter | None = getattr(request.app.state, "rate_limiter", None)
    if limiter is None:
        return
    identity = key.identity if key else limiter.identity("ip", _client(request))
    per_minute = key.rate_limit_per_minute if key else None
    wait = limiter.check(identity, per_minute)
    if wait is not None:
        shown = limiter.per_minute if per_minute is None else per_minute
        raise _too_many(request, wait, "rate_limited", f"rate limit of {shown} requests per minute exceeded")


def authenticate(request: Request, key: str) -> list[ApiKey]:
    """The configured keys equal to ``key``; a right key is never refused here. A wrong key counts against the
    client's address and against the key itself, and once either is over ``FEDQA_AUTH_FAILURES_PER_MINUTE`` a
    wrong key gets 429."""
    found = key_ring(request).matches(key)
    failures: RateLimiter | None = getattr(request.app.state, "auth_failures", None)
    if found or failures is None:
        return found
    counters = (RateLimiter.identity("ip", _client(request)), RateLimiter.identity("wrong-key", key))
    for counter in counters:
        wait = failures.full(counter)
        if wait is not None:
            raise _too_many(request, wait, "auth_failures", "too many failed authentications from this address or with this key")
    for counter in counters:
        failures.check(counter)
    return found


async def require_api_key(request: Request, key: str | None = Depends(presented_key)) -> ApiKey | None:
    """The caller's key (None: the API is open), else 401; then the rate limit."""
    ring = key_ring(request)
    if not ring.keyed:
        enforce_rate_limit(request, None)
        return None
    found = [k for k in authenticate(request, key) if k.api] if key else []
    if not found:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing or invalid API key (Authorization: Bearer <key> or X-API-Key)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    enforce_rate_limit(request, found[0])
    request.state.api_key = found[0].name
    request.state.caller = found[0]
    return found[0]


async def caller_scope(caller: ApiKey | None = Depends(require_api_key)) -> frozenset[str] | None:
    """The products the caller may see (None: every product); the routes pass it to the pipeline as ``allowed``."""
    return caller.domains if caller is not None else None


async def require_admin(request: Request, key: str | None = Depends(presented_key)) -> ApiKey:
    """The admin key the caller presented: 401 without a key, 403 with a key that is not an admin key; closed when no
    admin key is set; rate limited."""
    ring = key_ring(request)
    if not ring.has_admin:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "admin routes are disabled: set FEDQA_ADMIN_KEY (or an admin key in FEDQA_API_KEYS_FILE)")
    if not key:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "admin key required", headers={"WWW-Authenticate": "Bearer"})
    admins = [k for k in authenticate(request, key) if k.admin]
    if not admins:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "this key may not use admin routes")
    enforce_rate_limit(request, admins[0])
    return admins[0]


def sees_every_product(ring: KeyRing, keys: list[ApiKey]) -> bool:
    """Whether a caller let in with ``keys`` may see every product's name and count (and the server's own details,
    such as the file paths in a cause of unreadiness): always while no key is limited to some products; else only
    with a key that sees every product, or an admin key."""
    return not ring.scoped or any(k.domains is None or k.admin for k in keys)


def caller_sees_everything(request: Request) -> bool:
    """:func:`sees_every_product` for the caller :func:`require_api_key` let in (none: the API is open)."""
    caller: ApiKey | None = getattr(request.state, "caller", None)
    return sees_every_product(key_ring(request), [caller] if caller is not None else [])


async def sees_everything(request: Request, key: str | None = Depends(presented_key)) -> bool:
    """Whether the caller may see every product's name and count (operations routes: ``/metrics``, the details
    of ``/readyz``): always while no key is limited to some products; else only with a key that sees every
    product, or an admin key. Never 401: probes send no key; a wrong key counts as a failed authentication."""
    ring = key_ring(request)
    if not ring.scoped:
        return True
    if not key:
        return False
    return sees_every_product(ring, authenticate(request, key))
