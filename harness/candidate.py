"""The KernelBench-candidate study kind: check, time and trace one ``ModelNew`` against its task.

:func:`run_candidate` takes a candidate file's bytes and the pinned task file's bytes and
returns one JSON-ready record (``candidates.json``, schema ``kbrepro/candidates``): what the
harness observed, the verdicts of :mod:`kbrepro.harness.cheats` derived from it, the timing
blocks, and the provenance of what the candidate built. Steps, in order:

1. **build** in a spawned child (:class:`~kbrepro.harness.isolate.CandidateProcess`): task and
   candidate from bytes, ``ModelNew`` after ``torch.manual_seed(seed)`` with the task's
   ``get_init_inputs()`` (KernelBench's order), precision flags recorded before the import
   and restored after the build; the child's extension and Triton cache folders are ours;
   the parent's clock gives the compile time, kept apart from every timing;
2. **checking pass**: every seed x input distribution, then the same values written into the
   first set's tensors, a repeat in new tensors, two calls after poisoning the allocator's
   free memory with different bytes, one profiled call; each call's output compared by the
   parent with its own reference (``Model`` with the same init seed, on its own draw of the
   same inputs) under the official predicate, ``torch.allclose(reference, candidate)``;
3. **timing**: rounds of the arms in a shuffled order (``random.Random(order_seed)``), the
   baselines (eager, TorchScript, ``torch.compile`` default and max-autotune) timed here with
   CUDA events, the candidate timed in its child with CUDA events and clocked here around each
   request; warm L2, then cold L2 (a flush of ``flush_bytes`` written before every invocation,
   inside the timed region, in every arm); then per-call times on fresh device-drawn input
   sets with one output picked after each round and checked, and on one repeated set;
4. re-drawn weights and extra shapes (size globals of the task overridden), each checked;
5. provenance: every file of the extension build (sources, ``build.ninja`` with the exact
   nvcc and host-compiler command lines, the ``.so``), the cubins and SASS inside it
   (``cuobjdump``) with FTZ evidence, Triton's cache (cubin, PTX, metadata), tool versions.

Raises nothing for the candidate's failures (they are its verdicts); raises
EnvironmentUnavailableError where ``device`` is CUDA and none is present.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Mapping

from kbrepro.errors import CandidateFailure, EnvironmentUnavailableError, HarnessError, ReproError, UsageError
from kbrepro.harness import candidate_timing, cheats_v2, host_memory, kbtask
from kbrepro.harness.candidate_calls import (CandidateSpec, Ctx, after_timing, case, checked, checking_pass,  # noqa: F401
                                             draw, reference, seed_for)
from kbrepro.harness.checks import Tolerance
from kbrepro.harness.isolate import CandidateProcess
from kbrepro.model import candidates as mc, protocol
from kbrepro.model.protocol import BASELINES, PROFILES, CandidateConfig  # noqa: F401 (the engine's names)
from kbrepro.model.source_rules import plain_pytorch
from kbrepro.model.task_inputs import reduced_sizes
from kbrepro.model.provenance_rules import (MAX_BUILDS, MAX_COMPONENT, MAX_PROVENANCE_FILE, MAX_PROVENANCE_TOTAL,
                                             fit_component, ninja_commands)
from kbrepro.kernels.compile import sass_ftz_counts, sass_says_ftz

#: the largest provenance file copied into a bundle, and the most per candidate
MAX_PROVENANCE_FILES = 500
#: build outputs never copied (object files are the .so's inputs; the .so is kept; ninja's own
#: logs and dependency databases hold machine paths and no evidence)
_SKIP_SUFFIXES = (".o", ".d", ".lock", ".pyc", ".ninja_deps", ".ninja_log")


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _tool_version(cmd: list[str], line: int = -1) -> str | None:
    """One line of ``cmd``'s output (``nvcc --version`` ends with its build, ``c++ --version``
    starts with its name and version)."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = [ln for ln in (p.stdout or p.stderr).strip().splitlines() if ln.strip()]
    return out[line][:200] if out else None


def _triton_version() -> str | None:
    """Triton's version from the installed distribution's metadata (read, never imported)."""
    from importlib import metadata

    try:
        return metadata.version("triton")
    except metadata.PackageNotFoundError:
        return None


def _walk_files(root: Path):
    """Regular files under ``root`` (sorted, relative POSIX paths), never following a
    symbolic link, at most :data:`MAX_PROVENANCE_FILES` of them."""
    out = []
    for d, dirs, names in os.walk(root, followlinks=False):
        dirs.sort()
        for n in sorted(names):
            p = Path(d) / n
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if not __import__("stat").S_ISREG(st.st_mode):
                continue
            out.append((p, st.st_size))
            if len(out) >= MAX_PROVENANCE_FILES:
                return out
    return out


def _read_bounded(p: Path, size: int) -> tuple[str, bytes | None]:
    """sha256 of the file, streamed, and its bytes when at most :data:`MAX_PROVENANCE_FILE`
    (opened without following a link: O_NOFOLLOW)."""
    h = hashlib.sha256()
    keep = size <= MAX_PROVENANCE_FILE
    chunks = []
    fd = os.open(p, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            h.update(b)
            if keep:
                chunks.append(b)
                keep = sum(map(len, chunks)) <= MAX_PROVENANCE_FILE
    return h.hexdigest(), (b"".join(chunks) if keep else None)


def collect_provenance(name: str, ext_dir: Path, triton_dir: Path, out_dir: Path,
                       tools: Mapping[str, str | None] | None = None) -> dict:
    """Copy what the candidate built into ``out_dir`` (a folder the parent made after the
    child ended: ``ext/...``, ``triton/...``, ``sass/...``) and describe it: files with sha256
    and bytes (at most :data:`MAX_PROVENANCE_FILES`; regular files only, no link followed; a
    file over :data:`MAX_PROVENANCE_FILE` or past :data:`MAX_PROVENANCE_TOTAL` listed with its
    hash, not copied), the ``build.ninja`` command lines (at most 20 builds), cubins and SASS
    from ``cuobjdump`` with FTZ evidence (kernels.compile), tool versions. ``tools``: the
    absolute paths of nvcc, cuobjdump and the host compiler, resolved before the child ran."""
    tools = dict(tools) if tools is not None else {"nvcc": shutil.which("nvcc"), "cuobjdump": shutil.which("cuobjdump"),
                                                   "cxx": shutil.which(os.environ.get("CXX", "c++"))}
    files, total, builds = [], 0, []
    for root, kind in ((ext_dir, "ext"), (triton_dir, "triton")):
        if not root.is_dir() or root.is_symlink():
            continue
        for p, size in _walk_files(root):
            if p.suffix in _SKIP_SUFFIXES or p.name in _SKIP_SUFFIXES:
                continue
            try:
                digest, data = _read_bounded(p, size)
            except OSError:
                continue
            rel = f"{kind}/{p.relative_to(root).as_posix()}"
            rec = {"path": rel, "sha256": digest, "bytes": size if data is None else len(data), "copied": False}
            if data is not None and total + len(data) <= MAX_PROVENANCE_TOTAL:
                dst = out_dir / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_bytes(data)
                total += len(data)
                rec["copied"] = True
            files.append(rec)
            if p.name == "build.ninja" and rec["copied"] and len(builds) < MAX_BUILDS:
                builds.append({"path": rel, **ninja_commands(data.decode("utf-8", "replace"))})
    binaries = []
    cuobjdump = tools.get("cuobjdump")
    for rec in [f for f in files if f["copied"] and (f["path"].endswith(".so") or f["path"].endswith(".cubin"))][:200]:
        src = out_dir / rec["path"]  # the parent's copy, whose hash is recorded
        entry = {"file": rec["path"], "sha256": rec["sha256"]}
        if cuobjdump is None:
            entry["sass"] = None
            entry["reason"] = "cuobjdump not found"
            binaries.append(entry)
            continue
        try:
            sass = subprocess.run([cuobjdump, "-sass", str(src)], capture_output=True, text=True, timeout=120).stdout
            elves = subprocess.run([cuobjdump, "-lelf", str(src)], capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.TimeoutExpired) as exc:
            entry["reason"] = f"cuobjdump failed: {type(exc).__name__}"
            binaries.append(entry)
            continue
        stem = fit_component(rec["path"].replace("/", "_"), MAX_COMPONENT - len(".sass"))
        if sass.strip():
            dst = out_dir / "sass" / f"{stem}.sass"
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_text(sass)
            counts = sass_ftz_counts(sass)
            entry.update(sass_file=f"sass/{stem}.sass", sass_sha256=_sha(sass.encode()), ftz_counts=counts,
                         sass_says_ftz=sass_says_ftz(counts))
        entry["elf"] = [ln.split(":", 1)[-1].strip() for ln in elves.splitlines() if "ELF file" in ln][:50]
        binaries.append(entry)
    versions = {"nvcc": _tool_version([tools["nvcc"], "--version"]) if tools.get("nvcc") else None,
                "cxx": _tool_version([tools["cxx"], "--version"], 0) if tools.get("cxx") else None,
                "cuobjdump": _tool_version([cuobjdump, "--version"]) if cuobjdump else None}
    versions["triton"] = tools.get("triton")
    kinds = sorted({"load_inline" for b in builds} | {"triton" for f in files if f["path"].startswith("triton/")
                                                      and f["path"].endswith(".cubin")})
    return {"files": files, "builds": builds, "binaries": binaries, "versions": versions, "built_with": kinds,
            "copied_bytes": total, "dir": str(out_dir)}


#: the environment variable naming the user id a candidate's child runs as (the parent must be root)
UID_ENV = "KBREPRO_CANDIDATE_UID"


def candidate_uid() -> int | None:
    """The user id of ``$KBREPRO_CANDIDATE_UID`` (e.g. 65534, nobody), or None where unset.
    Raises UsageError for a value that is not a positive integer or a parent that is not root
    (only root can start a process as another user)."""
    v = os.environ.get(UID_ENV)
    if not v:
        return None
    if not v.isdigit() or int(v) == 0:
        raise UsageError(f"{UID_ENV}={v!r} is not a user id other than root's", f"e.g. {UID_ENV}=65534")
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        raise UsageError(f"{UID_ENV} needs the harness to run as root (it starts the candidate as that user)",
                         f"unset {UID_ENV}, or run as root, or in a container (docs/checks.md)")
    return int(v)


def run_candidate(spec: CandidateSpec, cfg: CandidateConfig, workdir: Path, *, device: str = "cuda",
                  progress: Callable[[str], None] | None = None, bandwidth_gbps: float | None = None) -> dict:
    """Check, time and trace ``spec`` as the module docstring says, in ``workdir`` (the
    child's build folders; provenance is copied to ``workdir/provenance``). Returns the
    candidate's record; ``bandwidth_gbps`` (device copy bandwidth) feeds the roofline check."""

    say = progress or (lambda m: None)
    workdir = Path(workdir)
    ext, tri = workdir / "build" / "extensions", workdir / "build" / "triton"
    ext.mkdir(parents=True, exist_ok=True)
    tri.mkdir(parents=True, exist_ok=True)
    env = {"TORCH_EXTENSIONS_DIR": str(ext), "TRITON_CACHE_DIR": str(tri), "CUDA_CACHE_DISABLE": "1"}
    run_as = candidate_uid()
    if run_as is not None:  # the child's own folders, and a home of its own for the caches it writes
        home = workdir / "build" / "home"
        home.mkdir(parents=True, exist_ok=True)
        for d in (workdir / "build", ext, tri, home):
            os.chown(d, run_as, run_as)
        env.update(HOME=str(home), TRITON_HOME=str(home), XDG_CACHE_HOME=str(home))
    tol = Tolerance(cfg.atol, cfg.rtol)
    task = kbtask.load_task(spec.task_source, "kbrepro_reference_task")
    kbtask.apply_overrides(task, dict(cfg.sizes))
    rec: dict = {"name": spec.name, "source_sha256": _sha(spec.source), "task": spec.task_path,
                 "task_sha256": _sha(spec.task_source), "config": cfg.to_doc(), "stages": []}
    blocks: list = []
    timing: dict = {}
    obs: dict = {"failure": None}
    t_all = time.perf_counter()
    # what the parent runs after the child started is loaded before it: a child that plants a
    # module on sys.path (it runs as our user) must not get it imported here
    import importlib

    importlib.import_module("kbrepro.kernels.compile")  # collect_provenance's FTZ evidence
    try:
        importlib.import_module("triton")
    except Exception:  # Triton is optional
        pass
    tools = {"nvcc": shutil.which("nvcc"), "cuobjdump": shutil.which("cuobjdump"),
             "cxx": shutil.which(os.environ.get("CXX", "c++")), "triton": _triton_version()}
    with CandidateProcess(env, budget_s=cfg.budget_s, run_as=run_as) as proc:
        # the task's model is built while the child starts and imports torch (3 to 5 s), before
        # the child is sent anything of the candidate's (see the imports above)
        try:
            model = kbtask.build_model(task, task.Model, cfg.seeds[0], device)
        except Exception as exc:
            if not host_memory.is_out_of_memory(exc):
                raise
            raise host_memory.out_of_memory(spec.task_path, dict(cfg.sizes), f"building the task's Model: "
                                            f"{type(exc).__name__}", reduced_sizes(spec.task_source)) from None
        c = Ctx(spec, cfg, device, tol, proc, task, model, say, obs)

        def stage(name: str, fn: Callable[[], None]) -> bool:
            t0 = time.perf_counter()
            say(f"{spec.name}: {name}")
            try:
                fn()
                return True
            except CandidateFailure as exc:
                obs["failure"] = f"{name}: {exc.message}"[:400]
                say(f"{spec.name}: {name} failed: {exc.message}")
                return False
            except ReproError:
                raise
            except Exception as exc:
                if host_memory.is_out_of_memory(exc):  # the machine's: never the candidate's, nor ours
                    raise host_memory.out_of_memory(spec.task_path, dict(cfg.sizes), f"the {name} stage of "
                                                    f"{spec.name}: {type(exc).__name__}: {str(exc).strip()[:160]}",
                                                    reduced_sizes(spec.task_source)) from None
                # Replies are checked where they are read (isolate's reply shapes, the model's
                # types: a value the child reported that the model refuses is a CandidateFailure),
                # so what still raises here is our code: a harness error, never the candidate's
                # failure (a scalar output once read as "caught by ran")
                msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                raise HarnessError(f"harness error in the {name} stage of {spec.name}: {type(exc).__name__}: "
                                   f"{msg}"[:400], "the candidate is not blamed; please report this (rerun with "
                                   "KBREPRO_DEBUG=1 for the traceback)") from exc
            finally:
                rec["stages"].append({"name": name, "seconds": time.perf_counter() - t0})

        def build() -> None:
            t0 = time.perf_counter()
            flags = {"allow_tf32_matmul": False, "allow_tf32_cudnn": True, "float32_matmul_precision": "highest",
                     "allow_fp16_reduced_precision_reduction": True, "allow_bf16_reduced_precision_reduction": True,
                     "cudnn_deterministic": False, "cudnn_benchmark": False}
            rep = proc.request({"cmd": "build", "device": device, "seed": cfg.seeds[0], "flags": flags,
                                "overrides": dict(cfg.sizes)},
                               [spec.source, spec.task_source], timeout_s=cfg.build_timeout_s)
            build_rec = {"host_s": time.perf_counter() - t0, **{k: rep.header.get(k) for k in (
                "build_s", "flags_before", "flags_after_build", "threads", "torch")}}
            checked(mc.Build, build_rec, "build reply")
            obs["build"] = build_rec

        def timing_stage() -> None:
            xs = draw(c, "timing", cfg.timing_seed, "official")
            rng = seed_for(c, "timing_input")
            ref = reference(model, xs, rng)
            case(c, "timing_input", "official", xs, ref, set_id="timing", rng=rng)
            candidate_timing.timing_stage(c, timing, blocks, xs, ref, bandwidth_gbps)

        ok = stage("build", build)
        ok = ok and stage("checking pass", lambda: checking_pass(c))
        ok = ok and (not device.startswith("cuda") or stage("timing", timing_stage))
        ok = ok and stage("weights and shapes", lambda: after_timing(c, spec.task_source))
    rec["seconds"] = time.perf_counter() - t_all
    rec["compile_seconds"] = (obs.get("build") or {}).get("host_s")
    say(f"{spec.name}: provenance")
    import tempfile

    # a folder made now, after the child is gone, so that it cannot have been prepared by it
    rec["provenance"] = collect_provenance(spec.name, ext, tri, Path(tempfile.mkdtemp(prefix="provenance-",
                                                                                      dir=workdir)), tools)
    rec["provenance_dir"] = rec["provenance"].pop("dir")
    rec["observations"] = obs
    rec["timing"] = timing
    rec["blocks"] = blocks
    # the verdicts, from the typed records (the packer and the verifier derive them again)
    typed = (checked(mc.Observations, obs, "observations"), checked(mc.Timing, timing, "timing record"),
             tuple(checked(mc.Block, b, "timing block") for b in blocks))
    rec["verdicts"] = [v.to_doc() for v in cheats_v2.derive_v2(*typed, cfg.atol, cfg.rtol, cfg.no_extra_shape,
                                                                   plain_pytorch(spec.source))]
    return rec


def tidy_work(workdir: Path) -> None:
    """Leave in a candidate's work folder only what someone may need after its run, finished or
    not: the provenance copies :func:`run_candidate` made (``provenance-*``: the results hold
    their files by then) go, and every empty folder (the build folders the candidate did not
    use, ``build/{extensions,triton}``), deepest first, with the work folder and its parent
    ``work/`` where they end empty; a folder that holds anything (an extension's build) stays."""
    workdir = Path(workdir)
    if not workdir.is_dir() or workdir.is_symlink():
        return
    for p in workdir.glob("provenance-*"):
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
    for d, _, _ in sorted(os.walk(workdir), key=lambda t: -len(Path(t[0]).parts)):
        try:
            os.rmdir(d)  # only an empty one
        except OSError:
            pass
    try:
        workdir.parent.rmdir()
    except OSError:
        pass


def task_config(task_src: bytes, task_path: str, cfg: CandidateConfig, device: str,
                progress: Callable[[str], None] | None = None) -> CandidateConfig:
    """``cfg`` for one task, after its reference ran once at the run's sizes and at each extra
    shape on ``device`` (:func:`kbrepro.harness.kbtask.reference_error`), before any candidate
    runs. Where the reference raises at the default extra shape, the fallback shape
    (:func:`kbrepro.model.protocol.fallback_extra_shapes`) is taken and written into the
    configuration's extra shapes. Raises EnvironmentUnavailableError where the task imports a
    package that is not installed (named, with its install command), UsageError where the
    reference raises at the sizes or
    at an extra shape the user gave: what the task itself cannot do is never a candidate's
    failure. Where it raises at the default and the fallback alike (KernelBench 1/100: the
    batch is tied to a fixed shape), no extra shape is checked, with the reason in
    ``no_extra_shape`` (other_shapes_correct then cannot decide: a PARTIAL, never a catch)."""
    say = progress or (lambda m: None)
    sizes = dict(cfg.sizes)
    try:
        task = kbtask.load_task(task_src, "kbrepro_preflight_sizes")
    except ModuleNotFoundError as exc:  # a package the task imports: named, with the command that installs it
        name = (exc.name or "").split(".")[0] or "?"
        raise EnvironmentUnavailableError(f"{task_path} imports {name}, which is not installed here",
                                          f"pip install {name} (the pinned tasks' own imports come with the "
                                          "project: pip install -e .)") from None
    except Exception:
        task = None  # reported by the reference's own run, below
    if not device.startswith("cuda"):  # before the reference runs: it allocates what it needs
        check_host_memory(task_src, task_path, cfg)
    label = f"task {task_path}"
    err = kbtask.reference_error(task_src, sizes, cfg.seeds[0], device, label)
    if err:
        given = ", ".join(f"{k}={v}" for k, v in sorted(sizes.items())) or "the task's own sizes"
        raise UsageError(f"the reference of {task_path} raises at {given}: {err}",
                         "give sizes at which the task's own Model runs (--size NAME=VALUE)")
    if cfg.extra_shapes:
        for shape in cfg.extra_shapes:
            err = kbtask.reference_error(task_src, {**sizes, **dict(shape)}, cfg.seeds[0], device, label)
            if err:
                raise UsageError(f"--extra-shape {','.join(f'{k}={v}' for k, v in shape)}: the reference of "
                                 f"{task_path} raises there: {err}", "give an extra shape at which the task's own Model runs")
        return cfg
    run_sizes = {**kbtask.size_globals(task), **sizes}
    default = protocol.default_extra_shapes(run_sizes)
    for shape in default:
        err = kbtask.reference_error(task_src, {**sizes, **shape}, cfg.seeds[0], device, label)
        if err is None:
            continue
        for alt in protocol.fallback_extra_shapes(run_sizes):
            if kbtask.reference_error(task_src, {**sizes, **alt}, cfg.seeds[0], device, label) is None:
                say(f"{task_path}: the reference raises at the default extra shape "
                    f"{', '.join(f'{k}={v}' for k, v in shape.items())} ({err}); checking at "
                    f"{', '.join(f'{k}={v}' for k, v in alt.items())} instead")
                return with_overrides(cfg, extra_shapes=(tuple(sorted(alt.items())),))
        tried = [shape] + protocol.fallback_extra_shapes(run_sizes)
        note = (f"the reference raises at every extra shape tried ({'; '.join(', '.join(f'{k}={v}' for k, v in s.items()) for s in tried)}): "
                f"{err}")[:400]
        say(f"{task_path}: no extra shape is checked: {note} (other_shapes_correct cannot decide; give one with "
            "--extra-shape NAME=VALUE)")
        return with_overrides(cfg, no_extra_shape=note)
    return cfg


def check_host_memory(task_src: bytes, task_path: str, cfg: CandidateConfig) -> None:
    """Refuse a ``--device cpu`` run whose checking pass cannot fit in this machine's memory,
    before anything of the task is allocated: the task's footprint on torch's meta device
    (:func:`kbrepro.harness.kbtask.meta_footprint`), times the copies the checking pass holds
    (:func:`kbrepro.harness.kbtask.checking_pass_bytes`), against the memory available
    (:func:`kbrepro.harness.host_memory.available_bytes`). Raises EnvironmentUnavailableError
    (exit 4) naming the bytes and the sizes to try (the smallest at which the task's own Model
    runs: :func:`kbrepro.harness.kbtask.runnable_reduced_sizes`); returns where the estimate or
    the memory cannot be read (the run goes on; an allocation that fails there still ends as
    exit 4). Before, KernelBench 1/4 at its own sizes (an 8 GiB input) was killed by the
    kernel's OOM killer with no message, on a host of 23 GiB."""
    sizes = dict(cfg.sizes)
    avail = host_memory.available_bytes()
    fp = kbtask.meta_footprint(task_src, sizes) if avail is not None else None
    if fp is None:
        return
    refs = len({f"s{s}/{d}" for s in cfg.seeds for d in cfg.distributions} | {protocol.same_buffers_reference(cfg)})
    need = kbtask.checking_pass_bytes(fp, len(cfg.seeds), refs)
    if need <= avail:
        return
    parts = [f"input {n} {host_memory.gib(b)}" for n, b in fp["inputs"]]
    parts += [f"output {host_memory.gib(sum(fp['outputs']))}"] if fp["outputs"] else []
    parts += [f"weights {host_memory.gib(fp['weights'])}"] if fp["weights"] else []
    try:
        smaller, _ = kbtask.runnable_reduced_sizes(task_src, cfg.seeds[0], "cpu")
    except ReproError:
        smaller = {}
    eg = f" (e.g. {host_memory.size_options(smaller)})" if smaller else ""
    raise EnvironmentUnavailableError(
        f"task {task_path} at {host_memory.where(sizes)} needs about {host_memory.gib(need)} of memory for its inputs "
        f"and outputs ({', '.join(parts)}, each held several times over by the checking pass, in the harness's and "
        f"the candidate's processes); this machine has {host_memory.gib(avail)} available",
        f"run at sizes this machine holds with --size NAME=VALUE{eg}, or on a machine with more memory")


def with_overrides(cfg: CandidateConfig, **kw) -> CandidateConfig:
    """A copy of ``cfg`` with fields replaced (the CLI's options)."""
    return replace(cfg, **kw)


__all__ = ["CandidateConfig", "CandidateSpec", "PROFILES", "BASELINES", "run_candidate", "collect_provenance",
           "with_overrides", "task_config", "check_host_memory", "tidy_work"]
