"""C07: a load_inline candidate's build.ninja (the nvcc and host-compiler command lines: the flags in
effect, e.g. --use_fast_math) and its kernel sources (cuda.cu, main.cpp) marked "not copied" and
removed from the bag, the build record dropped and built_with emptied: PASS. Nothing explains why
they were not copied (copied_bytes 3.3 MB, far below the packer's 96 MiB cap); the bundle no longer
shows how the candidate was built or what its kernel is.
Run: cd tests && python -m forgeries.c07_build_files_uncopied (held by tests/test_forgeries_round2.py)"""
from forgeries.common import forge_and_verify


def uncopy(doc, files, suffixes):
    r = doc["candidates"][0]
    for pf in r["provenance"]["files"]:
        if pf["path"].endswith(suffixes):
            files.pop(pf.pop("bundle_path"))
            pf["copied"] = False
    r["provenance"]["builds"] = []
    r["provenance"]["built_with"] = []


if __name__ == "__main__":
    a = forge_and_verify(lambda d, f: uncopy(d, f, (".ninja",)), "attack 1: build.ninja not copied, build record dropped")
    b = forge_and_verify(lambda d, f: uncopy(d, f, (".ninja", ".cu", ".cpp")),
                         "attack 2: build.ninja, cuda.cu and main.cpp not copied, build record dropped")
    print(f"\nRESULT: exit {a} and {b}" + ("  -> ATTACK SUCCEEDED" if a == 0 or b == 0 else ""))
