"""fused, the default: calibrated router probabilities fused with per-domain retrieval evidence, the
paper's gate on the fused q with a fitted tau0, U = c_j * q_j^lambda * s+ (c_j a fitted per-domain weight),
and every domain when unsure.

Every domain is searched first (top evidence_k for the evidence, or top-k when the fitted q ignores it),
so the final merge reuses those hits; when q ignores the evidence and a breadth was fitted (``search_top``), only
that many domains, heaviest first. The parameters come from the router version (``fitted.fusion``, fitted by ``fedqa train
router``); without them (no trained router, or an older one) it searches every domain and ranks by
raw s, i.e. it is uis, except that a question naming products (their domain names, as words: "... in postfix")
searches those alone: before a router is trained it is the one sign of the product a question is about. When
the fit itself does not beat uis out of fold on the held-out questions (training/fusion.py's guard),
the stored parameters rank as uis too (sharpness 0, tau0 0, no c), with the fused q still reported.
Always deterministic: its parameters are fitted for the deterministic gate.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from service.retrieval.passage import Hit
from service.retrieval.strategies import uis
from service.retrieval.strategies.base import Selection, StrategyDetail, StrategyInput
from service.routing.fusion import domain_evidence, fuse, fused_weights, per_domain
from service.routing.gate import gate
from service.text import words


def select(inp: StrategyInput) -> Selection:
    """Search all (or the fitted breadth), fuse p with the evidence, gate, weight c_j q^lambda."""
    domains = list(inp.domains)
    params = inp.fitted.fusion
    # The evidence reads each domain's top evidence_k; parameters without evidence (q = p) need only the top-k.
    limit = inp.top_k if params is None or params.is_identity else max(inp.top_k, params.evidence_k)
    if inp.search is None:
        raise ValueError("the fused strategy needs a search function")
    p = inp.p()
    searched = params.searched(p, domains) if params is not None else None
    hits = inp.search(searched or domains, limit)
    named = named_domains(inp.query or "", domains) if params is None or params.ranks_as_uis else []
    if params is None or named:
        return _unfitted(inp, hits, named, "no fitted fusion parameters" if params is None else "the fit ranks as uis")
    # q = p reads no evidence: skip sorting every searched hit for it (with a breadth, most domains have none).
    q = p.copy() if params.is_identity else fuse(p, domain_evidence(hits, domains, params.evidence_k), params)
    decision = gate(q, params.tau0, mode="deterministic")
    fused = {d: round(float(v), 6) for d, v in zip(domains, q, strict=True)}
    activation = {d: float(a) for d, a in zip(domains, decision.activation, strict=True)}
    w = fused_weights(q, params, per_domain(params, domains), decision)
    if q.max() < params.unsure:
        detail = StrategyDetail(fused=fused, reason=f"router unsure (max q {q.max():.3f} < {params.unsure:.3f}): every domain, ranked by s")
        return Selection(
            strategy="fused",
            active=domains,
            weights={d: float(x) for d, x in zip(domains, w, strict=True)},  # every weight 1
            threshold=decision.threshold,
            activation=activation,
            fallback=True,
            detail=detail,
            hits=hits,
        )
    detail = StrategyDetail(fused=fused)
    if searched is not None:
        detail = StrategyDetail(fused=fused, reason=f"{len(searched)} of {len(domains)} domains searched (the fitted breadth)")
    active = [d for d, x in zip(domains, w, strict=True) if np.isfinite(x) and (searched is None or d in searched)]
    return Selection(
        strategy="fused",
        active=active,
        weights={d: float(w[domains.index(d)]) for d in active},
        threshold=decision.threshold,
        activation=activation,
        fallback=decision.fallback,
        detail=detail,
        hits=hits,
    )


def named_domains(query: str, domains: list[str]) -> list[str]:
    """The domains whose name the question says as words ("postfix", "api-gateway" as "API gateway"): before a router
    is trained, the only evidence of the product a question is about. A name of fewer than 3 characters never counts."""
    said = " " + " ".join(words(query)) + " "
    named = []
    for d in domains:
        name = " ".join(words(d.replace("-", " ").replace("_", " ")))
        if len(name) >= 3 and f" {name} " in said:
            named.append(d)
    return named


def _unfitted(inp: StrategyInput, hits: dict[str, list[Hit]], named: list[str], why: str) -> Selection:
    """No fitted parameters (or fitted ones that rank as uis, ``why``): uis over the products the question names
    (``named``), or over every domain."""
    base = replace(uis.select(inp), strategy="fused", hits=hits)
    if not named:
        return replace(base, fallback=True, detail=StrategyDetail(fused=None, reason=f"{why}: every domain, ranked by s"))
    return replace(
        base,
        active=named,
        weights={d: 1.0 for d in named},
        activation={d: float(d in named) for d in inp.domains},
        detail=StrategyDetail(fused=None, reason=f"{why}: the products the question names ({', '.join(named)})"),
        hits={d: h for d, h in hits.items() if d in named},
    )
