"""What was fitted with a router version on its held-out questions, stored as ``fitted`` in its ``router.json``.

``calibration``: the report of the temperature and per-domain biases' fit (training/calibration.py; the values
themselves are the router's ``temperature`` and ``bias``). ``fusion``: the fused strategy's parameters
(:class:`~service.routing.fusion.FusionParams`; None: not fitted, and the fused strategy ranks as uis).
``page_prior``: the pages the labelled questions were answered from and the fitted bonus of their passages
(:class:`~service.retrieval.page_prior.PagePrior`; None: not fitted, no bonus).
``extra``: keys this release does not know, kept as they were read so that a router saved again writes them back.

The stored form is a JSON object ``{"calibration": {...}, "fusion": {...}, <name>: ...}`` (a key absent when
nothing was fitted), the form every release has written: :meth:`RouterFitted.from_json` reads it and
:meth:`RouterFitted.to_json` writes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import SerializerFunctionWrapHandler, TypeAdapter, model_serializer, model_validator

from service.artifacts import read_stored
from service.retrieval.page_prior import PagePrior
from service.routing.fusion import FusionParams

CALIBRATION = "calibration"
FUSION = "fusion"
PAGE_PRIOR = "page_prior"


@dataclass(frozen=True)
class RouterFitted:
    """The parameters fitted with a router version (see the module docstring); empty when nothing was fitted."""

    calibration: Mapping[str, Any] | None = None
    fusion: FusionParams | None = None
    page_prior: PagePrior | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        clash = {CALIBRATION, FUSION, PAGE_PRIOR} & set(self.extra)
        if clash:
            raise ValueError(f"{sorted(clash)} are fields of RouterFitted, not extra values")

    @property
    def ranks(self) -> bool:
        """A ranking fitted on labelled questions serves: a fused fit that beat uis, or an active page prior (the
        lexical index is then not fused: at an unfitted weight it undid them, docs/quality.md)."""
        return (self.fusion is not None and not self.fusion.ranks_as_uis) or self.active_prior is not None

    @property
    def active_prior(self) -> PagePrior | None:
        """The page prior when it changes a ranking, else None."""
        return self.page_prior if self.page_prior is not None and self.page_prior.active else None

    @model_validator(mode="before")
    @classmethod
    def _from_stored(cls, data: Any) -> Any:
        """The stored form's keys as fields: a key absent or empty is not fitted (an empty ``fusion`` too, as the fused
        strategy has always read it), a key this release does not know goes to ``extra``."""
        if data is None:
            return {}
        if not isinstance(data, Mapping):
            return data  # refused as not an object
        known = (CALIBRATION, FUSION, PAGE_PRIOR)
        return {**{k: data[k] for k in known if data.get(k)}, "extra": {k: v for k, v in data.items() if k not in known}}

    @model_serializer(mode="wrap")
    def _to_stored(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The stored form: ``extra``'s keys beside what was fitted (a field not fitted is left out)."""
        out = handler(self)
        return {**out.pop("extra"), **{k: v for k, v in out.items() if v}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None, name: str = "router.json's fitted") -> RouterFitted:
        """Read the stored form (None or an empty object: nothing fitted); ValueError naming ``name`` when a fitted
        value is incomplete or of the wrong type."""
        return read_stored(_STORED, data, name)

    def to_json(self) -> dict[str, Any]:
        """The stored form (only what was fitted)."""
        return _STORED.dump_python(self, mode="json")


_STORED = TypeAdapter(RouterFitted)
