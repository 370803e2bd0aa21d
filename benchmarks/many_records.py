"""A candidate bundle of many records: packing and static verification time (issue 28).

    python benchmarks/many_records.py [--n 250] [--example candidates-quick-*.tar]
        [--record model_new_ex_add_triton] [--repeat 3]

Copies one record of a committed candidate example (its candidate file and provenance with it)
under ``n`` names (``t_000``...), packs the results folder with the product's packer
(``pack_results``) and verifies the bundle at ``--level static`` ``repeat`` times, printing the
seconds. The numbers of benchmarks/RESULTS.md ("Issue 28: a 250-record bundle") come from here.
"""
from __future__ import annotations

import json
import shutil
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))
ROOT = Path(__file__).resolve().parent.parent


@click.command()
@click.option("--n", default=250, show_default=True)
@click.option("--example", default="candidates-quick-*.tar", show_default=True)
@click.option("--record", default="model_new_ex_add_triton", show_default=True)
@click.option("--repeat", default=3, show_default=True)
def main(n, example, record, repeat):
    from kbrepro.bundle.candidates import pack_results
    from kbrepro.bundle.verify.checklist import verify_archive

    (tar,) = sorted((ROOT / "examples").glob(example))
    with tempfile.TemporaryDirectory() as tmp:
        res = Path(tmp) / "res"
        with tarfile.open(tar) as tf:
            for m in tf:
                rel = m.name.split("/", 1)[1] if "/" in m.name else ""
                if m.isfile() and rel.startswith("data/") and rel.split("/")[1] in ("inputs", "results", "provenance"):
                    out = res / rel[len("data/"):]
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_bytes(tf.extractfile(m).read())
        doc = json.loads((res / "results" / "candidates.json").read_text())
        (rec,) = [r for r in doc["candidates"] if r["name"] == record]
        text = json.dumps(rec)
        out_recs = []
        for i in range(n):
            name = f"t_{i:03d}"
            out_recs.append(json.loads(text.replace(json.dumps(record)[1:-1], name)))
            shutil.copytree(res / "provenance" / record, res / "provenance" / name)
            shutil.copy(res / "inputs" / "candidates" / f"{record}.py", res / "inputs" / "candidates" / f"{name}.py")
        for r in doc["candidates"]:
            shutil.rmtree(res / "provenance" / r["name"], ignore_errors=True)
            (res / "inputs" / "candidates" / f"{r['name']}.py").unlink(missing_ok=True)
        doc["candidates"] = out_recs
        (res / "results" / "candidates.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        t0 = time.perf_counter()
        made = pack_results(res, Path(tmp) / f"many-{n}.tar", allow_failing=True)
        click.echo(f"{n} records: packed in {time.perf_counter() - t0:.1f} s, {made.size_bytes:,} bytes")
        for _ in range(repeat):
            t0 = time.perf_counter()
            rep = verify_archive(made.path, level="static")
            tiers = ", ".join(f"{t.name} {t.seconds:.2f}s" for t in rep.tiers)
            click.echo(f"static verification {time.perf_counter() - t0:.1f} s, exit {rep.exit_code} [{tiers}]")


if __name__ == "__main__":
    main()
