"""The hyper-parameters of the three trained models: ``RouterConfig``, ``RetrieverConfig``, ``RerankerConfig``.

Kept apart from their trainers and free of torch, so that ``fedqa``'s parser generates the ``train`` options from these
fields (``service/cli/options.py``) without importing it: a field's default is the option's, and ``metadata["help"]``
(``option``) its help text; fields without help are not options.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from training.precision import TrainingPrecision


def option(default: Any, help: str) -> Any:
    """A field that is also a ``fedqa train`` option: its default and the option's help text."""
    return field(default=default, metadata={"help": help})


@dataclass
class RouterConfig:
    """How the head is trained (choices, not values fitted on data)."""

    #: linear: on faq6 dev it routed single-product questions better than a 256-unit MLP (docs/quality.md)
    hidden: int = option(0, "hidden units of the head over the query vector (0: linear)")
    epochs: int = option(30, "passes over the training questions")
    batch_size: int = option(256, "questions per step (smaller sets use smaller batches)")
    lr: float = 2e-3
    weight_decay: float = 1e-4
    labelled_weight: float = 4.0  # an expert question weighs this many synthetic ones of its group
    #: synthetic questions kept per domain (None: all; -1 on the command line)
    synthetic_per_domain: int | None = option(2000, "synthetic questions per domain (-1: all)")
    top_k: int = 5  # ranking depth the fused strategy is fitted for
    evidence_k: int = 20  # unified top-k whose per-domain share is evidence
    seed: int = option(0, "seed of the split, the sampling and the training")
    min_val_per_domain: int = 5  # a validation split with fewer questions of a product is fitted out of fold instead
    kfold: int = 5  # folds of that out-of-fold fit


@dataclass
class RetrieverConfig:
    """Hyper-parameters of a retriever run (saved in the version's manifest)."""

    #: docs/quality.md "Three passes over the retriever's training set": 1, 2, 3 on faq6's two folds
    epochs: int = option(3, "passes over the selected examples (at most 50 steps each at the defaults)")
    batch_size: int = option(16, "questions per step")
    lr: float = option(3e-5, "peak learning rate (linear warm-up over 10%)")
    warmup_ratio: float = 0.1
    temperature: float = option(0.05, "temperature tau of the symmetric InfoNCE loss")
    max_seq_length: int = option(128, "tokens per text in training; saved with the model, so also for index build")
    negatives_per_query: int = option(1, "hard negatives per query in a batch")
    max_positives: int = 3
    #: None: all (0 on the command line)
    max_examples: int | None = option(800, "every labelled/cross example, then synthetic ones up to this many (0: all)")
    labelled_repeat: int = option(2, "times each labelled and cross-domain example is used")
    seed: int = option(0, "seed of the example selection and the training")
    checkpoint_every: int = option(50, "steps between checkpoints")
    freeze_embeddings: bool = True
    #: the MiniLM's dropout while training: without it a probe step costs ~0.55 of the time, but faq6's fold a scored 0.577
    #: single Acc@1 against 0.613-0.640 with it (two seeds; docs/quality.md, "Training without dropout")
    dropout: bool = option(True, "the MiniLM's dropout while training (default: RetrieverConfig's)")
    #: a step's arithmetic: ``auto``/``bf16`` halve the flow's training on a CPU with AMX, but on faq6's fold b the models
    #: refused fewer neighbouring-product questions, so float32 by default (docs/quality.md, "Training steps in bfloat16")
    precision: TrainingPrecision = option(
        TrainingPrecision.FP32,
        "a training step's arithmetic: bf16 autocast, fp32, or auto (bf16 where the CPU has AMX tiles; default: RetrieverConfig's)",
    )
    #: drop hard negatives scored >= best positive - margin by the base model (None: keep all; -1 on the command line)
    negative_margin: float | None = option(
        0.05, "drop hard negatives the base model scores within this margin of the positive, or above it (-1: keep all)"
    )


@dataclass
class RerankerConfig:
    """Hyper-parameters of a reranker run (saved in the version's manifest)."""

    steps: int = option(200, "optimisation steps")
    batch_size: int = option(8, "in-scope questions per step")
    negatives: int = option(3, "hard negatives per question, from its ranking")
    oos_per_step: int = option(2, "out-of-scope questions per step (every candidate negative)")
    depth: int = option(20, "ranking depth the negatives are drawn from")
    #: 96 rather than 128: the same "not covered" evidence for ~2/3 of the cost (docs/quality.md, rerank_evidence.py)
    max_length: int = option(96, "tokens of a question and passage, trained and served (default: RerankerConfig's)")
    lr: float = option(5e-5, "peak learning rate")
    warmup_ratio: float = 0.1
    labelled_repeat: int = option(3, "times each expert question is used before synthetic ones")
    max_questions: int = option(1600, "training questions (expert ones first, then synthetic)")
    seed: int = option(0, "seed of the sampling and the training")
    checkpoint_every: int = option(50, "steps between checkpoints")
    freeze_embeddings: bool = True
    titles: bool = option(False, "the model reads each passage's title (page > section) before its text (default: RerankerConfig's)")
    #: transformer layers kept from the shipped MiniLM's six (None: all): fewer train and serve in proportion less time, but 3 or 4
    #: refused 5 points fewer neighbouring-product questions on faq6's fold b (docs/quality.md, "Where the refresh flow's time goes")
    layers: int | None = option(None, "transformer layers kept from the MiniLM's six (default: RerankerConfig's)")
    #: the MiniLM's dropout while training: without it training took 0.77 of the time, but on faq6's fold b
    #: 1.3 points fewer neighbouring-product questions were refused (docs/quality.md, "Training without dropout")
    dropout: bool = option(True, "the MiniLM's dropout while training (default: RerankerConfig's)")
    #: a step's arithmetic: ``auto``/``bf16`` halve the flow's training on a CPU with AMX, but on faq6's fold b the models
    #: refused fewer neighbouring-product questions, so float32 by default (docs/quality.md, "Training steps in bfloat16")
    precision: TrainingPrecision = option(
        TrainingPrecision.FP32,
        "a training step's arithmetic: bf16 autocast, fp32, or auto (bf16 where the CPU has AMX tiles; default: RerankerConfig's)",
    )
