"""C19 (C07 again): the new copy rule decides whether the packer would have left a file out from the
file's *recorded* size, which for a file left out is the bundle's word alone (nothing of it is in
the bag). build.ninja, cuda.cu and main.cpp of model_new_ex_add marked not copied and removed, each
recorded as 33 MiB (over MAX_PROVENANCE_FILE), the build record dropped, built_with emptied: PASS,
and the bundle no longer shows the nvcc flags or the kernel source. With their true sizes (1617,
721, 249 bytes) the same edit is refused.
Run: cd tests && python -m forgeries.r3_c19_uncopied_recorded_oversize (held by tests/test_forgeries_round2.py)"""
from forgeries.round3 import forge_candidates as forge_and_verify


def uncopy(size):
    def edit(doc, files):
        r = doc["candidates"][0]
        for pf in r["provenance"]["files"]:
            if pf["path"].endswith((".ninja", ".cu", ".cpp")):
                files.pop(pf.pop("bundle_path"))
                pf.pop("built_sha256", None)
                pf.pop("scrubbed", None)
                pf["copied"] = False
                if size:
                    pf["bytes"] = size
        r["provenance"]["copied_bytes"] = sum(pf["bytes"] for pf in r["provenance"]["files"] if pf["copied"])
        r["provenance"]["builds"] = []
        r["provenance"]["built_with"] = []
    return edit


if __name__ == "__main__":
    a, _ = forge_and_verify(uncopy(None), "control: build files uncopied at their real sizes (refused)")
    b, vb = forge_and_verify(uncopy(33 * 1024 * 1024), "attack: the same, each recorded as 33 MiB")
    print(f"\nRESULT: control exit {a}; attack exit {b} [{vb}]" + ("  -> ATTACK SUCCEEDED" if a == 1 and b == 0 else ""))
