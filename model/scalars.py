"""The scalar types and the precision flags of the candidate records (:mod:`kbrepro.model.candidates`):
JSON types with their ranges, lengths and patterns, as :mod:`kbrepro.model.strict` reads them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal, Mapping, Tuple, Union

from kbrepro.model.sizes import MAX_DIMS
from kbrepro.model.strict import NONFINITE, Items, Num, Text

# ------------------------------------------------------------------------------- scalars
SHA256 = Annotated[str, Text(64, 64, r"[0-9a-f]{64}")]
SHA1 = Annotated[str, Text(40, 40, r"[0-9a-f]{40}")]
UTC = Annotated[str, Text(20, 20, r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")]
RELPATH = Annotated[str, Text(1, 400, r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*")]
#: a file path inside a build folder as recorded (may hold names a relpath does not allow)
BUILD_PATH = Annotated[str, Text(1, 400)]
NAME = Annotated[str, Text(1, 40, r"[A-Za-z][A-Za-z0-9_]{0,39}")]
IDENT = Annotated[str, Text(1, 64, r"[A-Za-z_][A-Za-z0-9_]{0,63}")]
CASE_ID = Annotated[str, Text(1, 40, r"[A-Za-z0-9_/.-]{1,40}")]
SHARD_ID = Annotated[str, Text(21, 21, r"c[0-9a-f]{20}")]
COUNT = Annotated[int, Num(ge=0, le=1 << 53)]
#: a process's thread count (it runs at least one)
THREADS = Annotated[int, Num(ge=1, le=1 << 20)]
POSITIVE = Annotated[int, Num(ge=1, le=1 << 53)]
#: bounds a run could reach: 100 days, and a timed request of 1e8 ms; 1 PB/s
SECONDS = Annotated[float, Num(ge=0, le=1e7)]
MS = Annotated[float, Num(ge=0, le=1e8)]
#: a measured time per invocation: at least 1 ns (a CUDA event's resolution is about 0.5 us per region)
POSITIVE_MS = Annotated[float, Num(ge=1e-6, le=1e8)]
GBPS = Annotated[float, Num(gt=0, le=1e6)]
TOL = Annotated[float, Num(ge=0, le=1)]
#: a float jsonio.enc_float may write as "nan", "inf" or "-inf"
ENC = Annotated[float, NONFINITE]
RATIO = Annotated[float, NONFINITE, Num(ge=0)]
SHORT = Annotated[str, Text(0, 400)]
LINE = Annotated[str, Text(1, 400)]
#: a tensor fingerprint (kbtask.fingerprint): dtype|shape|sums
DIGEST = Annotated[str, Text(1, 200, r"torch\.[a-z0-9]+\|\(([0-9]+(, [0-9]+)*,?)?\)\|[0-9a-f]{48}")]
DEVICE = Annotated[str, Text(1, 40, r"[a-z_]+(:[0-9]{1,3})?")]
LAYOUT = Literal["torch.strided", "torch.sparse_coo", "torch.sparse_csr", "torch.sparse_csc", "torch.sparse_bsr",
                 "torch.sparse_bsc", "torch._mkldnn", "torch.jagged"]
#: a size global's value (model/sizes.py): an integer, or a tuple of 1 to 8 (a JSON array);
#: whether it is one the task may take is the verifier's rule (protocol.shape_problems)
SIZE_VALUE = Union[int, Annotated[Tuple[int, ...], Items(1, MAX_DIMS)]]
SIZES = Annotated[Mapping[Annotated[str, Text(1, 64, r"[A-Za-z_][A-Za-z0-9_]*")], SIZE_VALUE], Items(0, 32)]
ARM = Annotated[str, Text(1, 40, r"[a-z_]{1,40}")]

CASE_KINDS = ("official", "normal", "normal_x100", "same_buffers", "repeat", "poison", "profiled",
              "redrawn_weights", "extra_shape")
STAGES = ("build", "checking pass", "timing", "weights and shapes")


@dataclass(frozen=True)
class Flags:
    """The precision settings a process runs with (harness/candidate_server.py ``_flags``)."""

    allow_tf32_matmul: bool
    allow_tf32_cudnn: bool
    float32_matmul_precision: Literal["highest", "high", "medium"]
    allow_fp16_reduced_precision_reduction: bool
    allow_bf16_reduced_precision_reduction: bool
    cudnn_deterministic: bool
    cudnn_benchmark: bool


FLAGS = Flags
