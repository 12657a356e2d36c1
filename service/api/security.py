"""API-key and admin-key checks and the per-key rate limit, as FastAPI dependencies.

Keys come in ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``. When no API keys are
configured the API is open; admin routes are closed unless an admin key is configured.
Keys are compared in constant time and never logged. The checks run on the event loop (``async def``:
in-memory work only), not as a thread-pool hand-off per dependency.

Every route that depends on :func:`require_api_key` or :func:`require_admin` is rate limited:
``FEDQA_RATE_LIMIT_PER_MINUTE`` requests in any 60-second window per key (per client IP when
keys are off), 429 with ``Retry-After`` above it. The limiter is the ``limits`` library's
moving window over in-process memory, so with several replicas the limit applies per replica.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import time

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from service.api.deps import get_app_settings
from service.config import Settings

_bearer = HTTPBearer(auto_error=False, description="API key as a bearer token")
_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="API key")


async def presented_key(bearer: HTTPAuthorizationCredentials | None = Depends(_bearer), header: str | None = Depends(_header)) -> str | None:
    """The key the client sent, if any."""
    if bearer and bearer.credentials:
        return bearer.credentials
    return header or None


def _matches(key: str, candidates: frozenset[str]) -> bool:
    return any(hmac.compare_digest(key.encode(), c.encode()) for c in candidates)


class RateLimiter:
    """``per_minute`` requests in any 60 s window per identity; identities are hashed, never raw keys."""

    def __init__(self, per_minute: int) -> None:
        from limits import RateLimitItemPerMinute
        from limits.storage import MemoryStorage
        from limits.strategies import MovingWindowRateLimiter

        self.per_minute = per_minute
        self._item = RateLimitItemPerMinute(per_minute) if per_minute > 0 else None
        self._limiter = MovingWindowRateLimiter(MemoryStorage()) if per_minute > 0 else None

    @staticmethod
    def identity(kind: str, value: str) -> str:
        """A stable, non-reversible name for a key or an address."""
        return kind + ":" + hashlib.sha256(value.encode()).hexdigest()[:24]

    def check(self, identity: str) -> float | None:
        """None when the request may go on, else the seconds until it may be retried."""
        if self._limiter is None or self._item is None:
            return None
        if self._limiter.hit(self._item, identity):
            return None
        stats = self._limiter.get_window_stats(self._item, identity)
        return max(1.0, stats.reset_time - time.time())


def enforce_rate_limit(request: Request, key: str | None) -> None:
    """429 when the caller (its key, else its address) is over the app's rate limit."""
    limiter: RateLimiter | None = getattr(request.app.state, "rate_limiter", None)
    if limiter is None:
        return
    client = request.client.host if request.client else "unknown"
    identity = limiter.identity("key", key) if key else limiter.identity("ip", client)
    wait = limiter.check(identity)
    if wait is not None:
        metrics = getattr(request.app.state, "metrics", None)
        if metrics is not None:
            metrics.rejected.labels("rate_limited").inc()
        raise HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS,
            f"rate limit of {limiter.per_minute} requests per minute exceeded; retry in {math.ceil(wait)} s",
            headers={"Retry-After": str(math.ceil(wait))},
        )


async def require_api_key(request: Request, key: str | None = Depends(presented_key), settings: Settings = Depends(get_app_settings)) -> str | None:
    """401 unless the request carries a configured API key (open when none is configured); then the rate limit."""
    keys = settings.api_key_set()
    if not keys:
        enforce_rate_limit(request, None)
        return None
    if not key or not _matches(key, keys):
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing or invalid API key (Authorization: Bearer <key> or X-API-Key)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    enforce_rate_limit(request, key)
    request.state.api_key = key
    return key


async def require_admin(request: Request, key: str | None = Depends(presented_key), settings: Settings = Depends(get_app_settings)) -> None:
    """401 without a key, 403 with a key that is not the admin key; closed when no admin key is set; rate limited."""
    admin = settings.admin_key.get_secret_value() if settings.admin_key else ""
    if not admin:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "admin routes are disabled: set FEDQA_ADMIN_KEY")
    if not key:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "admin key required", headers={"WWW-Authenticate": "Bearer"})
    if not _matches(key, frozenset([admin])):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "this key may not use admin routes")
    enforce_rate_limit(request, key)
