"""Checkpoint files are read as tensors and plain values only: a crafted ``optimizer.pt`` cannot run code on --resume."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from training.checkpoint import CheckpointError, load_extra, save_checkpoint


class _Payload:
    """Pickles as a call that creates ``marker``: what a crafted checkpoint would run on load."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, int]]:
        return (os.open, (str(self.marker), os.O_CREAT | os.O_WRONLY))


def test_a_crafted_optimizer_file_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "ran"
    checkpoint = tmp_path / "last"
    checkpoint.mkdir()
    torch.save({"state": {}, "param_groups": [], "payload": _Payload(marker)}, checkpoint / "optimizer.pt")
    with pytest.raises(CheckpointError) as info:
        load_extra(checkpoint, "optimizer")
    assert not marker.exists()
    assert str(checkpoint / "optimizer.pt") in str(info.value) and "\n" not in str(info.value)


def test_optimizer_scheduler_and_random_state_round_trip(tmp_path):
    """What the trainers save loads back whole under ``weights_only``."""
    from transformers import get_linear_schedule_with_warmup

    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    sched = get_linear_schedule_with_warmup(opt, 2, 10)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    sched.step()
    extra = {"optimizer": opt.state_dict(), "scheduler": sched.state_dict(), "rng": torch.get_rng_state()}
    last = save_checkpoint(tmp_path / "ckpt", lambda p: p.mkdir(), {"global_step": 1}, extra)
    restored = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    restored.load_state_dict(load_extra(last, "optimizer"))
    assert torch.equal(restored.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"])
    assert load_extra(last, "scheduler")["last_epoch"] == 1
    assert torch.equal(load_extra(last, "rng"), extra["rng"])
    assert load_extra(last, "missing") is None
