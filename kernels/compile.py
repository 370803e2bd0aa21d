"""Compilation of CUDA sources: direct NVRTC with an explicit option list, or CuPy's
``RawModule`` route, with a content-keyed cubin cache and FTZ evidence from PTX and SASS.

Why two routes: CuPy's ``RawModule(code=...)`` appends ``-ftz=true`` to whatever options
the caller gives (CuPy ``cupy/cuda/compiler.py``, ``_compile_with_cache_cuda``), so the
options a caller passes are not the options in effect. Direct NVRTC compilation with an
explicit, ordered option list is the only route where the recorded flags are the flags
used. On NVRTC 12.9 and newer NVRTC also keeps a persistent compile cache; on this
project's H200 (NVRTC 13.0) that cache returned the binary of the other ``--ftz`` value
for the same source. Every direct compile therefore passes ``--no-cache`` (NVRTC >= 12.9),
the CLI sets ``CUDA_CACHE_DISABLE=1`` before CUDA initialises, and both are recorded.

CuPy is imported lazily: this module imports on machines without CUDA, where only the
pure functions (cache keys, option lists, PTX/SASS parsing) are usable.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from kbrepro.errors import CompileError, EnvironmentUnavailableError, UsageError

#: Bumped whenever the cache layout or key derivation changes; part of every key.
CACHE_FORMAT_VERSION = 1

#: First NVRTC version with the persistent compile cache and the ``--no-cache`` option
#: (NVRTC User Guide, section "Caching (CUDA 12.9+)").
NVRTC_NO_CACHE_MIN_VERSION = (12, 9)

_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.MULTILINE)


@dataclass(frozen=True)
class CompileVariant:
    """One way of compiling a study's kernel sources.

    ``route`` is ``"nvrtc"`` (direct NVRTC, the options below plus the device arch and
    ``--no-cache``) or ``"cupy_rawmodule"`` (``cupy.RawModule(code=..., options=...)``, the
    way the post compiled; CuPy adds options of its own, captured at the NVRTC call).
    ``expected_ftz`` is the FTZ mode the variant's name promises; the witness must agree.
    """

    name: str
    route: str
    options: tuple[str, ...]
    expected_ftz: bool

    def __post_init__(self):
        if self.route not in ("nvrtc", "cupy_rawmodule"):
            raise UsageError(f"compile variant {self.name!r}: unknown route {self.route!r}",
                             "use 'nvrtc' or 'cupy_rawmodule' in the study YAML")


@dataclass(frozen=True)
class CompiledBinary:
    """What one compile produced. ``cubin`` and ``ptx`` are the exact bytes NVRTC returned
    (``ptx`` may be empty where the route produced none); ``effective_options`` is the option
    list NVRTC received, in order; ``nvrtc_version`` is ``(major, minor)``."""

    variant: str
    route: str
    source_sha256: str
    requested_options: tuple[str, ...]
    effective_options: tuple[str, ...]
    nvrtc_version: tuple[int, int]
    arch: str
    cubin: bytes
    ptx: bytes
    program_log: str
    cache: str  # "hit", "miss" or "disabled"
    nvrtc_cache_disabled_by: tuple[str, ...] = ()
    #: For the CuPy route: the complete cubin NVRTC produced, where CuPy loaded a copy
    #: with its last byte dropped (see :func:`full_cubin`); None otherwise.
    cubin_complete: bytes | None = None

    @property
    def cubin_sha256(self) -> str:
        return hashlib.sha256(self.cubin).hexdigest()

    @property
    def ptx_sha256(self) -> str | None:
        return hashlib.sha256(self.ptx).hexdigest() if self.ptx else None


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_source(path: Path) -> bytes:
    """Bytes of a ``.cu`` file. Raises OSError if it cannot be read."""
    return Path(path).read_bytes()


def includes_of(source: bytes) -> list[str]:
    """Names the source ``#include``s, in order of appearance."""
    return _INCLUDE_RE.findall(source.decode("utf-8", errors="replace"))


def check_includes(source: bytes, headers: Mapping[str, bytes] | None) -> None:
    """Refuse a source whose ``#include``s are not all supplied as header bytes.

    Raises :class:`UsageError` naming the missing headers: an include NVRTC would resolve
    from disk is not part of the cache key, so the cached binary could silently go stale.
    """
    missing = [n for n in includes_of(source) if n not in (headers or {})]
    if missing:
        raise UsageError(
            f"the CUDA source #includes {', '.join(missing)} but their bytes were not given",
            "pass every included header as headers={name: bytes} so it is part of the cache "
            "key, or inline it into the .cu file")


def nvrtc_options(variant: CompileVariant, arch: str, nvrtc_version: tuple[int, int]) -> tuple[str, ...]:
    """The exact ordered option list handed to NVRTC for a direct compile: the variant's
    options, then ``--gpu-architecture=<arch>``, then ``--no-cache`` where NVRTC has a
    persistent cache (>= 12.9). ``arch`` is e.g. ``"sm_90"``."""
    opts = list(variant.options)
    if any(o.startswith(("--gpu-architecture", "-arch")) for o in opts):
        raise UsageError(f"compile variant {variant.name!r} names an architecture",
                         "leave the architecture out; it is read from the device")
    opts.append(f"--gpu-architecture={arch}")
    if tuple(nvrtc_version) >= NVRTC_NO_CACHE_MIN_VERSION and "--no-cache" not in opts:
        opts.append("--no-cache")
    return tuple(opts)


def cache_key(source: bytes, options: Sequence[str], nvrtc_version: Sequence[int], arch: str,
              headers: Mapping[str, bytes] | None = None) -> str:
    """sha256 hex key of a compile: source bytes, included header bytes, the exact ordered
    option list, NVRTC version, arch and :data:`CACHE_FORMAT_VERSION`. No path or time goes
    in, so the same inputs in two folders give the same key.

    Raises :class:`UsageError` if the source ``#include``s a header not given in ``headers``.
    """
    check_includes(source, headers)
    doc = {
        "format": CACHE_FORMAT_VERSION,
        "source_sha256": sha256_hex(source),
        "headers": {k: sha256_hex(v) for k, v in sorted((headers or {}).items())},
        "options": list(options),
        "nvrtc": [int(v) for v in nvrtc_version],
        "arch": arch,
    }
    return sha256_hex(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode())


class CubinCache:
    """Our own cubin cache: one folder per key holding ``cubin``, ``ptx``, ``log`` and a
    ``meta.json`` written last with the sha256 of each. A folder whose files do not match
    their recorded hashes, or that cannot be parsed, is a miss (and is replaced). Writes go
    to a temporary folder that is renamed into place, so a crash leaves no half entry."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def _dir(self, key: str) -> Path:
        return self.root / key

    def load(self, key: str) -> tuple[bytes, bytes, str] | None:
        d = self._dir(key)
        try:
            meta = json.loads((d / "meta.json").read_text())
            cubin = (d / "cubin").read_bytes()
            ptx = (d / "ptx").read_bytes()
            log = (d / "log").read_bytes()
        except (OSError, ValueError):
            return None
        if (meta.get("key") != key or meta.get("cubin_sha256") != sha256_hex(cubin)
                or meta.get("ptx_sha256") != sha256_hex(ptx) or meta.get("log_sha256") != sha256_hex(log)
                or not cubin):
            return None
        return cubin, ptx, log.decode("utf-8", errors="replace")

    def store(self, key: str, cubin: bytes, ptx: bytes, log: str) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key[:16]}.", dir=self.root))
        try:
            logb = log.encode()
            for name, data in (("cubin", cubin), ("ptx", ptx), ("log", logb)):
                (tmp / name).write_bytes(data)
            meta = {"key": key, "format": CACHE_FORMAT_VERSION, "cubin_sha256": sha256_hex(cubin),
                    "ptx_sha256": sha256_hex(ptx), "log_sha256": sha256_hex(logb)}
            (tmp / "meta.json").write_text(json.dumps(meta, sort_keys=True))
            final = self._dir(key)
            if final.exists():
                shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------------
# CUDA-side functions (need CuPy and a GPU)


def _nvrtc():
    try:
        from cupy_backends.cuda.libs import nvrtc  # type: ignore
    except Exception as exc:  # ImportError, or CUDA libraries missing
        raise EnvironmentUnavailableError(
            f"NVRTC is not available through CuPy: {exc}",
            "install cupy-cuda12x or cupy-cuda13x matching the driver (pip install "
            "'kbrepro[cuda12]' or '[cuda13]')") from exc
    return nvrtc


def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the NVRTC library CuPy loads. Raises EnvironmentUnavailableError."""
    major, minor = _nvrtc().getVersion()
    return int(major), int(minor)


def _loaded_nvrtc_library():
    """ctypes handle of the libnvrtc that this process has loaded (through CuPy), or None."""
    import ctypes

    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    paths = sorted({line.split()[-1] for line in maps.splitlines()
                    if "libnvrtc.so" in line and "builtins" not in line and line.split()[-1].startswith("/")})
    for path in paths:
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    return None


def full_cubin(prog: int) -> bytes | None:
    """The complete cubin of a compiled NVRTC program, read through ``nvrtcGetCUBINSize`` and
    ``nvrtcGetCUBIN`` directly. CuPy's ``nvrtc.getCUBIN`` drops the last byte (it strips a
    trailing NUL as for text; seen in CuPy 14.2, ``cupy_backends/cuda/libs/nvrtc.pyx``), which
    leaves a cubin that loads but that ``cuobjdump``/``nvdisasm`` reject. Returns None if the
    library cannot be reached this way."""
    import ctypes

    lib = _loaded_nvrtc_library()
    if lib is None:
        return None
    size = ctypes.c_size_t(0)
    handle = ctypes.c_void_p(int(prog))
    if lib.nvrtcGetCUBINSize(handle, ctypes.byref(size)) != 0 or size.value == 0:
        return None
    buf = ctypes.create_string_buffer(size.value)
    if lib.nvrtcGetCUBIN(handle, buf) != 0:
        return None
    return buf.raw[: size.value]


def _as_bytes(data) -> bytes:
    if data is None:
        return b""
    return data.encode() if isinstance(data, str) else bytes(data)


def compile_nvrtc(source: bytes, variant: CompileVariant, arch: str, *, program_name: str = "kernel.cu",
                  headers: Mapping[str, bytes] | None = None, cache: CubinCache | None = None) -> CompiledBinary:
    """Compile ``source`` with NVRTC directly, with the explicit option list of
    :func:`nvrtc_options`. Returns the cubin and PTX NVRTC produced (or our cache's copy of
    an identical earlier compile). Raises :class:`CompileError` with the program log."""
    nvrtc = _nvrtc()
    version = nvrtc_version()
    options = nvrtc_options(variant, arch, version)
    key = cache_key(source, options, version, arch, headers)
    disabled_by = tuple(o for o in options if o == "--no-cache")
    if os.environ.get("CUDA_CACHE_DISABLE") == "1":
        disabled_by += ("CUDA_CACHE_DISABLE=1",)
    common = dict(variant=variant.name, route="nvrtc", source_sha256=sha256_hex(source),
                  requested_options=tuple(variant.options), effective_options=options,
                  nvrtc_version=version, arch=arch, nvrtc_cache_disabled_by=disabled_by)
    if cache is not None:
        hit = cache.load(key)
        if hit is not None:
            cubin, ptx, log = hit
            return CompiledBinary(cubin=cubin, ptx=ptx, program_log=log, cache="hit", **common)
    names = sorted((headers or {}).keys())
    prog = nvrtc.createProgram(source.decode("utf-8"), program_name,
                               tuple(headers[n].decode("utf-8") for n in names), tuple(names))
    try:
        try:
            nvrtc.compileProgram(prog, options)
        except Exception as exc:
            log = _as_bytes(nvrtc.getProgramLog(prog)).decode("utf-8", errors="replace")
            raise CompileError(f"NVRTC rejected {program_name} for variant {variant.name!r}: {exc}\n{log}",
                               "fix the source or the variant's options in the study YAML") from exc
        cubin = full_cubin(prog) or _as_bytes(nvrtc.getCUBIN(prog))
        ptx = _as_bytes(nvrtc.getPTX(prog))
        log = _as_bytes(nvrtc.getProgramLog(prog)).decode("utf-8", errors="replace").rstrip("\x00")
    finally:
        nvrtc.destroyProgram(prog)
    if cache is not None:
        cache.store(key, cubin, ptx, log)
    return CompiledBinary(cubin=cubin, ptx=ptx, program_log=log, cache="miss" if cache else "disabled", **common)


class _NvrtcSpy:
    """Stands in for CuPy's ``nvrtc`` module during one ``RawModule`` compile, passing every
    call through and recording each program's source, the options it was compiled with and
    its PTX and cubin."""

    def __init__(self, real):
        self._real = real
        self.sources: dict[int, str] = {}
        self.compiles: list[dict] = []

    def __getattr__(self, name):
        return getattr(self._real, name)

    def createProgram(self, src, name, headers, include_names):  # noqa: N802 (CuPy's name)
        prog = self._real.createProgram(src, name, headers, include_names)
        self.sources[int(prog)] = src.decode() if isinstance(src, bytes) else src
        return prog

    def compileProgram(self, prog, options):  # noqa: N802
        self._real.compileProgram(prog, options)
        entry = {"source": self.sources.get(int(prog), ""), "options": [str(o) for o in options]}
        try:
            entry["ptx"] = _as_bytes(self._real.getPTX(prog))
        except Exception:
            entry["ptx"] = b""
        try:
            entry["cubin"] = _as_bytes(self._real.getCUBIN(prog))
        except Exception:
            entry["cubin"] = b""
        entry["cubin_full"] = full_cubin(prog) if entry["cubin"] else None
        entry["log"] = _as_bytes(self._real.getProgramLog(prog)).decode("utf-8", errors="replace").rstrip("\x00")
        self.compiles.append(entry)


def scrub_option(option: str) -> str:
    """Replace install-specific include paths in an option with a placeholder, so that a
    recorded option list names no path of the machine (e.g. ``-I<site-packages>/cupy/...``)."""
    m = re.match(r"^(-I|--include-path=)(.*)$", option)
    if not m:
        return option
    path = m.group(2)
    for marker in ("site-packages", "dist-packages"):
        idx = path.find(marker)
        if idx >= 0:
            return m.group(1) + "<" + marker + ">" + path[idx + len(marker):]
    return m.group(1) + "<path>"


def compile_cupy_rawmodule(source: bytes, variant: CompileVariant, kernel_names: Sequence[str]):
    """Compile through ``cupy.RawModule(code=..., options=variant.options)``, the post's
    route, and capture what NVRTC really received. CuPy's on-disk kernel cache is bypassed
    (``CUPY_CACHE_IN_MEMORY=1`` during the compile) so that a compile really happens.

    Returns ``(CompiledBinary, {kernel_name: cupy Function})``. Raises CompileError, or
    EnvironmentUnavailableError if CuPy is missing or no compile call was observed.
    """
    try:
        import cupy as cp  # type: ignore
        import cupy.cuda.compiler as cupy_compiler  # type: ignore
    except Exception as exc:
        raise EnvironmentUnavailableError(f"CuPy is not importable: {exc}",
                                          "install cupy-cuda12x or cupy-cuda13x") from exc
    text = source.decode("utf-8")
    real = cupy_compiler.nvrtc
    spy = _NvrtcSpy(real)
    old_env = os.environ.get("CUPY_CACHE_IN_MEMORY")
    os.environ["CUPY_CACHE_IN_MEMORY"] = "1"
    cupy_compiler.nvrtc = spy
    try:
        module = cp.RawModule(code=text, options=tuple(variant.options))
        functions = {n: module.get_function(n) for n in kernel_names}
    except Exception as exc:
        raise CompileError(f"CuPy RawModule failed for variant {variant.name!r}: {exc}",
                           "check the variant's options; CuPy rejects duplicated -ftz options") from exc
    finally:
        cupy_compiler.nvrtc = real
        if old_env is None:
            os.environ.pop("CUPY_CACHE_IN_MEMORY", None)
        else:
            os.environ["CUPY_CACHE_IN_MEMORY"] = old_env
    ours = [c for c in spy.compiles if c["source"] == text and c["cubin"]]
    if not ours:
        raise EnvironmentUnavailableError(
            f"no NVRTC compile of the kernel source was observed for variant {variant.name!r}",
            "this CuPy version compiles differently; the effective options cannot be recorded")
    final = ours[-1]
    version = nvrtc_version()
    arch_opts = [o for o in final["options"] if o.startswith(("-arch=", "--gpu-architecture="))]
    arch = arch_opts[-1].split("=", 1)[1] if arch_opts else "unknown"
    disabled_by = ("CUDA_CACHE_DISABLE=1",) if os.environ.get("CUDA_CACHE_DISABLE") == "1" else ()
    binary = CompiledBinary(
        variant=variant.name, route="cupy_rawmodule", source_sha256=sha256_hex(source),
        requested_options=tuple(variant.options),
        effective_options=tuple(scrub_option(o) for o in final["options"]),
        nvrtc_version=version, arch=arch, cubin=final["cubin"], ptx=final["ptx"],
        program_log=final["log"], cache="disabled", nvrtc_cache_disabled_by=disabled_by,
        cubin_complete=final["cubin_full"] if final["cubin_full"] and final["cubin_full"] != final["cubin"] else None)
    return binary, functions


def load_cubin(cubin: bytes, kernel_names: Sequence[str]):
    """Load a cubin into the current CUDA context; returns ``{name: cupy Function}``."""
    try:
        import cupy as cp  # type: ignore
    except Exception as exc:
        raise EnvironmentUnavailableError(f"CuPy is not importable: {exc}",
                                          "install cupy-cuda12x or cupy-cuda13x") from exc
    module = cp.cuda.function.Module()
    module.load(cubin)
    return {n: module.get_function(n) for n in kernel_names}


# ---------------------------------------------------------------------------------------
# FTZ evidence from PTX and SASS (pure text functions, usable without a GPU)

#: PTX instructions whose ``.approx`` forms are emitted with ``.ftz`` by NVRTC whatever
#: ``--ftz`` says (seen on NVRTC 13.0: ``ex2.approx.ftz.f32`` inside ``expf`` under
#: ``--ftz=false``); they are counted apart and do not decide the mode.
_PTX_F32_OP = re.compile(r"^\s*(?:@!?%p\d+\s+)?([a-z][a-z0-9]*(?:\.[a-z0-9]+)*)\s", re.MULTILINE)


def ptx_ftz_counts(ptx: str | bytes) -> dict:
    """Count ``.ftz`` in PTX text.

    Returns ``{"ftz_total": n, "ftz_exact_f32": n, "ftz_approx": n, "f32_exact_ops": n}``:
    ``ftz_total`` counts every ``.ftz`` token; ``ftz_exact_f32`` counts f32 instructions
    that are not ``.approx`` and carry ``.ftz`` (these appear only under ``--ftz=true``);
    ``f32_exact_ops`` counts all non-approx f32 arithmetic/compare instructions.
    """
    text = ptx.decode("utf-8", errors="replace") if isinstance(ptx, bytes) else ptx
    total = text.count(".ftz")
    exact_ftz = approx_ftz = exact_ops = 0
    for op in _PTX_F32_OP.findall(text):
        parts = op.split(".")
        if "f32" not in parts or parts[0] in ("ld", "st", "mov", "cvta", "ret", "bra"):
            continue
        if "approx" in parts:
            approx_ftz += "ftz" in parts
            continue
        exact_ops += 1
        exact_ftz += "ftz" in parts
    return {"ftz_total": total, "ftz_exact_f32": exact_ftz, "ftz_approx": approx_ftz, "f32_exact_ops": exact_ops}


def ptx_says_ftz(counts: Mapping[str, int]) -> bool | None:
    """FTZ mode implied by :func:`ptx_ftz_counts`: True if any exact f32 op carries
    ``.ftz``, False if there are exact f32 ops and none does, None if there are none."""
    if counts.get("f32_exact_ops", 0) == 0:
        return None
    return counts.get("ftz_exact_f32", 0) > 0


_SASS_INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)")


def sass_ftz_counts(sass: str) -> dict:
    """Count FTZ instructions in a SASS listing (``cuobjdump -sass`` or ``nvdisasm``).

    Returns ``{"instructions", "ftz_instructions", "fp32_instructions", "fmul_ffma",
    "fmul_ffma_ftz"}``: all instructions; those with a ``.FTZ`` modifier; FP32 ones (opcode
    F* or MUFU); and the FMUL/FFMA multiplies, in all and with ``.FTZ``.

    Only the multiplies decide the mode (:func:`sass_says_ftz`): under ``--ftz=false``
    NVRTC 13.0 still emits ``FADD.FTZ r, -x, -RZ`` negations, ``FSETP.NEU.FTZ`` NaN tests
    and ``F2I.FTZ`` conversions, where flushing cannot change a result (seen on the H200,
    sm_90), but never an FMUL/FFMA with ``.FTZ``; under ``--ftz=true`` nearly all carry it.
    """
    insns = _SASS_INSN.findall(sass)
    fp32 = [i for i in insns if i.startswith(("F", "MUFU")) and not i.startswith("FLO")]
    ftz = [i for i in insns if ".FTZ" in i]
    mul = [i for i in insns if i.split(".")[0] in ("FMUL", "FFMA")]
    return {"instructions": len(insns), "ftz_instructions": len(ftz), "fp32_instructions": len(fp32),
            "fmul_ffma": len(mul), "fmul_ffma_ftz": sum(1 for i in mul if ".FTZ" in i)}


def sass_says_ftz(counts: Mapping[str, int]) -> bool | None:
    """True if any FMUL/FFMA carries ``.FTZ``; False if there are FMUL/FFMA and none does;
    None if the listing has no FMUL/FFMA (nothing to judge)."""
    if counts.get("fmul_ffma", 0) == 0:
        return None
    return counts.get("fmul_ffma_ftz", 0) > 0


def disassemble(cubin: bytes) -> tuple[str | None, str]:
    """SASS text of a cubin via ``cuobjdump -sass``, else ``nvdisasm``; returns
    ``(text, how)`` or ``(None, reason)`` when neither tool is present or both fail."""
    tools = [("cuobjdump", ["-sass"]), ("nvdisasm", ["-c"])]
    reasons = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(cubin)
        for tool, args in tools:
            exe = shutil.which(tool) or (str(Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / tool)
                                          if (Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / tool).exists() else None)
            if not exe:
                reasons.append(f"{tool}: not found")
                continue
            try:
                proc = subprocess.run([exe, *args, str(path)], capture_output=True, text=True, timeout=60)
            except (OSError, subprocess.TimeoutExpired) as exc:
                reasons.append(f"{tool}: {exc}")
                continue
            if proc.returncode == 0 and _SASS_INSN.search(proc.stdout):
                return proc.stdout, f"{tool} {' '.join(args)}"
            reasons.append(f"{tool}: rc={proc.returncode} {proc.stderr.strip()[:200]} (no instructions in output)")
    return None, "; ".join(reasons)
