"""M01: inputs that make a verifier check raise (KeyError, StatisticsError); the crash is contained
as "the bundle's data broke this verifier's documents" (exit 1, FAIL, no traceback): the verdict was
right, but no check named the record (now its record fails by its own path). Only the document is
replaced and the manifests recomputed (the other derived files keep their bytes).
Run: cd tests && python -m forgeries.m01_contained_crashes (held by tests/test_forgeries_round2.py)"""
import dataclasses
import json
import tarfile
import tempfile
from pathlib import Path

from kbrepro.bundle import pack
from kbrepro.harness import jsonio
from forgeries.common import Q7, verify


def manifests_only(edit, label):
    with tarfile.open(Q7) as tf:
        files = {m.name.split("/", 1)[1]: tf.extractfile(m).read() for m in tf if m.isfile()}
    info = files["bag-info.txt"].decode()
    name = info.split("External-Identifier: ", 1)[1].split("\n", 1)[0]
    payload = {k[len("data/"):]: v for k, v in files.items() if k.startswith("data/")}
    doc = json.loads(payload["results/candidates.json"])
    edit(doc)
    payload["results/candidates.json"] = jsonio.dumps(doc).encode()
    keys = [ln.split(": ", 1) for ln in info.splitlines() if ": " in ln]
    bag = pack.make_bag(name, payload, [(k, v) for k, v in keys if k in pack.BAG_INFO_KEYS])
    bag = dataclasses.replace(bag, summary=files.get("summary.txt", b""))
    with tempfile.TemporaryDirectory(prefix="kbrepro-redteam-") as tmp:
        out = Path(tmp) / "forged.tar"
        pack.write_archive(bag, out)
        return verify(out, label)


if __name__ == "__main__":
    a = manifests_only(lambda d: d["candidates"][0]["blocks"][0]["rounds"][3]["times_ms"].pop("candidate"),
                       "a round without the candidate's time")
    b = manifests_only(lambda d: d["candidates"][0]["timing"]["per_call"].update(fresh=[]),
                       "per_call.fresh emptied")
    print(f"\nRESULT: exit {a} and {b} (look for 'broke this verifier')")
