"""The KernelBench-candidate study kind on CPU: the engine's checking pass against fake
candidates (each cheat caught by its named check), and a candidate bundle packed, verified, and
refused once tampered with (the attacker re-hashes the bag, so the manifest still agrees)."""
from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from kbrepro.bundle import candidates as bc
from kbrepro.bundle import pack
from kbrepro.bundle.verify.checklist import verify_archive
from kbrepro.bundle.verify.core import bag_info
from kbrepro.harness import candidate as hc
from kbrepro.harness import jsonio

import forge_candidates  # noqa: E402 (tests/ is on the path)
from conftest import kernelbench_from_example  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

TASK = b'''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)
    def forward(self, x):
        return torch.relu(self.lin(x))

batch_size = 8
n = 16

def get_inputs():
    return [torch.rand(batch_size, n)]

def get_init_inputs():
    return [n]
'''

HEAD = b'''import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)
'''

HONEST = HEAD + b'''    def forward(self, x):
        return torch.clamp_min(x @ self.lin.weight.t() + self.lin.bias, 0)
'''

CHEATS = {
    "inputs_unchanged": HEAD + b'''    def forward(self, x):
        y = torch.relu(self.lin(x))
        x.zero_()
        return y
''',
    "follows_fresh_inputs": HEAD + b'''        self.memo = {}
    def forward(self, x):
        k = x.data_ptr()
        if k not in self.memo:
            self.memo[k] = torch.relu(self.lin(x))
        return self.memo[k]
''',
    "output_is_plain_tensor": HEAD + b'''    def forward(self, x):
        class Lazy(torch.Tensor):
            pass
        return torch.relu(self.lin(x)).as_subclass(Lazy)
''',
    "no_threads_left": HEAD + b'''    def forward(self, x):
        import threading, time
        threading.Thread(target=time.sleep, args=(20,), daemon=True).start()
        return torch.relu(self.lin(x))
''',
    "precision_flags_unchanged": HEAD + b'''    def forward(self, x):
        torch.backends.cuda.matmul.allow_tf32 = True
        return torch.relu(self.lin(x))
''',
    "other_shapes_correct": HEAD + b'''    def forward(self, x):
        return torch.relu(self.lin(x)).reshape(8, -1)
''',
    "redrawn_weights_correct": HEAD + b'''        g = torch.Generator().manual_seed(0)
        with torch.no_grad():
            self.lin.weight.copy_(torch.randn(n, n, generator=g) / 4)
            self.lin.bias.zero_()
    def forward(self, x):
        return torch.relu(self.lin(x))
''',
    "ran": b"raise ImportError('no such extension')\n",
}
# a content cache: only caught because the child writes over every output it has read
CONTENT_CACHE = HEAD + b'''        self.memo = {}
    def forward(self, x):
        k = (tuple(x.shape), tuple(x.reshape(-1)[:8].tolist()))
        if k not in self.memo:
            self.memo.clear()
            self.memo[k] = torch.relu(self.lin(x))
        return self.memo[k]
'''
# honest: one output buffer, recomputed on every call (as a CUDA graph's static output is)
REUSED_BUFFER = HEAD + b'''        self.out = None
    def forward(self, x):
        y = torch.relu(self.lin(x))
        if self.out is None or self.out.shape != y.shape:
            self.out = torch.empty_like(y)
        return self.out.copy_(y)
'''


def _run(src: bytes, name: str = "c", cfg=None):
    spec = hc.CandidateSpec(name, src, "task.py", TASK)
    return hc.run_candidate(spec, cfg or hc.PROFILES["quick"], Path(pytest.tmp) / name, device="cpu")


@pytest.fixture(autouse=True)
def _tmp(tmp_path):
    pytest.tmp = tmp_path


def _verdicts(rec) -> dict:
    return {v["name"]: v["passed"] for v in rec["verdicts"]}


def test_an_honest_candidate_passes_every_check_that_can_decide_on_cpu():
    rec = _run(HONEST)
    v = _verdicts(rec)
    assert [k for k, p in v.items() if p is False] == []
    # what needs a GPU (profiler, timing) is undecided on CPU, not passed
    assert v["custom_kernel_ran"] is None and v["host_clock_agrees"] is None
    kinds = [c["kind"] for c in rec["observations"]["cases"]]
    assert {"official", "normal", "same_buffers", "repeat", "poison", "redrawn_weights", "extra_shape"} <= set(kinds)


@pytest.mark.slow
@pytest.mark.parametrize("check", sorted(CHEATS))
def test_each_cheat_is_caught_by_its_named_check(check):
    v = _verdicts(_run(CHEATS[check]))
    assert v[check] is False, v


@pytest.mark.slow
def test_a_content_cache_returns_the_nan_written_over_its_earlier_output():
    rec = _run(CONTENT_CACHE)
    v = {x["name"]: x for x in rec["verdicts"]}
    assert v["follows_fresh_inputs"]["passed"] is False and "earlier output's memory" in v["follows_fresh_inputs"]["detail"]
    held = [c for c in rec["observations"]["cases"] if c.get("held_over")]
    assert held and all(not c["compare"]["official"]["pass"] for c in held)


@pytest.mark.slow
def test_a_reused_output_buffer_recomputed_each_call_is_noted_not_failed():
    rec = _run(REUSED_BUFFER)
    v = {x["name"]: x for x in rec["verdicts"]}
    assert [k for k, x in v.items() if x["passed"] is False] == []
    assert "reused output buffer" in v["follows_fresh_inputs"]["detail"]
    assert sum(1 for c in rec["observations"]["cases"] if c.get("held_over")) >= 5


@pytest.mark.slow
def test_a_candidate_cannot_move_the_reference_by_editing_its_inputs():
    rec = _run(CHEATS["inputs_unchanged"])
    first = rec["observations"]["cases"][0]
    assert first["compare"]["official"]["pass"] is True  # its first answer was right ...
    assert first["digests_after"] != first["digests_parent"]  # ... and it zeroed what it was given
    assert _verdicts(rec)["official_allclose"] is False  # so later calls on those tensors fail


# --------------------------------------------------------------------------------- bundles

def _kernelbench(dest: Path) -> Path:
    """The pinned level 1 task 40 and LICENSE, from the committed LayerNorm example bundle."""
    return kernelbench_from_example(dest, "layernorm-l1-40-full-*.tar")


LN_HONEST = b'''import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)
    def forward(self, x):
        d = tuple(range(-len(self.ln.normalized_shape), 0))
        m = x.mean(dim=d, keepdim=True)
        v = ((x - m) ** 2).mean(dim=d, keepdim=True)
        return (x - m) / torch.sqrt(v + self.ln.eps) * self.ln.weight + self.ln.bias
'''

SIZES = {"batch_size": 2, "features": 4, "dim1": 8, "dim2": 8}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    d = tmp_path_factory.mktemp("cand")
    kb = _kernelbench(d)
    (d / "ln_honest.py").write_bytes(LN_HONEST)
    res = bc.run_candidates([(d / "ln_honest.py", "1/40")], profile="quick", kernelbench=str(kb), results_dir=d / "res",
                            sizes=SIZES, device="cpu")
    made = bc.pack_results(res, d / "b.tar")
    return d, made


def _members(path: Path) -> tuple[str, dict[str, bytes], dict]:
    with tarfile.open(path) as tf:
        files = {m.name.split("/", 1)[1]: tf.extractfile(m).read() for m in tf if m.isfile()}
    info = bag_info(files["bag-info.txt"])
    name = info["External-Identifier"]
    return name, {k[len("data/"):]: v for k, v in files.items() if k.startswith("data/")}, info


def _repack(src: Path, dst: Path, edit) -> Path:
    name, payload, info = _members(src)
    edit(payload)
    bag = pack.make_bag(name, payload, [(k, info[k]) for k in pack.BAG_INFO_KEYS])
    pack.write_archive(bag, dst)
    return dst


@pytest.mark.slow
def test_a_candidate_bundle_verifies_and_its_report_names_the_checks(made):
    d, m = made
    rep = verify_archive(m.path, level="static")
    # a CPU run: every check passes, and the verdict says what a CPU run cannot show
    assert rep.verdict == "PARTIAL", [p for t in rep.tiers for p in t.problems]
    assert any("without a GPU" in r for r in rep.partial)
    _, payload, _ = _members(m.path)
    report = payload["REPORT.md"].decode()
    assert "deterministic_under_poison" in report and "ln_honest" in report
    meta = json.loads(payload["bundle.json"])
    assert meta["format"] == bc.FORMAT and meta["candidates"][0]["task"] == "KernelBench/level1/40_LayerNorm.py"


def _edit_doc(rel, fn):
    def edit(payload):
        doc = json.loads(payload[rel])
        fn(doc)
        payload[rel] = jsonio.dumps(doc).encode()
    return edit


def _weaken_claim(payload):
    """The first default claim reworded, and bundle.json's hash of the claims file updated to match."""
    _edit_doc("inputs/claims.yaml", lambda d: d["claims"][0].update(
        sentence="ln_honest is the fastest kernel ever written."))(payload)
    _edit_doc("bundle.json", lambda d: d["claims"].update(sha256=pack.sha256_hex(payload["inputs/claims.yaml"])))(payload)


TAMPER = {
    "a verdict turned to pass": (_edit_doc("results/candidates.json", lambda d: d["candidates"][0]["verdicts"][1].update(
        detail="all fine")), 3, "not what its observations give"),
    "an observation edited": (_edit_doc("results/candidates.json", lambda d: [d["candidates"][0]["observations"]["cases"][0][
        "compare"][k].update({"pass": False, "failing_count": 3}) for k in ("official", "equal_nan_stress")]), 3,
        "verdict"),
    "the candidate file swapped": (lambda p: p.update({"inputs/candidates/ln_honest.py": b"class ModelNew: pass\n"}), 3,
                                   "not the one that ran"),
    "the task file swapped": (lambda p: p.update({"inputs/kernelbench/KernelBench/level1/40_LayerNorm.py": b"x=1\n"}), 3,
                              "not the pinned file"),
    "a stray file": (lambda p: p.update({"results/notes.json": b"{}"}), 3, "does not hold"),
    "a default claim weakened": (_weaken_claim, 5, "default claims"),
    "the report edited": (lambda p: p.update({"REPORT.md": p["REPORT.md"].replace(b"pass", b"PASS")}), 5, "REPORT.md"),
}


@pytest.mark.parametrize("what", sorted(TAMPER))
def test_a_tampered_candidate_bundle_fails_in_the_tier_that_owns_it(made, tmp_path, what):
    d, m = made
    edit, tier, fragment = TAMPER[what]
    rep = verify_archive(_repack(m.path, tmp_path / "t.tar", edit), level="static")
    assert rep.verdict == "FAIL"
    t = next(t for t in rep.tiers if t.number == tier)
    assert t.status == "FAIL" and any(fragment in p.message for p in t.problems), t.problems


def test_author_claims_are_judged_but_make_the_verdict_partial(made, tmp_path):
    d, m = made
    extra = tmp_path / "extra.yaml"
    extra.write_text(json.dumps({"schema": "kbrepro/claims-spec", "schema_version": 1, "study": bc.KIND,
                                 "bootstrap": {"level": 0.95, "resamples": 1000, "seed": 1},
                                 "claims": [{"id": "U1", "sentence": "it ran", "checks": [
                                     {"kind": "all_equal", "select": "candidates.candidates[*].verdicts[0].passed",
                                      "equals": True}]}]}))
    m2 = bc.pack_results(d / "res", tmp_path / "x.tar", claims_path=str(extra))
    rep = verify_archive(m2.path, level="static")
    assert rep.exit_code == 5 and any("U1" in r for r in rep.partial)


def test_packing_refuses_a_caught_candidate_unless_asked_and_keeps_the_results(made, tmp_path):
    d, m = made
    res = d / "res"
    doc = json.loads((res / "results" / "candidates.json").read_bytes())
    caught = json.loads(json.dumps(doc))
    d0 = caught["candidates"][0]["observations"]["cases"][1]["digests_after"][0]
    caught["candidates"][0]["observations"]["cases"][1]["digests_after"] = [d0[:-1] + ("0" if d0[-1] != "0" else "1")]
    bad = tmp_path / "res"
    for p in res.rglob("*"):
        if p.is_file():
            q = bad / p.relative_to(res)
            q.parent.mkdir(parents=True, exist_ok=True)
            q.write_bytes(p.read_bytes())
    (bad / "results" / "candidates.json").write_bytes(jsonio.dumps(caught).encode())
    from kbrepro.errors import InvalidResultsError

    with pytest.raises(InvalidResultsError, match="caught by inputs_unchanged"):
        bc.pack_results(bad, tmp_path / "no.tar")
    assert not (tmp_path / "no.tar").exists() and (bad / "results" / "candidates.json").exists()
    made2 = bc.pack_results(bad, tmp_path / "yes.tar", allow_failing=True)
    assert made2.caught == {"ln_honest": ["inputs_unchanged"]}
    rep = verify_archive(made2.path, level="static")
    assert rep.verdict == "PARTIAL"  # a genuine bundle (of a CPU run) of a caught candidate: its claims say so
    assert any("CAUGHT by inputs_unchanged" in n for t in rep.tiers for n in t.notes)


# ------------------------------------------------- forgeries of the GPU example bundle
# The attacker edits the results and packs them again with this product's own packer: verdicts,
# claims, REPORT.md and manifests then all agree with the edited data, so only the verifier's own
# expectations of a complete run (harness/candidate.py's protocol) can catch the lie. Found by a
# red-team pass of issue 11; each case names its finding.

EXAMPLE = ROOT / "examples" / "candidates-quick-20261201T153437.tar"


def _forge(tmp_path: Path, edit) -> Path:
    return forge_candidates.forge(EXAMPLE, edit, tmp_path / "forged.tar")


def _c0(doc):
    return doc["candidates"][0]


def _case_edit(doc, files):
    o = _c0(doc)["observations"]["cases"][1]["compare"]["official"]
    o.update({"pass": True, "failing_count": 50, "worst_ratio": 1000.0})


def _dup(doc, files):
    doc["candidates"][1] = json.loads(json.dumps(doc["candidates"][0]))


def _sass_outside(doc, files):
    files["results/summary.json"] = b"{}"
    _c0(doc)["provenance"]["binaries"].append({"file": "x", "sha256": "0" * 64, "sass_file": "results/summary.json",
                                               "sass_sha256": pack.sha256_hex(b"{}"), "ftz_counts": None,
                                               "sass_says_ftz": None})


FORGERIES = {
    "a01 a passing case whose counts fail": (_case_edit, "a pass has no failing element"),
    "a02 a failing case deleted": (lambda d, f: _c0(d)["observations"]["cases"].pop(1), "are not the cases"),
    "a03 the profiled call deleted": (lambda d, f: _c0(d)["observations"].pop("profile"), "profile"),
    "a04 the roofline's bandwidth edited": (lambda d, f: _c0(d)["timing"]["roofline"].update(bandwidth_gbps=1e9),
                                            "roofline.bandwidth_gbps"),
    "a05 eager dropped from the arms": (lambda d, f: _c0(d)["blocks"][0]["arms"].remove("eager"), "blocks[0].arms"),
    "a06 the cold block deleted": (lambda d, f: _c0(d)["blocks"].pop(1), "timing blocks"),
    "a07 a baseline marked failing against its counts": (lambda d, f: _c0(d)["timing"]["baselines"]["compile_default"][
        "compare"]["official"].update({"pass": False}), "false with no failing element"),
    "a09 two candidates of one name": (_dup, "same name"),
    "a13 markup in built_with": (lambda d, f: _c0(d)["provenance"].update(built_with=["triton"]), "built_with"),
    "a15 a file let in as SASS": (_sass_outside, "SASS file outside"),
    "a16 the task set to a solution file": (lambda d, f: _c0(d).update(task="src/kernelbench/prompts/model_new_ex_add.py"),
                                            "not a KernelBench task"),
    "a27 the compile time edited": (lambda d, f: _c0(d).update(compile_seconds=0.5), "compile_seconds"),
    "a28 the tolerance loosened": (lambda d, f: [d["predicate"].update(atol=0.05, rtol=0.05)] + [
        r["config"].update(atol=0.05, rtol=0.05) for r in d["candidates"]], "profile's"),
    "a30 a case relabelled to a kind no check judges": (
        lambda d, f: _c0(d)["observations"]["cases"][1].update(kind="profiled"), "are not the cases"),
}


@pytest.mark.parametrize("what", sorted(FORGERIES))
def test_a_forgery_packed_with_our_own_packer_fails_on_the_protocol(tmp_path, what):
    edit, fragment = FORGERIES[what]
    rep = verify_archive(_forge(tmp_path, edit), level="static")
    assert rep.verdict == "FAIL", what
    problems = [f"{p.path} {p.message}" for t in rep.tiers for p in t.problems]
    assert any(fragment in m for m in problems), problems


def test_the_example_forged_with_no_edit_still_verifies(tmp_path):
    rep = verify_archive(_forge(tmp_path, lambda d, f: None), level="static")
    assert rep.verdict == "PASS", [p for t in rep.tiers for p in t.problems]


def test_author_claims_cannot_take_a_default_claims_id(tmp_path):
    _, payload, info = _members(EXAMPLE)
    spec = json.loads(payload["inputs/claims.yaml"])
    spec["claims"].append({"id": "K1a", "sentence": "shadow", "checks": [
        {"kind": "all_equal", "select": "candidates.kind", "equals": "kernelbench-candidates"}]})

    def edit(p):
        p["inputs/claims.yaml"] = jsonio.dumps(spec).encode()
        meta = json.loads(p["bundle.json"])
        meta["claims"].update(sha256=pack.sha256_hex(p["inputs/claims.yaml"]), extra=1)
        p["bundle.json"] = jsonio.dumps(meta).encode()

    rep = verify_archive(_repack(EXAMPLE, tmp_path / "t.tar", edit), level="static")
    assert rep.verdict == "FAIL"
    assert any("same id" in p.message for t in rep.tiers for p in t.problems)


@pytest.mark.slow
def test_what_a_candidate_builds_is_traced_and_scrubbed_of_machine_paths(tmp_path):
    """A candidate that 'builds' an extension (writes into the folder the harness gives the
    child as TORCH_EXTENSIONS_DIR) gets its files listed with hashes, copied into the bundle
    with home paths and the results folder scrubbed (the built file's hash kept), ninja's own
    logs left out, and build.ninja's command lines recorded."""
    kb = _kernelbench(tmp_path)
    src = LN_HONEST + b'''
import os
_d = os.path.join(os.environ["TORCH_EXTENSIONS_DIR"], "my_ext")
os.makedirs(_d, exist_ok=True)
with open(os.path.join(_d, "build.ninja"), "w") as f:
    f.write("nvcc = /usr/local/cuda/bin/nvcc\\ncuda_cflags = -O3 --use_fast_math -I/home/alice/include -I" + _d + "\\n"
            "rule cuda_compile\\n  command = $nvcc $cuda_cflags -c $in -o $out\\n")
with open(os.path.join(_d, ".ninja_log"), "w") as f:
    f.write("/home/alice\\n")
'''
    (tmp_path / "built.py").write_bytes(src)
    res = bc.run_candidates([(tmp_path / "built.py", "1/40")], profile="quick", kernelbench=str(kb),
                            results_dir=tmp_path / "res", sizes=SIZES, device="cpu")
    rec = json.loads((res / "results" / "candidates.json").read_bytes())["candidates"][0]
    prov = rec["provenance"]
    assert prov["built_with"] == ["load_inline"]
    (f,) = prov["files"]  # build.ninja only: .ninja_log is not evidence
    assert f["path"] == "ext/my_ext/build.ninja" and f["scrubbed"] and f["built_sha256"] != f["sha256"]
    stored = (res / f["bundle_path"]).read_bytes()
    assert b"/home/alice" not in stored and str(tmp_path).encode() not in stored and b"--use_fast_math" in stored
    assert prov["builds"][0]["commands"] == ["$nvcc $cuda_cflags -c $in -o $out"]
    made = bc.pack_results(res, tmp_path / "b.tar")
    rep = verify_archive(made.path, level="static")
    assert rep.exit_code == 5, [p for t in rep.tiers for p in t.problems]  # PARTIAL: a CPU run


def _replayed_as(made, monkeypatch, edit):
    """verify_archive at --level replay with the candidates' run replaced by the bundle's own
    results edited by ``edit`` (the comparison of tier 6 is what is tested, not the GPU run)."""
    import torch

    from kbrepro.bundle.verify import candidate as vc

    _, m = made
    with tarfile.open(m.path) as tf:
        doc = json.loads(next(tf.extractfile(x).read() for x in tf if x.name.endswith("data/results/candidates.json")))

    def fake_run(items, *, results_dir, **kw):
        again = json.loads(json.dumps(doc))
        edit(again)
        (Path(results_dir) / "results").mkdir(parents=True)
        (Path(results_dir) / "results" / "candidates.json").write_bytes(jsonio.dumps(again).encode())
        return Path(results_dir)

    monkeypatch.setattr(vc.bc, "run_candidates", fake_run)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    rep = verify_archive(m.path, level="replay", trust=True)
    return rep, next(t for t in rep.tiers if t.number == 6)


def _set_verdict(doc, name, passed):
    for v in doc["candidates"][0]["verdicts"]:
        if v["name"] == name:
            v.update(passed=passed, detail="replayed")


def test_a_replay_that_reproduces_every_verdict_passes(made, monkeypatch):
    rep, t6 = _replayed_as(made, monkeypatch, lambda d: None)
    assert t6.status == "PASS" and t6.details["claim_changes"] == [] and t6.details["check_changes"] == []


def test_a_candidate_caught_only_on_replay_fails_the_replay(made, monkeypatch):
    rep, t6 = _replayed_as(made, monkeypatch, lambda d: _set_verdict(d, "follows_fresh_inputs", False))
    assert t6.status == "FAIL" and rep.exit_code != 0
    msgs = " ".join(p.message for p in t6.problems)
    assert "follows_fresh_inputs was pass when packed and is FAIL on replay" in msgs
    assert "claim K1a: holds when packed, fails on replay" in msgs


def test_a_check_that_decides_only_on_replay_is_noted_not_failed(made, monkeypatch):
    rep, t6 = _replayed_as(made, monkeypatch, lambda d: _set_verdict(d, "custom_kernel_ran", True))
    assert t6.status == "PASS" and any("custom_kernel_ran decided only on replay" in n for n in t6.notes)


FULL_EXAMPLE = ROOT / "examples" / "candidates-full-20261201T175531.tar"


def test_the_full_h200_example_verifies_and_packs_again_to_its_quoted_digest(tmp_path):
    """The honest load_inline and Triton candidates for level 1 task 88, full profile, made
    and replayed on an H200: its results packed again here give the digest it quotes."""
    quoted = FULL_EXAMPLE.with_name(FULL_EXAMPLE.name + ".sha256-digest").read_text().split()[-1]
    rep = verify_archive(FULL_EXAMPLE, level="static", expect_digest=quoted)
    assert rep.exit_code == 0 and rep.digest == quoted
    name, payload, _ = _members(FULL_EXAMPLE)
    files = {k: v for k, v in payload.items() if k.split("/")[0] in ("inputs", "results", "provenance")
             and k != "inputs/claims.yaml"}
    bag, _, claims, doc = bc.build_payload(files, name=name, bundle_format=2)  # the example's format
    out = tmp_path / "again.tar"
    pack.write_archive(bag, out)
    assert verify_archive(out, level="static").digest == quoted
    verdicts = {(r["name"], v["name"]): v["passed"] for r in doc["candidates"] for v in r["verdicts"]}
    assert [k for k, p in verdicts.items() if p is not True] == []
    assert {c["id"]: c["verdict"] for c in claims["claims"]}["K1d"] == "fails"  # slower than torch.compile


# after the red-team pass of the NaN overwrite (issue 11): honest outputs the overwrite must not
# break, and caches it must still catch
BIAS_TASK = TASK.replace(b"return torch.relu(self.lin(x))", b"return self.lin.bias.expand(x.shape[0], -1) + 0 * x[:, :1]")
BOOL_TASK = TASK.replace(b"return torch.relu(self.lin(x))", b"return self.lin(x) > 0")


def _run_on(task: bytes, src: bytes, name: str):
    spec = hc.CandidateSpec(name, src, "task.py", task)
    return hc.run_candidate(spec, hc.PROFILES["quick"], Path(pytest.tmp) / name, device="cpu")


@pytest.mark.slow
def test_an_output_that_is_a_view_of_a_weight_is_not_written_over():
    """Writing NaN over it would poison the model's own bias (found by the red-team pass)."""
    src = HEAD + b"    def forward(self, x):\n        return self.lin.bias.detach().expand(x.shape[0], -1)\n"
    rec = _run_on(BIAS_TASK, src, "bias_view")
    assert [k for k, p in _verdicts(rec).items() if p is False] == []


def test_a_boolean_output_is_compared_not_a_crash():
    rec = _run_on(BOOL_TASK, HEAD + b"    def forward(self, x):\n        return self.lin(x) > 0\n", "bool_out")
    assert _verdicts(rec)["ran"] is True and _verdicts(rec)["official_allclose"] is True


@pytest.mark.slow
def test_a_cache_of_a_boolean_output_is_caught_once_its_bits_are_flipped():
    src = HEAD + b'''        self.memo = {}
    def forward(self, x):
        k = tuple(x.reshape(-1)[:8].tolist())
        if k not in self.memo:
            self.memo.clear()
            self.memo[k] = self.lin(x) > 0
        return self.memo[k], self.memo[k]
'''
    task = BOOL_TASK.replace(b"return self.lin(x) > 0", b"y = self.lin(x) > 0\n        return y, y.clone()")
    rec = _run_on(task, src, "bool_cache")
    assert _verdicts(rec)["follows_fresh_inputs"] is False


def test_a_truncated_run_cannot_name_a_case_it_does_not_hold(tmp_path):
    def edit(doc, files, negative=False):
        c = _c0(doc)
        c["observations"]["failure"] = "timing: the candidate's process ended"
        c["observations"]["cases"] = c["observations"]["cases"][:7]
        c["stages"] = c["stages"][:3]
        c["observations"]["cases"][4]["held_over"] = "no_such_case"
        if negative:
            c["observations"]["cases"][3]["device_wait_ms"] = -1.0
    rep = verify_archive(_forge(tmp_path, edit), level="static")
    msgs = " ".join(p.message for t in rep.tiers for p in t.problems)
    assert rep.exit_code == 1 and "names no earlier case" in msgs, msgs
    rep = verify_archive(_forge(tmp_path, lambda d, f: edit(d, f, True)), level="static")
    msgs = " ".join(f"{p.path} {p.message}" for t in rep.tiers for p in t.problems)
    assert rep.exit_code == 1 and "cases[3].device_wait_ms is -1.0, less than 0" in msgs, msgs


def test_a_candidate_bundle_carries_the_summary_the_verifier_writes_and_a_forged_one_fails(tmp_path):
    import dataclasses

    name, payload, _ = _members(FULL_EXAMPLE)
    with tarfile.open(FULL_EXAMPLE) as tf:
        summary = tf.extractfile(f"{name}/summary.txt").read()
    assert b"not holding: K1d" in summary and FULL_EXAMPLE.with_name(FULL_EXAMPLE.name + ".sha256-digest").read_text(
        ).split()[-1].encode() in summary
    files = {k: v for k, v in payload.items() if k.split("/")[0] in ("inputs", "results", "provenance")
             and k != "inputs/claims.yaml"}
    bag, _, _, _ = bc.build_payload(files, name=name, bundle_format=2)  # the example's format
    assert bag.summary == summary
    out = tmp_path / "f.tar"
    pack.write_archive(dataclasses.replace(bag, summary=summary.replace(b"not holding: K1d", b"all hold")), out)
    rep = verify_archive(out, level="static")
    assert rep.exit_code == 1 and any("five-line summary" in p.message for t in rep.tiers for p in t.problems)


SCALAR_TASK = b'''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, predictions, targets):
        return torch.mean((predictions - targets) ** 2)

batch_size = 4
dim = 64

def get_inputs():
    scale = torch.rand(())
    return [torch.rand(batch_size, dim) * scale, torch.rand(batch_size, dim)]

def get_init_inputs():
    return []
'''


def test_a_scalar_output_task_with_its_reference_as_candidate_is_caught_by_nothing():
    """A loss (a 0-dim output) is framed, compared and judged (issue 28: every loss task of
    level 1 reported any candidate as caught by 'ran'); discriminates looks across its sets."""
    src = SCALAR_TASK.replace(b"class Model(", b"class ModelNew(")
    spec = hc.CandidateSpec("mse", src, "task.py", SCALAR_TASK)
    rec = hc.run_candidate(spec, hc.PROFILES["quick"], Path(pytest.tmp) / "mse", device="cpu")
    v = _verdicts(rec)
    assert [k for k, x in v.items() if x is False] == [], rec["verdicts"]
    assert v["ran"] is True and v["official_allclose"] is True and v["discriminates"] is True
