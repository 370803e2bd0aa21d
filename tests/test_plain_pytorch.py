"""A plain PyTorch candidate (the reference itself, torch.compile of it) presents no kernel of
its own: custom_kernel_ran does not decide for it ("not a custom kernel", PARTIAL), never a catch,
while a file that brings a kernel and runs only library kernels is still caught (issue 28). The
rule (model/source_rules.py) fails closed, and the verifier derives it from the bundled file."""
from __future__ import annotations

import hashlib
from pathlib import Path
from unittest import mock

import pytest

import forge_candidates as fc
from corpus import cases_candidates as cc
from kbrepro.bundle.verify.checklist import verify_archive
from kbrepro.harness import cheats
from kbrepro.model import candidates as mc
from kbrepro.model.source_rules import plain_pytorch

ROOT = Path(__file__).resolve().parent.parent
KB = ROOT / "KernelBench"
GPU = ROOT / "tests" / "gpu_candidates"
PLAIN = b"import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, a, b):\n" \
        b"        return a + b\n"
LIB = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>>(int)"


def _tasks() -> list[Path]:
    return sorted(p for lv in ("level1", "level2", "level3") for p in (KB / "KernelBench" / lv).glob("*.py"))


def test_every_pinned_task_and_its_torch_compile_candidate_are_plain():
    from examples.inductor_candidate import candidate_source

    tasks = _tasks()
    if len(tasks) != 250:
        pytest.skip("no KernelBench checkout at the pin")
    for p in tasks:
        src = p.read_bytes()
        assert plain_pytorch(src), p.name
        assert plain_pytorch(candidate_source(src)), p.name


@pytest.mark.parametrize("name", ["cheat_pytorch_fallback.py", "honest_gelu_cuda.py", "honest_gelu_triton.py",
                                  "cheat_hidden_nvrtc.py", "cheat_hidden_triton.py"])
def test_a_file_that_brings_a_kernel_is_not_plain(name):
    assert plain_pytorch((GPU / name).read_bytes()) is None


EVASIONS = {
    "load_inline": "from torch.utils.cpp_extension import load_inline\n",
    "cpp_extension module": "from torch.utils import cpp_extension\n",
    "attribute": "import torch\nf = torch.utils.cpp_extension.load_inline\n",
    "jiterator": "import torch\nk = torch.cuda.jiterator._create_jit_fn('template <typename T> T f(T x) { return x; }')\n",
    "torch.ops.load_library": "import torch\ntorch.ops.load_library('k.so')\n",
    "getattr": "import torch\nf = getattr(torch.utils, 'cpp_' + 'extension')\n",
    "__import__": "m = __import__('tri' + 'ton')\n",
    "importlib": "import importlib\n",
    "exec": "exec('import triton')\n",
    "eval": "eval('1')\n",
    "builtin compile": "c = compile('x=1', 'f', 'exec')\n",
    "__dict__": "import torch\nm = torch.utils.__dict__\n",
    "subclasses": "x = ().__class__.__bases__[0].__subclasses__()\n",
    "sys": "import sys\n",
    "torch.sys": "import torch\nm = torch.sys.modules\n",
    "torch.os": "import torch\ntorch.os.system('nvcc k.cu')\n",
    "os": "import os\n",
    "ctypes": "import ctypes\n",
    "cupy": "import cupy\n",
    "triton": "import triton\n",
    "relative import": "from . import kernels\n",
    "cuda source string": "SRC = '__global__ void k(float* x) {}'\n",
    "ptx string": "P = '.version 8.0\\n.target sm_90\\n.entry k()'\n",
    "dlpack": "import torch\nt = torch.from_dlpack(x)\n",
    "numpy ctypeslib": "import numpy as np\nnp.ctypeslib.load_library('k', '.')\n",
    "torch._C": "import torch._C\n",
    "torch.library": "import torch\n@torch.library.custom_op('a::b', mutates_args=())\ndef f(x): return x\n",
    "syntax error": "def f(:\n",
    # found by a red team (issue 28): private torch, pickles, evaluated strings, loaders
    "torch.cuda._compile_kernel": "from torch.cuda import _compile_kernel\nk = _compile_kernel(S, 'k')\n",
    "pickle through serialization": "import torch\ntorch.serialization.pickle._loads(b'x')\n",
    "typing._eval_type": "import typing\ntyping._eval_type(typing.List['int'], {}, {})\n",
    "singledispatch string annotation": "import functools\n",
    "string annotation": "def f(x: 'print(1) or int'): return x\n",
    "torch.__getattr__": "import torch\nind = torch.__getattr__('_inductor')\n",
    "torch._library": "from torch._library.triton import wrap_triton\n",
    "torch.ops.import_module": "import torch\ntorch.ops.import_module('cupy')\n",
    "pluggable allocator": "import torch\na = torch.cuda.memory.CUDAPluggableAllocator('k.so', 'a', 'f')\n",
    "numpy tofile": "import numpy as np\nnp.frombuffer(b'x', np.uint8).tofile('k.so')\n",
    "numpy read_array": "import numpy as np\nnp.lib.format.read_array(f, allow_pickle=True)\n",
    "numpy extbuild": "from numpy.testing.extbuild import build_and_import_extension\n",
    "torch.jit.CompilationUnit": "import torch\ncu = torch.jit.CompilationUnit('def f(x): return x')\n",
    "from torch import _C": "from torch import _C\n",
    "from torch import library": "from torch import library\n",
    "type() builds a function": "f = type(lambda: 0)(c, {})\n",
    "the module's loader": "m = __loader__.load_module('triton')\n",
    # a second red team (issue 28): re-exported modules, self as a variable, frames, class patterns, a coding cookie
    "self assigned": "import torch\nself = torch\nself = self.os\nself.system('x')\n",
    "cls as a free function's parameter": "import torch\ndef f(cls):\n    return cls._C\nf(torch)\n",
    "a generator's frame": "import torch\ndef g():\n    yield 1\nb = g().gi_frame.f_builtins\n",
    "a class pattern": "import torch\nmatch torch:\n    case object(cuda=c):\n        pass\n",
    "a utf-7 coding cookie": "# -*- coding: utf-7 -*-\nimport torch\n# +AAo-import os; os.system('x')\n",
    "builtins through torch.inspect": "import torch\ntorch.inspect.enum.bltns.exec('import os')\n",
    "typing.operator.attrgetter": "import torch\nimport typing\nk = typing.operator.attrgetter('cuda.x')(torch)\n",
    "the module's spec": "s = __spec__\n",
    "torch.load": "import torch\nm = torch.load('kernel.pt', weights_only=False)\n",
    "torch.hub": "import torch\nm = torch.hub.load('a/b', 'k')\n",
    "annotation evaluated": "import typing\ndef f(x: \"__import__('triton')\"): pass\ntyping.get_type_hints(f)\n",
}


@pytest.mark.parametrize("name", sorted(EVASIONS))
def test_what_could_bring_or_hide_a_kernel_is_not_plain(name):
    assert plain_pytorch(EVASIONS[name].encode()) is None


HONEST = {
    "input as a name": "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, input):\n"
                       "        return torch.relu(input)\n",
    "its own attributes": "import torch\nclass ModelNew(torch.nn.Module):\n    def __init__(self):\n"
                          "        super().__init__()\n        self.package = 3\n        self._scale = 2\n"
                          "    def forward(self, x):\n        return x * self.package * self._scale\n",
    "a docstring that says import": '"""import torch and call ModelNew."""\nimport torch\n',
    "from torch import nn": "from torch import Tensor, nn\nimport torch.nn.functional as F\n",
    "a utf-8 coding cookie": "# -*- coding: utf-8 -*-\nimport torch\n",
    "a classmethod's cls": "import torch\nclass ModelNew(torch.nn.Module):\n    @classmethod\n    def make(cls, n):\n"
                           "        return cls._build(n)\n",
}


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_plain_files_are_plain(name):
    assert plain_pytorch(HONEST[name].encode()), name


def test_unreadable_or_oversized_files_are_not_plain():
    assert plain_pytorch(None) is None
    assert plain_pytorch(b"\xff\xfe") is None
    assert plain_pytorch(b"x = 1\n" + b"#" * (1 << 20)) is None
    assert plain_pytorch(b"x = " + b"(" * 200_000 + b")" * 200_000) is None
    assert plain_pytorch(PLAIN)


def _verdict(names, plain):
    prof = mc.Profile(kernels=tuple(mc.Kernel(name=n, stream=7) for n in names), marker_stream=7)
    obs = mock.Mock(profile=prof)
    return cheats.custom_kernel_ran(obs, plain)


def test_custom_kernel_ran_for_plain_and_for_kernel_bringing_files():
    plain = plain_pytorch(PLAIN)
    v = _verdict([LIB], plain)
    assert v.passed is None and v.detail.startswith("not a custom kernel (plain PyTorch"), v
    assert _verdict([LIB], None).passed is False
    assert _verdict([], None).passed is False
    assert _verdict([LIB, "my_kernel(float*)"], plain).passed is True
    assert _verdict([LIB, "my_kernel(float*)"], None).passed is True


def _plain_candidate(doc, files):
    """The example's first candidate as a plain PyTorch file whose call ran only library kernels."""
    r = cc._c(doc)
    files[r["file"]] = PLAIN
    r["source_sha256"] = hashlib.sha256(PLAIN).hexdigest()
    r["observations"]["profile"]["kernels"] = [{"name": LIB, "stream": r["observations"]["profile"]["marker_stream"]}]


def _custom(rep):
    return [n for t in rep.tiers for n in t.notes] + list(rep.partial)


def test_a_plain_candidate_bundle_verifies_partial_not_caught(tmp_path):
    rep = verify_archive(fc.forge(ROOT / "examples" / cc.V2, _plain_candidate, tmp_path / "plain.tar"), level="static")
    assert rep.verdict == "PARTIAL" and rep.exit_code == 5, [p for t in rep.tiers for p in t.problems]
    assert not any("CAUGHT by custom_kernel_ran" in n for n in _custom(rep)), _custom(rep)
    assert any("custom_kernel_ran" in n and "not a custom kernel" in n for n in _custom(rep)), _custom(rep)


@pytest.mark.parametrize("forged", ["plain called caught", "kernel file called plain"])
def test_the_verifier_derives_plainness_from_the_bundled_file(tmp_path, forged):
    """A packer that believed another answer of the rule: the verifier's own derivation differs."""
    if forged == "plain called caught":
        edit, lie = _plain_candidate, (lambda src: None)
    else:
        def edit(doc, files):  # the load_inline candidate, its call running only library kernels
            r = cc._c(doc)
            r["observations"]["profile"]["kernels"] = [{"name": LIB, "stream": r["observations"]["profile"]["marker_stream"]}]
        lie = (lambda src: "plain PyTorch: forged")
    with mock.patch.object(fc, "plain_pytorch", lie):
        out = fc.forge(ROOT / "examples" / cc.V2, edit, tmp_path / "forged.tar")
    rep = verify_archive(out, level="static")
    problems = [f"{p.path} {p.message}" for t in rep.tiers for p in t.problems]
    assert rep.exit_code == 1 and any("custom_kernel_ran is not what its observations give" in p for p in problems), \
        problems
