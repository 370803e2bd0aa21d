"""Environment fingerprint (DESIGN.md section 8): every field as
``{"value": ..., "source": "...", "reason": null}`` or, where it cannot be read,
``{"value": null, "source": "...", "reason": "why"}``.

Privacy: no hostname, user name or home path is recorded; the GPU UUID is recorded only as
``sha256("kbrepro-gpu:" + uuid)``. Environment variables are recorded only from
:data:`ENV_ALLOWLIST` (those that change numerics, compilation or caching).
"""
from __future__ import annotations

import hashlib
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

#: Variables that change numerics, compilation, caching or device selection.
ENV_ALLOWLIST = (
    "CUDA_CACHE_DISABLE", "CUDA_CACHE_MAXSIZE", "CUDA_FORCE_PTX_JIT", "CUDA_DISABLE_PTX_JIT",
    "CUDA_LAUNCH_BLOCKING", "CUDA_MODULE_LOADING", "CUDA_DEVICE_MAX_CONNECTIONS",
    "NVIDIA_TF32_OVERRIDE", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "CUBLAS_WORKSPACE_CONFIG",
    "CUBLASLT_WORKSPACE_SIZE", "PYTORCH_CUDA_ALLOC_CONF", "TORCH_CUDNN_V8_API_DISABLED",
    "CUPY_CACHE_IN_MEMORY", "CUPY_CUDA_COMPILE_WITH_DEBUG", "CUPY_COMPILE_WITH_PTX",
    "CUPY_ACCELERATORS", "TORCHINDUCTOR_FORCE_DISABLE_CACHES", "TRITON_CACHE_DIR_SET",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS",
)
#: Fields whose difference between two machines can change output bits.
BIT_RELEVANT = ("gpu_name", "compute_capability", "driver_version", "cuda_runtime_version", "nvrtc_version",
                "torch_version", "cupy_distributions", "tf32_matmul", "tf32_cudnn", "float32_matmul_precision",
                "env")


def field(value=None, source: str = "", reason: str | None = None) -> dict:
    return {"value": value, "source": source, "reason": None if value is not None else (reason or "unavailable")}


def _try(source: str, fn, reason_prefix: str = ""):
    try:
        v = fn()
        return field(v, source, None if v is not None else f"{reason_prefix}not reported")
    except Exception as exc:  # each probe is independent; record why it failed
        return field(None, source, f"{reason_prefix}{type(exc).__name__}: {exc}")


def hash_uuid(uuid: str) -> str:
    return hashlib.sha256(("kbrepro-gpu:" + str(uuid)).encode()).hexdigest()


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def cupy_distributions() -> list[dict]:
    """Every installed distribution whose name starts with ``cupy`` (name, version)."""
    out = []
    for dist in metadata.distributions():
        name = (dist.metadata.get("Name") or "").strip()
        if name.lower().startswith("cupy"):
            out.append({"name": name, "version": dist.version})
    return sorted(out, key=lambda d: d["name"].lower())


def product_commit(root: Path | None = None) -> str | None:
    """git HEAD of the product (``-dirty`` if tracked files changed), else the value of
    ``KBREPRO_PRODUCT_COMMIT`` (for copies without git metadata), else None."""
    root = root or Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return os.environ.get("KBREPRO_PRODUCT_COMMIT") or None
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=20)
        head = out.stdout.strip()
        if out.returncode != 0 or len(head) != 40:
            return os.environ.get("KBREPRO_PRODUCT_COMMIT") or None
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=20).stdout.strip()
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.TimeoutExpired):
        return None


def product_version() -> str | None:
    """Installed version of the ``kbrepro`` distribution, else ``version`` in pyproject.toml."""
    try:
        return metadata.version("kbrepro")
    except metadata.PackageNotFoundError:
        pass
    try:
        import re

        text = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
        m = re.search(r'^version\s*=\s*"([^"]+)"', text, re.MULTILINE)
        return m.group(1) if m else None
    except OSError:
        return None


def nvml_clocks() -> dict:
    """SM and memory clocks (MHz), throttle-reason bits, temperature (C) and power (W) now."""
    import pynvml  # type: ignore

    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(int(os.environ.get("KBREPRO_NVML_INDEX", "0")))
    get_reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
    return {"sm_clock_mhz": int(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
            "memory_clock_mhz": int(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)),
            "throttle_reasons": int(get_reasons(h)),
            "temperature_c": int(pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)),
            "power_w": float(pynvml.nvmlDeviceGetPowerUsage(h)) / 1000.0}


def collect(phase: str = "start") -> dict:
    """The fingerprint of this process's machine now. Never raises: every probe that fails
    yields a null value with its reason. ``phase`` labels the clock sample."""
    import numpy
    import torch

    f: dict = {}
    f["python_version"] = field(platform.python_version(), "platform.python_version")
    f["os"] = field(f"{platform.system()} {platform.release()} {platform.machine()}", "platform")
    f["cpu_model"] = _try("/proc/cpuinfo", _cpu_model)
    f["torch_version"] = field(torch.__version__, "torch.__version__")
    f["torch_cuda_build"] = field(torch.version.cuda, "torch.version.cuda", "CPU build of torch")
    f["numpy_version"] = field(numpy.__version__, "numpy.__version__")
    dists = cupy_distributions()
    f["cupy_distributions"] = field(dists, "importlib.metadata")
    f["cupy_conflict"] = field(len(dists) > 1, "importlib.metadata")
    f["product_version"] = _try("importlib.metadata kbrepro, else pyproject.toml", product_version)
    f["product_commit"] = _try("git rev-parse HEAD, else $KBREPRO_PRODUCT_COMMIT", product_commit)
    f["tf32_matmul"] = field(bool(torch.backends.cuda.matmul.allow_tf32), "torch.backends.cuda.matmul.allow_tf32")
    f["tf32_cudnn"] = field(bool(torch.backends.cudnn.allow_tf32), "torch.backends.cudnn.allow_tf32")
    f["float32_matmul_precision"] = field(torch.get_float32_matmul_precision(), "torch.get_float32_matmul_precision")
    f["env"] = field({k: os.environ[k] for k in ENV_ALLOWLIST if k in os.environ}, "os.environ (allowlist)")

    gpu = torch.cuda.is_available()
    no_gpu = "no CUDA GPU visible to torch"
    if gpu:
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        f["gpu_name"] = field(props.name, "torch.cuda.get_device_properties")
        f["compute_capability"] = field(f"{props.major}.{props.minor}", "torch.cuda.get_device_properties")
        f["sm_count"] = field(int(props.multi_processor_count), "torch.cuda.get_device_properties")
        f["memory_bytes"] = field(int(props.total_memory), "torch.cuda.get_device_properties")
        f["l2_cache_bytes"] = _try("torch.cuda.get_device_properties", lambda: int(props.L2_cache_size))
        f["gpu_uuid_sha256"] = _try("torch.cuda.get_device_properties (sha256 of uuid)",
                                    lambda: hash_uuid(props.uuid))
    else:
        for k in ("gpu_name", "compute_capability", "sm_count", "memory_bytes", "l2_cache_bytes", "gpu_uuid_sha256"):
            f[k] = field(None, "torch.cuda", no_gpu)

    def cupy_runtime(what):
        import cupy  # type: ignore

        return {"driver": cupy.cuda.runtime.driverGetVersion, "runtime": cupy.cuda.runtime.runtimeGetVersion}[what]()

    def fmt(v):
        return f"{v // 1000}.{(v % 1000) // 10}"

    if gpu:
        f["driver_cuda_version"] = _try("cudaDriverGetVersion (CuPy)", lambda: fmt(cupy_runtime("driver")))
        f["cuda_runtime_version"] = _try("cudaRuntimeGetVersion (CuPy)", lambda: fmt(cupy_runtime("runtime")))
    else:
        f["driver_cuda_version"] = field(None, "cudaDriverGetVersion", no_gpu)
        f["cuda_runtime_version"] = field(None, "cudaRuntimeGetVersion", no_gpu)

    def nvrtc_v():
        from cupy_backends.cuda.libs import nvrtc  # type: ignore

        major, minor = nvrtc.getVersion()
        return f"{major}.{minor}"

    f["nvrtc_version"] = _try("nvrtcVersion (CuPy)", nvrtc_v)

    def nvml(fn):
        import pynvml  # type: ignore

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        return fn(pynvml, h)

    def dec(v):
        return v.decode() if isinstance(v, bytes) else v

    f["driver_version"] = _try("NVML nvmlSystemGetDriverVersion", lambda: nvml(lambda n, h: dec(n.nvmlSystemGetDriverVersion())))
    f["power_limit_w"] = _try("NVML nvmlDeviceGetPowerManagementLimit",
                              lambda: nvml(lambda n, h: n.nvmlDeviceGetPowerManagementLimit(h) / 1000.0))
    f["ecc_enabled"] = _try("NVML nvmlDeviceGetEccMode", lambda: nvml(lambda n, h: bool(n.nvmlDeviceGetEccMode(h)[0])))
    f["mig_mode"] = _try("NVML nvmlDeviceGetMigMode", lambda: nvml(lambda n, h: int(n.nvmlDeviceGetMigMode(h)[0])))
    f["persistence_mode"] = _try("NVML nvmlDeviceGetPersistenceMode",
                                 lambda: nvml(lambda n, h: int(n.nvmlDeviceGetPersistenceMode(h))))
    f["max_sm_clock_mhz"] = _try("NVML nvmlDeviceGetMaxClockInfo",
                                 lambda: nvml(lambda n, h: int(n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM))))
    f[f"clocks_{phase}"] = _try("NVML clocks, throttle reasons, temperature, power", nvml_clocks)
    return {"schema": "kbrepro/environment", "schema_version": 1, "fields": f}


def add_clocks(fp: dict, phase: str) -> dict:
    """A copy of ``fp`` with a ``clocks_<phase>`` field sampled now."""
    out = {**fp, "fields": dict(fp["fields"])}
    out["fields"][f"clocks_{phase}"] = _try("NVML clocks, throttle reasons, temperature, power", nvml_clocks)
    return out

