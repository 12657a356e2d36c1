"""What answering a request emits, in order: one :class:`RetrievalEvent`, answer text as :class:`TokenEvent` pieces
(a :class:`ResetEvent` drops the pieces so far: a rejected generation, the fallback follows), then one
:class:`DoneEvent` with the full response. :func:`service.ask.answer_stream` yields them; ``/ask`` sends each as a
Server-Sent Event named :attr:`name` with :meth:`data` as JSON, the chat endpoint as OpenAI chunks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from service.retrieval.passage import RankedHit
from service.schemas import AskResponse, Routing, Source


@dataclass(frozen=True)
class RetrievalEvent:
    """Retrieval is done: the routing and the sources the answer will cite; ``ranking``: the merged ranking retrieval
    gave, typed (what evaluation scores; not sent: :meth:`data` leaves it out), which an answer given by product does
    not cite as it is; ``products``: the products an answer given by product covers, in order (empty: one product
    answers, the sources are the ranking's passages, and the data has no ``products``)."""

    name: ClassVar[str] = "retrieval"
    routing: Routing
    sources: list[Source]
    ranking: list[RankedHit]
    products: list[str] = field(default_factory=list)

    def data(self) -> dict[str, Any]:
        out: dict[str, Any] = {"routing": self.routing.model_dump(), "sources": [s.model_dump() for s in self.sources]}
        return {**out, "products": list(self.products)} if self.products else out


@dataclass(frozen=True)
class TokenEvent:
    """A piece of the answer's text."""

    name: ClassVar[str] = "token"
    text: str

    def data(self) -> dict[str, Any]:
        return {"text": self.text}


@dataclass(frozen=True)
class ResetEvent:
    """Drop the pieces sent so far (a generated answer was rejected; the fallback's text follows)."""

    name: ClassVar[str] = "reset"

    def data(self) -> dict[str, Any]:
        return {}


@dataclass(frozen=True)
class DoneEvent:
    """The full response (always the last event)."""

    name: ClassVar[str] = "done"
    response: AskResponse

    def data(self) -> dict[str, Any]:
        return self.response.model_dump(mode="json")


Event = RetrievalEvent | TokenEvent | ResetEvent | DoneEvent
