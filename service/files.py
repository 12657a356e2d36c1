"""Copies that keep a file's holes, and the free space kept on the home's file system.

The embedded store preallocates its files (a shard's WAL segments and payload pages are 32 MiB each, almost all of
it a hole on disk). ``shutil.copy2`` writes those holes out as zeros: a faq6 index of 6 shards, 121 MB on disk, took
924 MB once copied (a demo home ~0.6 GB). Python's ``shutil`` has no sparse copy and ``cp --sparse`` is not portable, so this writes the
data blocks and seeks over runs of zeros.

The engine writes into those holes through memory maps: on a full file system (ext4 or tmpfs alike) such a write
kills the process with SIGBUS instead of failing. :func:`ensure_room` refuses a write beforehand when less than
``FEDQA_MIN_FREE_MB`` would stay free, with an error that names the folder.
"""

from __future__ import annotations

import errno
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


#: File systems whose files live in memory: a write into a preallocated hole of a memory-mapped file there, when the
#: file system is full, kills the process with SIGBUS instead of failing with ENOSPC (ext4 does the same once full).
MEMORY_FILE_SYSTEMS = frozenset({"tmpfs", "ramfs"})


class DiskFull(OSError):
    """Less free space than the reserve under a folder fedqa is about to write to (errno ENOSPC)."""


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on the file system of ``path`` (or of its nearest existing parent)."""
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    st = os.statvfs(existing)
    return st.f_bavail * st.f_frsize


def file_system_type(path: Path) -> str | None:
    """The type (``ext4``, ``tmpfs``...) of the file system holding ``path``, from /proc/self/mountinfo (None elsewhere)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    target, best, kind = str(path.resolve()), "", None
    for line in lines:
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        mount = fields[4].replace("\\040", " ")
        inside = target == mount or target.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):
            best, kind = mount, line.split(" - ", 1)[1].split()[0]
    return kind


def ensure_room(path: Path, reserve: int, what: str, need: int = 0) -> None:
    """:class:`DiskFull` naming ``path`` when its file system has less than ``need`` + ``reserve`` bytes free
    (``reserve`` 0: no check), before ``what`` writes there."""
    if reserve <= 0:
        return
    free = free_bytes(path)
    if free >= need + reserve:
        return
    kind = file_system_type(path)
    memory = f" ({kind}: files there take memory; a full one kills a process with SIGBUS)" if kind in MEMORY_FILE_SYSTEMS else ""
    raise DiskFull(
        errno.ENOSPC,
        f"no space left for {what}: {free / 2**20:.1f} MiB free on the file system of {path}{memory}, "
        f"{(need + reserve) / 2**20:.1f} MiB needed (FEDQA_MIN_FREE_MB={reserve // 2**20} is kept free); free some space "
        "(fedqa index prune) or move FEDQA_HOME to a larger disk",
    )


def disk_usage(path: Path) -> int:
    """Bytes the files under ``path`` take on disk (holes not counted)."""
    return sum(p.lstat().st_blocks * 512 for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0
