"""Verification time at each level, and hashing throughput against sha256sum.

    python benchmarks/verify_levels.py BUNDLE.tar [--levels fast,static]

For each level prints the wall time of verify_archive. Then extracts the bundle's files
and compares the verifier's sha256 throughput (hashlib over the same bytes) with
``sha256sum`` over the same files.
"""
from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


@click.command()
@click.argument("archive", type=click.Path(dir_okay=False, exists=True))
@click.option("--levels", default="fast,static", show_default=True)
@click.option("--profile", default=None)
def main(archive, levels, profile):
    from kbrepro.bundle.verify.checklist import verify_archive

    for level in levels.split(","):
        t0 = time.perf_counter()
        rep = verify_archive(Path(archive), level=level, profile=profile)
        dt = time.perf_counter() - t0
        tiers = ", ".join(f"{t.name} {t.status} {t.seconds:.2f}s" for t in rep.tiers)
        click.echo(f"level {level:<7} {dt:7.2f} s  exit {rep.exit_code}  [{tiers}]")
    with tempfile.TemporaryDirectory() as tmp:
        from kbrepro.bundle import archive as arc
        from kbrepro.bundle.extract import extract_checked

        contents = arc.read_archive(Path(archive))  # the verifier's own reader and extractor, no tarfile
        extract_checked(Path(archive), Path(tmp) / "x", contents)
        files = [p for p in Path(tmp).rglob("*") if p.is_file()]
        data = [p.read_bytes() for p in files]
        total = sum(len(d) for d in data)
        t0 = time.perf_counter()
        for d in data:
            hashlib.sha256(d).hexdigest()
        ours = time.perf_counter() - t0
        if shutil.which("sha256sum"):
            t0 = time.perf_counter()
            subprocess.run(["sha256sum", *map(str, files)], check=True, capture_output=True)
            theirs = time.perf_counter() - t0
            click.echo(f"{len(files)} files, {total:,} bytes: hashlib {total / ours / 1e6:.0f} MB/s "
                       f"({ours * 1e3:.2f} ms), sha256sum {total / theirs / 1e6:.0f} MB/s ({theirs * 1e3:.2f} ms, "
                       "process start included)")
        else:
            click.echo(f"hashlib {total / ours / 1e6:.0f} MB/s; sha256sum not found")


if __name__ == "__main__":
    main()
