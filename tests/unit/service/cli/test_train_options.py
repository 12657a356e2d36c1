"""``fedqa train router|retriever|reranker``: the options that are config fields take their defaults from the config."""

from __future__ import annotations

import argparse
import dataclasses
from enum import Enum

import pytest

from service.cli import build_parser
from service.cli.options import ConfigOptions
from service.cli.train import RETRIEVER_OPTIONS, ROUTER_OPTIONS, retriever_config, router_config
from service.cli.train_reranker import RERANKER_OPTIONS
from training.configs import RerankerConfig, RetrieverConfig, RouterConfig
from training.precision import TrainingPrecision

COMMANDS = {"router": ([], ROUTER_OPTIONS), "retriever": (["--data", "d"], RETRIEVER_OPTIONS), "reranker": (["--data", "d"], RERANKER_OPTIONS)}


def command(name: str) -> argparse.ArgumentParser:
    """The parser of ``fedqa train NAME``."""
    parsers = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    train = parsers[0].choices["train"]
    return next(a for a in train._actions if isinstance(a, argparse._SubParsersAction)).choices[name]


@pytest.mark.parametrize("name", COMMANDS)
def test_config_options_default_to_the_config_fields(name):
    required, spec = COMMANDS[name]
    parser = command(name)
    args = parser.parse_args(required)
    fields = {f.name: f for f in dataclasses.fields(spec.config)}
    for field_name in spec.names:
        expected = None if field_name in spec.unset else fields[field_name].default
        expected = expected.value if isinstance(expected, Enum) else expected
        assert getattr(args, spec.dest(field_name)) == expected, f"{spec.flag(field_name)} of train {name}"
    # an option named like a config field is one of the generated ones (not a second, hand-written default)
    by_dest = {spec.dest(n): n for n in spec.names}
    for action in parser._actions:
        if action.dest in fields or action.dest in by_dest:
            assert action.dest in by_dest and action.help == fields[by_dest[action.dest]].metadata["help"].replace("%", "%%"), action.dest


def test_default_options_give_the_default_configs():
    assert router_config(command("router").parse_args([])) == RouterConfig()
    assert retriever_config(command("retriever").parse_args(["--data", "d"])) == RetrieverConfig()
    assert RerankerConfig(**RERANKER_OPTIONS.values(command("reranker").parse_args(["--data", "d"]))) == RerankerConfig()


def test_given_options_reach_the_config():
    router = router_config(command("router").parse_args(["--synthetic-per-domain", "-1", "--hidden", "8", "--seed", "3"]))
    assert (router.synthetic_per_domain, router.hidden, router.seed) == (None, 8, 3)
    argv = ["--data", "d", "--negatives", "4", "--no-dropout", "--precision", "bf16", "--max-examples", "0", "--negative-margin", "-1"]
    retriever = retriever_config(command("retriever").parse_args([*argv, "--lr", "1e-4"]))
    assert retriever == dataclasses.replace(
        RetrieverConfig(), negatives_per_query=4, dropout=False, precision=TrainingPrecision.BF16, max_examples=None, negative_margin=None, lr=1e-4
    )
    argv = ["--data", "d", "--max-length", "64", "--layers", "3", "--titles", "--precision", "auto", "--steps", "5"]
    reranker = RerankerConfig(**RERANKER_OPTIONS.values(command("reranker").parse_args(argv)))
    assert reranker == dataclasses.replace(RerankerConfig(), max_length=64, layers=3, titles=True, precision=TrainingPrecision.AUTO, steps=5)
    assert "warm-up over 10%)" in command("retriever").format_help()  # a help text's % is escaped for argparse


def test_a_field_without_an_option_type_is_refused():
    @dataclasses.dataclass
    class Odd:
        name: str = dataclasses.field(default="x", metadata={"help": "a name"})

    with pytest.raises(TypeError, match="Odd.name"):
        ConfigOptions(Odd, ("name",)).add(argparse.ArgumentParser())
