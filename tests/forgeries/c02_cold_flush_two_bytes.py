"""C02: a cold-L2 timing block whose flush before every invocation is 2 bytes passes, (a) when the
run is recorded as sharded and its case's ran_on names another GPU than environment.json's (the
verifier then accepts any even flush size), (b) when environment.json says the H200's L2 is 1 byte.
Run: cd tests && python -m forgeries.c02_cold_flush_two_bytes (held by tests/test_forgeries_round2.py)"""
import copy


from kbrepro.bundle import case_records  # noqa: E402
from kbrepro.harness import cases as hcases  # noqa: E402
from forgeries.common import env_edit, forge_and_verify


def sharded(doc, gpu):
    for r in doc["candidates"]:
        fields = case_records.record_case_fields(r, doc)[0]
        r["case"] = {"id": hcases.case_id(fields), "bandwidth_gbps": doc["bandwidth"]["gbps"],
                     "bandwidth_block": copy.deepcopy(doc["bandwidth"]["block"])}
    doc["cases"] = [{"id": r["case"]["id"], "index": i, **case_records.record_case_fields(r, doc)[0],
                     "status": "done", "error": None,
                     "ran_on": {"host_sha256": "a" * 64, "engine": "local", "worker": None, "device": "cuda",
                                "gpu_name": gpu, "gpu_uuid_sha256": "b" * 64, "driver_version": "580.159.04",
                                "sm_clock_mhz": 1980, "memory_clock_mhz": 3201}}
                    for i, r in enumerate(doc["candidates"])]


def flush2(doc):
    for r in doc["candidates"]:
        r["blocks"][1]["flush_bytes"] = 2


def control(doc, files):
    sharded(doc, "NVIDIA H200")
    flush2(doc)


def other_gpu(doc, files):
    sharded(doc, "NVIDIA H200 NVL")
    flush2(doc)


def l2_one_byte(doc, files):
    env_edit(files, lambda f: f["l2_cache_bytes"].update(value=1))
    flush2(doc)


if __name__ == "__main__":
    a = forge_and_verify(control, "control: sharded, ran_on = environment's GPU, flush 2 bytes (refused)")
    b = forge_and_verify(other_gpu, "attack a: sharded, ran_on 'NVIDIA H200 NVL', flush 2 bytes")
    c = forge_and_verify(l2_one_byte, "attack b: environment l2_cache_bytes 1 on an NVIDIA H200, flush 2 bytes")
    print(f"\nRESULT: control exit {a}; other GPU exit {b}; L2 = 1 byte exit {c}"
          + ("  -> ATTACK SUCCEEDED" if a == 1 and (b == 0 or c == 0) else ""))
