"""Copies that keep holes: a copied index takes the disk space of the original."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from service.artifacts import Registry
from service.files import copy_if_present, copy_sparse
from service.retrieval.edge_store import EdgeBackend
from service.retrieval.passage import Passage
from tests.integration.retrieval.test_store import _fill


def _allocated(path: Path) -> int:
    """Bytes a file or folder holds on disk (holes excluded)."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_blocks * 512 for p in files)


def test_copy_keeps_contents_and_holes(tmp_path):
    src = tmp_path / "src"
    with src.open("wb") as fh:  # data, a 32 MiB hole, data, then a hole to the end
        fh.write(b"head" * 1000)
        fh.seek(32 << 20, os.SEEK_CUR)
        fh.write(b"tail" * 1000)
        fh.truncate(80 << 20)
    os.utime(src, (1_000_000, 1_000_000))
    dst = tmp_path / "dst"
    copy_sparse(src, dst)
    assert dst.stat().st_size == src.stat().st_size == 80 << 20
    assert dst.read_bytes() == src.read_bytes()
    assert dst.stat().st_mtime == 1_000_000
    assert _allocated(dst) < 1 << 20  # the holes stay holes (a plain copy allocates 80 MiB)


def test_a_file_removed_before_it_is_copied_is_left_out(tmp_path):
    gone, dst = tmp_path / "jobs.sqlite-wal", tmp_path / "copy" / "jobs.sqlite-wal"
    dst.parent.mkdir()
    assert copy_if_present(gone, dst) is None and not dst.exists()  # listed, then removed by its owner: not copied
    (tmp_path / "here").write_bytes(b"x")
    assert copy_if_present(tmp_path / "here", dst) == str(dst) and dst.read_bytes() == b"x"
    with pytest.raises(FileNotFoundError):  # a source that exists but a destination folder that does not: an error
        copy_if_present(tmp_path / "here", tmp_path / "no-such-folder" / "x")


def test_a_cloned_index_takes_the_disk_of_the_original(tmp_path, faq6_sample, encoder):
    passages = [Passage(**{k: r[k] for k in ("doc_id", "domain", "title", "source", "text")}) for r in faq6_sample]
    backend = EdgeBackend(Registry(tmp_path))
    store = backend.open("v1", create=True)
    _fill(store, passages, encoder.embed_passages([p.text for p in passages]))
    store.close()
    backend.clone("v1", "v2")
    src, dst = backend._root("v1"), backend._root("v2")
    size = sum(p.stat().st_size for p in src.rglob("*") if p.is_file())
    assert size > 4 * _allocated(src)  # the engine preallocates files it has not filled
    assert _allocated(dst) <= 2 * _allocated(src) < size / 2  # holes found in 16 KiB blocks: a little more than the engine's
    copy = backend.open("v2")
    assert sum(copy.count(d) for d in copy.domains()) == len(passages)
    copy.close()
