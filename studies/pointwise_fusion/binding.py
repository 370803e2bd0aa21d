"""Binding of the published pointwise-fusion study (KernelBench level 2, tasks 53, 81, 95).

The GEMM (the task's Linear layer) stays PyTorch's; the pointwise tail after it is one CUDA
kernel of ``fused_tails.cu``. Besides the full program the engine checks and times the
``tail`` scope (the tail alone on the Linear output). The study adds: tail controls per task
(boundary and non-finite values, the actual Linear output), the tiny-value controls (tails
on subnormal-producing inputs), the cost of FTZ (``--ftz=false`` against ``--ftz=true``
tails), and the task 14/51 scout (algebraic rewrites of the GEMM reduction), plus its
report sections, its cross-checks for the verifier and the importer of the post's files.
"""
from __future__ import annotations

import gc
from pathlib import Path
from typing import Mapping

from kbrepro.harness.plugin import Scope, SizedCase, StudyBinding, WitnessRun
from kbrepro.harness.study import task_key, values
from kbrepro.harness.timing import TimingProtocol
from kbrepro.kernels.launch import blocks_for, check_float32_cuda, THREADS_PER_BLOCK
from kbrepro.errors import UsageError

from . import tasks

#: Kernel entry points in ``fused_tails.cu``, by task id.
KERNEL_NAMES = {53: "fused_tail_53", 81: "fused_tail_81", 95: "fused_tail_95"}
TAIL_CONTROLS = ("boundaries_and_nonfinite", "actual_linear_output")


def launch_tail(kernels, task: int, x, params: Mapping, *, out=None, stream=None, device_index: int = 0):
    """Run the fused tail of ``task`` on ``x`` with one variant's kernels.

    ``x``: contiguous 2-D ``torch.float32`` CUDA tensor (rows, cols), the Linear output.
    ``params``: task 53 ``{"scale", "min", "max"}`` floats; task 81 ``{}``; task 95
    ``{"bias": float32 CUDA tensor (cols,)}``. ``out``: optional tensor like ``x``. Returns
    the output (same shape and dtype). Raises UsageError on bad inputs, LaunchError on a
    side stream during CUDA-graph capture (:meth:`kernels.launch.KernelSet.launch`).
    """
    import numpy as np
    import torch

    if task not in KERNEL_NAMES:
        raise UsageError(f"no fused tail for task {task}", f"supported tasks: {sorted(KERNEL_NAMES)}")
    check_float32_cuda(x, "the tail input", ndim=2)
    y = torch.empty_like(x) if out is None else out
    if y.shape != x.shape or y.dtype != x.dtype or y.device != x.device or not y.is_contiguous():
        raise UsageError("out must be a contiguous tensor like x", "allocate it with torch.empty_like(x)")
    n = x.numel()
    if task == 53:
        args = (x.data_ptr(), y.data_ptr(), np.int64(n), np.float32(params["scale"]),
                np.float32(params["min"]), np.float32(params["max"]))
    elif task == 81:
        args = (x.data_ptr(), y.data_ptr(), np.int64(n))
    else:
        bias = params["bias"]
        cols = x.shape[1]
        if not (isinstance(bias, torch.Tensor) and bias.dtype == torch.float32 and bias.device == x.device
                and bias.is_contiguous() and tuple(bias.shape) == (cols,)):
            raise UsageError("task 95 needs a contiguous float32 bias of one value per column on x's device",
                             f"expected shape ({cols},)")
        args = (x.data_ptr(), bias.data_ptr(), y.data_ptr(), np.int64(n), np.int64(cols))
    if n == 0:
        return y
    kernels.launch(KERNEL_NAMES[task], (blocks_for(n),), (THREADS_PER_BLOCK,), args,
                   device_index=x.device.index or 0, stream=stream)
    return y


class PointwiseFusion(StudyBinding):
    documents = {"scout": "schemas/scout.schema.json"}
    section_schemas = {"correctness": "schemas/correctness.sections.schema.json"}
    custom_schema = "schemas/custom.schema.json"
    scope_names = ("tail",)
    section_names = ("tail_controls",)
    import_log_file = "run_all.log"  # the post's scripts' log (importer.LOG_FILE)
    nan_input_paths = ("boundaries_and_nonfinite", "tail_controls[0]", "tiny_value_controls")

    # ------------------------------------------------------------------ static
    def kernel_names(self, study) -> tuple[str, ...]:
        return tuple(KERNEL_NAMES[t] for t in sorted(KERNEL_NAMES))

    def kernelbench_tasks(self, study) -> list[tuple[int, int]]:
        out = super().kernelbench_tasks(study)
        return out + [task_key(t) for t in study.custom("scout")["tasks"] if task_key(t) not in out]

    def stages(self, study):
        return [("tiny_value_controls", self._tiny_value_controls), ("ftz_cost", self._ftz_cost),
                ("scout", self._scout)]

    # ------------------------------------------------------------------ building
    def candidate(self, ctx, task, variant, model):
        spec = tasks.spec(task)
        k = ctx.kernels[variant]
        return lambda x: launch_tail(k, task, spec.linear(model)(x), spec.kernel_params(model))

    def _tail(self, ctx, task, variant, model, z, bias=None):
        spec = tasks.spec(task)
        k = ctx.kernels[variant]
        return lambda: launch_tail(k, task, z, spec.kernel_params(model, bias))

    def scopes(self, ctx, task, model, inputs):
        spec = tasks.spec(task)
        z = spec.linear(model)(inputs[0])
        nbytes = 2 * z.numel() * 4 + (z.shape[1] * 4 if spec.has_bias else 0)
        return [Scope(name="tail", inputs=(z,), reference=lambda v: spec.reference_tail(model, v),
                      candidate=lambda n: self._tail(ctx, task, n, model, z), bytes_moved=nbytes,
                      owner=model)]

    def controls(self, ctx, task, model, inputs, scopes):
        import torch

        spec = tasks.spec(task)
        z = scopes[0].inputs[0]
        bnd = ctx.study.custom("boundary")
        vals = torch.tensor(values(bnd["values"]), dtype=torch.float32, device="cuda")
        if spec.has_bias:
            cols = z.shape[1]
            control = vals.repeat((cols + vals.numel() - 1) // vals.numel())[:cols].repeat(bnd["bias_task_rows"], 1)
        else:
            control = vals.repeat(bnd["rows"]).reshape(bnd["rows"], -1)
        control = control.contiguous()
        return {"tail_controls": [
            {"name": TAIL_CONTROLS[0], "shape": list(control.shape), "criterion": ctx.criterion(control),
             "checks": ctx.checks(spec.reference_tail(model, control),
                                  {n: self._tail(ctx, task, n, model, control)() for n in ctx.kernels})},
            {"name": TAIL_CONTROLS[1], "shape": list(z.shape), "criterion": ctx.criterion(z),
             "checks": ctx.checks(spec.reference_tail(model, z),
                                  {n: self._tail(ctx, task, n, model, z)() for n in ctx.kernels})},
        ]}

    def mutate(self, ctx, task, model, mutation):
        spec = tasks.spec(task)
        spec.linear(model).weight.add_(mutation["weight_delta"])
        if spec.has_bias:
            spec.bias_of(model).add_(mutation["bias_delta"])

    def size_label(self, size):
        return f"B{size['batch']}K{size['in_features']}H{size['out_features']}"

    def model_at(self, ctx, task, module, size, seed):
        import torch

        spec = tasks.spec(task)
        torch.manual_seed(seed)
        model = module.Model(*spec.init_at(list(module.get_init_inputs()), size["in_features"],
                                           size["out_features"])).cuda().eval()
        x = torch.rand(size["batch"], size["in_features"], device="cuda")
        shape = [size["batch"], size["in_features"], size["out_features"]]
        return SizedCase(model=model, inputs=(x,), case={"shape_B_K_H": shape},
                         shape=(size["batch"], size["out_features"]), label=self.size_label(size))

    def _model_for_params(self, ctx, task, device="cuda"):
        """A model whose pointwise constants (scale, clamp bounds) the witness and the
        tiny-value controls use; built at a tiny shape (constants do not depend on it)."""
        import torch

        mod = ctx.module(task)
        spec = tasks.spec(task)
        torch.manual_seed(0)
        return mod.Model(*spec.init_at(list(mod.get_init_inputs()), 8, 8)).to(device).eval()

    def witness(self, ctx, task, module, inputs):
        import torch

        spec = tasks.spec(task)
        models = {"cuda": self._model_for_params(ctx, task, "cuda"), "cpu": self._model_for_params(ctx, task, "cpu")}

        def make(device):
            return torch.tensor([inputs], dtype=torch.float32, device=device)

        def reference(x):
            dev = "cuda" if x.is_cuda else "cpu"
            bias = torch.zeros(x.shape[1], device=x.device) if spec.has_bias else None
            return spec.reference_tail(models[dev], x, bias)

        def candidate(variant):
            x = make("cuda")
            bias = torch.zeros(x.shape[1], device="cuda") if spec.has_bias else None
            return launch_tail(ctx.kernels[variant], task, x, spec.kernel_params(models["cuda"], bias))

        return WitnessRun(make=make, reference=reference, candidate=candidate,
                          description="fused tail of the task at inputs whose sigmoid intermediate is subnormal: "
                                      "under FTZ the output flushes to signed zero; without FTZ it equals PyTorch")

    def extra_blocks(self, ctx, task, model, inputs):
        if not ctx.study.extra("roofline"):
            return
        spec = tasks.spec(task)
        lin = spec.linear(model)
        x = inputs[0]
        for mode in ("events", "graph"):
            blk = ctx.time_block({"gemm": lambda: lin(x)}, ctx.study.timing_protocol(mode))
            ctx.add_block({"id": f"{task}.gemm.{mode}", "task": task, "scope": "gemm", "mode": mode, "kind": "gemm",
                           "shape": [x.shape[0], lin.weight.shape[0]],
                           "flops": 2 * x.shape[0] * x.shape[1] * lin.weight.shape[0], **blk})

    def validate(self, study) -> list[str]:
        """The FTZ-cost probe times two variants of the study against each other."""
        names = [v.name for v in study.variants]
        fc = study.custom("ftz_cost") or {}
        out = [f"custom.ftz_cost names variant {n!r}, which the study does not compile (variants: "
               f"{', '.join(names)})" for n in fc.get("variants", []) if n not in names]
        if fc and len(set(fc.get("variants", []))) != 2:
            out.append("custom.ftz_cost must name two different variants")
        return out

    # ------------------------------------------------------------------ probes
    @staticmethod
    def ftz_cost_protocol(study) -> TimingProtocol:
        f = study.custom("ftz_cost")
        return TimingProtocol(mode=f["mode"], warmups=f["warmups"], rounds=f["rounds"],
                              invocations_per_pair=f["invocations_per_pair"], order_seed=study.doc["timing"]["order_seed"])

    def _tiny_value_controls(self, ctx) -> None:
        import torch

        tv = ctx.study.custom("tiny_value")
        ls = tv["linspace"]
        vals = torch.cat([torch.linspace(ls["start"], ls["stop"], ls["count"], device="cuda"),
                          torch.tensor(values(tv["extra_values"]), dtype=torch.float32, device="cuda")])
        rows, cols = tv["shape"]
        n = rows * cols
        a = vals.repeat((n + vals.numel() - 1) // vals.numel())[:n].reshape(rows, cols).contiguous()
        names = list(ctx.kernels)
        section = ctx.docs["correctness"].setdefault("tiny_value_controls", {})
        for task in ctx.study.tasks:
            spec = tasks.spec(task)
            model = self._model_for_params(ctx, task)
            bias = torch.zeros(cols, device="cuda") if spec.has_bias else None
            ref = spec.reference_tail(model, a, bias)
            outs = {nm: launch_tail(ctx.kernels[nm], task, a, spec.kernel_params(model, bias)) for nm in names}
            cross = {f"{b}_vs_{c}": ctx.compare(outs[c], outs[b]) for i, c in enumerate(names) for b in names[i + 1:]}
            chk = ctx.checks(ref, outs)
            if ctx.study.extra("inductor"):
                fn, secs = ctx.inductor(lambda v: spec.reference_tail(model, v, bias), a)
                chk["inductor_tail"] = ctx.compare(ref, fn(a))
                ctx.docs["timings"]["extras"].setdefault("inductor_compile_seconds", {}).setdefault(
                    str(task), {})["tiny_value_tail"] = secs
            section[str(task)] = {
                "shape": [rows, cols], "bias": "zero" if spec.has_bias else None, "criterion": ctx.criterion(a),
                "domain": tiny_value_domain(tv), "checks": chk, "cross": cross}
        ctx.write("correctness")

    def _ftz_cost(self, ctx) -> None:
        import torch

        fc = ctx.study.custom("ftz_cost")
        seed = ctx.study.doc["timing"]["seed"]
        proto = self.ftz_cost_protocol(ctx.study)
        for task in ctx.study.tasks:
            spec = tasks.spec(task)
            mod = ctx.module(task)
            torch.manual_seed(seed)
            model = mod.Model(*mod.get_init_inputs()).cuda().eval()
            x = mod.get_inputs()[0].cuda()
            z = spec.linear(model)(x)
            ref = spec.reference_tail(model, z)
            arms = {n: self._tail(ctx, task, n, model, z) for n in fc["variants"]}
            chk = {n: ctx.compare(ref, fn()) for n, fn in arms.items()}
            block = {"id": f"{task}.ftz_cost.{fc['mode']}", "task": task, "scope": "tail", "mode": fc["mode"],
                     "shape": list(z.shape), "kind": "ftz_cost", "checks": chk}
            if all(c["official"]["pass"] for c in chk.values()):
                block.update(ctx.time_block(arms, proto))
            else:
                block.update({"protocol": proto.to_doc(), "arms": list(arms), "rounds": [],
                              "skipped": FTZ_COST_SKIPPED})
            ctx.add_block(block)
            del model, x, z, ref
            torch.cuda.empty_cache()
        ctx.write("timings")

    def _scout(self, ctx) -> None:
        import torch

        sc = ctx.study.custom("scout")
        cases = []
        for t in sc["tasks"]:
            level, task = task_key(t)
            mod = ctx.module(task, level)
            for seed in sc["seeds"]:
                torch.manual_seed(seed)
                model = mod.Model(*mod.get_init_inputs()).cuda().eval()
                x = mod.get_inputs()[0].cuda()
                ref = model(x)
                if task == 14:
                    half = model.scaling_factor / 2
                    out = (x @ model.weight.sum(0)).unsqueeze(1) * half
                    out64 = ((x.double() @ model.weight.double().sum(0)).unsqueeze(1) * half).float()
                    rewrite = "(x @ W.sum(0)).unsqueeze(1) * (scaling_factor / 2)"
                else:
                    lin = model.gemm
                    v = lin.weight.mean(0)
                    c = lin.bias.mean() - model.subtract.mean()
                    out = torch.nn.functional.gelu((x @ v + c).unsqueeze(1)) + x
                    v64 = lin.weight.double().mean(0)
                    c64 = lin.bias.double().mean() - model.subtract.double().mean()
                    out64 = torch.nn.functional.gelu((x.double() @ v64 + c64).float().unsqueeze(1)) + x
                    rewrite = "gelu((x @ W.mean(0) + b.mean() - subtract.mean()).unsqueeze(1)) + x"
                cases.append({"case": {"task": task, "seed": seed, "shape": list(x.shape)}, "rewrite": rewrite,
                              "checks": {"fp32": ctx.compare(ref, out), "fp64_accumulated": ctx.compare(ref, out64)}})
                del model, x, ref, out, out64
                gc.collect()
                torch.cuda.empty_cache()
        ctx.doc("scout", cases=cases,
                description="algebraic rewrites of tasks 14 and 51 that reassociate the GEMM reduction; "
                            "a numerical scout, not a fused kernel")
        ctx.write("scout")

    # ------------------------------------------------------------------ verifier side
    def expected_blocks(self, study) -> dict[str, dict]:
        fc = study.custom("ftz_cost")
        out = {f"{t}.ftz_cost.{fc['mode']}": {"kind": "ftz_cost", "protocol": self.ftz_cost_protocol(study).to_doc(),
                                               "arms": list(fc["variants"])} for t in study.tasks}
        if study.extra("roofline"):
            for t in study.tasks:
                for mode in ("events", "graph"):
                    out[f"{t}.gemm.{mode}"] = {"kind": "gemm", "protocol": study.timing_protocol(mode).to_doc(),
                                               "arms": ["gemm"]}
        return out

    def report_sections(self, study_doc, documents):
        from . import report

        return report.sections(documents)

    def crosscheck(self, study, documents, imported):
        from . import checks

        return checks.problems(study, documents, imported)

    def provenance(self, documents, files):
        from . import checks

        return checks.shape_problems(documents, files)

    def import_originals(self, folder: Path):
        from . import importer

        return importer.import_post_run(folder)


#: the note of an FTZ-cost block that was not timed because a variant failed its check
FTZ_COST_SKIPPED = "a variant failed its check on the timing input"


def tiny_value_domain(tv: Mapping) -> str:
    ls = tv["linspace"]
    return (f"linspace({ls['start']}, {ls['stop']}, {ls['count']}) plus {len(tv['extra_values'])} "
            "subnormal, signed-zero, infinite and NaN values, tiled")


BINDING = PointwiseFusion()
