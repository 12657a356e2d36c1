"""The two LLM prompts of the training data: query generation and relevance annotation.

They follow MKP-QA's appendix B as described in the paper (Figure 5: an LLM writes the question
a product user would ask that the given passage answers; Figure 6: an LLM judges whether a
passage answers a question). The exact wording of the figures was not available to us, so these
are faithful re-statements of that description, kept in one place so they can be swapped for
the original text without touching the code that uses them.
"""

from __future__ import annotations

QUERY_GENERATION_PROMPT = """\
You are a customer of {product}. Below is a passage from the {product} documentation.

Title: {title}
Passage:
{passage}

Write one question that a customer of {product} would ask, and that this passage answers.
Write it as a customer would: in your own words, without copying sentences from the passage,
without mentioning "the passage" or "the documentation". Answer with the question only.
Question:"""

RELEVANCE_PROMPT = """\
You are an expert on {product}. Judge whether a documentation passage answers a customer's question.

Question: {query}

Passage (from {product}, "{title}"):
{passage}

Does the passage contain the answer to the question, or the information needed to answer it?
Answer with one word: "Yes" or "No".
Answer:"""


def query_generation_prompt(*, product: str, title: str, passage: str, max_words: int = 300) -> str:
    """Figure 5: the prompt asking for one question the passage answers."""
    return QUERY_GENERATION_PROMPT.format(product=product, title=title, passage=_clip(passage, max_words))


def relevance_prompt(*, product: str, title: str, passage: str, query: str, max_words: int = 300) -> str:
    """Figure 6: the prompt asking whether the passage answers the query (Yes/No)."""
    return RELEVANCE_PROMPT.format(product=product, title=title, passage=_clip(passage, max_words), query=query)


def _clip(text: str, max_words: int) -> str:
    words = text.split()
    return text.strip() if len(words) <= max_words else " ".join(words[:max_words]) + " ..."
