"""How many domains the fused strategy's prior family searches: the breadth fit of ``fedqa train router``.

The prior family (q = p, U = c_j p_j^lambda s+) knows every domain's merge weight before searching, so it can search
the heaviest ones only (:func:`service.routing.fusion.search_order`). The fit scores every breadth k = 1..m on the
fitting questions at once (:func:`breadth_top1`) and keeps the smallest that is not worse than searching every domain
by a one-sided sign test (:func:`fit_breadth`); the result is stored as the parameters' ``search_top``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from service.retrieval.unified import ranking, unified_scores
from service.routing.fusion import FusionParams, fused_weights, per_domain, search_order
from training.guard import SIGN_TEST_Z

if TYPE_CHECKING:
    from training.fusion import FitSet

#: z of the breadth fit's one-sided sign test (:func:`fit_breadth`): a breadth is kept unless it loses to every
#: domain searched at 95%.
BREADTH_Z = SIGN_TEST_Z


def breadth_top1(fs: FitSet, params: FusionParams) -> np.ndarray:
    """(questions, m) 0/1: Acc@Top1 of ``params``' ranking when only the k heaviest domains (:func:`search_order`)
    are searched, for k = 1..m (column k - 1). Only each domain's first hit can be first (fusion_scoring's
    :class:`~training.fusion_scoring.Leaders`), scored and ordered as the merge does (:mod:`service.retrieval.unified`)."""
    domains, lead = fs.domains, fs.cand.lead
    m = len(domains)
    out = np.zeros((len(fs.questions), m))
    c = per_domain(params, domains)
    for i, q in enumerate(fs.questions):
        w = fused_weights(q.p, params, c)
        rank = {d: r for r, d in enumerate(search_order(w, q.p, domains))}
        u = np.where(lead.valid[i], unified_scores(w, lead.s[i]), np.nan)  # a domain without a hit: not ranked
        upto = m  # breadths <= upto are still without a winner
        for j in ranking(u, lead.tie[i]).tolist():  # in ranking order: j is first for every breadth that searches it and none above it
            r = rank[domains[j]]
            if r < upto:
                out[i, r:upto] = float(lead.gold[i, j])
                upto = r
    return out


def fit_breadth(fs: FitSet, params: FusionParams, uis: np.ndarray) -> tuple[int, dict]:
    """The fewest domains to search (heaviest first) for the prior family's ``params``: the smallest k whose
    ranking is not worse than searching every domain by a one-sided sign test at 95% (:data:`BREADTH_Z`; losses -
    wins <= z sqrt(losses + wins)) and wins at least as many questions from uis as it loses (the family's own bar);
    0 (every domain) when only m passes. ``uis``: each fitting question's Acc@Top1 under uis. Returns (search_top,
    report)."""
    m = len(fs.domains)
    acc = breadth_top1(fs, params)
    full = acc[:, -1]
    lost = ((acc == 0) & (full > 0)[:, None]).sum(axis=0)  # per breadth k = 1..m
    won = ((acc > 0) & (full == 0)[:, None]).sum(axis=0)
    vs_uis = ((acc > 0) & (uis == 0)[:, None]).sum(axis=0) - ((acc == 0) & (uis > 0)[:, None]).sum(axis=0)
    passes = (lost - won <= BREADTH_Z * np.sqrt(lost + won)) & (vs_uis >= 0)
    chosen = int(np.argmax(passes)) + 1 if passes.any() else m
    top = chosen if chosen < m else 0
    report: dict[str, Any] = {
        "search_top": top,
        "searched_fraction": round(chosen / m, 4),
        "acc_at_top1": round(float(acc[:, chosen - 1].mean()), 4),
        "acc_at_top1_every_domain": round(float(full.mean()), 4),
        "uis_acc_at_top1": round(float(uis.mean()), 4),
        "lost": int(lost[chosen - 1]),
        "won": int(won[chosen - 1]),
        "z": BREADTH_Z,
    }
    return top, report
