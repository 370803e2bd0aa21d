"""Issue 14: signed, attested bundles that verify offline (CPU only).

One signed bundle of the committed full results (examples/results-full-h200) is packed twice
with one key, once by the CLI and once by the API, and shared by every test here: it verifies
with the right key, and each fault fails with its own message: a wrong key, an altered
envelope (a signature byte, the statement under an old signature, a cut line), an altered
payload (with the manifests re-hashed, so that only the attestation sees it, and plain), and a
statement that disagrees with the documents (re-signed with the same key, so its signature is
valid). The statements are checked against the in-toto and SLSA field definitions twice: the
product's own JSON Schemas (transcribed from the specifications) and, where the package
``in-toto-attestation`` is installed, the protobuf definitions the in-toto project publishes.
"""
from __future__ import annotations

import base64
import dataclasses
import json
import shutil
import os
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from kbrepro.bundle import attest, make, pack, publish
from kbrepro.bundle.verify.checklist import verify_archive

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "examples" / "results-full-h200"
(EXAMPLE,) = (ROOT / "examples").glob("pointwise-fusion-ftz-full-*.tar")


def _run(script: str, *args, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, script, *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def signed(tmp_path_factory):
    """The committed full results packed signed twice (CLI and API, one key), unsigned in
    format 4, and a second key pair that did not sign them."""
    from conftest import kernelbench_from_example

    d = tmp_path_factory.mktemp("signed")
    kb = kernelbench_from_example(d)
    priv, pub, kid = attest.write_key_pair(d / "keys")
    other_priv, other_pub, _ = attest.write_key_pair(d / "other")
    cli = d / "cli" / "s.tar"
    cli.parent.mkdir()
    r = _run("make_bundle.py", "--from-results", RESULTS, "--out", cli, "--kernelbench", kb, "--no-plots",
             "--sign", priv)
    assert r.returncode == 0, r.stderr
    api = make.make_from_results(RESULTS, d / "api.tar", kernelbench=str(kb), with_plots=False, sign=str(priv))
    unsigned = make.make_from_results(RESULTS, d / "unsigned.tar", kernelbench=str(kb), with_plots=False)
    return {"dir": d, "kb": kb, "priv": priv, "pub": pub, "kid": kid, "other_priv": other_priv,
            "other_pub": other_pub, "cli": cli, "cli_out": r.stdout, "api": api, "unsigned": unsigned.path}


def _members(path: Path) -> tuple[str, dict[str, bytes]]:
    with tarfile.open(path) as tf:
        files = {m.name.split("/", 1)[1]: tf.extractfile(m).read() for m in tf if m.isfile()}
        top = next(m.name for m in tf).split("/")[0]
    return top, files


def _repack(src: Path, dst: Path, *, payload_edit=None, attestations=None) -> Path:
    """``src`` packed again by the packer (manifests re-hashed, no summary.txt, which names the
    old digest) with the payload edited and/or other attestation bytes."""
    top, files = _members(src)
    payload = {k[len("data/"):]: v for k, v in files.items() if k.startswith("data/")}
    if payload_edit:
        payload_edit(payload)
    info = [tuple(line.split(": ", 1)) for line in files["bag-info.txt"].decode().splitlines()
            if not line.startswith("Payload-Oxum")]
    bag = pack.make_bag(top, payload, info)
    bag = dataclasses.replace(bag, attestations=files[pack.ATTESTATIONS] if attestations is None else attestations)
    pack.write_archive(bag, dst)
    return dst


def _statements(path: Path) -> list[dict]:
    _, files = _members(path)
    return [json.loads(base64.b64decode(json.loads(line)["payload"])) for line in files[pack.ATTESTATIONS].splitlines()]


def _resign(statements: list[dict], priv: Path) -> bytes:
    key = attest.load_signing_key(priv)
    return b"".join(attest.envelope(s, key) for s in statements)


def _problems(rep) -> list[str]:
    return [f"{t.name}: {p.message}" for t in rep.tiers for p in t.problems]


# ---------------------------------------------------------------------------------- the good case


@pytest.mark.slow
def test_a_signed_bundle_of_the_committed_results_verifies_with_the_right_key(signed):
    key = attest.load_public_key(signed["pub"])
    rep = verify_archive(signed["cli"], level="static", public_key=key)
    assert rep.verdict == "PASS", _problems(rep)
    assert rep.signature.signed and rep.signature.checked and rep.signature.keyid == signed["kid"]
    _, files = _members(signed["cli"])
    tagm = files["tagmanifest-sha256.txt"].decode()
    assert f"  {pack.ATTESTATIONS}\n" in tagm  # the digest covers the envelopes
    assert pack.ATTESTATIONS not in files["manifest-sha256.txt"].decode()  # the payload manifest is as it was
    r = _run("verify_bundle.py", signed["cli"], "--level", "static", "--public-key", signed["pub"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"signed by key id {signed['kid']}, checked with --public-key" in r.stdout
    assert "VERDICT PASS (exit 0)" in r.stdout and "at --level fast" not in r.stdout
    r = _run("verify_bundle.py", signed["cli"], "--level", "fast", "--public-key", signed["pub"])
    assert r.returncode == 0 and "at --level fast the signed statements are not compared with the documents" in r.stdout
    # the packer said it signed, and checked the signature with the signer's public key
    assert f"signed:  key id {signed['kid']}" in signed["cli_out"]
    assert f"signed by key id {signed['kid']}, checked with --public-key" in signed["cli_out"]


def test_without_a_public_key_the_verifier_says_signed_by_key_id_not_checked_or_not_signed(signed):
    r = _run("verify_bundle.py", signed["cli"], "--level", "static")
    assert r.returncode == 0, r.stdout
    assert f"signed by key id {signed['kid']}, not checked" in r.stdout.splitlines()
    for unsigned in (signed["unsigned"], EXAMPLE):  # format 4 unsigned, and the committed format 3 example
        r = _run("verify_bundle.py", unsigned, "--level", "fast")
        assert r.returncode == 0, r.stdout
        assert "not signed" in r.stdout.splitlines()


def test_the_signed_archive_is_byte_identical_across_two_packs_with_the_same_key(signed):
    assert signed["cli"].read_bytes() == signed["api"].path.read_bytes()
    assert signed["api"].signed_by == signed["kid"]
    # and signing changes the digest (the envelopes are a tag file), not the payload manifest
    _, a = _members(signed["api"].path)
    _, u = _members(signed["unsigned"])
    assert a["manifest-sha256.txt"] == u["manifest-sha256.txt"]
    assert a["tagmanifest-sha256.txt"] != u["tagmanifest-sha256.txt"]


def test_the_key_never_enters_the_archive(signed):
    key = attest.load_signing_key(signed["priv"])
    pem = signed["priv"].read_bytes()
    body = b"".join(pem.strip().splitlines()[1:-1])  # the PEM's base64 text
    for archive in (signed["cli"], signed["api"].path):
        raw = archive.read_bytes()
        assert pem.strip() not in raw and body not in raw
        assert not [s for s in key.secrets if s in raw]  # PEM, DER PKCS#8, the raw 32-byte seed
        _, files = _members(archive)
        assert not [p for p, v in files.items() if b"PRIVATE KEY" in v]


def test_a_key_inside_the_results_is_refused_and_nothing_is_written(signed, tmp_path):
    res = tmp_path / "res"
    shutil.copytree(RESULTS, res)
    shutil.copy(signed["priv"], res / "binaries" / "key.pem")
    from kbrepro.errors import UsageError

    with pytest.raises(UsageError, match="a key never goes into a bundle"):
        make.make_from_results(res, tmp_path / "x.tar", kernelbench=str(signed["kb"]), with_plots=False,
                               sign=str(signed["priv"]))
    assert not list(tmp_path.glob("x.tar*"))


# ---------------------------------------------------------------------------------------- faults


def test_a_wrong_key_fails_with_its_own_message(signed):
    rep = verify_archive(signed["cli"], level="static", public_key=attest.load_public_key(signed["other_pub"]))
    assert rep.exit_code == 1 and not rep.signature.checked
    msgs = _problems(rep)
    assert any("not by the --public-key given" in m and signed["kid"] in m for m in msgs), msgs
    assert not any("altered" in m for m in msgs), msgs
    # the problem's code says what it is, for scripts (never the wording)
    assert [p.code for t in rep.tiers for p in t.problems] == ["signature.wrong_key"]
    r = _run("verify_bundle.py", signed["cli"], "--level", "static", "--public-key", signed["other_pub"])
    assert r.returncode == 1 and "the wrong key, or not the signer's" in r.stdout
    # the signature line says the key given refused it, never "not checked" (a key was given)
    line = next(x for x in r.stdout.splitlines() if x.startswith("signed by key id"))
    assert "does NOT verify" in line and "not checked" not in r.stdout
    assert "only --public-key checks the signature" not in r.stdout


def test_an_envelope_with_a_flipped_signature_byte_fails_as_altered(signed, tmp_path):
    _, files = _members(signed["cli"])
    lines = files[pack.ATTESTATIONS].splitlines()
    env = json.loads(lines[0])
    sig = bytearray(base64.b64decode(env["signatures"][0]["sig"]))
    sig[10] ^= 0x01
    env["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
    forged = attest.canonical(env) + b"\n" + lines[1] + b"\n"
    out = _repack(signed["cli"], tmp_path / "f.tar", attestations=forged)  # the tag manifest re-hashed
    rep = verify_archive(out, level="static", public_key=attest.load_public_key(signed["pub"]))
    msgs = _problems(rep)
    assert rep.exit_code == 1
    assert msgs == ["manifest: the signature of envelope 1 does not verify with key id "
                    f"{signed['kid']}: the envelope was altered after it was signed"], msgs


def test_an_envelope_whose_statement_was_changed_under_the_old_signature_fails_as_altered(signed, tmp_path):
    _, files = _members(signed["cli"])
    lines = files[pack.ATTESTATIONS].splitlines()
    env = json.loads(lines[1])
    st = json.loads(base64.b64decode(env["payload"]))
    st["predicate"]["result"] = "PASSED"  # "every claim holds", under the signature of the real result
    st["predicate"]["passedTests"] += st["predicate"]["failedTests"]
    st["predicate"]["failedTests"] = []
    env["payload"] = base64.b64encode(attest.canonical(st)).decode()
    forged = lines[0] + b"\n" + attest.canonical(env) + b"\n"
    out = _repack(signed["cli"], tmp_path / "f.tar", attestations=forged)
    rep = verify_archive(out, level="static", public_key=attest.load_public_key(signed["pub"]))
    msgs = _problems(rep)
    assert rep.exit_code == 1
    assert any("signature of envelope 2 does not verify" in m and "altered after it was signed" in m for m in msgs), msgs


@pytest.mark.parametrize("edit,fragment", [
    (lambda raw: raw[:-40] + b"\n", "malformed"),
    (lambda raw: raw.splitlines()[0] + b"\n", "exactly two envelopes"),
    (lambda raw: raw.replace(b'"payloadType"', b'"payloadTyp"', 1), "malformed"),
    (lambda raw: raw.replace(b'{"payload"', b'{"extra":1,"payload"', 1), "malformed"),
    (lambda raw: raw.replace(b"\n", b"\r\n"), "not JSON Lines"),
])
def test_a_malformed_envelope_fails_as_malformed(signed, tmp_path, edit, fragment):
    _, files = _members(signed["cli"])
    out = _repack(signed["cli"], tmp_path / "f.tar", attestations=edit(files[pack.ATTESTATIONS]))
    rep = verify_archive(out, level="static")  # without a key too: the envelopes must be the packer's
    msgs = _problems(rep)
    assert rep.exit_code == 1 and any(fragment in m for m in msgs), msgs


def _same_size_log_edit(payload):
    log = payload["logs/run.log"]
    i = log.index(b"e")
    payload["logs/run.log"] = log[:i] + b"E" + log[i + 1:]


def test_an_altered_payload_with_rehashed_manifests_is_caught_by_the_attestation_alone(signed, tmp_path):
    """The run log is not derived again by any tier; edited at the same size with every
    manifest re-hashed, only the signed subjects still know the original."""
    out = _repack(signed["cli"], tmp_path / "f.tar", payload_edit=_same_size_log_edit)
    rep = verify_archive(out, level="static", public_key=attest.load_public_key(signed["pub"]))
    msgs = _problems(rep)
    assert rep.exit_code == 1 and rep.signature.checked  # the signature itself is fine
    assert len(msgs) == 1 and msgs[0].startswith("manifest: the signed statements give data/logs/run.log sha256 ")
    assert msgs[0].endswith("the payload was altered after signing"), msgs
    # the same bundle without the signature: nothing notices (why a signature is worth having)
    plain = _repack(out, tmp_path / "plain.tar", attestations=b"")
    assert verify_archive(plain, level="static").verdict == "PASS"


def test_an_altered_payload_without_rehashing_fails_in_the_manifest_and_in_the_attestation(signed, tmp_path):
    raw = signed["cli"].read_bytes()
    _, files = _members(signed["cli"])
    log = files["data/logs/run.log"]
    at = raw.index(log)
    i = log.index(b"e")
    out = tmp_path / "f.tar"
    out.write_bytes(raw[:at + i] + b"E" + raw[at + i + 1:])
    rep = verify_archive(out, level="fast", public_key=attest.load_public_key(signed["pub"]))
    msgs = _problems(rep)
    assert rep.exit_code == 1
    assert "manifest: sha256 differs from manifest-sha256.txt" in msgs, msgs
    assert any("the payload was altered after signing" in m for m in msgs), msgs


def test_a_statement_re_signed_with_the_same_key_that_disagrees_with_the_documents_fails(signed, tmp_path):
    sts = _statements(signed["cli"])
    sts[0]["predicate"]["buildDefinition"]["externalParameters"]["profile"] = "quick"
    out = _repack(signed["cli"], tmp_path / "f.tar", attestations=_resign(sts, signed["priv"]))
    rep = verify_archive(out, level="static", public_key=attest.load_public_key(signed["pub"]))
    assert rep.exit_code == 1 and rep.signature.checked  # a valid signature over a false statement
    bad = [p for t in rep.tiers for p in t.problems]
    assert [(p.path, p.expected, p.found) for p in bad] == [
        ("envelope 1 $.predicate.buildDefinition.externalParameters.profile", "full", "quick")]
    assert "disagrees with the documents" in bad[0].message


@pytest.mark.parametrize("what,edit,path", [
    ("the KernelBench commit", lambda s: s[0]["predicate"]["buildDefinition"]["resolvedDependencies"][0].update(
        digest={"gitCommit": "0" * 40}), "envelope 1 $.predicate.buildDefinition.resolvedDependencies[0].digest.gitCommit"),
    ("the study", lambda s: s[0]["predicate"]["buildDefinition"]["externalParameters"].update(study="layernorm-l1-40"),
     "envelope 1 $.predicate.buildDefinition.externalParameters.study"),
    ("a claim's verdict", lambda s: s[1]["predicate"].update(failedTests=["C11"], passedTests=s[1]["predicate"][
        "passedTests"] + ["C10"]), "envelope 2 $.predicate.failedTests"),
    ("the run's start", lambda s: s[0]["predicate"]["runDetails"]["metadata"].update(startedOn="2026-01-01T00:00:00Z"),
     "envelope 1 $.predicate.runDetails.metadata.startedOn"),
])
def test_each_kind_of_disagreement_is_named_by_its_path(signed, tmp_path, what, edit, path):
    sts = _statements(signed["cli"])
    edit(sts)
    out = _repack(signed["cli"], tmp_path / "f.tar", attestations=_resign(sts, signed["priv"]))
    rep = verify_archive(out, level="static", public_key=attest.load_public_key(signed["pub"]))
    paths = [p.path for t in rep.tiers for p in t.problems]
    assert rep.exit_code == 1 and path in paths, (what, paths)


def test_a_public_key_asks_for_a_signature_an_unsigned_bundle_does_not_carry(signed):
    for unsigned in (signed["unsigned"], EXAMPLE):
        r = _run("verify_bundle.py", unsigned, "--level", "static", "--public-key", signed["pub"])
        assert r.returncode == 1, r.stdout
        assert "not signed: --public-key asks for a signature this bundle does not carry" in r.stdout


def test_an_attestation_file_in_a_format_3_bundle_is_refused(signed, tmp_path):
    _, files = _members(signed["cli"])
    out = _repack(EXAMPLE, tmp_path / "f.tar", attestations=files[pack.ATTESTATIONS])
    rep = verify_archive(out, level="fast")
    assert rep.exit_code == 1 and any("never signed" in m for m in _problems(rep)), _problems(rep)


# ------------------------------------------------------------------------ what the statements say


def test_the_statements_say_what_the_documents_say(signed):
    prov, tests = _statements(signed["cli"])
    assert prov["_type"] == tests["_type"] == "https://in-toto.io/Statement/v1"
    assert prov["predicateType"] == "https://slsa.dev/provenance/v1"
    assert tests["predicateType"] == "https://in-toto.io/attestation/test-result/v0.1"
    _, files = _members(signed["cli"])
    payload = sorted(p for p in files if p.startswith("data/"))
    assert [s["name"] for s in prov["subject"]] == payload == [s["name"] for s in tests["subject"]]
    assert "data/ro-crate-metadata.json" in payload
    bd, rd = prov["predicate"]["buildDefinition"], prov["predicate"]["runDetails"]
    assert bd["buildType"] == attest.BUILD_TYPES["study"]
    assert bd["externalParameters"] == {"study": "pointwise-fusion-ftz", "profile": "full", "options": {
        "claims": "inputs/claims/claims.yaml", "name": "pointwise-fusion-ftz-full-20261201T124959",
        "results": "measured"}}
    deps = {d["name"]: d for d in bd["resolvedDependencies"]}
    assert deps["KernelBench"]["digest"] == {"gitCommit": "423217d9fda91e0c2d67e4a43bf62f96f6d104f1"}
    assert deps["data/inputs/study/fused_tails.cu"]["annotations"]["kbrepro_role"] == "kernel_source"
    assert deps["torch"]["uri"] == "pkg:pypi/torch@2.11.0%2Bcu130"
    assert deps["cupy-cuda13x"]["uri"] == "pkg:pypi/cupy-cuda13x@14.2.0"
    assert deps["nvrtc"]["uri"] == "pkg:generic/nvidia/nvrtc@13.0"
    assert deps["driver"]["uri"] == "pkg:generic/nvidia/driver@580.159.04"
    assert deps["kbrepro"]["annotations"]["kbrepro_commit"].startswith("5599e0e2c42324b9")
    kb_files = [n for n in deps if n.startswith("data/inputs/kernelbench/KernelBench/")]
    assert len(kb_files) == 5 and all(deps[n]["uri"].startswith("git+https://github.com/ScalingIntelligence/") for n in kb_files)
    assert rd["metadata"] == {"invocationId": "pointwise-fusion-ftz-full-20261201T124959",
                              "startedOn": "2026-12-01T12:49:59Z", "finishedOn": "2026-12-01T12:50:40Z"}
    assert [b["name"] for b in rd["byproducts"]] == ["data/logs/run.log"]
    assert bd["internalParameters"]["gpu"]["name"] == "NVIDIA H200"
    p = tests["predicate"]
    assert p["result"] == "FAILED" and p["failedTests"] == ["C10", "C11"] and p["warnedTests"] == []
    assert len(p["passedTests"]) == 12 and "C08" in p["passedTests"]
    assert [c["name"] for c in p["configuration"]] == ["data/inputs/claims/claims.yaml", "data/inputs/study/study.yaml"]


def test_the_statements_validate_against_the_in_toto_and_slsa_field_definitions_of_our_schemas(signed):
    from kbrepro import schemas

    prov, tests = _statements(signed["cli"])
    for st, pred in ((prov, "slsa-provenance"), (tests, "intoto-test-result")):
        assert schemas.validate(st, "intoto-statement") == []
        assert schemas.validate(st["predicate"], pred) == []
    # the schemas do reject what the definitions forbid
    assert schemas.validate({**prov, "subject": []}, "intoto-statement")
    assert schemas.validate({**tests["predicate"], "result": "OK"}, "intoto-test-result")
    assert schemas.validate({"buildDefinition": {"buildType": "x"}, "runDetails": {}}, "slsa-provenance")


def test_the_statements_parse_under_the_in_toto_projects_protobuf_definitions(signed):
    """in-toto-attestation (the in-toto project's Python bindings): the Statement, every
    ResourceDescriptor, and each predicate parsed strictly (no unknown field) into the
    published SLSA Provenance v1 and Test Result v0 messages, and back to the same JSON."""
    pytest.importorskip("in_toto_attestation", reason="the in-toto-attestation package is not installed")
    from google.protobuf import json_format
    from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
    from in_toto_attestation.predicates.test_result.v0 import test_result_pb2
    from in_toto_attestation.v1 import statement, statement_pb2
    from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor

    prov, tests = _statements(signed["cli"])
    for st, msg in ((prov, provenance_pb2.Provenance), (tests, test_result_pb2.TestResult)):
        pb = json_format.ParseDict(st, statement_pb2.Statement(), ignore_unknown_fields=False)
        statement.Statement.copy_from_pb(pb).validate()
        pred = json_format.ParseDict(st["predicate"], msg(), ignore_unknown_fields=False)
        rds = list(pb.subject)
        if msg is provenance_pb2.Provenance:
            rds += list(pred.build_definition.resolved_dependencies) + list(pred.run_details.byproducts)
        else:
            rds += list(pred.configuration)
        for rd in rds:
            ResourceDescriptor.copy_from_pb(rd).validate()
        back = json_format.MessageToDict(pred)
        assert back == {k: v for k, v in st["predicate"].items() if v != []}  # proto3 drops empty lists


def test_the_dsse_envelope_is_the_spec_s_pae_over_the_canonical_statement(signed):
    from cryptography.hazmat.primitives import serialization

    _, files = _members(signed["cli"])
    key = attest.load_public_key(signed["pub"])
    der = key.key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    import hashlib

    assert key.keyid == hashlib.sha256(der).hexdigest()
    for line in files[pack.ATTESTATIONS].splitlines():
        env = json.loads(line)
        body = base64.b64decode(env["payload"])
        t = b"application/vnd.in-toto+json"
        signed_bytes = b"DSSEv1 " + str(len(t)).encode() + b" " + t + b" " + str(len(body)).encode() + b" " + body
        key.key.verify(base64.b64decode(env["signatures"][0]["sig"]), signed_bytes)
        assert body == json.dumps(json.loads(body), sort_keys=True, separators=(",", ":")).encode()


# ------------------------------------------------------------------------------------- the CLIs


def test_keygen_writes_a_pair_openssl_reads_and_refuses_to_overwrite(tmp_path):
    r = _run("make_bundle.py", "--keygen", tmp_path / "k")
    assert r.returncode == 0, r.stderr
    priv, pub = tmp_path / "k" / attest.PRIVATE_KEY_FILE, tmp_path / "k" / attest.PUBLIC_KEY_FILE
    assert stat.S_IMODE(priv.stat().st_mode) == 0o600
    assert priv.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----\n")  # PKCS#8, as openssl genpkey writes
    assert pub.read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----\n")  # SubjectPublicKeyInfo
    kid = attest.load_public_key(pub).keyid
    assert attest.load_signing_key(priv).public.keyid == kid and f"key id:      {kid}" in r.stdout
    before = priv.read_bytes()
    r = _run("make_bundle.py", "--keygen", tmp_path / "k")
    assert r.returncode == 2 and r.stderr.startswith("error: ") and "exists; a key is never overwritten" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 2 and priv.read_bytes() == before
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / attest.PUBLIC_KEY_FILE).write_text("mine")  # either file existing is refused
    assert _run("make_bundle.py", "--keygen", tmp_path / "p").returncode == 2
    assert not (tmp_path / "p" / attest.PRIVATE_KEY_FILE).exists()
    r = _run("make_bundle.py", "--keygen", tmp_path / "q", "--no-plots")
    assert r.returncode == 2 and "--keygen takes no other option" in r.stderr


def test_openssl_keys_sign_and_verify(signed, tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("no openssl here")
    priv, pub = tmp_path / "o.pem", tmp_path / "o.pub.pem"
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(priv)], check=True, capture_output=True)
    subprocess.run(["openssl", "pkey", "-in", str(priv), "-pubout", "-out", str(pub)], check=True, capture_output=True)
    der = subprocess.run(["openssl", "pkey", "-in", str(priv), "-pubout", "-outform", "DER"], check=True,
                         capture_output=True).stdout
    import hashlib

    assert attest.load_public_key(pub).keyid == attest.load_signing_key(priv).public.keyid == \
        hashlib.sha256(der).hexdigest()
    sts = _statements(signed["cli"])
    out = _repack(signed["cli"], tmp_path / "o.tar", attestations=_resign(sts, priv))
    assert verify_archive(out, level="static", public_key=attest.load_public_key(pub)).verdict == "PASS"


@pytest.mark.parametrize("args,code,fragment", [
    (["--sign", "{pub}"], 2, "is a public key"),
    (["--sign", "{missing}"], 3, "does not exist"),
    (["--sign", "{priv}", "--bundle-format", "3"], 2, "cannot be signed"),
    (["--sign", "{priv}", "--allow-failing"], 2, "a signed bundle must pass verification"),
    (["--bundle-format", "9"], 2, "not a format this packer writes"),
])
def test_make_bundle_refuses_a_key_or_format_it_cannot_use(signed, tmp_path, args, code, fragment):
    args = [a.format(pub=signed["pub"], priv=signed["priv"], missing=tmp_path / "none.pem") for a in args]
    r = _run("make_bundle.py", "--from-results", RESULTS, "--out", tmp_path / "x.tar", "--kernelbench", signed["kb"],
             *args)
    assert r.returncode == code and fragment in r.stderr, r.stderr
    assert not list(tmp_path.glob("x.tar*"))


def test_an_encrypted_or_non_ed25519_key_is_a_usage_error(tmp_path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    from kbrepro.errors import UsageError

    enc = tmp_path / "enc.pem"
    enc.write_bytes(ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(b"pw")))
    ecp = tmp_path / "ec.pem"
    ecp.write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    junk = tmp_path / "junk.pem"
    junk.write_bytes(b"not a key\n")
    for p, frag in ((enc, "encrypted"), (ecp, "not Ed25519"), (junk, "not a PEM private key")):
        with pytest.raises(UsageError, match=frag):
            attest.load_signing_key(p)
    with pytest.raises(UsageError, match="not a PEM public key"):
        attest.load_public_key(junk)


def test_verify_bundle_refuses_a_private_key_as_public_key_and_writes_the_signature_into_json(signed, tmp_path):
    r = _run("verify_bundle.py", signed["cli"], "--public-key", signed["priv"])
    assert r.returncode == 2 and "is a private key" in r.stderr
    r = _run("verify_bundle.py", signed["cli"], "--public-key", tmp_path / "none.pem")
    assert r.returncode == 3
    r = _run("verify_bundle.py", signed["cli"], "--level", "fast", "--public-key", signed["pub"], "--json",
             tmp_path / "rep.json")
    assert r.returncode == 0, r.stdout
    from kbrepro import schemas

    doc = json.loads((tmp_path / "rep.json").read_text())
    assert doc["signature"] == {"signed": True, "keyid": signed["kid"], "checked": True,
                                "line": f"signed by key id {signed['kid']}, checked with --public-key"}
    assert schemas.validate(doc, "verification-report") == []


def test_a_signed_bundle_that_would_fail_is_removed_even_with_allow_failing_semantics(signed, tmp_path, monkeypatch):
    from click.testing import CliRunner

    import make_bundle

    monkeypatch.setattr(publish, "predict_verification", lambda p, key=None: ("FAIL", "FAIL in tier 5 claims: x"))
    out = tmp_path / "s.tar"
    r = CliRunner().invoke(make_bundle.main, ["--from-results", str(RESULTS), "--out", str(out), "--kernelbench",
                                              str(signed["kb"]), "--no-plots", "--sign", str(signed["priv"])])
    assert r.exit_code == 1 and not out.exists() and not out.with_name("s.tar.sha256-digest").exists()
    assert "a signature never goes on a failing bundle" in r.output


# ------------------------------------------------------------------------------ candidate bundles


def test_a_signed_candidate_bundle_verifies_and_fails_with_another_key(signed, tmp_path):
    from kbrepro.bundle import candidates as bc

    src = ROOT / "examples" / "candidates-quick-20261201T153437.tar"
    top, files = _members(src)
    inputs = {k[len("data/"):]: v for k, v in files.items() if k.startswith("data/")
              and k.split("/")[1] in ("inputs", "results", "provenance") and k != "data/inputs/claims.yaml"}
    key = attest.load_signing_key(signed["priv"])
    bag, meta, _, _ = bc.build_payload(inputs, name=top, signing_key=key)
    assert meta["format_version"] == 3 and "ro-crate-metadata.json" in bag.payload
    out = tmp_path / "c.tar"
    pack.write_archive(bag, out)
    rep = verify_archive(out, level="static", public_key=attest.load_public_key(signed["pub"]))
    assert rep.verdict == "PASS" and rep.signature.checked, _problems(rep)
    prov, tests = _statements(out)
    ext = prov["predicate"]["buildDefinition"]["externalParameters"]
    assert prov["predicate"]["buildDefinition"]["buildType"] == attest.BUILD_TYPES["candidates"]
    assert ext["study"] == "kernelbench-candidates" and [c["name"] for c in ext["candidates"]] == [
        c["name"] for c in meta["candidates"]]
    assert tests["predicate"]["result"] in ("PASSED", "WARNED", "FAILED")
    rep = verify_archive(out, level="static", public_key=attest.load_public_key(signed["other_pub"]))
    assert rep.exit_code == 1 and any("not by the --public-key given" in m for m in _problems(rep))
    # a statement that disagrees, re-signed: caught by the candidate verifier too
    prov["predicate"]["buildDefinition"]["externalParameters"]["profile"] = "full"
    forged = tmp_path / "cf.tar"
    pack.write_archive(dataclasses.replace(bag, summary=b"", attestations=_resign([prov, tests], signed["priv"])), forged)
    rep = verify_archive(forged, level="static", public_key=attest.load_public_key(signed["pub"]))
    assert rep.exit_code == 1 and any("disagrees with the documents" in m for m in _problems(rep)), _problems(rep)


def test_the_private_key_is_found_in_any_common_encoding(tmp_path):
    """Red team of issue 14: only an exact copy of the PEM was refused; CRLF, the body alone,
    another line length and the seed in hex or base64 went into a signed bundle."""
    import base64

    from cryptography.hazmat.primitives import serialization

    priv, _, _ = attest.write_key_pair(tmp_path / "keys")
    key = attest.load_signing_key(priv)
    pem = priv.read_bytes()
    body = b"".join(pem.strip().splitlines()[1:-1])
    seed = key.key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                 serialization.NoEncryption())
    forms = {
        "crlf": pem.replace(b"\n", b"\r\n"),
        "body": body,
        "rewrapped": b"\n".join(body[i:i + 20] for i in range(0, len(body), 20)),
        "seed_hex": seed.hex().upper().encode(),
        "seed_b64": base64.b64encode(seed).rstrip(b"="),
    }
    files = {f"logs/{n}.log": b"run log\n" + v + b"\nmore\n" for n, v in forms.items()}
    files["results/clean.json"] = b'{"a": 1}\n'
    assert attest.key_material_in(files, key) == sorted(f"logs/{n}.log" for n in forms)


def test_a_disagreement_is_judged_on_the_json_text_not_on_python_equality():
    """Issue 14's red team: 132.0 == 132 and False == 0 in Python, but a signed statement
    that says 132.0 or false where the documents give 132 or 0 is not the statement the
    verifier derives."""
    want = [{"a": 132, "b": 0, "c": [1, 2], "d": "x"}]
    assert attest.disagreements([{"a": 132, "b": 0, "c": [1, 2], "d": "x"}], want) == []
    got = attest.disagreements([{"a": 132.0, "b": False, "c": [1, 2.0], "d": "x"}], want)
    assert [p for p, _, _ in got] == ["envelope 1 $.a", "envelope 1 $.b", "envelope 1 $.c[1]"]


def test_a_folder_keygen_makes_is_the_owners_alone_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        priv, pub, _ = attest.write_key_pair(tmp_path / "new" / "keys")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new" / "keys").stat().st_mode) == 0o700
    assert stat.S_IMODE(priv.stat().st_mode) == 0o600
