"""What ``fedqa serve`` refuses to start with, and the line it logs at start about who may reach what.

Refused: a non-loopback address with no API key (the API, ``/evaluate`` and ``/metrics`` would be open to whoever
reaches the port) unless ``FEDQA_ALLOW_OPEN`` says so, and any secret setting or keys-file entry holding one of the
placeholder values the manifests and docs show (``replace-me``...), which would otherwise be a key everyone knows.
A loopback address without keys (``fedqa serve``'s default, the README's first command) starts as before.
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass

from pydantic import SecretStr

from service.api.keys import KeyRing, digest
from service.config import Settings

log = logging.getLogger("fedqa.api")

#: Values shown in the manifests and docs in place of real secrets; never accepted as one.
PLACEHOLDERS = frozenset(
    {"replace-me", "replace-me-admin", "replace-me-llm", "replace-me-qdrant", "replace-me-qdrant-read", "changeme", "change-me", "example"}
)


class UnsafeConfigError(ValueError):
    """The settings would serve an open API to the network, or use a placeholder as a secret."""


@dataclass(frozen=True)
class Exposure:
    """Where the service listens and what guards it (the start-up log line)."""

    host: str
    loopback: bool
    keyed: bool  # the API needs a key
    admin: bool

    def describe(self) -> str:
        """One line for the log: the address, and whether the API needs a key."""
        where = "loopback only" if self.loopback else "reachable from the network"
        guard = "the API needs a key" if self.keyed else "no API key: the API, /evaluate and /metrics are open"
        return f"listening on {self.host} ({where}); {guard}; admin routes {'on' if self.admin else 'closed'}"


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (or ``localhost``)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


def placeholder_secrets(settings: Settings, ring: KeyRing) -> list[str]:
    """The settings (``FEDQA_*``) and keys-file entries whose secret is a known placeholder."""
    found = []
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        if isinstance(value, SecretStr):
            parts = {v.strip() for v in value.get_secret_value().split(",")}
            if parts & PLACEHOLDERS:
                found.append(f"FEDQA_{name.upper()}")
    placeholders = {digest(p) for p in PLACEHOLDERS}
    from_env = {"FEDQA_ADMIN_KEY"} | {f"FEDQA_API_KEYS[{i}]" for i in range(len(settings.api_key_set()))}
    found += [f"keys file entry {k.name!r}" for k in ring.keys if k.digest in placeholders and k.name not in from_env]
    return found


def check_exposure(settings: Settings, ring: KeyRing, host: str) -> Exposure:
    """What ``fedqa serve`` on ``host`` exposes; :class:`UnsafeConfigError` naming the fix when it must not start."""
    exposure = Exposure(host=host, loopback=is_loopback(host), keyed=ring.keyed, admin=ring.has_admin)
    placeholders = placeholder_secrets(settings, ring)
    if placeholders:
        raise UnsafeConfigError(
            f"{', '.join(placeholders)} still hold(s) a placeholder value (e.g. 'replace-me'): set real secrets "
            "(Kubernetes: the fedqa-secrets and qdrant-secrets Secrets of your overlay)"
        )
    if not exposure.loopback and not exposure.keyed and not settings.allow_open:
        raise UnsafeConfigError(
            f"refusing to serve on {host} without an API key: anyone who reaches it could use /ask, /evaluate and /metrics; "
            "set FEDQA_API_KEYS (or FEDQA_API_KEYS_FILE), listen on 127.0.0.1 (FEDQA_HOST), or set FEDQA_ALLOW_OPEN=1 "
            "to serve openly on purpose"
        )
    return exposure


def log_exposure(exposure: Exposure) -> None:
    """Say at start who may reach what: a warning when the network reaches an open API."""
    if not exposure.loopback and not exposure.keyed:
        log.warning("%s (FEDQA_ALLOW_OPEN)", exposure.describe())
    else:
        log.info("%s", exposure.describe())
