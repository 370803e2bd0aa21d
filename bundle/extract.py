"""Extraction of an archive that :func:`kbrepro.bundle.archive.read_archive` read and hashed:
the bytes it holds in memory are written into a fresh folder, every folder created here and
every file opened relative to its folder's descriptor with ``O_NOFOLLOW | O_EXCL``, so that a
link planted on disk while it writes is never followed.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from kbrepro.bundle.archive import ArchiveContents, check_name, show
from kbrepro.errors import UnreadableInputError

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_BINARY = getattr(os, "O_BINARY", 0)
_USE_DIR_FD = os.open in os.supports_dir_fd and os.mkdir in os.supports_dir_fd and bool(_O_DIRECTORY)


def extract_checked(path: Path, dest: Path, expected: ArchiveContents) -> Path:
    """Write the files :func:`read_archive` read from ``path`` and hashed (``expected``) into
    the fresh folder ``dest`` (which must be empty); returns the bag root. The archive is not
    read again: every folder is created here (mode 0755), every file is opened with
    ``O_CREAT|O_EXCL|O_NOFOLLOW`` (mode 0644), written, read back and re-hashed. Raises
    UnreadableInputError if ``expected`` has problems or an unsafe name, or if a write
    fails or what was written differs."""
    dest = Path(dest)
    if expected.problems or not expected.top:
        raise UnreadableInputError(f"{Path(path).name} did not pass the archive checks; not extracting",
                                   "do not trust this archive")
    names = [expected.top] + sorted(d for d in expected.dirs if d != expected.top)
    names += [f"{expected.top}/{rel}" for rel in sorted(expected.files)]
    for n in names:
        if check_name(n) or (n != expected.top and not n.startswith(expected.top + "/")):
            raise UnreadableInputError(f"{show(n)}: unsafe name in the checked contents", "do not trust this archive")
    for rel, data in expected.files.items():
        if hashlib.sha256(data).hexdigest() != expected.sha256.get(rel):
            raise UnreadableInputError(f"{show(rel)} changed in memory after it was hashed",
                                       "do not trust this archive")
    try:
        dest.mkdir(parents=True, exist_ok=True)
        if any(dest.iterdir()):
            raise UnreadableInputError(f"extraction folder {dest} is not empty", "give an empty folder")
        _write_tree(dest, expected)
    except OSError as exc:
        raise UnreadableInputError(f"extraction refused: {exc}", "do not trust this archive") from exc
    return dest / expected.top


def _write_tree(dest: Path, c: ArchiveContents) -> None:
    dirs = {c.top}
    dirs.update(d for d in c.dirs)
    for rel in c.files:  # parents of every file, even if (impossibly) not listed
        parts = f"{c.top}/{rel}".split("/")
        dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
    use_fd = _USE_DIR_FD
    root_fd = os.open(dest, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC) if use_fd else None
    opened: dict[str, int] = {}

    def dir_fd(d: str) -> int:
        """An fd of folder ``d`` (relative to dest), opened component by component without
        following symbolic links."""
        if d in opened:
            return opened[d]
        parent, _, leaf = d.rpartition("/")
        pfd = dir_fd(parent) if parent else root_fd
        fd = os.open(leaf, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=pfd)
        opened[d] = fd
        return fd

    try:
        for d in sorted(dirs, key=lambda s: (s.count("/"), s)):
            parent, _, leaf = d.rpartition("/")
            if use_fd:
                pfd = dir_fd(parent) if parent else root_fd
                os.mkdir(leaf, 0o755, dir_fd=pfd)
                fd = dir_fd(d)
                os.fchmod(fd, 0o755)
            else:
                p = dest / d
                os.mkdir(p, 0o755)
                if p.is_symlink() or not p.is_dir():
                    raise OSError(f"{d} is not the folder just created")
                os.chmod(p, 0o755)
        for rel in sorted(c.files):
            full = f"{c.top}/{rel}"
            parent, _, leaf = full.rpartition("/")
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC | _O_BINARY
            if use_fd:
                fd = os.open(leaf, flags, 0o644, dir_fd=dir_fd(parent))
            else:
                fd = os.open(dest / full, flags, 0o644)
            with os.fdopen(fd, "wb") as fh:
                fh.write(c.files[rel])
                if hasattr(os, "fchmod"):
                    os.fchmod(fh.fileno(), 0o644)
            rflags = os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC | _O_BINARY
            fd = os.open(leaf, rflags, dir_fd=dir_fd(parent)) if use_fd else os.open(dest / full, rflags)
            with os.fdopen(fd, "rb") as fh:
                back = fh.read()
            if hashlib.sha256(back).hexdigest() != c.sha256[rel]:
                raise UnreadableInputError(f"{show(rel)} changed between reading and extraction",
                                           "do not trust this archive")
    finally:
        for fd in opened.values():
            os.close(fd)
        if root_fd is not None:
            os.close(root_fd)


__all__ = ["extract_checked"]
