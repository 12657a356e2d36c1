"""LLM relevance labels for query-passage pairs, with the paper's annotation prompt (appendix B, Figure 6)."""

from __future__ import annotations

import logging
import re
from dataclasses import asdict, dataclass

from service.generation.llm import LLM, LLMError
from service.retrieval.passage import Passage
from training.data.prompts import relevance_prompt

log = logging.getLogger("fedqa.training.data")
_YES = re.compile(r"^\W*(yes|relevant|true)\b", re.I)
_NO = re.compile(r"^\W*(no|not relevant|irrelevant|false)\b", re.I)


@dataclass(frozen=True)
class RelevanceLabel:
    """One judgement: ``relevant`` is None when the LLM failed or gave no clear Yes/No."""

    qid: str
    doc_id: str
    relevant: bool | None
    judge: str
    raw: str = ""

    def row(self) -> dict:
        """The JSON row written to ``relevance.jsonl``."""
        return asdict(self)


def parse_judgement(text: str) -> bool | None:
    """Yes -> True, No -> False, anything else -> None."""
    text = text.strip()
    if _YES.match(text):
        return True
    if _NO.match(text):
        return False
    return None


class LLMRelevanceJudge:
    """Asks an LLM whether a passage answers a query."""

    def __init__(self, llm: LLM, *, timeout_s: float = 60.0, product_names: dict[str, str] | None = None) -> None:
        self.llm = llm
        self.timeout_s = timeout_s
        self.product_names = product_names or {}
        self.name = f"llm:{llm.name}"

    def label(self, qid: str, query: str, passage: Passage) -> RelevanceLabel:
        """The LLM's judgement of one pair (never raises for LLM faults)."""
        prompt = relevance_prompt(
            product=self.product_names.get(passage.domain, passage.domain), title=passage.title, passage=passage.text, query=query
        )
        try:
            raw = self.llm.complete(prompt, max_tokens=3, stop=["\n"], timeout_s=self.timeout_s)
        except LLMError as exc:
            log.warning("relevance labelling failed for %s/%s: %s", qid, passage.doc_id, exc)
            return RelevanceLabel(qid, passage.doc_id, None, self.name, f"error: {exc}")
        return RelevanceLabel(qid, passage.doc_id, parse_judgement(raw), self.name, raw.strip()[:40])
