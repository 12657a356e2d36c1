"""lfs, LLM-based resource selection: one yes/no LLM call per domain with the resource-selection prompt
(MKP-QA appendix, Figure 9); the "yes" domains are searched and merged by raw s. When the LLM says no to
every domain, or every call fails, the router's argmax domain is searched instead (``fallback``);
failed calls are counted.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

from service.retrieval.strategies.base import Selection, StrategyDetail, StrategyInput
from service.routing.gate import gate

log = logging.getLogger("fedqa.strategies")


# ------------------------------------------------------------------ LFS (resource selection by an LLM)
# Reconstructed from the MKP-QA paper's appendix (Figure 9, the LLM-based resource-selection baseline):
# the LLM sees one product's description and the question and answers yes or no. The exact figure text
# could not be retrieved here, so the wording is ours; its structure (one call per domain, a binary
# decision, descriptions of the products' documentation) follows the paper.
LFS_PROMPT = (
    "You are the resource selector of a question-answering assistant that searches the documentation "
    "of several products. Decide whether the documentation of the product below is likely to contain "
    "information needed to answer the user's question. A question may need more than one product.\n\n"
    "Product: {domain}\n"
    "Description: {description}\n\n"
    "Question: {query}\n\n"
    'Answer with one word, "yes" or "no".\n'
    "Answer:"
)

_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)


def parse_yes_no(text: str) -> bool | None:
    """True for yes, False for no, None when the reply says neither (or both first words conflict)."""
    cleaned = text.strip().strip("\"'*`.").lower()
    if cleaned.startswith("yes"):
        return True
    if cleaned.startswith("no"):
        return False
    found = {m.group(1).lower() for m in _YES_NO.finditer(text[:200])}
    if found == {"yes"}:
        return True
    if found == {"no"}:
        return False
    return None


def describe_domains(passage_titles: Mapping[str, Sequence[str]], *, topics: int = 8) -> dict[str, str]:
    """A short description per domain from its passages' titles: the most frequent top-level pages.

    ``passage_titles`` maps a domain to its passages' titles ("Page > Section > ...").
    """
    out = {}
    for domain, titles in passage_titles.items():
        heads = Counter(t.split(" > ")[0].strip() for t in titles if t and t.strip())
        common = [h for h, _ in heads.most_common(topics)]
        out[domain] = (
            f"Documentation of {domain} ({len(titles)} passages); main pages: " + "; ".join(common) if common else f"Documentation of {domain}."
        )
    return out


class LLMDomainSelector:
    """LFS: one yes/no LLM call per domain (Figure 9 prompt)."""

    def __init__(self, llm, descriptions: Mapping[str, str], *, timeout_s: float = 30.0, max_tokens: int = 4) -> None:  # noqa: ANN001
        self.llm = llm
        self.descriptions = dict(descriptions)
        self.timeout_s = timeout_s
        self.max_tokens = max_tokens

    def prompt(self, query: str, domain: str) -> str:
        """The resource-selection prompt for one domain."""
        desc = self.descriptions.get(domain) or f"Documentation of {domain}."
        return LFS_PROMPT.format(domain=domain, description=desc, query=query.strip())

    def votes(self, query: str, domains: Sequence[str]) -> tuple[dict[str, bool | None], dict[str, str]]:
        """Per domain: True/False, or None when the call failed or the reply was unreadable (with the error)."""
        from service.generation.llm import LLMError

        votes: dict[str, bool | None] = {}
        errors: dict[str, str] = {}
        for d in domains:
            if self.llm is None:
                votes[d], errors[d] = None, "no LLM is configured"
                continue
            try:
                reply = self.llm.complete(self.prompt(query, d), max_tokens=self.max_tokens, stop=["\n"], timeout_s=self.timeout_s)
            except LLMError as exc:
                votes[d], errors[d] = None, f"LLM call failed: {exc}"
                continue
            vote = parse_yes_no(reply)
            votes[d] = vote
            if vote is None:
                errors[d] = f"unreadable reply: {reply[:80]!r}"
        return votes, errors


def select(inp: StrategyInput) -> Selection:
    """The domains the LLM says yes to (weight 1), or the router's argmax when it says no to all."""
    if inp.query is None:
        raise ValueError("lfs needs the query")
    domains = list(inp.domains)
    p = inp.p()
    decision = gate(p, inp.tau0, mode="deterministic")
    selector = inp.selector() if callable(inp.selector) and not isinstance(inp.selector, LLMDomainSelector) else inp.selector
    if selector:
        votes, errors = selector.votes(inp.query, domains)
    else:
        votes, errors = {d: None for d in domains}, {d: "no LLM" for d in domains}
    chosen = [d for d in domains if votes.get(d)]
    fallback = not chosen
    if fallback:
        chosen = [domains[int(np.argmax(p))]]
    detail = StrategyDetail(
        votes=votes,
        failures=sum(1 for v in votes.values() if v is None),
        errors=errors,
        llm_calls=len(domains) if selector and selector.llm is not None else 0,
    )
    activation = {d: float(a) for d, a in zip(domains, decision.activation, strict=True)}
    return Selection(
        strategy="lfs",
        active=chosen,
        weights={d: 1.0 for d in chosen},
        threshold=decision.threshold,
        activation=activation,
        fallback=fallback,
        detail=detail,
    )
