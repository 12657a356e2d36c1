"""What a new training run does with the checkpoints already in its folder, and which folders --resume takes."""

from __future__ import annotations

import logging

import pytest

from training.trainer_parts import check_resumable, drop_stale_checkpoints


def _old_loop_checkpoint(folder):
    """A ``last`` folder as the hand-written loops of earlier releases wrote it."""
    (folder / "model").mkdir(parents=True)
    (folder / "trainer_state.json").write_text('{"global_step": 3}')
    (folder / "optimizer.pt").write_bytes(b"")
    return folder


def test_a_new_run_removes_earlier_checkpoints_and_the_old_loops_last_folder(tmp_path, caplog):
    last = _old_loop_checkpoint(tmp_path / "last")
    for name in ("checkpoint-50", "checkpoint-100", ".last-old", ".ckpt-x1y2"):
        (tmp_path / name).mkdir()
    (tmp_path / "notes.txt").write_text("kept")
    with caplog.at_level(logging.INFO, logger="fedqa.training"):
        drop_stale_checkpoints(tmp_path, keep=tmp_path / "checkpoint-50")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-50", "notes.txt"]
    assert f"removing the earlier run's checkpoint {last}" in caplog.text
    drop_stale_checkpoints(tmp_path / "absent", keep=None)  # no folder yet: nothing to do


def test_resume_takes_a_trainer_checkpoint_and_refuses_the_old_loops_last_folder(tmp_path):
    with pytest.raises(ValueError, match="earlier training loop"):
        check_resumable(_old_loop_checkpoint(tmp_path / "last"))
    with pytest.raises(ValueError, match="not a training checkpoint"):
        check_resumable(tmp_path)
    checkpoint = tmp_path / "checkpoint-7"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")
    (checkpoint / "trainer_state.json").write_text('{"global_step": 7}')
    check_resumable(checkpoint)
