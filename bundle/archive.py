"""Reading an untrusted bundle archive without extracting it first.

:func:`read_archive` walks the tar member headers as a stream (``.tar`` or gzip-compressed)
and accepts only regular files and directories whose names are relative, normalised, made
of safe characters and all under one top folder, with no duplicates and within size and
count limits. Regular members are hashed (sha256) and read into memory from the stream.
Nothing is written to disk. :func:`extract_checked` extracts an archive that passed, into
a fresh folder, member by member, through ``tarfile``'s ``data`` filter as a second line of
defence (never ``extractall``).
"""
from __future__ import annotations

import hashlib
import posixpath
import re
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from kbrepro.kernels.errors import UnreadableInputError

MAX_MEMBERS = 10000
MAX_MEMBER_BYTES = 256 * 1024 * 1024
MAX_TOTAL_BYTES = 1024 * 1024 * 1024
SAFE_NAME = re.compile(r"^[A-Za-z0-9._/-]+$")


@dataclass
class ArchiveContents:
    """What the archive holds. ``files``: path relative to the top folder -> bytes;
    ``sha256``: same keys -> hex digest computed from the stream; ``problems``: every unsafe
    or malformed member, by name."""

    top: str | None = None
    files: dict[str, bytes] = field(default_factory=dict)
    sha256: dict[str, str] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=set)
    problems: list[dict] = field(default_factory=list)
    members: int = 0
    total_bytes: int = 0
    compressed: bool = False


def _problem(out: ArchiveContents, name: str, message: str) -> None:
    out.problems.append({"file": name, "path": None, "message": message})


def _check_name(raw: str) -> str | None:
    """Why a member name is unsafe, or None."""
    if not raw or "\x00" in raw:
        return "empty or NUL in name"
    if raw.startswith("/") or re.match(r"^[A-Za-z]:", raw) or "\\" in raw:
        return "absolute path or backslash"
    name = raw.rstrip("/")
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return "'..', '.' or empty path component"
    if posixpath.normpath(name) != name:
        return "name is not normalised"
    if not SAFE_NAME.match(name):
        return "characters outside [A-Za-z0-9._/-]"
    return None


def read_archive(path: Path) -> ArchiveContents:
    """Read member headers and contents of ``path`` as a stream. Raises
    UnreadableInputError if the file cannot be opened as tar/tar.gz at all; every other
    problem is collected in ``problems`` (the caller decides: any problem is unsafe)."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            magic = fh.read(2)
    except OSError as exc:
        raise UnreadableInputError(f"cannot read {path}: {exc.strerror}", "check the archive path") from exc
    out = ArchiveContents(compressed=magic == b"\x1f\x8b")
    mode = "r|gz" if out.compressed else "r|"
    try:
        tf = tarfile.open(path, mode=mode)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise UnreadableInputError(f"{path.name} is not a tar archive: {exc}",
                                   "bundles are .tar or .tar.gz files made by make_bundle.py") from exc
    seen: set[str] = set()
    try:
        with tf:
            for m in tf:
                out.members += 1
                if out.members > MAX_MEMBERS:
                    _problem(out, m.name, f"more than {MAX_MEMBERS} members")
                    break
                why = _check_name(m.name)
                if why:
                    _problem(out, m.name, f"unsafe member name: {why}")
                    continue
                name = m.name.rstrip("/")
                if name in seen:
                    _problem(out, m.name, "duplicate member")
                    continue
                seen.add(name)
                top = name.split("/")[0]
                if out.top is None:
                    out.top = top
                elif top != out.top:
                    _problem(out, m.name, f"outside the single top folder {out.top!r}")
                    continue
                if m.isdir():
                    out.dirs.add(name)
                    continue
                if not m.isreg():
                    kind = ("symbolic link" if m.issym() else "hard link" if m.islnk() else
                            "device" if (m.ischr() or m.isblk()) else "FIFO" if m.isfifo() else f"type {m.type!r}")
                    target = f" -> {m.linkname}" if (m.issym() or m.islnk()) else ""
                    _problem(out, m.name, f"{kind}{target} is not allowed; bundles hold regular files and folders only")
                    continue
                if m.size > MAX_MEMBER_BYTES:
                    _problem(out, m.name, f"{m.size} bytes exceeds the per-file limit {MAX_MEMBER_BYTES}")
                    continue
                out.total_bytes += m.size
                if out.total_bytes > MAX_TOTAL_BYTES:
                    _problem(out, m.name, f"archive content exceeds {MAX_TOTAL_BYTES} bytes")
                    break
                fh = tf.extractfile(m)
                data = fh.read() if fh is not None else b""
                rel = name[len(out.top) + 1:] if "/" in name else ""
                if not rel:
                    _problem(out, m.name, "a file in place of the top folder")
                    continue
                out.files[rel] = data
                out.sha256[rel] = hashlib.sha256(data).hexdigest()
            else:
                # tarfile ends its member loop silently when the data stop where a header should
                # be (an archive cut at a member boundary); a whole archive has zero blocks there
                if tf.fileobj.tell() - tf.offset < tarfile.BLOCKSIZE:
                    _problem(out, path.name, "the archive ends without its end-of-archive blocks: truncated")
    except (tarfile.TarError, OSError, EOFError, ValueError) as exc:
        raise UnreadableInputError(f"{path.name} is corrupt or truncated: {exc}",
                                   "download the bundle again; its digest should match the one quoted") from exc
    if out.members == 0:
        raise UnreadableInputError(f"{path.name} is an empty archive", "bundles are made by make_bundle.py")
    return out


def extract_checked(path: Path, dest: Path, expected: ArchiveContents) -> Path:
    """Extract an archive that :func:`read_archive` found safe into the fresh folder ``dest``
    (which must be empty), member by member with the ``data`` filter; returns the bag root.
    Each extracted file is re-hashed against the stream hash. Raises UnreadableInputError
    if the archive changed in between or the filter refuses a member."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise UnreadableInputError(f"extraction folder {dest} is not empty", "give an empty folder")
    mode = "r|gz" if expected.compressed else "r|"
    try:
        with tarfile.open(path, mode=mode) as tf:
            for m in tf:
                if _check_name(m.name) or not (m.isreg() or m.isdir()):
                    raise UnreadableInputError(f"{m.name}: unsafe member appeared on the second read",
                                               "the archive changed while being verified; do not trust it")
                tf.extract(m, dest, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise UnreadableInputError(f"extraction refused: {exc}", "do not trust this archive") from exc
    root = dest / (expected.top or "")
    for rel, digest in expected.sha256.items():
        f = root / rel
        if not f.is_file() or hashlib.sha256(f.read_bytes()).hexdigest() != digest:
            raise UnreadableInputError(f"{rel} changed between reading and extraction", "do not trust this archive")
    return root
