"""The verifier's checks of the pointwise-fusion study's own sections and documents.

Called through :meth:`PointwiseFusion.crosscheck` (tier 3, against the verifier's own
resolved study) and :meth:`PointwiseFusion.provenance` (tier 4, sizes from the bundled task
files). Every function returns problem dicts ``{"file", "path", "message", "expected",
"found"}`` and raises nothing.
"""
from __future__ import annotations

import math
import re
from typing import Any, Mapping

from kbrepro.harness.study import task_key, values

from . import tasks as tasks_mod

_F = {n: f"data/results/{n}.json" for n in ("correctness", "timings", "scout", "witness", "compile")}
_CUT = 120


def _cut(x: Any) -> Any:
    return x[:_CUT] + "..." if isinstance(x, str) and len(x) > _CUT else x


def _p(file, path, message, expected=None, found=None) -> dict:
    return {"file": file, "path": path, "message": message, "expected": _cut(expected), "found": _cut(found)}


def _d(x: Any) -> dict:
    return x if isinstance(x, dict) else {}


def _l(x: Any) -> list:
    return x if isinstance(x, list) else []


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _int(x: Any) -> Any:
    try:
        return int(x)
    except (TypeError, ValueError):
        return x


def _criterion_of(vals: list) -> str:
    return "equal_nan_stress" if any(isinstance(v, float) and math.isnan(v) for v in vals) else "official"


def problems(study, documents: Mapping[str, dict], imported: bool) -> list[dict]:
    """Tail controls, tiny-value controls, extra-shape sizes and the scout against the
    verifier's own resolved study."""
    from .binding import TAIL_CONTROLS, tiny_value_domain

    out: list[dict] = []
    f = _F["correctness"]
    cor = _d(documents.get("correctness"))
    vnames = [v.name for v in study.variants]
    inductor = bool(study.extra("inductor"))

    def vset(checks: Any, path: str, what: str, extra: tuple = ()) -> None:
        keys = list(_d(checks))
        allowed = vnames + list(extra)
        if imported:
            bad = [k for k in keys if k not in allowed]
            if bad or not keys:
                out.append(_p(f, path, f"{what}: checks of variants the study does not compile", expected=allowed,
                              found=keys))
        elif sorted(keys) != sorted(allowed):
            out.append(_p(f, path, f"{what}: the checked variants are not the study's", expected=sorted(allowed),
                          found=sorted(keys)))

    tdocs = _d(cor.get("tasks"))
    bnd = study.custom("boundary")
    bvals = values(bnd["values"])
    for t in study.tasks:
        td = tdocs.get(str(t))
        if not isinstance(td, dict):
            continue
        base = f'$.tasks["{t}"]'
        spec = tasks_mod.TASKS.get(t)
        tcs = [c for c in _l(td.get("tail_controls")) if isinstance(c, dict)]
        if [c.get("name") for c in tcs] != list(TAIL_CONTROLS):
            out.append(_p(f, f"{base}.tail_controls", f"task {t}: the tail controls are not the study's",
                          expected=list(TAIL_CONTROLS), found=[c.get("name") for c in tcs]))
        for j, c in enumerate(tcs):
            vset(c.get("checks"), f"{base}.tail_controls[{j}].checks", f"task {t} control {_cut(c.get('name'))}")
            if c.get("name") == TAIL_CONTROLS[0]:
                shape = c.get("shape")
                if shape is not None and spec is not None:
                    ok = (isinstance(shape, list) and len(shape) == 2 and shape[0] == bnd["bias_task_rows"]) \
                        if spec.has_bias else shape == [bnd["rows"], len(bvals)]
                    if not ok:
                        out.append(_p(f, f"{base}.tail_controls[{j}].shape", f"task {t}: the boundary control's shape "
                                      "is not the study's", expected=[bnd["bias_task_rows"], "out_features"]
                                      if spec.has_bias else [bnd["rows"], len(bvals)], found=shape))
                if not imported and c.get("criterion") != _criterion_of(bvals):
                    out.append(_p(f, f"{base}.tail_controls[{j}].criterion", f"task {t}: the boundary control is "
                                  "decided by the wrong criterion", expected=_criterion_of(bvals), found=c.get("criterion")))
    for i, c in enumerate(_l(cor.get("extra_shapes"))):
        es = study.doc.get("extra_shapes") or []
        sz = _d(es[i // max(1, len(study.tasks))].get("size")) if i // max(1, len(study.tasks)) < len(es) else {}
        want = [sz.get("batch"), sz.get("in_features"), sz.get("out_features")]
        got = _d(_d(c).get("case")).get("shape_B_K_H")
        if got != want and not imported:
            out.append(_p(f, f"$.extra_shapes[{i}].case.shape_B_K_H", "the extra shape is not the study's size",
                          expected=want, found=got))
    tv = study.custom("tiny_value")
    tvals = values(tv["extra_values"])
    domain = tiny_value_domain(tv)
    tvc = _d(cor.get("tiny_value_controls"))
    if sorted(tvc) != sorted(str(t) for t in study.tasks):
        out.append(_p(f, "$.tiny_value_controls", "the tiny-value controls are not the study's tasks",
                      expected=[str(t) for t in study.tasks], found=sorted(tvc)))
    for t in study.tasks:
        c = tvc.get(str(t))
        if not isinstance(c, dict):
            continue
        base = f'$.tiny_value_controls["{t}"]'
        spec = tasks_mod.TASKS.get(t)
        if c.get("shape") is not None and c.get("shape") != list(tv["shape"]):
            out.append(_p(f, f"{base}.shape", f"task {t}: tiny-value shape differs from the study",
                          expected=list(tv["shape"]), found=c.get("shape")))
        if not imported:
            if spec is not None and c.get("bias") != ("zero" if spec.has_bias else None):
                out.append(_p(f, f"{base}.bias", f"task {t}: tiny-value bias is not the study's",
                              expected="zero" if spec.has_bias else None, found=c.get("bias")))
            if c.get("criterion") != _criterion_of(tvals):
                out.append(_p(f, f"{base}.criterion", f"task {t}: tiny-value control decided by the wrong criterion",
                              expected=_criterion_of(tvals), found=c.get("criterion")))
            if c.get("domain") != domain:
                out.append(_p(f, f"{base}.domain", f"task {t}: tiny-value domain is not the study's",
                              expected=domain, found=c.get("domain")))
            cross = sorted(f"{b}_vs_{a}" for i, a in enumerate(vnames) for b in vnames[i + 1:])
            if sorted(_d(c.get("cross"))) != cross:
                out.append(_p(f, f"{base}.cross", f"task {t}: the variant cross-comparisons are not the study's pairs",
                              expected=cross, found=sorted(_d(c.get("cross")))))
        vset(c.get("checks"), f"{base}.checks", f"task {t} tiny-value control", ("inductor_tail",) if inductor else ())
    sc = study.custom("scout")
    scout = documents.get("scout")
    if isinstance(scout, dict):
        want_s = [(task_key(t)[1], s) for t in sc["tasks"] for s in sc["seeds"]]
        got_s = [(_d(_d(c).get("case")).get("task"), _d(_d(c).get("case")).get("seed")) for c in _l(scout.get("cases"))]
        if got_s != want_s:
            out.append(_p(_F["scout"], "$.cases", "the scout cases are not the study's tasks x seeds",
                          expected=[list(x) for x in want_s], found=[list(x) for x in got_s]))
        for i, c in enumerate(_l(scout.get("cases"))):
            if sorted(_d(_d(c).get("checks"))) != ["fp32", "fp64_accumulated"]:
                out.append(_p(_F["scout"], f"$.cases[{i}].checks", "scout checks are fp32 and "
                              "fp64_accumulated", expected=["fp32", "fp64_accumulated"], found=sorted(_d(_d(c).get("checks")))))
    elif not imported:
        out.append(_p(_F["scout"], None, "the study's scout document is missing"))
    return out


_ASSIGN_INT = re.compile(rb"^([A-Za-z_]\w*)\s*=\s*(\d+)\s*(?:#.*)?$", re.MULTILINE)


def _task_sizes(data: bytes) -> dict[str, int]:
    """Module-level integer constants of a KernelBench task file (``batch_size = 2048``),
    read from lines that start in column 0; the last assignment wins, as in Python."""
    return {m.group(1).decode(): int(m.group(2)) for m in _ASSIGN_INT.finditer(data)}


def shape_problems(documents, files) -> list[dict]:
    """Element counts and shapes vs the bundled task files' batch/in/out sizes."""
    out = []
    sizes: dict[int, dict] = {}
    for p, data in files.items():
        m = re.match(r"^data/inputs/kernelbench/KernelBench/level\d+/(\d+)_[^/]+\.py$", p)
        if m:
            s = _task_sizes(data)
            b, k = s.get("batch_size"), s.get("in_features", s.get("input_size"))
            h = s.get("out_features", s.get("hidden_size"))
            if b and k and h:
                sizes[int(m.group(1))] = {"B": b, "K": k, "H": h}
    if not sizes:
        return out
    cor = _d(documents.get("correctness"))
    f = _F["correctness"]

    def counts(checks: Any, path: str, what: str, want: int) -> None:
        for v, c in sorted(_d(checks).items()):
            if not (isinstance(c, dict) and "element_count" in c):
                continue
            if c.get("element_count") != want:
                out.append(_p(f, f"{path}.{v}.element_count", f"{what}: {c.get('element_count')} elements, the task's "
                              f"output has {want}", expected=want, found=c.get("element_count")))
                return

    for i, c in enumerate(_l(cor.get("full_program"))):
        case = _d(_d(c).get("case"))
        s = sizes.get(case.get("task")) if case.get("task") in tasks_mod.TASKS else None
        if s is None:
            continue
        if case.get("shape") is not None and case["shape"] != [s["B"], s["K"]]:
            out.append(_p(f, f"$.full_program[{i}].case.shape", f"task {case['task']}: input shape is not the task "
                          "file's (batch_size, in_features)", expected=[s["B"], s["K"]], found=case["shape"]))
        counts(_d(c).get("checks"), f"$.full_program[{i}].checks", f"full-program case {i}", s["B"] * s["H"])
    for t, td in sorted(_d(cor.get("tasks")).items()):
        s = sizes.get(_int(t))
        if s is None or _int(t) not in tasks_mod.TASKS:
            continue
        td = _d(td)
        base = f'$.tasks["{t}"]'
        bh = s["B"] * s["H"]
        ti = _d(td.get("timing_input"))
        if ti.get("shape") is not None and ti["shape"] != [s["B"], s["K"]]:
            out.append(_p(f, f"{base}.timing_input.shape", f"task {t}: timing-input shape is not the task file's",
                          expected=[s["B"], s["K"]], found=ti["shape"]))
        counts(ti.get("checks"), f"{base}.timing_input.checks", f"task {t} timing input", bh)
        counts(_d(td.get("graph_mutation")).get("checks"), f"{base}.graph_mutation.checks", f"task {t} graph mutation", bh)
        ts = _d(td.get("torchscript"))
        counts({k: ts[k] for k in ("full", "tail") if k in ts}, f"{base}.torchscript", f"task {t} TorchScript", bh)
        ind = _d(td.get("inductor"))
        counts({k: ind[k] for k in ("full", "tail") if k in ind}, f"{base}.inductor", f"task {t} Inductor", bh)
        for j, tc in enumerate(_l(td.get("tail_controls"))):
            tc = _d(tc)
            shape = tc.get("shape")
            if tc.get("name") == "actual_linear_output" and shape is not None and shape != [s["B"], s["H"]]:
                out.append(_p(f, f"{base}.tail_controls[{j}].shape", f"task {t}: the Linear output's shape is not "
                              "(batch_size, out_features)", expected=[s["B"], s["H"]], found=shape))
            if tc.get("name") == "boundaries_and_nonfinite" and tasks_mod.TASKS[_int(t)].has_bias and \
                    isinstance(shape, list) and len(shape) == 2 and shape[1] != s["H"]:
                out.append(_p(f, f"{base}.tail_controls[{j}].shape", f"task {t}: the boundary control spans the bias "
                              "columns", expected=s["H"], found=shape[1]))
            if isinstance(shape, list) and shape and all(_is_int(x) for x in shape):
                counts(tc.get("checks"), f"{base}.tail_controls[{j}].checks", f"task {t} control "
                       f"{_cut(tc.get('name'))}", math.prod(shape))
    for t, tv in sorted(_d(cor.get("tiny_value_controls")).items()):
        shape = _d(tv).get("shape")
        if isinstance(shape, list) and shape and all(_is_int(x) for x in shape):
            counts(_d(tv).get("checks"), f'$.tiny_value_controls["{t}"].checks', f"task {t} tiny-value control",
                   math.prod(shape))
    for i, c in enumerate(_l(cor.get("extra_shapes"))):
        shp = _d(_d(c).get("case")).get("shape_B_K_H")
        if isinstance(shp, list) and len(shp) == 3 and all(_is_int(x) for x in shp):
            counts(_d(c).get("checks"), f"$.extra_shapes[{i}].checks", f"extra shape {i}", shp[0] * shp[2])
    tf = _F["timings"]
    for i, b in enumerate(_l(_d(documents.get("timings")).get("blocks"))):
        b = _d(b)
        t = b.get("task")
        s = sizes.get(t) if t in tasks_mod.TASKS else None
        if s is None:
            continue
        kind, scope, shape = b.get("kind"), b.get("scope"), b.get("shape")
        want = None
        if kind in ("study", "cold_l2") and scope in ("full", "tail"):
            want = [s["B"], s["K"]]
        elif kind == "ftz_cost":
            want = [s["B"], s["H"]]
        elif kind == "extra_shape" and isinstance(b.get("shape_B_K_H"), list) and len(b["shape_B_K_H"]) == 3:
            want = [b["shape_B_K_H"][0], b["shape_B_K_H"][2]]
        if want is not None and shape is not None and shape != want:
            out.append(_p(tf, f"$.blocks[{i}].shape", f"block {_cut(b.get('id'))}: shape does not follow from the task "
                          "file's sizes", expected=want, found=shape))
        if scope == "tail" and kind in ("study", "cold_l2") and "bytes_moved" in b:
            moved = 2 * s["B"] * s["H"] * 4 + (s["H"] * 4 if tasks_mod.TASKS[t].has_bias else 0)
            if b["bytes_moved"] != moved:
                out.append(_p(tf, f"$.blocks[{i}].bytes_moved", f"block {_cut(b.get('id'))}: bytes moved by the tail "
                              "(read + write float32, + bias) do not follow from the task's sizes", expected=moved,
                              found=b["bytes_moved"]))
    for i, c in enumerate(_l(_d(documents.get("scout")).get("cases"))):
        case = _d(_d(c).get("case"))
        s = sizes.get(case.get("task"))
        if s is not None and case.get("shape") is not None and case["shape"] != [s["B"], s["K"]]:
            out.append(_p(_F["scout"], f"$.cases[{i}].case.shape", f"scout task {case.get('task')}: input shape "
                          "is not the task file's", expected=[s["B"], s["K"]], found=case["shape"]))
    return out


