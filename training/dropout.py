"""The MiniLM without dropout, for trainers asked to train without it (``--no-dropout``).

BERT's dropout (0.1 on hidden states and attention weights) draws a random mask over every activation and keeps
attention off PyTorch's fused CPU path: without it the probe's full-length steps took 0.53-0.59 of the time on two
cores, and the reranker's real training 0.77 (365.5 s against 472 s). On faq6
the models trained without it were worse (docs/quality.md, "Training without dropout"), so both trainers keep it by
default. These are the Hugging Face config values passed (``config_kwargs``) and saved with the model.
"""

from __future__ import annotations

NO_DROPOUT: dict[str, float] = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
