"""API-key and admin-key checks, as FastAPI dependencies.

Keys come in ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``. When no API keys are
configured the API is open; admin routes are closed unless an admin key is configured.
Keys are compared in constant time and never logged.
"""

from __future__ import annotations

import hmac

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from service.api.deps import get_app_settings
from service.config import Settings

_bearer = HTTPBearer(auto_error=False, description="API key as a bearer token")
_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="API key")


def presented_key(
    bearer: HTTPAuthorizationCredentials | None = Depends(_bearer), header: str | None = Depends(_header)
) -> str | None:
    """The key the client sent, if any."""
    if bearer and bearer.credentials:
        return bearer.credentials
    return header or None


def _matches(key: str, candidates: frozenset[str]) -> bool:
    return any(hmac.compare_digest(key.encode(), c.encode()) for c in candidates)


def require_api_key(
    request: Request, key: str | None = Depends(presented_key), settings: Settings = Depends(get_app_settings)
) -> str | None:
    """401 unless the request carries a configured API key (open when none is configured)."""
    keys = settings.api_key_set()
    if not keys:
        return None
    if not key or not _matches(key, keys):
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing or invalid API key (Authorization: Bearer <key> or X-API-Key)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    request.state.api_key = key
    return key


def require_admin(key: str | None = Depends(presented_key), settings: Settings = Depends(get_app_settings)) -> None:
    """401 without a key, 403 with a key that is not the admin key; closed when no admin key is set."""
    admin = settings.admin_key.get_secret_value() if settings.admin_key else ""
    if not admin:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "admin routes are disabled: set FEDQA_ADMIN_KEY")
    if not key:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "admin key required", headers={"WWW-Authenticate": "Bearer"})
    if not _matches(key, frozenset([admin])):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "this key may not use admin routes")
