"""Probe: how many numbers fitted on data a home's active bundle stores, which of them order the served passages,
and which decide the answer (issue 53: "fewer fitted numbers than today, and the count stated").

    HF_HUB_OFFLINE=1 python benchmarks/probes/fitted_numbers.py --home $FEDQA_HOME [--json]

Reads only JSON files and safetensors headers of the active versions (``active.json`` through
:class:`service.artifacts.Registry`), through the loaders the service uses (``RouterFitted``, ``PagePrior``,
``RankingModel``, ``RerankParams``, ``SplitRule``, ``AnswerPolicy``, ``AbstentionModel``); it loads no network and
writes nothing. A number counts when its stored value was chosen by a fit on data (a logistic fit, a grid searched on
labelled questions, a Platt fit): not configuration (epochs, lr, seeds, grids, ``evidence_k``, the pool depths, the
false-refusal target), not figures of a fit, not counts of questions, not the known answers' data (gold passages and
question vectors), and not a value a guard put back to its default (the fit then did not serve). A vector counts its
length. The "not covered" model's standardisation (``mean``, ``scale``) is not counted: they are the training
features' mean and standard deviation, and ``coef / scale`` with ``intercept - sum(coef * mean / scale)`` is the same
model without them. Networks (router head, fine-tuned retriever, reranker) are one line each, outside the count.

Whether a part orders the served passages follows ``service/pipeline.py``: when the ranking model serves
(:meth:`RankingModel.serves` for the serving versions) its score orders the pool, searched in every domain with the
fused fit's gate, breadth and weights off (``Pipeline._fitted``); the page prior's counts and known answers are then
features, and its weight, depth, penalty and match only choose the top N the reranker scores for the model
(``Pipeline._reranked``). Otherwise the default merge (``Pipeline._merged``) orders them: the fused weights when the fit
did not rank as uis, plus the page prior's bonus when it is active. FEDQA_RERANK (default on) is read from the
environment; trusted feedback served as known answers is not read.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from service.artifacts import Kind, Registry
from service.generation.abstention import AbstentionModel, abstention_path, load_abstention
from service.generation.answer_policy import AnswerPolicy, load_policy, policy_path
from service.ranking.features import Feature
from service.ranking.model import RankingModel, load_ranking, ranking_path
from service.reranking.params import PARAMS_FILE, RerankParams
from service.retrieval.page_prior import PagePrior
from service.routing.fitted import RouterFitted
from service.routing.fusion import FusionParams
from service.routing.split import SplitRule, load_split, split_path

ROUTER_FILE = "router.json"  # service/routing/router.py ROUTER_FILE (not imported: that module loads torch)
HEAD_FILE = "head.safetensors"
ROUTER_FORMAT = "embedding-head-v1"


@dataclass
class Part:
    """One fitted part: the numbers counted (name -> value), those left out (name -> why), and what they decide."""

    name: str
    file: str
    counted: dict[str, Any] = field(default_factory=dict)
    left_out: dict[str, str] = field(default_factory=dict)
    orders: int = 0  # how many of the counted numbers order the served passages
    orders_why: str = ""
    decides: int = 0  # how many of the counted numbers decide the answer (policy, split, not covered)

    @property
    def count(self) -> int:
        """Numbers counted (a vector: its length)."""
        return sum(len(v) if isinstance(v, list | tuple | dict) else 1 for v in self.counted.values())


@dataclass
class Serving:
    """What serves for the active bundle: the router, the ranking model, the fused fit, the page prior, the reranker."""

    versions: dict[str, str | None]
    router_ok: bool
    router_note: str
    meta: dict[str, Any]
    fitted: RouterFitted
    ranking: RankingModel | None
    model_serves: bool
    model_says: str
    reranker: RerankParams | None  # the reranker that serves (None: none, or FEDQA_RERANK off)
    reranker_note: str


def _router_usable(meta: dict[str, Any], retriever: str, domains: Sequence[str] | None) -> tuple[bool, str]:
    """Whether the pipeline serves this router (else the uniform stand-in, and nothing fitted with it), and why."""
    if meta.get("format") != ROUTER_FORMAT:
        return False, f"router format {meta.get('format')!r} is not {ROUTER_FORMAT!r}: the uniform router serves"
    if meta.get("retriever") is not None and meta.get("retriever") != retriever:
        return False, f"router read retriever {meta.get('retriever')}'s vectors, the index {retriever}'s: the uniform router serves"
    if domains is not None and set(meta.get("domains") or []) != set(domains):
        return False, "router domains differ from the index's: the uniform router serves"
    return True, "the head router serves"


def _reranker(registry: Registry, version: str | None, retriever: str, domains: Sequence[str] | None) -> tuple[RerankParams | None, str]:
    """The reranker that serves (as :func:`service.reranking.loading.load_reranker` decides) and why."""
    if not version:
        return None, "no active reranker"
    manifest = registry.manifest("reranker", version)
    if manifest.get("retriever") != retriever or (domains is not None and sorted(manifest.get("domains") or []) != sorted(domains)):
        return None, f"reranker {version} does not fit the index's retriever and domains: not served"
    params = RerankParams.from_json(json.loads((registry.path("reranker", version) / PARAMS_FILE).read_text(encoding="utf-8")))
    if os.environ.get("FEDQA_RERANK", "on") != "on":
        return None, f"reranker {version} stored, FEDQA_RERANK off"
    return params, f"reranker {version} serves"


def serving(registry: Registry) -> Serving:
    """The active bundle read as :func:`service.loading.load_pipeline` composes it (no store or network opened)."""
    bundle = registry.bundle()
    if not bundle.router or not bundle.index:
        raise SystemExit(f"{registry.home}: no active router or index (active.json: {bundle.as_dict()})")
    index = registry.manifest("index", bundle.index)
    retriever = str(index.get("retriever") or "base")
    domains = index.get("domains")
    domains = list(domains) if isinstance(domains, list) else None
    rdir = registry.path("router", bundle.router)
    if not (rdir / ROUTER_FILE).is_file():
        raise SystemExit(f"{rdir}: no {ROUTER_FILE} (a router of an earlier release: nothing fitted this probe reads)")
    meta = json.loads((rdir / ROUTER_FILE).read_text(encoding="utf-8"))
    ok, note = _router_usable(meta, retriever, domains)
    reranker, rnote = _reranker(registry, bundle.reranker, retriever, domains)
    model = load_ranking(ranking_path(registry, bundle.router))
    versions: dict[str, str | None] = {"index": bundle.index, "retriever": retriever, "router": bundle.router if ok else "uniform"}
    versions["reranker"] = bundle.reranker if reranker is not None else None
    serves = ok and model is not None and model.serves(versions)
    says = model.says(versions) if model is not None else "no ranking model stored: the default ranking serves"
    fitted = RouterFitted.from_json(meta.get("fitted")) if ok else RouterFitted()
    return Serving(versions, ok, note, meta, fitted, model if ok else None, serves, says, reranker, rnote)


def _calibration(s: Serving) -> Part:
    """Temperature and per-domain biases (training/calibration.py), read from ``router.json``'s top level."""
    part = Part("calibration", ROUTER_FILE)
    bias = [float(b) for b in s.meta.get("bias") or []]
    if s.fitted.calibration is not None or float(s.meta.get("temperature", 1.0)) != 1.0:
        part.counted["temperature"] = round(float(s.meta.get("temperature", 1.0)), 6)
    if bias:
        part.counted["bias"] = [round(b, 6) for b in bias]
    part.left_out["fitted.calibration"] = "the fit's report (ece, nll, questions; prior_sd config; bias/temperature rounded copies, never read)"
    logp = _weight(s.ranking, Feature.LOG_PRODUCT_PROBABILITY)
    fusion = s.fitted.fusion
    if s.model_serves:
        part.orders, part.orders_why = (part.count, "p is the model's feature log_product_probability") if logp else (0, "model weight on log p is 0")
    elif fusion is not None and not fusion.ranks_as_uis:
        part.orders, part.orders_why = part.count, "p feeds the fused q / prior weights c_j p^lambda"
    else:
        part.orders_why = "default ranking as uis: merge weights all 1 (p still decides split and not covered)"
    return part


def _weight(model: RankingModel | None, feature: Feature) -> float:
    """The ranking model's weight on ``feature`` (0: no model)."""
    if model is None or feature not in model.features:
        return 0.0
    return float(model.weights[model.features.index(feature)])


def _family(p: FusionParams) -> str:
    """Which family the guard stored: uis (the fit did not pay), prior (q = p), or fused (the gate grid)."""
    return "uis" if p.ranks_as_uis else "prior" if p.is_identity else "fused"


def _fusion(s: Serving) -> Part:
    """The fused strategy's parameters (training/fusion.py: logistic weights, grid, prior family's c_j, breadth)."""
    part = Part("fused strategy + breadth", f"{ROUTER_FILE} fitted.fusion")
    p = s.fitted.fusion
    if p is None:
        part.orders_why = "not fitted: the fused strategy ranks as uis"
        return part
    family = _family(p)
    logistic = {"w_prior": p.w_prior, "w_best": p.w_best, "w_share": p.w_share, "bias": p.bias}
    grid = {"sharpness": p.sharpness, "tau0": p.tau0, "unsure": p.unsure}
    part.left_out["evidence_k"] = "configuration (fit_fusion's evidence_k, 20), not searched"
    if family == "prior":
        part.counted.update(sharpness=p.sharpness, domain_weight=dict(p.domain_weight), search_top=p.search_top)
        part.left_out["w_prior, w_best, w_share, bias, tau0, unsure"] = "fixed by the prior family (q = p, no gate)"
        if len(p.domain_weight) < len(s.meta.get("domains") or []):
            part.left_out["c_j = 1"] = "domains whose fitted c_j is 1 are not stored (counted: the stored ones)"
    else:
        part.counted.update({k: round(v, 6) for k, v in logistic.items()})
        if family == "fused":
            part.counted.update(grid)
            part.left_out["domain_weight, search_top"] = "not in the fused family (fixed {} and 0)"
        else:
            names = "sharpness, tau0, unsure, domain_weight, search_top"
            part.left_out[names] = "guard chose uis: reset to 0 / {} (as_uis), not fitted values"
    if s.model_serves:
        part.orders_why = "ranking model serves: every_domain() turns gate, breadth and weights off; q only reported"
    elif family == "uis":
        part.orders_why = "guard chose uis: merge weights 1, every domain; fused q only reported"
    else:
        part.orders, part.orders_why = part.count, f"the {family} family's weights, gate and breadth order the merge"
    return part


def _prior_orders(prior: PagePrior, s: Serving, part: Part) -> None:
    """Set how many of the page prior's counted numbers order the served passages, and why."""
    if s.model_serves:
        if s.ranking is not None and s.ranking.uses_reranker:
            part.orders = part.count if prior.active else 0
            part.orders_why = "model serves: the bonus only picks the top N the reranker scores for it" + ("" if prior.active else " (inactive)")
        else:
            part.orders_why = "model serves: only the counts and known answers (features) order; weight/penalty/match unread"
    elif prior.active:
        part.orders, part.orders_why = part.count, "default merge: U + weight*log(1+n) - penalty*(match-c) over the top depth"
    else:
        part.orders_why = "inactive (weight and penalty 0): no bonus, depth unread"


def _page_prior(s: Serving) -> Part:
    """Weight, depth, penalty and match (training/page_prior.py), and what the guard left of them."""
    part = Part("page prior + known answers", f"{ROUTER_FILE} fitted.page_prior")
    prior = s.fitted.page_prior
    if prior is None:
        part.orders_why = "not fitted"
        return part
    part.counted["depth"] = prior.depth
    if prior.active:
        part.counted["weight"] = prior.weight
        if prior.penalty > 0:
            part.counted.update(penalty=prior.penalty, match=prior.match)
        else:
            part.left_out["penalty, match"] = "penalty 0 chosen: match is then the default 1.0 and unread"
    else:
        part.left_out["weight, penalty, match"] = "guard did not pay: weight and penalty 0, match default (fitted depth kept, never read)"
    part.left_out["answers, members, questions"] = (
        f"data, not fitted numbers: {len(prior.answers)} counted questions' gold passages, {len(prior.members)} pages' "
        f"passages, {len(prior.questions)} question vectors ({len(prior.known)} known answers)"
    )
    part.left_out["pages"] = "recounted from answers when loaded (for reading only)"
    _prior_orders(prior, s, part)
    return part


def _ranking(s: Serving) -> Part:
    """The ranking model's weights (training/ranking.py ``fit_weights``: 0 for a feature that never varied)."""
    part = Part("ranking model", "ranking.json")
    m = s.ranking
    if m is None:
        part.orders_why = "no ranking model stored"
        return part
    zero = [str(f) for f, w in zip(m.features, m.weights, strict=True) if w == 0.0]
    part.counted.update({str(f): round(w, 4) for f, w in zip(m.features, m.weights, strict=True) if w != 0.0})
    if zero:
        part.left_out[", ".join(zero)] = "weight exactly 0: the feature never varied in the pools (no reranker / no lexical hit), not fitted"
    part.left_out["depth, rerank_depth"] = f"configuration ({m.depth}, {m.rerank_depth}: --depth, FEDQA_RANK_RERANK_DEPTH)"
    part.left_out["active"] = "the guard's verdict (a decision, not a number)"
    if s.model_serves:
        part.orders, part.orders_why = part.count, s.model_says
    else:
        part.orders_why = s.model_says
    return part


def _rerank(s: Serving, registry: Registry) -> Part:
    """The reranker's combination (weight, depth) and Platt calibration (training/reranker_fit.py)."""
    version = registry.bundle().reranker
    part = Part("reranker combination", f"rerankers/{version}/{PARAMS_FILE}" if version else PARAMS_FILE)
    p = s.reranker
    if p is None:
        part.orders_why = s.reranker_note
        return part
    if p.weight > 0:
        part.counted.update(weight=p.weight, depth=p.depth)
    else:
        part.left_out["weight, depth"] = "guard did not pay: weight 0 at the smallest depth (the strategy's order)"
    part.counted.update(scale=round(p.scale, 6), shift=round(p.shift, 6))
    part.left_out["max_length, titles"] = "configuration of the cross-encoder's input"
    uses = s.model_serves and s.ranking is not None and s.ranking.uses_reranker
    if uses:
        part.orders_why = "the model reads the reranker's logit itself: weight/depth unread; scale/shift only calibrate"
    elif s.model_serves:
        part.orders_why = "the model's order stands: weight unread; depth picks the top N scored for not covered; scale/shift only calibrate"
    elif p.weight > 0:
        part.orders, part.orders_why = 2, "U + weight*ce over the top depth; scale/shift only calibrate (split, not covered)"
    else:
        part.orders_why = "weight 0: order unchanged; scale/shift only calibrate (split, not covered)"
    return part


def _decision(fit: Mapping[str, Any] | None) -> str:
    """The stored verdict of a fitted decision (fitted, too_few, worse; none: stored before verdicts)."""
    record = (fit or {}).get("decision") or {}
    return str(record.get("verdict", "none"))


def _split(s: Serving, registry: Registry) -> Part:
    """The by-product split rule (training/split.py): min_ratio and max_gap; max_groups is a constant."""
    part = Part("split rule", "split.json")
    rule: SplitRule | None = load_split(split_path(registry, registry.bundle().router)) if s.router_ok else None
    if rule is None:
        part.orders_why = "not fitted (every answer one product)"
        return part
    verdict = _decision(rule.fit)
    part.counted.update({k: v for k, v in (("min_ratio", rule.min_ratio), ("max_gap", rule.max_gap)) if v is not None})
    if not part.counted:
        part.left_out["min_ratio, max_gap"] = f"None: never split (verdict {verdict}: the default, not fitted)"
    part.left_out["max_groups"] = "constant MAX_GROUPS (a choice, not fitted)"
    part.decides = part.count
    part.orders_why = f"no: decides which products answer (verdict {verdict})"
    return part


def _policy(registry: Registry) -> Part:
    """The extractive answer policy (training/answer_policy.py grid): sources, term_weight, margin, continue_gap."""
    part = Part("answer policy", "answer.json")
    bundle = registry.bundle()
    policy: AnswerPolicy | None = load_policy(policy_path(registry, bundle.router, bundle.index))
    if policy is None:
        part.orders_why = "not fitted: FEDQA_EXTRACTIVE_* serve"
        return part
    values = {"sources": policy.sources, "term_weight": policy.term_weight, "margin": policy.margin, "continue_gap": policy.continue_gap}
    part.counted.update({k: v for k, v in values.items() if v is not None})
    if policy.continue_gap is None:
        part.left_out["continue_gap"] = "None chosen from the grid: never continue (no number)"
    part.decides = part.count if policy.serves else 0
    part.orders_why = f"no: quotes from the ranking (verdict {_decision(policy.fit)}, {'serves' if policy.serves else 'stored, not served'})"
    return part


def _not_covered(s: Serving, registry: Registry) -> Part:
    """The "not covered" logistic model (training/abstention.py): coef, intercept, threshold."""
    part = Part("not covered", "abstention.json")
    bundle = registry.bundle()
    model: AbstentionModel | None = load_abstention(abstention_path(registry, bundle.router, bundle.index)) if s.router_ok else None
    if model is None:
        part.orders_why = "not fitted: every question answered"
        return part
    part.counted.update(coef=[round(c, 6) for c in model.coef], intercept=round(model.intercept, 6), threshold=round(model.threshold, 6))
    k = len(model.coef)
    part.left_out["mean, scale"] = f"standardisation ({2 * k} numbers): the features' mean and sd, folded into coef/intercept: not counted"
    part.left_out["(note) intercept, threshold"] = "both counted (two fits); for the yes/no decision alone they are one: z >= logit(threshold)"
    part.left_out["features"] = f"a chosen subset ({', '.join(model.features)}): a fitted choice, not a number"
    part.left_out["target_false_refusal"] = f"configuration ({model.target_false_refusal})"
    part.decides = part.count
    part.orders_why = f"no: decides not_covered (verdict {_decision(model.fit)}; the default model is fitted on data too)"
    return part


def tensors(path: Path) -> int | None:
    """Tensors named in a safetensors file's header (None: absent or not a safetensors file, e.g. an LFS pointer)."""
    try:
        with path.open("rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(size))
    except (OSError, ValueError, struct.error):
        return None
    return sum(1 for k in header if k != "__metadata__")


def networks(registry: Registry, s: Serving) -> list[dict[str, Any]]:
    """One line per network of the bundle (router head, fine-tuned retriever, reranker): its tensors, outside the count."""
    bundle = registry.bundle()
    out = []
    places: list[tuple[str, Kind, str | None]] = [
        ("router head", "router", bundle.router),
        ("retriever", "retriever", bundle.retriever),
        ("reranker", "reranker", bundle.reranker),
    ]
    for name, kind, version in places:
        if not version:
            continue
        files = sorted(registry.path(kind, version).rglob("*.safetensors"))
        counts = [tensors(f) for f in files]
        n = sum(c for c in counts if c is not None)
        served = {"router": s.router_ok, "retriever": s.versions["retriever"] == version, "reranker": s.reranker is not None}[kind]
        out.append({"network": name, "version": version, "files": len(files), "tensors": n, "served": served})
    return out


def report(home: Path) -> dict[str, Any]:
    """Every part's counted and left-out numbers, the networks, the totals, and what serves."""
    registry = Registry(home)
    s = serving(registry)
    parts = [
        _calibration(s),
        _fusion(s),
        _page_prior(s),
        _ranking(s),
        _rerank(s, registry),
        _split(s, registry),
        _policy(registry),
        _not_covered(s, registry),
    ]
    totals = {
        "fitted_numbers_stored": sum(p.count for p in parts),
        "order_served_passages": sum(p.orders for p in parts),
        "decide_answer": sum(p.decides for p in parts),
    }
    rows = [{**asdict(p), "count": p.count} for p in parts]
    notes = {"router": s.router_note, "ranking": s.model_says, "reranker": s.reranker_note}
    return {"home": str(home), "versions": s.versions, "serving": notes, "parts": rows, "networks": networks(registry, s), "totals": totals}


def _short(counted: Mapping[str, Any]) -> str:
    """Counted names with values (a vector: its length)."""
    return ", ".join(f"{k}[{len(v)}]" if isinstance(v, list | tuple | dict) else f"{k}={v}" for k, v in counted.items()) or "-"


def render(r: Mapping[str, Any]) -> str:
    """The report as text: serving lines, the table, what was left out, networks, totals."""
    lines = [f"home {r['home']}", f"versions {json.dumps(r['versions'])}"]
    lines += [f"  {k}: {v}" for k, v in r["serving"].items()]
    lines += ["", f"{'part':<28} {'file':<34} {'n':>3} {'order':>5}  names / why it orders or not"]
    for p in r["parts"]:
        lines.append(f"{p['name']:<28} {p['file'][:34]:<34} {p['count']:>3} {p['orders']:>5}  {_short(p['counted'])}")
        lines.append(f"{'':<28} {'':<34} {'':>3} {'':>5}  -> {p['orders_why']}")
    lines += ["", "left out:"]
    lines += [f"  {p['name']}: {k}: {why}" for p in r["parts"] for k, why in p["left_out"].items()]
    lines += ["", "networks (outside the count):"]
    lines += [
        f"  network weights: {n['network']} {n['version']}: {n['tensors']} tensors in {n['files']} file(s), served {n['served']}"
        for n in r["networks"]
    ]
    t = r["totals"]
    lines += [
        "",
        f"fitted numbers stored: {t['fitted_numbers_stored']}",
        f"numbers that order the served passages: {t['order_served_passages']}",
        f"numbers that decide the answer (policy, split, not covered): {t['decide_answer']}",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--home", type=Path, required=True, help="a FEDQA_HOME (read only)")
    ap.add_argument("--json", action="store_true", help="machine output")
    args = ap.parse_args(argv)
    r = report(args.home.expanduser())
    print(json.dumps(r, indent=2) if args.json else render(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
