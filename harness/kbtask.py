"""A KernelBench task file as the harness uses it, in the parent and in a candidate's child alike.

A task file defines ``Model``, ``get_inputs()`` and ``get_init_inputs()`` and reads its sizes
from module globals (``batch_size``, ``dim``, ``N``...). Both processes load the task from the
same pinned bytes and draw inputs with :func:`draw_inputs`, so the parent (references) and the
child (the candidate) hold bit-identical inputs without any tensor crossing the pipe: the seed,
the distribution name and the size overrides are all that travel. A candidate that tampers with
its own process's generator or ``torch.rand`` changes only the inputs it computes on, never
the parent's references.

Distributions (each drawn on the CPU generator, so the bits do not depend on the GPU):

* ``official``: ``torch.manual_seed(seed)`` then the task's ``get_inputs()``;
* ``normal``: the official draw, then every floating-point tensor replaced by standard normal
  values of its shape and dtype from ``torch.Generator().manual_seed(seed + 7919)``;
* ``normal_x100``: the ``normal`` values times 100 (outputs far from atol).

Integer and boolean tensors (indices, masks) and non-tensor inputs stay as the official draw
gives them.
"""
from __future__ import annotations

import ast
import copy
import os
import types
from typing import Any, Mapping

from kbrepro.errors import EnvironmentUnavailableError
from kbrepro.harness import host_memory
from kbrepro.model import sizes as msizes
from kbrepro.model.protocol import DISTRIBUTIONS  # noqa: E402,F401
from kbrepro.model.task_inputs import reduced_sizes

#: the offset of the second generator's seed (a prime, so that seeds 0..n never collide)
_NORMAL_OFFSET = 7919


#: module attributes of a loaded task: its source, and the sizes set so far
_SOURCE, _SIZES = "__kbrepro_source__", "__kbrepro_sizes__"


def load_task(src: bytes, name: str = "kbrepro_task") -> types.ModuleType:
    """Execute a task file's bytes as a fresh module. Raises whatever the file raises."""
    mod = types.ModuleType(name)
    mod.__dict__[_SOURCE], mod.__dict__[_SIZES] = bytes(src), {}
    exec(compile(bytes(src), f"{name}.py", "exec"), mod.__dict__)
    for need in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(mod, need):
            raise ValueError(f"the task defines no {need}")
    return mod


def size_globals(task: types.ModuleType) -> dict[str, msizes.SizeValue]:
    """The task's size globals (candidates for a size override), by name: positive ints and
    tuples of them (:func:`kbrepro.model.sizes.is_size`), as the loaded module holds them."""
    return {k: v for k, v in vars(task).items() if not k.startswith("_") and msizes.is_size(v)}


def apply_overrides(task: types.ModuleType, overrides: Mapping[str, msizes.SizeValue], reset: bool = False) -> None:
    """Set the task's size globals (``{"batch_size": 8}``, ``{"kernel_size": (5, 7)}``; a
    list, as a JSON request carries a tuple, is read as a tuple), on top of those set before
    (or, with ``reset``, on the task's own values: earlier overrides dropped), and
    compute again every module global derived from them (``bias_shape = (out_channels, 1, 1)``,
    ``input_shape = (dim,)``): the task's module-level code runs again with each overridden
    assignment followed by ``name = value``, as :func:`kbrepro.model.task_inputs.input_specs`
    reads it. Raises ValueError for a name that is not one of :func:`size_globals` or a value
    that is not a size of the kind of the task's own (:func:`kbrepro.model.sizes.value_problem`);
    whatever the task's code raises at those sizes."""
    overrides = msizes.canonical_map(overrides)
    known = size_globals(task)
    for k, v in overrides.items():
        if k not in known:
            raise ValueError(f"the task has no size global {k!r} (it has {', '.join(sorted(known)) or 'none'})")
        why = msizes.value_problem(k, v, known[k])
        if why:
            raise ValueError(f"size {why}")
    prev = vars(task).get(_SIZES) or {}
    sizes = dict(overrides) if reset else {**prev, **dict(overrides)}
    src = vars(task).get(_SOURCE)
    if src is None or not (overrides or (reset and prev)):
        for k, v in overrides.items():
            setattr(task, k, v)
        return
    tree = ast.parse(src)
    body = []
    for st in tree.body:
        body.append(st)
        if isinstance(st, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            names = {n.id for t in (st.targets if isinstance(st, ast.Assign) else [st.target])
                     for n in ast.walk(t) if isinstance(n, ast.Name)}
            body += [ast.Assign(targets=[ast.Name(k, ast.Store())], value=ast.Constant(sizes[k]))
                     for k in sorted(names & set(sizes))]
    tree.body = body
    exec(compile(ast.fix_missing_locations(tree), f"{task.__name__}.py", "exec"), task.__dict__)
    task.__dict__[_SIZES] = sizes


def follow_sizes(namespace: dict, task: types.ModuleType) -> list[str]:
    """Set every global of ``namespace`` (a candidate module's) that has the name of one of
    the task's overridden sizes and a value of its kind (an int, or a tuple of as many
    entries: :func:`kbrepro.model.sizes.same_kind`) to the task's value, and return those names. A
    KernelBench candidate copies the task's module-level sizes (``batch_size = 256``) and its
    ``__init__`` or ``forward`` may read them, as the task's ``Model`` does: at a size the run
    set (``--size``, the other shapes of the checking pass) its copy must read what the task's
    module reads, or an honest candidate fails for our override (3/33, issue 28). Only names
    the task overrides, only values of the same kind; module-level code of the candidate that
    already ran keeps what it computed."""
    sizes = vars(task).get(_SIZES) or {}
    out = []
    for k, v in sizes.items():
        if msizes.same_kind(namespace.get(k), v):
            namespace[k] = v
            out.append(k)
    return out


class SetCache:
    """Official draws a process keeps on the host, to give a set drawn again without drawing it
    (issue 29): a candidate's checking pass draws the first seed's official set three times
    (its case, the repeat, the re-drawn weights) and its ``normal`` set starts from the same
    ``get_inputs()`` call; on the CPU generator a 4.3 GB set takes about 6.7 s on the H200
    (KernelBench 1/33). An entry holds the draw's CPU tensors and the CPU generator's state
    right after ``get_inputs()``, which a hit restores (after ``torch.manual_seed(seed)``, as
    the draw starts): every bit and every generator's state are what a draw gives. An entry is kept only where it fits in ``max_bytes`` with those
    kept before (the first draws, the most drawn again, stay). Keyed by the task object itself
    (held) and the sizes set on it, and by the seed."""

    def __init__(self, max_bytes: int | None = None):
        if max_bytes is None:
            try:
                ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
            except (ValueError, OSError, AttributeError):
                ram = 16 << 30
            max_bytes = min(16 << 30, ram // 8)
        self.max_bytes = int(max_bytes)
        self.entries: list[tuple[types.ModuleType, str, int, list, Any, int]] = []

    @staticmethod
    def _sizes(task: types.ModuleType) -> str:
        return repr(sorted((vars(task).get(_SIZES) or {}).items()))

    def get(self, task: types.ModuleType, seed: int):
        sizes = self._sizes(task)
        for t, sz, s, xs, state, _ in self.entries:
            if t is task and sz == sizes and s == seed:
                return xs, state
        return None

    def put(self, task: types.ModuleType, seed: int, xs: list, state) -> bool:
        """Keep ``xs`` where it fits, every tensor of it is on the CPU (a task that draws on the
        GPU is drawn again) and every other value can be deep-copied; returns whether it did."""
        import torch

        tensors = [x for x in xs if isinstance(x, torch.Tensor)]
        n = sum(int(x.numel() * x.element_size()) for x in tensors)
        if any(x.device.type != "cpu" for x in tensors) or sum(e[5] for e in self.entries) + n > self.max_bytes:
            return False
        try:
            copy.deepcopy([x for x in xs if not isinstance(x, torch.Tensor)])
        except Exception:  # a value deepcopy refuses: given as the draw gives it, never kept
            return False
        self.entries.append((task, self._sizes(task), seed, xs, state, n))
        return True


def draw_inputs(task: types.ModuleType, seed: int, distribution: str, device: str,
                cache: SetCache | None = None) -> list[Any]:
    """The input set of ``(seed, distribution)`` (see the module docstring), tensors moved to
    ``device`` (new tensors, never the cache's). With ``cache``, the official ``get_inputs()``
    of ``seed`` is taken from it where it holds it (the generator's state after it restored),
    and kept there where it did not. Raises ValueError for an unknown distribution."""
    import torch

    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"unknown input distribution {distribution!r}")
    hit = cache.get(task, seed) if cache is not None else None
    if hit is not None:
        xs = list(hit[0])
        torch.manual_seed(seed)  # every generator as the draw leaves it: the CUDA ones seeded, the CPU one
        torch.set_rng_state(hit[1])  # where get_inputs() left it
    else:
        torch.manual_seed(seed)
        xs = list(task.get_inputs())
        hit = cache is not None and cache.put(task, seed, xs, torch.get_rng_state())
    if distribution != "official":
        g = torch.Generator().manual_seed(seed + _NORMAL_OFFSET)
        scale = 100.0 if distribution == "normal_x100" else 1.0
        xs = [torch.randn(x.shape, generator=g, dtype=x.dtype) * scale
              if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in xs]
    if not hit:  # nothing of it is kept: as a draw gives it
        return [x.to(device) if isinstance(x, torch.Tensor) else x for x in xs]
    return [x.to(device, copy=True) if isinstance(x, torch.Tensor) else copy.deepcopy(x) for x in xs]


def build_model(task: types.ModuleType, cls, seed: int, device: str):
    """``cls(*task.get_init_inputs())`` after ``torch.manual_seed(seed)``, on ``device`` (the
    way KernelBench builds ``Model`` and ``ModelNew`` with the same weights)."""
    import torch

    torch.manual_seed(seed)
    init = task.get_init_inputs()
    torch.manual_seed(seed)
    return cls(*init).to(device)


def reference_error(src: bytes, sizes: Mapping[str, msizes.SizeValue], seed: int, device: str,
                    task: str = "the task") -> str | None:
    """Why the task's own ``Model`` cannot run at ``sizes`` (the task loaded from ``src``, its
    model built and called once on the official inputs of ``seed``, on ``device``): a one-line
    ``Type: message``, or None where it runs. What the reference does there is the task's
    fact, never a candidate's: the run refuses such sizes before any candidate runs. Running
    out of memory (on the GPU, or on the host: torch's CPU allocator raises a RuntimeError) and
    a task that starts CUDA on a machine without it are the machine's, not the task's facts:
    raises EnvironmentUnavailableError, exit 4 (before, an out-of-memory error at the extra
    shapes left them out as if the task raised, a host one was a usage error, and a task that
    builds its inputs with ``.cuda()`` was told to try other sizes)."""
    import torch

    def once() -> None:  # its model, inputs and outputs are freed when it returns
        task = load_task(src, "kbrepro_preflight_task")
        apply_overrides(task, sizes)
        model = build_model(task, task.Model, seed, device)
        xs = draw_inputs(task, seed, "official", device)
        with torch.no_grad():
            model(*xs)
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    try:
        once()
    except torch.OutOfMemoryError as exc:  # the GPU's memory
        where = ", ".join(f"{k}={msizes.text(v)}" for k, v in sorted(sizes.items())) or "the task's own sizes"
        raise EnvironmentUnavailableError(
            f"the reference ran out of memory on {device} at {where}: {type(exc).__name__}",
            "free the device or run at smaller sizes (--size NAME=VALUE)") from None
    except Exception as exc:  # the task's own code raised: reported, not ours to judge
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        if host_memory.is_out_of_memory(exc):
            raise host_memory.out_of_memory(f"the reference of {task}", sizes, f"{type(exc).__name__}: {msg}"[:200]
                                            if msg else type(exc).__name__,
                                            reduced_sizes(src)) from None
        if not torch.cuda.is_available() and host_memory.needs_cuda(exc):
            raise host_memory.cuda_needed(task, f"its Model or get_inputs() starts CUDA: {type(exc).__name__}: "
                                                f"{msg}"[:200]) from None
        return f"{type(exc).__name__}: {msg}"[:300]
    finally:
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    return None


def _input_names(src: bytes) -> list[str]:
    """The names ``get_inputs()`` returns its inputs under (``return [A, B]``: A, B), where its
    last statement returns a list or tuple of names; else none."""
    try:
        tree = ast.parse(src)
    except (SyntaxError, ValueError):
        return []
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_inputs"), None)
    ret = fn.body[-1] if fn is not None and fn.body else None
    if isinstance(ret, ast.Return) and isinstance(ret.value, (ast.List, ast.Tuple)) and all(
            isinstance(e, ast.Name) for e in ret.value.elts):
        return [e.id for e in ret.value.elts]
    return []


def meta_footprint(src: bytes, sizes: Mapping[str, msizes.SizeValue]) -> dict | None:
    """The bytes of the task's inputs, outputs and weights at ``sizes``, with nothing allocated:
    ``get_inputs()`` and ``Model(*get_init_inputs())`` run under ``torch.device("meta")`` and the
    model called on those meta tensors (shapes and dtypes only). Returns ``{"inputs": [(name,
    bytes)], "outputs": [bytes], "weights": bytes, "largest": elements}`` (``outputs`` empty
    where the forward cannot run on meta: an operator without a meta kernel, a value read from a
    tensor), or None where the inputs cannot be built there (a task that moves them to CUDA: its
    reference's run says so)."""
    import torch

    def nbytes(t) -> int:
        return int(t.numel() * t.element_size())

    try:
        task = load_task(src, "kbrepro_meta_task")
        apply_overrides(task, sizes)
        with torch.device("meta"):
            xs = list(task.get_inputs())
            model = task.Model(*task.get_init_inputs())
    except Exception:  # noqa: BLE001 - whatever the task raises: no estimate, its reference's run tells
        return None
    names = _input_names(src)
    tensors = [(names[i] if len(names) == len(xs) else str(i + 1), x) for i, x in enumerate(xs)
               if isinstance(x, torch.Tensor)]
    weights = sum(nbytes(t) for t in [*model.parameters(), *model.buffers()]) if isinstance(model, torch.nn.Module) else 0
    try:
        with torch.no_grad():
            y = model(*xs)
        outs = [nbytes(t) for t in (y if isinstance(y, (tuple, list)) else (y,)) if isinstance(t, torch.Tensor)]
    except Exception:  # noqa: BLE001 - a forward meta tensors cannot run: inputs and weights only
        outs = []
    largest = max([int(t.numel()) for _, t in tensors] + [o // 4 for o in outs] + [0])
    return {"inputs": [(n, nbytes(t)) for n, t in tensors], "outputs": outs, "weights": weights, "largest": largest}


def checking_pass_bytes(fp: Mapping, seeds: int, references: int, cache_bytes: int | None = None) -> int:
    """The host memory a ``--device cpu`` candidate run holds at once in its checking pass
    (harness/candidate_calls.py: checking_pass), parent and candidate child together, for a
    task whose :func:`meta_footprint` is ``fp``; ``seeds`` the run's seeds, ``references`` the
    references the parent keeps (``Ctx.refs``: one per seed and distribution, and the
    same-buffers set's). Counted from the code, with I the bytes of one input set, O of one
    call's outputs, W of the weights:

    * 4 I: each process holds two sets at once: the parent the set it drew and the copy its
      reference call makes (``reference``: ``clone(xs)``), or the set before while it draws the
      next; the child the checking pass's first set (kept for the same-buffers case:
      ``draw(..., keep=...)``) and the set in use;
    * (references + 3) O: the parent's references, and the output it reads back from the
      child: the frame's bytes, the bytearray and the tensor ``wire.frame_tensor`` makes;
    * 2 W: the task's model in the parent, the candidate's in the child;
    * the official draws each process's :class:`SetCache` keeps (one per seed, where they fit
      its ``max_bytes``; ``cache_bytes``, default as a SetCache sets it);
    * the two int64 copies of one chunk :func:`fingerprint` makes (at most
      :data:`FINGERPRINT_ROWS` x 1024 elements), in one process at a time.

    Measured against this on a 2-core CPU host (KernelBench 1/4 with K=32768, a 256 MiB input,
    and 1/19 with dim=16384, 256 MiB in and out; the full profile; the peak of both processes'
    resident memory less their interpreters'): 1/4 took 2.7 GiB, estimated 3.0; 1/19 took 5.7
    GiB, estimated 5.3. What the interpreters and torch take (about 0.3 GiB a process) is not
    counted."""
    inp = sum(b for _, b in fp["inputs"])
    out = sum(fp["outputs"])
    cap = SetCache(cache_bytes).max_bytes
    cached = inp * min(seeds, cap // inp) if inp else 0
    scratch = 2 * 8 * min(int(fp["largest"]), FINGERPRINT_ROWS * 1024)
    return 4 * inp + (references + 3) * out + 2 * int(fp["weights"]) + 2 * cached + scratch


#: fixed column weights of :func:`fingerprint` (odd 61-bit constants of a simple LCG, seed 1)
def _weights(n: int = 1024) -> list[int]:
    out, x = [], 1
    for _ in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        out.append((x >> 3) | 1)
    return out


_W = _weights()


#: rows of 1024 elements a fingerprint sums at a time (two int64 copies of 512 MiB)
FINGERPRINT_ROWS = 1 << 16


def fingerprint(x) -> str | None:
    """A fingerprint of a tensor's bytes, computed where the tensor lives (no copy to the host):
    its dtype and shape, and three wrapping int64 sums of its bytes viewed as integers (plain,
    weighted by column of a 1024-wide view, weighted by row). Equal bytes give equal
    fingerprints on any device; a change of any element changes the plain sum unless it is
    cancelled on purpose (this detects edits by a kernel, not forgery by an adversary who
    controls the process, which nothing in that process could detect). None for a non-tensor.
    Computed over :data:`FINGERPRINT_ROWS` rows of the view at a time (the sums wrap modulo
    2**64, so the chunks add up to the same bits): an input of 16 GiB (KernelBench 1/45) once
    needed two int64 copies of 32 GiB each, and its out-of-memory error was read as the
    candidate's."""
    import torch

    if not isinstance(x, torch.Tensor):
        return None
    c = x.detach().contiguous()
    if c.dtype == torch.bool:
        c = c.view(torch.uint8)
    size = c.element_size()
    flat = c.reshape(-1)
    if size in (2, 4, 8) and flat.numel():
        v = flat.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[size])
    else:
        v = flat.view(torch.uint8)
    n = v.numel()
    w = torch.tensor(_W, dtype=torch.int64, device=v.device)
    plain = cols = rows = 0
    for r0 in range(0, -(-n // 1024), FINGERPRINT_ROWS):
        part = v[r0 * 1024:(r0 + FINGERPRINT_ROWS) * 1024].to(torch.int64)
        pad = (-part.numel()) % 1024
        if pad:
            part = torch.cat([part, part.new_zeros(pad)])
        m = part.view(-1, 1024)
        plain += int(m.sum())
        cols += int((m * w).sum())
        rows += int((m.sum(1) * torch.arange(r0 + 1, r0 + m.shape[0] + 1, dtype=torch.int64, device=m.device)).sum())
    mask = (1 << 64) - 1
    return f"{x.dtype}|{tuple(x.shape)}|{plain & mask:016x}{cols & mask:016x}{rows & mask:016x}"


def runnable_reduced_sizes(src: bytes, seed: int, device: str, batch: int = 2,
                           plain: int = 64) -> tuple[dict[str, int], list[str]]:
    """The smallest sizes of the ladder at which the task's own ``Model`` runs (the CPU sweep
    of issue 28): every size reduced (:func:`kbrepro.model.task_inputs.reduced_sizes`), then
    ``batch_size`` alone cut to ``batch``, then every size (the batch too) cut to ``plain``,
    then the task's own sizes. Returns the overrides
    (empty: the task's own sizes) and, for each rung skipped, why the reference raised there
    (:func:`reference_error`). A task whose sizes are tied to each other (1/100's batch and
    input shape: the third rung), or to fixed image sizes (3/19, 3/29), or to divisibility
    (3/25's groups) runs on a lower rung. The last rung is not tried, only returned: its
    failure is the run's."""
    full = reduced_sizes(src, batch=batch, plain=plain)
    rungs = [full, {k: v for k, v in full.items() if k == "batch_size"}, reduced_sizes(src, batch=plain, plain=plain)]
    skipped: list[str] = []
    for sizes in dict.fromkeys(tuple(sorted(r.items())) for r in rungs if r):
        err = reference_error(src, dict(sizes), seed, device)
        if err is None:
            return dict(sizes), skipped
        skipped.append(f"{dict(sizes)}: {err}")
    return {}, skipped


__all__ = ["meta_footprint", "checking_pass_bytes", "fingerprint", "DISTRIBUTIONS", "load_task", "size_globals", "apply_overrides", "follow_sizes", "draw_inputs", "build_model", "reference_error", "runnable_reduced_sizes", "SetCache"]
