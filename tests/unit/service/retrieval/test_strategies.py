"""Domain selection of the four strategies (mkpqa, uis, rfs, lfs), by hand (on the demo index:
tests/integration/retrieval/test_strategies_demo.py)."""

from __future__ import annotations

import numpy as np
import pytest

from service.retrieval.strategies import LLMDomainSelector, describe_domains, parse_yes_no, select
from service.retrieval.strategies.base import StrategyDetail

DOMAINS = ["a", "b", "c", "d"]


def test_every_strategy_name_has_its_registry_entry_and_the_schemas_accept_it():
    from service.retrieval.strategies import REGISTRY, StrategyName
    from service.schemas import AskRequest, EvalSpec

    assert list(REGISTRY) == list(StrategyName) and all(callable(f) for f in REGISTRY.values())
    for name in StrategyName:
        assert AskRequest.model_validate({"query": "q", "strategy": name.value}).strategy == name and str(name) == name.value
    assert set(EvalSpec.model_validate({"strategies": ["uis", "lfs"]}).strategies) == {
        StrategyName.UIS,
        StrategyName.LFS,
    }
    with pytest.raises(ValueError, match="unknown strategy"):
        select("nope", {"a": 1.0}, ["a"], tau0=0.5)


def test_mkpqa_uses_the_deterministic_gate():
    # p sums to 1.3; normalised q = p / 1.3; tau = 0.5 * (1 - H(q) / log 4) = 0.1955: a, b active (p/tau >= 0.5)
    probs = {"a": 0.9, "b": 0.3, "c": 0.05, "d": 0.05}
    sel = select("mkpqa", probs, DOMAINS, tau0=0.5, gate_mode="deterministic")
    q = np.array([0.9, 0.3, 0.05, 0.05]) / 1.3
    tau = 0.5 * (1 + (q * np.log(q)).sum() / np.log(4))
    assert sel.threshold == pytest.approx(tau)
    expected = [d for d in DOMAINS if min(1, probs[d] / tau) >= 0.5]
    assert sel.active == expected == ["a", "b"]
    assert sel.weights == {"a": 0.9, "b": 0.3}


def test_uis_searches_every_domain_with_weight_one():
    sel = select("uis", {"a": 0.99, "b": 0.01, "c": 0.0, "d": 0.0}, DOMAINS, tau0=0.5)
    assert sel.active == DOMAINS and set(sel.weights.values()) == {1.0}


def test_rfs_searches_the_argmax_domain_only():
    sel = select("rfs", {"a": 0.2, "b": 0.7, "c": 0.69, "d": 0.1}, DOMAINS, tau0=0.5)
    assert sel.active == ["b"] and sel.weights == {"b": 0.7}


def test_lfs_without_an_llm_falls_back_to_the_argmax_and_counts_failures():
    selector = LLMDomainSelector(None, {d: f"docs of {d}" for d in DOMAINS})
    sel = select("lfs", {"a": 0.2, "b": 0.1, "c": 0.9, "d": 0.1}, DOMAINS, tau0=0.5, query="q", selector=selector)
    assert sel.active == ["c"] and sel.fallback
    assert sel.detail is not None and sel.detail.failures == 4 and sel.detail.llm_calls == 0
    # the response's routing.selector: the fields lfs set and no other (an explicit null stays, as fused writes it)
    assert set(sel.detail.model_dump(mode="json")) == {"votes", "failures", "errors", "llm_calls"}
    assert sel.detail.model_dump(mode="json")["votes"] == {d: None for d in DOMAINS}
    assert StrategyDetail(fused=None, reason="r").model_dump_json() == '{"fused":null,"reason":"r"}'


def test_yes_no_parsing():
    assert parse_yes_no(" Yes.") is True
    assert parse_yes_no("no, it is not") is False
    assert parse_yes_no('"YES"') is True
    assert parse_yes_no("I think the answer is yes") is True
    assert parse_yes_no("maybe") is None
    assert parse_yes_no("It could be yes, or no") is None


def test_domain_descriptions_from_titles():
    desc = describe_domains({"git": ["git-commit > Options", "git-commit > Examples", "gitglossary > Terms"]}, topics=1)
    assert desc == {"git": "Documentation of git (3 passages); main pages: git-commit"}


def test_lfs_searches_the_domains_the_llm_says_yes_to(selector_llm):
    selector = LLMDomainSelector(selector_llm({"b", "d"}, junk={"c"}), {d: d for d in DOMAINS})
    sel = select("lfs", {"a": 0.9, "b": 0.1, "c": 0.1, "d": 0.1}, DOMAINS, tau0=0.5, query="q", selector=selector)
    assert sel.active == ["b", "d"] and not sel.fallback
    assert sel.detail is not None and sel.detail.votes == {"a": False, "b": True, "c": None, "d": True}
    assert sel.detail.failures == 1 and sel.detail.errors is not None and "perhaps" in sel.detail.errors["c"]
    none = select("lfs", {"a": 0.9, "b": 0.1, "c": 0.1, "d": 0.1}, DOMAINS, tau0=0.5, query="q", selector=LLMDomainSelector(selector_llm(set()), {}))
    assert none.active == ["a"] and none.fallback
