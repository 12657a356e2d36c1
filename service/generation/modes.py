"""What produced an answer: one enum, used by the answering component and the API's ``answer_mode`` alike."""

from __future__ import annotations

from enum import Enum


class AnswerMode(str, Enum):
    """What produced an answer (``answer_mode`` in responses)."""

    GENERATIVE = "generative"
    EXTRACTIVE = "extractive"
    NOT_COVERED = "not_covered"
    RETRIEVAL = "retrieval"
    NONE = "none"

    def __str__(self) -> str:
        return self.value
