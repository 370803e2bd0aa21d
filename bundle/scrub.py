"""Scrubbing of logs before packing: no hostnames, user names, home paths, machine paths or
raw GPU UUIDs leave the machine.

What is replaced: this machine's hostname and user name (as whole words), home folders
(``/home/<user>``, ``/Users/<user>``, ``/root``), the project root, site-packages prefixes,
temporary folders, and GPU/MIG UUIDs (replaced by ``GPU-sha256:<first 12 hex>``).
"""
from __future__ import annotations

import getpass
import hashlib
import os
import re
import socket
from pathlib import Path

_UUID = re.compile(r"\b(GPU|MIG)-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
_HOME = re.compile(r"(/home/[^/\s:'\"]+|/Users/[^/\s:'\"]+|/root)(?=[/\s:'\"]|$)")
_SITE = re.compile(r"/[^\s:'\"]*/(site-packages|dist-packages)")
_TMP = re.compile(r"/tmp/[^\s:'\"]+")


def _words() -> list[str]:
    out = []
    for fn in (socket.gethostname, getpass.getuser):
        try:
            w = fn()
        except Exception:
            continue
        if w and len(w) >= 3 and w not in ("root", "localhost"):
            out.append(w)
    return out


def scrub_text(text: str, *, extra_paths: list[str] | None = None) -> str:
    """``text`` with identifying strings replaced (see module docstring)."""
    text = _UUID.sub(lambda m: f"{m.group(1)}-sha256:{hashlib.sha256(m.group(0).encode()).hexdigest()[:12]}", text)
    roots = [str(Path(__file__).resolve().parent.parent)] + list(extra_paths or [])
    for r in sorted(set(roots), key=len, reverse=True):
        if r and r != "/":
            text = text.replace(r, "<project>" if r == roots[0] else "<path>")
    text = _SITE.sub(lambda m: f"<{m.group(1)}>", text)
    text = _TMP.sub("<tmp>", text)
    text = _HOME.sub("<home>", text)
    for w in _words():
        text = re.sub(rf"\b{re.escape(w)}\b", "<host-or-user>", text)
    return text


def scrub_bytes(data: bytes) -> bytes:
    return scrub_text(data.decode("utf-8", errors="replace")).encode("utf-8")


_TMP_BYTES = re.compile(rb"/tmp/[A-Za-z0-9_.+-]+")
_HOME_BYTES = re.compile(rb"/home/[A-Za-z0-9_.+-]+|/Users/[A-Za-z0-9_.+-]+|/root(?=/)")


def scrub_binary(data: bytes, paths: list[str] | None = None) -> bytes:
    """``data`` (a built binary: an ELF ``.so``, a cubin) with machine paths overwritten in
    place, each by a filler of the same length (``<path>____``), so that offsets and sizes
    inside the file do not move: the folders in ``paths``, temporary folders and home folders.
    The code is untouched; only the strings that name where it was built change."""
    def fill(tag: bytes):
        return lambda m: (tag + b"_" * max(0, len(m.group(0)) - len(tag)))[: len(m.group(0))]

    for p in sorted({q for q in (paths or []) if q and q != "/"}, key=len, reverse=True):
        data = re.sub(re.escape(p.encode()), fill(b"<path>"), data)
    data = _TMP_BYTES.sub(fill(b"<tmp>"), data)
    return _HOME_BYTES.sub(fill(b"<home>"), data)


def find_leaks(text: str) -> list[str]:
    """Identifying strings still present in ``text`` (for tests and the verifier)."""
    leaks = [m.group(0) for m in _UUID.finditer(text)] + [m.group(0) for m in _HOME.finditer(text)]
    for w in _words():
        if re.search(rf"\b{re.escape(w)}\b", text):
            leaks.append(w)
    cwd = os.getcwd()
    if len(cwd) > 1 and cwd in text:
        leaks.append(cwd)
    return leaks
