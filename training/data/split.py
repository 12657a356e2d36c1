"""Train/validation split of labelled queries, and cross-domain examples."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence

from service.queries import LabelledQuery


def split_queries(
    queries: Sequence[LabelledQuery], fraction: float, *, seed: int = 0, complement: bool = False
) -> tuple[list[LabelledQuery], list[LabelledQuery]]:
    """(train, validation): a seeded share ``fraction`` of the single-domain queries of each domain.

    Stratified by domain, decided by qid (the input order does not matter). A cross-domain query
    goes to validation when any of its ``parts`` (the qids it was joined from) is held out, so no
    validation question is seen in training inside a joined one; otherwise it goes to train.
    ``complement``: the single-domain queries the same ``fraction`` and ``seed`` would train on are held
    out instead, so that two builds (with and without it) score every labelled question once, each with
    models that never saw it (2-fold cross-fitting of the whole refresh flow).
    """
    if not 0.0 <= fraction < 1.0:
        raise ValueError("the validation fraction must be in [0, 1)")
    single = sorted((q for q in queries if not q.is_cross), key=lambda q: q.qid)
    by_domain: dict[str, list[LabelledQuery]] = defaultdict(list)
    for q in single:
        by_domain[q.domains[0] if q.domains else ""].append(q)
    held: set[str] = set()
    for domain in sorted(by_domain):
        group = by_domain[domain]
        rng = random.Random(f"{seed}:{domain}")
        order = list(group)
        rng.shuffle(order)
        n = int(round(fraction * len(order)))
        if fraction > 0 and len(order) >= 2:
            n = min(max(n, 1), len(order) - 1)
        held.update(q.qid for q in (order[n:] if complement else order[:n]))
    train: list[LabelledQuery] = []
    val: list[LabelledQuery] = []
    for q in queries:
        if q.is_cross:
            is_val = any(p in held for p in q.parts)
        else:
            is_val = q.qid in held
        (val if is_val else train).append(q)
    return train, val


def join_cross(queries: Sequence[LabelledQuery], n: int, *, seed: int = 0, prefix: str = "xsyn") -> list[LabelledQuery]:
    """``n`` cross-domain questions made by joining two questions of different domains.

    "Q1 And, Q2" with both domain sets and both gold sets, the way the faq6 cross set is built.
    """
    single = [q for q in queries if not q.is_cross and q.domains]
    domains = sorted({q.domains[0] for q in single})
    if len(domains) < 2 or n <= 0:
        return []
    rng = random.Random(f"{seed}:cross")
    by_domain: dict[str, list[LabelledQuery]] = defaultdict(list)
    for q in sorted(single, key=lambda q: q.qid):
        by_domain[q.domains[0]].append(q)
    out: list[LabelledQuery] = []
    seen: set[tuple[str, str]] = set()
    tries = 0
    while len(out) < n and tries < 20 * n:
        tries += 1
        d1, d2 = rng.sample(domains, 2)
        a, b = rng.choice(by_domain[d1]), rng.choice(by_domain[d2])
        if (a.qid, b.qid) in seen:
            continue
        seen.add((a.qid, b.qid))
        text = f"{a.query.rstrip()} And, {b.query[0].lower() + b.query[1:]}" if b.query else a.query
        out.append(
            LabelledQuery(
                qid=f"{prefix}-{len(out):04d}",
                query=text,
                domains=list(dict.fromkeys(a.domains + b.domains)),
                gold_doc_ids=list(dict.fromkeys(a.gold_doc_ids + b.gold_doc_ids)),
                kind="cross",
                parts=[a.qid, b.qid],
            )
        )
    return out
