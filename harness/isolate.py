"""A KernelBench candidate (``ModelNew``) runs in a child process; the parent only asks and checks.

The parent (the harness that computes references, checks, times the baselines, packs or
verifies) never imports the candidate. :class:`CandidateProcess` spawns a child that serves
requests over one pipe: ``build`` (:mod:`.candidate_server`; load the pinned task and the candidate from bytes, build
``ModelNew`` with the task's init seed), ``draw`` (an input set drawn from a seed by
:mod:`kbrepro.harness.kbtask`, the same bits as the parent's), ``call`` (one call, observed:
input digests before and after, the output's exact type, a poisoned allocator, the profiler's
kernels and streams, work still running after the call returned, threads left behind,
precision flags), ``time`` (CUDA-event timing of the candidate alone) and ``output`` (one kept
output of the last ``time`` request, for a spot check the parent chooses after the fact).

Messages are frames of bytes (:mod:`.wire`): a JSON header, then raw tensor bytes named by it. The parent
reads a reply within the request's deadline, bounds every frame, and parses it strictly:
never a pickle, which the candidate could forge into code run by the parent.

What the parent can trust, and what it cannot (red-team passes of issue 11):

* the outputs are the candidate's outputs, whatever forged them: every verdict on correctness
  is the parent's, on its own references, computed from inputs the candidate never touched;
* the parent's own clock around a request is an upper bound on the work the child did in
  that request; a ``time`` reply's event times come from the candidate's process and are
  **claims**: the parent compares them with its clock (``host_clock_agrees``) and asks for one
  of the timed outputs after the fact (``timed_outputs_correct``);
* everything else a reply says about the child (digests, types, kernels, threads, flags) is
  what honest code in the child observed. A candidate that takes over its own interpreter (it
  can read this module's frames) can forge it. The checks catch candidates that cheat through
  the kernel they ship, which is what KernelBench's adversarial tests and the public cheats do;
  they do not stop a candidate that attacks the harness itself;
* by default the child runs as our user with our filesystem and GPU: it can signal the
  parent, write files (the project's own code among them), read or write the parent's memory
  (as root even when the parent is not dumpable), read other processes' GPU memory through the
  driver, or leave processes behind that left its process group. ``run_as`` (the harness reads
  ``KBREPRO_CANDIDATE_UID``) starts it as another user, which closes the first four for an
  unprivileged id. It is not a sandbox; run an untrusted candidate in a container (docs/checks.md).
"""
from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
from typing import Any, Callable, Mapping, Sequence

from kbrepro.errors import CandidateFailure, EnvironmentUnavailableError, ReproError
from kbrepro.harness.candidate_server import child_main
from kbrepro.harness.wire import (MAX_FRAME_BYTES, MAX_FRAMES, MAX_HEADER_BYTES, MAX_REPLY_DEPTH, Reply, send_frames,
                                  shape_problem)
from kbrepro.harness import host_memory, jsonio, startenv


#: seconds a request may take by default (a load_inline build takes about 40 s on the H200)
DEFAULT_TIMEOUT_S = 600.0


def start_with_env(proc, env: Mapping[str, str]) -> None:
    """Start the spawned ``proc`` (a ``multiprocessing`` process, not started) with the
    environment kbrepro started with (:mod:`kbrepro.harness.startenv`: not what a library
    set in this process since, e.g. Inductor's ``TRITON_PTXAS_PATH``) and ``env`` over it, in
    effect from its first instruction (before it imports torch); this process's own
    environment is restored afterwards."""
    with startenv.launching(env):
        proc.start()


def _printable(text: str) -> str:
    """``text`` with control and non-ASCII characters replaced by ``?``."""
    return "".join(c if " " <= c <= "~" else "?" for c in text)


def _not_dumpable() -> None:
    """Make this (the parent's) process not dumpable (Linux ``prctl(PR_SET_DUMPABLE, 0)``): a
    child running as the same, unprivileged user can then neither ptrace it nor open
    ``/proc/<parent>/mem``. It does not stop a child running as root (CAP_SYS_PTRACE); the
    parent also re-checks its references after every call (harness/candidate.py)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError, TypeError):  # not Linux, or no prctl
        pass


def _kill_group(pid: int) -> None:
    """Kill what is left of the child's process group (grandchildren it started and that
    stayed in it; one that made a session of its own escapes: see the module docstring)."""
    import signal

    try:
        os.killpg(pid, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


class CandidateProcess:
    """One spawned child serving one candidate (see the module docstring), as the user id
    ``run_as`` if given (the parent must be root: the child then cannot write the parent's
    files, ptrace it or read its memory). Use as a context manager; :meth:`request` raises :class:`~kbrepro.errors.CandidateFailure` with a one-line
    reason when the child raises, exits, hangs past the deadline or sends a malformed reply
    (the child is then killed: a request after a failure raises too)."""

    def __init__(self, env: Mapping[str, str] | None = None, budget_s: float | None = None,
                 run_as: int | None = None):
        self._env = dict(env or {})
        self.run_as = run_as
        self.proc = self.conn = None
        self.dead: str | None = None
        self.budget_s = budget_s
        self.deadline = None

    def __enter__(self) -> "CandidateProcess":
        _not_dumpable()
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=child_main, args=(child, self.run_as, os.getpid()), daemon=True)
        start_with_env(self.proc, self._env)  # the child's extension and Triton cache folders
        child.close()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.proc is None:
            return
        if self.dead is None:
            try:
                self.request({"cmd": "quit"}, timeout_s=10)
            except CandidateFailure:
                pass
        self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=5)
        _kill_group(self.proc.pid)
        self.conn.close()
        self.proc = None

    def _fail(self, why: str) -> CandidateFailure:
        self.dead = why
        if self.proc is not None and self.proc.is_alive():
            self.proc.kill()
        return CandidateFailure(why)

    def request(self, header: dict, frames: Sequence[bytes] = (), *, timeout_s: float = DEFAULT_TIMEOUT_S,
                max_bytes: int = MAX_FRAME_BYTES) -> Reply:
        """Send one request and wait at most ``timeout_s`` seconds (and no longer than the
        process's whole budget) for its whole reply, whose frames may hold at most
        ``max_bytes`` bytes in all. The reply header is parsed strictly (no NaN, bounded depth
        and size: :func:`kbrepro.harness.jsonio.loads_strict`) and checked against
        :data:`REPLY_FIELDS`; anything else is the candidate's failure, but for a host
        allocation the child reports failing (the machine's: EnvironmentUnavailableError, exit 4,
        no verdict; :mod:`kbrepro.harness.host_memory`)."""
        return self.request_while(header, None, frames, timeout_s=timeout_s, max_bytes=max_bytes)[0]

    def request_while(self, header: dict, meanwhile: Callable[[], Any] | None, frames: Sequence[bytes] = (), *,
                      timeout_s: float = DEFAULT_TIMEOUT_S, max_bytes: int = MAX_FRAME_BYTES) -> tuple[Reply, Any]:
        """:meth:`request`, with the parent's own ``meanwhile()`` run after the request is sent
        and before its reply is awaited (the parent's draw of the same set, or its build of the
        task's model, while the child draws or builds: issue 29). Returns the reply and what
        ``meanwhile`` returned. The deadline counts from the send, and ``host_ms`` ends when the
        whole reply was read, not when ``meanwhile`` returned. Where ``meanwhile`` raises, the
        child is stopped (its reply would be read by no one) and the exception propagates: it
        is the harness's or the task's, never the candidate's."""
        if self.dead is not None:
            raise CandidateFailure(self.dead)
        if self.deadline is None and self.budget_s is not None:  # from the first request: the parent's own
            self.deadline = time.monotonic() + self.budget_s  # work before it (the task's model) is not the candidate's
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise self._fail(f"the candidate used up its budget of {self.budget_s:g} s")
            timeout_s = min(timeout_s, left)
        got: list = []
        ended: list = []

        def read() -> None:  # in a thread, so that a reply that stops half-way cannot outlast the deadline
            try:
                head = self.conn.recv_bytes(MAX_HEADER_BYTES)
                doc = jsonio.loads_strict(head, "a reply", max_bytes=MAX_HEADER_BYTES, max_depth=MAX_REPLY_DEPTH)
                if not isinstance(doc, dict):
                    raise ValueError("the reply is not an object")
                sizes = doc.get("frames", [])
                if not isinstance(sizes, list) or len(sizes) > MAX_FRAMES or not all(
                        type(s) is int and 0 <= s for s in sizes) or sum(sizes) > max_bytes:
                    raise ValueError(f"bad frame list (at most {MAX_FRAMES} frames and {max_bytes} bytes)")
                fr = []
                for s in sizes:
                    b = self.conn.recv_bytes(max(s, 1))
                    if len(b) != s:
                        raise ValueError("a frame of the wrong size")
                    fr.append(b)
                got.append((doc, tuple(fr)))
                ended.append(time.perf_counter())
            except (EOFError, ConnectionResetError):
                got.append("eof")
            except MemoryError:  # an allowed reply this host cannot hold: ours, not the candidate's
                got.append("memory")
            except (OSError, ValueError, UnicodeDecodeError, ReproError) as exc:
                got.append(f"malformed: {type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}")

        t0 = time.perf_counter()
        try:
            send_frames(self.conn, header, frames)
        except (OSError, BrokenPipeError):
            raise self._fail(self._exit_reason()) from None
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        result = None
        if meanwhile is not None:
            try:
                result = meanwhile()
            except BaseException:
                self._fail("the harness stopped waiting for the candidate's reply")
                raise
        reader.join(max(0.0, timeout_s - (time.perf_counter() - t0)))
        host_ms = ((ended[0] if ended else time.perf_counter()) - t0) * 1e3
        if reader.is_alive():
            raise self._fail(f"the candidate's process did not answer {header.get('cmd')!r} within {timeout_s:g} s")
        out = got[0] if got else "eof"
        if out == "eof":
            raise self._fail(self._exit_reason())
        if out == "memory":
            self.close()
            raise EnvironmentUnavailableError(f"this host ran out of memory reading the reply to {header.get('cmd')!r} "
                                              f"(at most {max_bytes} bytes allowed)",
                                              "run on a host with more memory, or at smaller sizes (--size)")
        if isinstance(out, str):
            raise self._fail(f"a {out} reply to {header.get('cmd')!r}")
        doc, fr = out
        if doc.get("ok") is not True:
            err = _printable(str(doc.get("error") or "the candidate failed"))[:300]
            if host_memory.out_of_memory_text(err):  # the host's memory, not the candidate's failure: the
                self.close()  # run stops (exit 4) with no verdict, so a candidate gains nothing by saying it
                raise host_memory.out_of_memory("the candidate's process", None,
                                                f"answering {header.get('cmd')!r}: {err}"[:300])
            raise CandidateFailure(err)
        bad = shape_problem(str(header.get("cmd")), doc)
        if bad:
            raise self._fail(f"a malformed reply to {header.get('cmd')!r}: {bad}")
        return Reply(doc, fr, host_ms), result

    def _exit_reason(self) -> str:
        if self.proc is not None:
            self.proc.join(timeout=5)
            code = self.proc.exitcode
            if code is not None:
                return f"the candidate's process ended with exit code {code}"
        return "the candidate's process closed its pipe"


__all__ = ["CandidateProcess", "DEFAULT_TIMEOUT_S", "start_with_env"]
