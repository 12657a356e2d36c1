"""Copies that keep a file's holes.

The embedded store preallocates its files (a shard's WAL segments and payload pages are 32 MiB each, almost all of
it a hole on disk). ``shutil.copy2`` writes those holes out as zeros: a faq6 index of 6 shards, 121 MB on disk, took
924 MB once copied (a demo home ~0.6 GB). Python's ``shutil`` has no sparse copy and ``cp --sparse`` is not portable, so this writes the
data blocks and seeks over runs of zeros.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

_BLOCK = 1 << 14


def copy_sparse(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> str:
    """Copy ``src`` to ``dst`` (contents, mode and times), leaving a hole wherever ``src`` reads as a block of zeros;
    ``dst`` has the same size as ``src``. Signature of a ``shutil.copytree`` copy function."""
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        while block := fin.read(_BLOCK):
            if block.count(0) == len(block):  # all zeros (counted in C, no copy of the block)
                fout.seek(len(block), os.SEEK_CUR)
            else:
                fout.write(block)
        fout.truncate()  # a file ending in a hole gets its full length
    shutil.copystat(src, dst)
    return str(dst)


def copy_if_present(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> str | None:
    """``copy_sparse``, or nothing (None) when ``src`` was removed after its folder was listed: SQLite removes its
    ``-wal`` and ``-shm`` files when the last connection closes, so a live home's folder can lose files mid-copy."""
    try:
        return copy_sparse(src, dst)
    except FileNotFoundError:
        if os.path.lexists(src):
            raise
        return None  # gone before it was opened (nothing written), or before its times were copied


def copytree_sparse(src: Path, dst: Path, *, dirs_exist_ok: bool = False) -> Path:
    """``shutil.copytree`` with ``copy_sparse``: a copied index takes the disk space of the original. A file that
    disappears while the tree is copied is left out (:func:`copy_if_present`)."""
    return Path(shutil.copytree(src, dst, copy_function=copy_if_present, dirs_exist_ok=dirs_exist_ok))
