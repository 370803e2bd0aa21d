"""Paths the user gave, checked up front (DESIGN.md §2: ``paths.py``). One mapping for every
entry point: an input path that cannot be read -> InputPathError (exit 3); an output path that
cannot be written -> OutputPathError (exit 2). Nothing here raises OSError.
"""
from __future__ import annotations

from kbrepro.errors import InputPathError, OutputPathError
from kbrepro.process import deferred_sigint

def _why(exc: OSError) -> str:
    return (exc.strerror or type(exc).__name__).lower()


def _stat(path):
    import os

    try:
        return os.stat(path), None
    except OSError as exc:
        return None, exc


def check_input_file(path, what: str, hint: str | None = None, folder_hint: str | None = None):
    """``path`` as a readable regular file; returns it as a Path. Raises InputPathError, whose next
    step is ``hint`` (``folder_hint`` where ``path`` is a folder)."""
    import os
    import stat
    from pathlib import Path

    p = Path(path)
    hint = hint or f"check the path given as {what}"
    st, err = _stat(p)
    if st is None:
        if err.errno == 2:  # ENOENT
            raise InputPathError(f"{what} {p} does not exist", hint)
        raise InputPathError(f"cannot read {what} {p}: {_why(err)}", hint)
    if stat.S_ISDIR(st.st_mode):
        raise InputPathError(f"{what} {p} is a folder, not a file", folder_hint or hint)
    if not stat.S_ISREG(st.st_mode):
        raise InputPathError(f"{what} {p} is not a regular file (a FIFO, socket or device)", hint)
    if not os.access(p, os.R_OK):
        raise InputPathError(f"cannot read {what} {p}: permission denied", hint)
    return p


def check_input_path(path, what: str, hint: str | None = None):
    """``path`` as a readable folder or regular file (a study: its folder or its study.yaml);
    returns it as a Path. Raises InputPathError."""
    import stat
    from pathlib import Path

    st, _ = _stat(Path(path))
    if st is not None and stat.S_ISDIR(st.st_mode):
        return check_input_dir(path, what, hint)
    return check_input_file(path, what, hint)


def check_input_dir(path, what: str, hint: str | None = None):
    """``path`` as a folder whose entries can be listed; returns it as a Path. Raises InputPathError."""
    import os
    import stat
    from pathlib import Path

    p = Path(path)
    hint = hint or f"check the path given as {what}"
    st, err = _stat(p)
    if st is None:
        if err.errno == 2:
            raise InputPathError(f"{what} {p} does not exist", hint)
        raise InputPathError(f"cannot read {what} {p}: {_why(err)}", hint)
    if not stat.S_ISDIR(st.st_mode):
        raise InputPathError(f"{what} {p} is a file, not a folder", hint)
    if not os.access(p, os.R_OK | os.X_OK):
        raise InputPathError(f"cannot read {what} {p}: permission denied", hint)
    return p


def _probe_write(folder, name: str) -> OSError | None:
    """Create and remove a temporary file named as ``harness.jsonio.atomic_write_bytes``
    names its own (``.<name>.XXXX.tmp``) in ``folder``: whether the atomic write can happen."""
    import os
    import tempfile

    # the whole probe with Ctrl-C and SIGTERM held: an interrupt landing between the file's
    # creation and its removal (a second one, re-sent from inside an import) left it behind
    with deferred_sigint():
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
        except OSError as exc:
            return exc
        os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
    return None


def check_output_file(path, what: str, *, companions: tuple[str, ...] = ()):
    """``path`` as a file that can be written atomically (a temporary file beside it, then a
    rename); ``companions``: suffixes of files written beside it (``.sha256-digest``),
    checked too. The folder must exist. Returns the Path. Raises OutputPathError."""
    import stat
    from pathlib import Path

    p = Path(path)
    hint = f"choose another {what}"
    if not p.name or p.name in (".", ".."):
        raise OutputPathError(f"{what} {path} names no file", hint)
    parent = p.parent
    for name in (p.name, *(p.name + s for s in companions)):
        target = parent / name
        label = what if name == p.name else f"{target.name} (written beside {what})"
        st, err = _stat(target)
        if st is not None:
            if stat.S_ISDIR(st.st_mode):
                raise OutputPathError(f"{label} {target if name == p.name else ''}".rstrip() + " is a folder",
                                      f"{hint}: give a file name")
            if not stat.S_ISREG(st.st_mode):
                raise OutputPathError(f"{label} {target if name == p.name else ''}".rstrip()
                                      + " exists and is not a regular file", hint)
        elif err.errno not in (2,):  # ENOENT is fine: the file will be created
            if err.errno == 20:  # ENOTDIR: a component of the folder is a file
                raise OutputPathError(f"cannot write {what} {target}: a part of its folder is a file", hint)
            raise OutputPathError(f"cannot write {what} {target}: {_why(err)}", hint)
    st, err = _stat(parent)
    if st is None:
        if err.errno == 2:
            raise OutputPathError(f"cannot write {what} {p}: folder {parent} does not exist",
                                  f"create the folder first, or {hint}")
        raise OutputPathError(f"cannot write {what} {p}: {_why(err)}", hint)
    if not stat.S_ISDIR(st.st_mode):
        raise OutputPathError(f"cannot write {what} {p}: {parent} is not a folder", hint)
    for name in (p.name, *(p.name + s for s in companions)):
        err = _probe_write(parent, name)
        if err is not None:
            raise OutputPathError(f"cannot write {what} {parent / name}: {_why(err)}", hint)
    return p


def prepare_output_dir(path, what: str, *, must_be_empty: bool = True):
    """Create ``path`` (and its parents) as a writable folder, or accept it if it exists and
    (with ``must_be_empty``) is empty. Returns ``(Path, created)`` where ``created`` lists
    the folders made here, deepest first (remove them with :func:`remove_created`).
    Raises OutputPathError."""
    import os
    import stat
    from pathlib import Path

    p = Path(path)
    hint = f"choose another {what}"
    st, err = _stat(p)
    created: list = []
    if st is not None:
        if not stat.S_ISDIR(st.st_mode):
            raise OutputPathError(f"{what} {p} exists and is not a folder", hint)
        try:
            nonempty = any(True for _ in os.scandir(p))
        except OSError as exc:
            raise OutputPathError(f"cannot use {what} {p}: {_why(exc)}", hint) from exc
        if must_be_empty and nonempty:
            raise OutputPathError(f"{what} {p} is not empty", f"{hint}, or empty it; nothing was overwritten")
    elif err.errno == 2:
        missing, q = [], p
        while True:
            s, e = _stat(q)
            if s is not None or e.errno != 2 or q.parent == q:
                break
            missing.append(q)
            q = q.parent
        try:
            for d in reversed(missing):
                os.mkdir(d)
                created.insert(0, d)
        except OSError as exc:
            remove_created(created)
            why = "a part of its folder is a file" if exc.errno == 20 else _why(exc)
            raise OutputPathError(f"cannot create {what} {p}: {why}", hint) from exc
    else:
        why = "a part of its folder is a file" if err.errno == 20 else _why(err)
        raise OutputPathError(f"cannot use {what} {p}: {why}", hint)
    e = _probe_write(p, "probe")
    if e is not None:
        remove_created(created)
        raise OutputPathError(f"cannot write into {what} {p}: {_why(e)}", hint)
    return p, created


def remove_created(created) -> None:
    """Remove the folders :func:`prepare_output_dir` made, if they are still empty."""
    import os

    for d in created:
        try:
            os.rmdir(d)
        except OSError:
            pass


def refuse_input_as_output(output, inputs, option: str) -> None:
    """An output path that names one of the command's own input files (``--json`` set to the
    archive, the digest file or an audited results file) would destroy that input: refused
    with OutputPathError (exit 2) before any work."""
    import os

    out = os.path.abspath(os.fspath(output))
    for inp in inputs:
        if inp is None:
            continue
        path = os.fspath(inp)
        try:
            same = os.path.exists(out) and os.path.exists(path) and os.path.samefile(out, path)
        except OSError:
            same = False
        if same or os.path.abspath(path) == out:
            raise OutputPathError(f"{option} {output} is one of this command's inputs; writing it would destroy it",
                                  f"choose another {option} path")


__all__ = ["check_input_file", "check_input_path", "check_input_dir", "check_output_file", "prepare_output_dir",
           "remove_created", "refuse_input_as_output"]
