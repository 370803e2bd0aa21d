"""Random type and value mutations of a candidate bundle's ``results/candidates.json``.

    python tests/corpus/mutate_candidates.py EXAMPLE.tar [--n 1000] [--seed 1] [--mode both]

Each mutation picks one node of the document at random (any object, array or value) and
changes its JSON type or its value (a number made negative, zero, huge, non-finite, a string, an
integer written as a float; a string emptied, made long or filled with Markdown, escape and bidi
characters; a key deleted or added; an array emptied, cut, doubled or reversed). A mutation the
model reads as the same record (an optional null field deleted, 2.0 written 2) changes nothing
and is skipped. Each remaining mutation is packed two ways and verified at ``--level static``:

* ``manifests``: only the document is replaced and the manifests recomputed (the other derived
  files keep the original's bytes);
* ``forger``: everything packed again with the product's own packer, its record checks off
  (tests/forge_candidates.py): verdicts, claims, REPORT.md and summary all agree with the edit.

A mutation must never verify with exit 0, and the verifier must never raise (a traceback).
Returns the counts; ``main`` prints them (the numbers of the closing note).
"""
from __future__ import annotations

import copy
import dataclasses
import json
import random
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

if str(Path(__file__).resolve().parents[1]) not in sys.path:  # tests/ (forge_candidates)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import forge_candidates as fc  # noqa: E402

from kbrepro.bundle import pack  # noqa: E402
from kbrepro.bundle.verify.checklist import verify_archive  # noqa: E402
from kbrepro.harness import jsonio  # noqa: E402
from kbrepro.model import candidates as mc  # noqa: E402

_HOSTILE = "**bold** [l](https://e.invalid) &lt; \u202e \x1b[31m `x` <b>"
_OTHER = ["x", "", 7, 2.5, True, None, [], {}]


def _nodes(doc, path=()):
    out = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.append(path + (k,))
            out += _nodes(v, path + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out.append(path + (i,))
            out += _nodes(v, path + (i,))
    return out


def _get(doc, path):
    for p in path:
        doc = doc[p]
    return doc


def _ops(v, in_dict: bool) -> list:
    ops = [("type", o) for o in _OTHER if type(o) is not type(v) or (isinstance(v, bool) != isinstance(o, bool))]
    if in_dict:
        ops.append(("delete", None))
    if isinstance(v, bool):
        ops.append(("value", not v))
    elif isinstance(v, (int, float)):
        ops += [("value", -abs(v) - 1), ("value", 0), ("value", 1e300), ("value", "nan"), ("value", "inf"),
                ("value", float(v) if isinstance(v, int) else int(v))]
    elif isinstance(v, str):
        ops += [("value", ""), ("value", "y" * 5000), ("value", _HOSTILE), ("value", v + "0")]
    elif isinstance(v, list):
        ops += [("value", [])]
        if v:
            ops += [("drop", None), ("dup", None), ("value", list(reversed(v)))]
    elif isinstance(v, dict):
        ops.append(("extra", None))
    return ops


def mutate(doc: dict, rng: random.Random) -> tuple[dict, str]:
    """A copy of ``doc`` with one random mutation, and its description."""
    new = copy.deepcopy(doc)
    path = rng.choice(_nodes(new))
    parent, key = _get(new, path[:-1]), path[-1]
    v = parent[key]
    kind, arg = rng.choice(_ops(v, isinstance(parent, dict)))
    if kind == "delete":
        del parent[key]
    elif kind == "extra":
        v["kbrepro_unknown"] = 1
    elif kind == "drop":
        v.pop(rng.randrange(len(v)))
    elif kind == "dup":
        i = rng.randrange(len(v))
        v.insert(i, copy.deepcopy(v[i]))
    else:
        parent[key] = copy.deepcopy(arg)
    where = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
    return new, f"{kind} {where} -> {str(arg)[:40] if arg is not None else ''}"


def _manifests_only(example: Path, raw_doc: bytes, out: Path) -> Path:
    import tarfile

    with tarfile.open(example) as tf:
        files = {m.name.split("/", 1)[1]: tf.extractfile(m).read() for m in tf if m.isfile()}
    info = files["bag-info.txt"].decode()
    name = info.split("External-Identifier: ", 1)[1].split("\n", 1)[0]
    payload = {k[len("data/"):]: v for k, v in files.items() if k.startswith("data/")}
    payload["results/candidates.json"] = raw_doc
    keys = [ln.split(": ", 1) for ln in info.splitlines() if ": " in ln]
    bag = pack.make_bag(name, payload, [(k, v) for k, v in keys if k in pack.BAG_INFO_KEYS])
    # summary.txt (outside the manifests) kept as it was
    bag = dataclasses.replace(bag, summary=files.get("summary.txt", b""))
    pack.write_archive(bag, out)
    return out


def _caught_or_failing(payload: dict) -> tuple:
    doc = json.loads(payload["results/candidates.json"])
    claims = json.loads(payload["claims.json"])
    return (tuple(sorted((r["name"], v["name"]) for r in doc["candidates"] for v in r["verdicts"]
                         if v["passed"] is False)),
            tuple(sorted(c["id"] for c in claims["claims"] if c["verdict"] != "holds")))


def run(example: Path, n: int, seed: int = 1, modes=("manifests", "forger"), log=None) -> dict:
    """Apply ``n`` non-neutral mutations; returns counts per mode: exit codes, the tier that
    failed first, raised (a traceback), and the mutations that verified with exit 0."""
    _, payload = fc.members(example)
    doc = json.loads(payload["results/candidates.json"])
    base, _ = mc.load(doc)
    rng = random.Random(seed)
    res = {m: {"exit": Counter(), "tier": Counter(), "raised": [], "passed": [], "worse": []} for m in modes}
    res["neutral"] = 0
    res["unforgeable"] = 0
    res["neutral_forged"] = 0
    done = 0
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kbrepro-mutate-") as tmp:
        while done < n:
            new, what = mutate(doc, rng)
            typed, problems = mc.load(new)
            if typed is not None and typed == base:
                res["neutral"] += 1
                continue
            done += 1
            for m in modes:
                out = Path(tmp) / f"{m}.tar"
                try:
                    if m == "manifests":
                        try:
                            raw = jsonio.dumps(new).encode()
                        except ValueError:
                            raw = json.dumps(new).encode()
                        _manifests_only(example, raw, out)
                    else:
                        fc.forge(example, lambda d, f, new=new: (d.clear(), d.update(copy.deepcopy(new))), out)
                except Exception:  # the packer itself broke on the garbage: nothing to verify
                    if m == "forger":
                        res["unforgeable"] += 1
                        continue
                    raise
                if m == "forger" and fc.members(out)[1]["results/candidates.json"] == payload["results/candidates.json"]:
                    res["neutral_forged"] += 1  # the packer derived the edit away (a verdict): the original
                    continue
                try:
                    rep = verify_archive(out, level="static")
                except Exception:
                    res[m]["raised"].append((what, traceback.format_exc(limit=3)))
                    continue
                res[m]["exit"][rep.exit_code] += 1
                first = next((t for t in rep.tiers if t.status == "FAIL"), None)
                res[m]["tier"][first.name if first else "none"] += 1
                broke = [p.message for t in rep.tiers for p in t.problems if "broke this verifier" in p.message]
                if broke:
                    res[m]["raised"].append((what, broke[0]))
                if rep.exit_code == 0:
                    # a bundle that now says the candidate is caught, or a claim fails, is what a
                    # genuine bundle of a worse candidate says: counted apart from a forged PASS
                    _, fp = fc.members(out)
                    worse = _caught_or_failing(fp) != _caught_or_failing(payload)
                    res[m]["worse" if worse else "passed"].append(what)
            if log and done % 50 == 0:
                log(f"{done}/{n} mutations, {time.perf_counter() - t0:.0f} s")
    res["seconds"] = time.perf_counter() - t0
    return res


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("example")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--mode", default="both", choices=("both", "manifests", "forger"))
    a = ap.parse_args(argv)
    modes = ("manifests", "forger") if a.mode == "both" else (a.mode,)
    res = run(Path(a.example), a.n, a.seed, modes, log=lambda m: print(m, file=sys.stderr, flush=True))
    for m in modes:
        r = res[m]
        print(f"{m}: exit codes {dict(r['exit'])}; first failing tier {dict(r['tier'])}; "
              f"raised {len(r['raised'])}; exit 0: {len(r['passed'])} forged PASS, {len(r['worse'])} a bundle "
              "now saying the candidate is caught or a claim fails")
        for w in r["passed"][:20]:
            print(f"  PASSED: {w}")
        for w, tb in r["raised"][:5]:
            print(f"  RAISED: {w}\n{tb}")
    print(f"neutral mutations skipped: {res['neutral']} (and {res['neutral_forged']} the forger's packer derived "
          f"away); not packable by the forger: {res['unforgeable']}; "
          f"{res['seconds']:.0f} s")
    return 0 if all(not res[m]["passed"] and not res[m]["raised"] for m in modes) else 1


if __name__ == "__main__":
    sys.exit(main())
