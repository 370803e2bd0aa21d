"""The study engine's per-task stages (:class:`kbrepro.harness.run.StudyRun` inherits them): per
task, correctness over seeds x input distributions for every variant, the timing-input check,
TorchScript, CUDA-graph replay after mutation, the binding's scopes and controls, Inductor,
eligibility and interleaved timing, cold-L2 blocks; and the extra shapes.
"""
from __future__ import annotations

import gc
import logging

from kbrepro.harness.records import BlockKey
from kbrepro.harness import extras
from kbrepro.harness.extras import L2Flush

log = logging.getLogger("kbrepro.run")


class TaskStages:
    """Per-task and extra-shape stages of :class:`kbrepro.harness.run.StudyRun` (a mixin: it
    reads the run's attributes and calls its context API, ``compare``, ``checks``,
    ``time_block``...)."""

    def _distributions(self, inputs: tuple):
        """The study's input distributions, in order: ``official_uniform`` is the task's own
        ``get_inputs()``; the others replace every floating input by a draw of the CUDA
        generator of the same shape (see the study YAML)."""
        import torch

        def each(f):
            return tuple(f(x) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs)

        for dist in self.study.doc["correctness"]["distributions"]:
            if dist == "official_uniform":
                yield dist, inputs
            elif dist == "normal":
                yield dist, each(torch.randn_like)
            elif dist == "uniform_x100":
                yield dist, each(lambda x: torch.rand_like(x) * 100)
            elif dist == "uniform_x_minus100":
                yield dist, each(lambda x: torch.rand_like(x) * (-100))

    @staticmethod
    def _shape(inputs: tuple) -> list:
        return list(inputs[0].shape) if inputs and hasattr(inputs[0], "shape") else []

    def _traced(self, fn, args: tuple, owner=None):
        """``torch.jit.freeze(torch.jit.trace(...))`` of a module or of a function of tensors
        (with ``owner``, the module whose parameters it reads, registered)."""
        import torch

        if isinstance(fn, torch.nn.Module):
            return torch.jit.freeze(torch.jit.trace(fn, args))

        class Wrapped(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.owner = owner if isinstance(owner, torch.nn.Module) else None

            def forward(self, *xs):
                return fn(*xs)

        return torch.jit.freeze(torch.jit.trace(Wrapped().eval(), args))

    # ------------------------------------------------------------------ per task
    def _task(self, task: int) -> None:
        import torch

        b = self.binding
        mod = self.module(task)
        cdoc = self.docs["correctness"]
        task_doc = cdoc["tasks"].setdefault(str(task), {})
        # 1. full-program correctness
        for seed in self.study.doc["correctness"]["seeds"]:
            model = b.model(self, task, mod, seed)
            inputs = b.inputs(self, task, mod)
            cands = {n: b.candidate(self, task, n, model) for n in self.kernels}
            for dist, xs in self._distributions(inputs):
                ref = model(*xs)
                outs = {n: fn(*xs) for n, fn in cands.items()}
                cdoc["full_program"].append({"case": {"task": task, "seed": seed, "distribution": dist,
                                                      "shape": self._shape(xs)},
                                             "checks": self.checks(ref, outs)})
                del ref, outs
            del model, inputs, cands
            gc.collect()
            torch.cuda.empty_cache()
        self.progress(f"task_{task}", "step", "full-program correctness done")
        # 2. controls on the timing input
        seed = self.study.doc["timing"]["seed"]
        model = b.model(self, task, mod, seed)
        inputs = b.inputs(self, task, mod)
        cands = {n: b.candidate(self, task, n, model) for n in self.kernels}
        scopes = b.scopes(self, task, model, inputs)
        task_doc.update(b.controls(self, task, model, inputs, scopes))
        ref = model(*inputs)
        task_doc["timing_input"] = {"seed": seed, "shape": self._shape(inputs),
                                    "checks": self.checks(ref, {n: fn(*inputs) for n, fn in cands.items()})}
        ts_full = self._traced(model, inputs)
        ts_scopes = {sc.name: self._traced(sc.reference, sc.inputs, sc.owner) for sc in scopes if sc.torchscript}
        task_doc["torchscript"] = {"full": self.compare(ref, ts_full(*inputs)),
                                   **{sc.name: self.compare(sc.reference(*sc.inputs), ts_scopes[sc.name](*sc.inputs))
                                      for sc in scopes if sc.torchscript}}
        mut = (self.study.doc.get("controls") or {}).get("graph_mutation")
        if mut:
            self._graph_mutation(task, task_doc, model, inputs, cands, ref, mut)
        self.write("correctness")
        # eligibility: a variant is timed only if every official check of this task passed
        sections = [k for k, v in task_doc.items() if isinstance(v, list)]
        eligible = {}
        for n in self.kernels:
            oks = [c["checks"][n]["official"]["pass"] for c in cdoc["full_program"] if c["case"]["task"] == task]
            oks += [c["checks"][n][c["criterion"]]["pass"] for s in sections for c in task_doc[s]]
            oks.append(task_doc["timing_input"]["checks"][n]["official"]["pass"])
            if "graph_mutation" in task_doc:
                oks.append(task_doc["graph_mutation"]["checks"][n]["official"]["pass"])
            eligible[n] = all(oks)
        task_doc["eligible_for_timing"] = eligible
        ts_ok = all(c["official"]["pass"] for c in task_doc["torchscript"].values())
        self.write("correctness")
        self.progress(f"task_{task}", "step", "controls done; eligible: " + ", ".join(n for n, e in eligible.items() if e))
        # 3. timings: the full program and every scope, each against its baselines
        groups = [("full", {"eager": lambda: model(*inputs)}, None)]
        if ts_ok:
            groups[0][1]["torchscript"] = lambda: ts_full(*inputs)
        for sc in scopes:
            arms = {f"eager_{sc.name}": lambda sc=sc: sc.reference(*sc.inputs)}
            if ts_ok and sc.name in ts_scopes:
                arms[f"torchscript_{sc.name}"] = lambda sc=sc: ts_scopes[sc.name](*sc.inputs)
            groups.append((sc.name, arms, sc))
        for n, ok in eligible.items():
            if ok:
                groups[0][1][n] = lambda fn=cands[n]: fn(*inputs)
                for _, arms, sc in groups[1:]:
                    arms[n] = sc.candidate(n)
        if self.study.extra("inductor"):
            self._inductor(task, task_doc, model, inputs, ref, groups)
        for scope, arms, sc in groups:
            for mode in self.study.doc["timing"]["modes"]:
                block = self.time_block(arms, self.protocol(mode, arms))
                self.add_block({"id": BlockKey(task, scope, mode).id, "task": task, "scope": scope, "mode": mode,
                                "shape": self._shape(sc.inputs if sc else inputs), "kind": "study",
                                **({"bytes_moved": sc.bytes_moved} if sc is not None and sc.bytes_moved else {}),
                                **block})
                self.progress(f"task_{task}", "step", f"timing {scope}/{mode} done ({len(block['rounds'])} rounds)")
        if self.study.extra("cold_l2"):
            self._cold_blocks(task, groups, inputs)
        b.extra_blocks(self, task, model, inputs)
        self.write("timings", "correctness")
        del model, inputs, cands, scopes, groups, ts_full, ts_scopes, ref
        gc.collect()
        torch.cuda.empty_cache()

    def _graph_mutation(self, task, task_doc, model, inputs, cands, ref, mut) -> None:
        """CUDA-graph replay after changing the inputs (scaled in place) and the parameters
        (the binding's :meth:`~plugin.StudyBinding.mutate`); everything is restored after."""
        import torch

        saved_inputs = [x.clone() if isinstance(x, torch.Tensor) else None for x in inputs]
        saved_state = {k: v.detach().clone() for k, v in model.state_dict(keep_vars=True).items()}
        graphs = {}
        for n, fn in cands.items():
            fn(*inputs)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out = fn(*inputs)
            graphs[n] = (g, out)
        for x in inputs:
            if isinstance(x, torch.Tensor) and x.is_floating_point():
                x.mul_(mut["input_scale"])
        self.binding.mutate(self, task, model, mut)
        ref_m = model(*inputs)
        outs = {}
        for n, (g, out) in graphs.items():
            g.replay()
            torch.cuda.synchronize()
            outs[n] = out.clone()
        task_doc["graph_mutation"] = {"mutation": mut, "checks": self.checks(ref_m, outs),
                                      "output_changed": {n: not bool(torch.equal(o, ref)) for n, o in outs.items()}}
        del graphs, outs, ref_m
        for x, s in zip(inputs, saved_inputs):
            if s is not None:
                x.copy_(s)
        state = model.state_dict(keep_vars=True)
        for k, v in saved_state.items():
            state[k].data.copy_(v)

    def _inductor(self, task, task_doc, model, inputs, ref, groups) -> None:
        full_fn, full_s = self.inductor(model, *inputs)
        rec = {"settings": extras.inductor_settings(), "compile_seconds": {"full": full_s},
               "full": self.compare(ref, full_fn(*inputs))}
        if rec["full"]["official"]["pass"]:
            groups[0][1]["inductor"] = lambda: full_fn(*inputs)
        for scope, arms, sc in groups[1:]:
            fn, secs = self.inductor(sc.reference, *sc.inputs)
            rec["compile_seconds"][scope] = secs
            rec[scope] = self.compare(sc.reference(*sc.inputs), fn(*sc.inputs))
            if rec[scope]["official"]["pass"]:
                arms[f"inductor_{scope}"] = lambda fn=fn, sc=sc: fn(*sc.inputs)
        task_doc["inductor"] = rec
        self.docs["timings"]["extras"].setdefault("inductor_compile_seconds", {})[str(task)] = rec["compile_seconds"]
        self.progress(f"task_{task}", "step", "inductor compiled in " + ", ".join(
            f"{s:.1f} s ({k})" for k, s in rec["compile_seconds"].items()))

    def _cold_blocks(self, task: int, groups, inputs) -> None:
        """Cold-L2 twins: every scope in events and graph mode, the full program in graph mode."""

        flush = L2Flush.for_device(2.0)
        self.docs["timings"]["extras"]["l2_flush_bytes"] = flush.nbytes
        order = [g for g in groups[1:]] + [groups[0]]
        for scope, arms, sc in order:
            modes = ("graph",) if scope == "full" else ("events", "graph")
            cold_arms = {"l2_flush_only": lambda: None, **arms}
            for mode in modes:
                blk = self.time_block(cold_arms, self.protocol(mode, cold_arms, l2="cold"), flush=flush)
                self.add_block({
                    "id": BlockKey(task, scope, mode, "cold_l2").id, "task": task, "scope": scope, "mode": mode, "kind": "cold_l2",
                    "shape": self._shape(sc.inputs if sc else inputs), "l2": "cold", "flush_bytes": flush.nbytes,
                    **({"bytes_moved": sc.bytes_moved} if sc is not None and sc.bytes_moved else {}), **blk})
                self.progress(f"task_{task}", "step", f"cold-L2 timing {scope}/{mode} done ({len(blk['rounds'])} rounds)")
        del flush


    def _extra_shapes(self) -> None:
        import torch

        b = self.binding
        for es in self.study.doc["extra_shapes"]:
            for task in self.study.tasks:
                sc = b.model_at(self, task, self.module(task), es["size"], es["seed"])
                model, xs = sc.model, sc.inputs
                ref = model(*xs)
                ts = self._traced(model, xs)
                cands = {n: b.candidate(self, task, n, model) for n in self.kernels}
                chk = self.checks(ref, {n: fn(*xs) for n, fn in cands.items()})
                chk["torchscript"] = self.compare(ref, ts(*xs))
                cdoc = self.docs["correctness"]
                cdoc["extra_shapes"].append({"case": {"task": task, "seed": es["seed"], **sc.case}, "checks": chk})
                arms = {"eager": lambda: model(*xs)}
                if chk["torchscript"]["official"]["pass"]:
                    arms["torchscript"] = lambda: ts(*xs)
                for n, fn in cands.items():
                    if chk[n]["official"]["pass"]:
                        arms[n] = lambda fn=fn: fn(*xs)
                for mode in self.study.doc["timing"]["modes"]:
                    block = self.time_block(arms, self.study.timing_protocol(mode, rounds=es["rounds"]))
                    key = BlockKey(task, "full", mode, "extra_shape", b.size_label(es["size"]))
                    self.add_block({"id": key.id, "task": task, "scope": "full",
                                    "mode": mode, "shape": list(sc.shape), "kind": "extra_shape", **sc.case, **block})
                del model, xs, ref, ts, cands, sc
                torch.cuda.empty_cache()
        self.write("correctness", "timings")


__all__ = ["TaskStages"]
