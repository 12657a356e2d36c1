"""The service's keys and what each may see: the keys file (``FEDQA_API_KEYS_FILE``), ``FEDQA_API_KEYS`` and
``FEDQA_ADMIN_KEY``, held as one :class:`KeyRing`.

The keys file is a JSON list; each entry names a key by its SHA-256 (``printf %s "$KEY" | sha256sum``), never
the key itself::

    [{"name": "support-team", "key_sha256": "9f86d08...", "domains": ["orbit", "relay"], "admin": false,
      "rate_limit_per_minute": 120, "curator": true},
     {"name": "ops", "key_sha256": "60303ae...", "domains": "*", "admin": true}]

``domains``: the products the key sees (``"*"``: every one). ``admin``: the key may also use ``/admin/...``, and
read and cancel every key's evaluation jobs (within its products).
``rate_limit_per_minute``: the key's own limit (default ``FEDQA_RATE_LIMIT_PER_MINUTE``). ``curator``: the key's
feedback (``POST /feedback``) is trusted, as an admin key's is (:mod:`service.feedback`). Keys of
``FEDQA_API_KEYS`` see every product; ``FEDQA_ADMIN_KEY`` opens the admin routes only. The service keeps
digests only (the plain keys of the environment are hashed when read), and compares them in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter, ValidationError

from service.config import Settings


class KeysFileError(ValueError):
    """The keys file is missing, not JSON, or not a list of valid, distinct entries."""


class KeyEntry(BaseModel):
    """One entry of the keys file."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=100)]
    key_sha256: Annotated[str, StringConstraints(strip_whitespace=True, to_lower=True, pattern=r"^[0-9a-fA-F]{64}$")]
    domains: Annotated[list[Annotated[str, StringConstraints(min_length=1)]], Field(min_length=1)] | Literal["*"] = Field(
        description='The products the key sees; "*": all.'
    )
    admin: bool = False
    rate_limit_per_minute: int | None = Field(default=None, ge=0, description="This key's limit (0: none); default the service's.")
    curator: bool = Field(default=False, description="The key's feedback is trusted (a curator confirms answers).")


_ENTRIES = TypeAdapter(list[KeyEntry])


@dataclass(frozen=True)
class ApiKey:
    """One key as the service holds it: a name, the key's digest (never the key) and what it may do."""

    name: str
    digest: bytes = field(repr=False)
    domains: frozenset[str] | None = None  # the products it sees; None: every product
    admin: bool = False  # may use the admin routes
    api: bool = True  # may use the API routes (FEDQA_ADMIN_KEY: admin routes only)
    rate_limit_per_minute: int | None = None  # None: the service's limit
    curator: bool = False  # its feedback is trusted

    @property
    def trusted(self) -> bool:
        """Its feedback is trusted: a curator key, or an admin key."""
        return self.curator or self.admin

    @property
    def identity(self) -> str:
        """The rate limiter's name for this key (part of its digest)."""
        return "key:" + self.digest.hex()[:24]


def digest(key: str) -> bytes:
    """The SHA-256 digest a key is stored and compared as."""
    return hashlib.sha256(key.encode()).digest()


@dataclass(frozen=True)
class KeyRing:
    """Every configured key. ``keyed``: the API routes need a key (some API key is configured, or a keys file is set)."""

    keys: tuple[ApiKey, ...] = ()
    keyed: bool = False

    def matches(self, key: str) -> list[ApiKey]:
        """The configured keys equal to ``key`` (each compared in constant time, all of them every time)."""
        d = digest(key)
        return [k for k in self.keys if hmac.compare_digest(d, k.digest)]

    @property
    def scoped(self) -> bool:
        """Some key sees only some products: product names and counts are then kept from callers that may not
        see every product (``/metrics``, the details of ``/readyz``)."""
        return any(k.domains is not None for k in self.keys)

    @property
    def has_admin(self) -> bool:
        """Some key may use the admin routes."""
        return any(k.admin for k in self.keys)


def read_keys_file(path: Path) -> list[ApiKey]:
    """The keys of a keys file; :class:`KeysFileError` naming the problem (never a key's digest)."""
    try:
        raw = json.loads(path.expanduser().read_text(encoding="utf-8"))
    except OSError as exc:
        raise KeysFileError(f"keys file {path} cannot be read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise KeysFileError(f"keys file {path} is not UTF-8 JSON: {exc}") from None
    try:
        entries = _ENTRIES.validate_python(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(x) for x in e['loc']) or 'file'}: {e['msg']}" for e in exc.errors(include_input=False))
        raise KeysFileError(f"keys file {path}: {problems}") from None
    for what, values in (("name", [e.name for e in entries]), ("key_sha256", [e.key_sha256 for e in entries])):
        repeated = sorted({v for v in values if values.count(v) > 1})
        if repeated:
            shown = repeated if what == "name" else [f"entry {values.index(v)}" for v in repeated]
            raise KeysFileError(f"keys file {path}: the same {what} appears twice ({', '.join(shown)})")
    return [
        ApiKey(
            name=e.name,
            digest=bytes.fromhex(e.key_sha256),
            domains=None if e.domains == "*" else frozenset(e.domains),
            admin=e.admin,
            rate_limit_per_minute=e.rate_limit_per_minute,
            curator=e.curator,
        )
        for e in entries
    ]


def key_ring(settings: Settings) -> KeyRing:
    """The keys the settings configure: the keys file (read now), FEDQA_API_KEYS, FEDQA_ADMIN_KEY."""
    keys = read_keys_file(settings.api_keys_file) if settings.api_keys_file else []
    keys += [ApiKey(name=f"FEDQA_API_KEYS[{i}]", digest=digest(k)) for i, k in enumerate(sorted(settings.api_key_set()))]
    admin = settings.admin_key.get_secret_value() if settings.admin_key else ""
    if admin:
        keys.append(ApiKey(name="FEDQA_ADMIN_KEY", digest=digest(admin), admin=True, api=False))
    return KeyRing(tuple(keys), keyed=settings.api_keys_file is not None or any(k.api for k in keys))
