"""What produced an answer: one enum, used by the answering component and the API's ``answer_mode`` alike."""

from __future__ import annotations

from service.choices import Choice


class AnswerMode(Choice):
    """What produced an answer (``answer_mode`` in responses)."""

    GENERATIVE = "generative"
    EXTRACTIVE = "extractive"
    NOT_COVERED = "not_covered"
    RETRIEVAL = "retrieval"
    NONE = "none"
    BY_PRODUCT = "by_product"  # several products plausible: one answer per product (``products`` in responses)
