"""``POST /ask``: answer a question with sources, routing and timings (JSON or Server-Sent Events)."""

from __future__ import annotations

import json
from collections.abc import Iterator

from fastapi import APIRouter, Depends
from fastapi.responses import StreamingResponse

from service.api.deps import get_pipeline
from service.api.security import require_api_key
from service.pipeline import Pipeline
from service.schemas import AskRequest, AskResponse, ErrorBody

router = APIRouter(tags=["ask"], dependencies=[Depends(require_api_key)])

_ERRORS = {
    401: {"model": ErrorBody, "description": "Missing or invalid API key"},
    400: {"model": ErrorBody, "description": "Body is not valid JSON"},
    422: {"model": ErrorBody, "description": "Invalid request"},
    503: {"model": ErrorBody, "description": "Store or index unavailable"},
}


def _sse(events: Iterator[tuple[str, dict]]) -> Iterator[str]:
    for name, data in events:
        yield f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


@router.post(
    "/ask",
    response_model=AskResponse,
    responses={**_ERRORS, 200: {"content": {"text/event-stream": {}}, "description": "JSON, or events when stream=true"}},
    summary="Answer a question from the product documentation",
)
def ask(req: AskRequest, pipeline: Pipeline = Depends(get_pipeline)):  # noqa: ANN201 - JSON or a stream
    if req.stream:
        pipeline.validate(req)  # fail with 422 before the stream starts
        return StreamingResponse(_sse(pipeline.answer_stream(req)), media_type="text/event-stream")
    return pipeline.answer(req)
