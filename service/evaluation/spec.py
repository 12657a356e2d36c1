"""What a job runs, as the evaluation modules pass it: its spec (:class:`JobSpec`) and its questions (:class:`JobQuestion`).

The request's :class:`~service.schemas.EvalSpec` and :class:`~service.schemas.EvalQuery` (``POST /evaluate``,
``fedqa evaluate``) become these when a job is made; the job store keeps them as JSON and gives them back typed.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict

from service.schemas import EvalQuery, EvalSpec


class JobSpec(EvalSpec):
    """A job's spec: the request's, the products of the API key that made it (``scope``; None: every product) and the
    dataset its questions came from. Read back from stored jobs, it ignores keys it does not know."""

    model_config = ConfigDict(extra="ignore", use_enum_values=True)

    scope: list[str] | None = None
    dataset: str = "inline"

    def view(self) -> dict[str, Any]:
        """The spec as a job's view shows it: without the dataset (shown apart), ``scope`` only when there is one."""
        return self.model_dump(exclude={"dataset"} if self.scope is not None else {"dataset", "scope"})

    def stored(self) -> dict[str, Any]:
        """The spec as the job store keeps it (``scope`` only when there is one)."""
        return {**self.view(), "dataset": self.dataset}


class JobQuestion(EvalQuery):
    """A question of a job: an :class:`~service.schemas.EvalQuery` whose ``qid`` is set and unique in the job."""

    qid: str
