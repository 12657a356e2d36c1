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

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> RouterFitted:
        """Read the stored form (None or an empty object: nothing fitted). A stored ``fusion`` that is empty counts as
        not fitted, as the fused strategy has always read it; ValueError when it is not a FusionParams."""
        data = dict(data or {})
        calibration = data.pop(CALIBRATION, None)
        fusion = data.pop(FUSION, None)
        prior = data.pop(PAGE_PRIOR, None)
        if fusion:
            try:
                params: FusionParams | None = FusionParams.from_dict(fusion)
            except TypeError as exc:  # a missing field
                raise ValueError(f"stored fusion parameters are incomplete: {exc}") from exc
        else:
            params = None
        page_prior = PagePrior.from_json(prior) if prior else None
        return cls(calibration=dict(calibration) if calibration else None, fusion=params, page_prior=page_prior, extra=data)

    def to_json(self) -> dict[str, Any]:
        """The stored form (only what was fitted)."""
        out: dict[str, Any] = dict(self.extra)
        if self.calibration:
            out[CALIBRATION] = dict(self.calibration)
        if self.fusion is not None:
            out[FUSION] = self.fusion.as_dict()
        if self.page_prior is not None:
            out[PAGE_PRIOR] = self.page_prior.to_json()
        return out
