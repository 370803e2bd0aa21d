"""Signed, offline-verifiable attestations of a bundle: Ed25519 keys, DSSE envelopes, in-toto
statements.

A signed bundle (study format 4, candidate format 3, packed with ``make_bundle.py --sign
KEY``) carries one more tag file, :data:`ATTESTATIONS` (``attestations.intoto.jsonl``), an
in-toto attestation Bundle (in-toto/attestation spec/v1/bundle.md: JSON Lines, one DSSE
envelope a line). It is listed in ``tagmanifest-sha256.txt``, so the bundle digest covers it.
It holds exactly two envelopes, in this order:

1. an in-toto Statement v1 (``_type`` ``https://in-toto.io/Statement/v1``) whose ``subject``
   is every payload file (``name`` its bag path ``data/...``, ``digest.sha256``), with a SLSA
   Provenance v1 predicate (``https://slsa.dev/provenance/v1``): build type
   :data:`BUILD_TYPES` (a kbrepro study run, or a run of KernelBench candidates);
   ``externalParameters`` the study, its profile and the options (claims file, bundle name,
   measured or imported; for candidates also the candidates, sizes and extra shapes);
   ``internalParameters`` the GPU and the bundle format; ``resolvedDependencies`` KernelBench
   at its commit and every KernelBench file, the kernel sources and the other study files, the
   claims specification, the post's original files (imported results), the product at its
   version and commit, torch, CuPy, NumPy, Python, NVRTC, the CUDA runtime and the driver (as
   package URLs); ``runDetails`` the builder :data:`BUILDER_ID` (version: kbrepro's),
   ``invocationId`` the bundle name, ``startedOn``/``finishedOn`` the run's own recorded times
   and ``byproducts`` the run log;
2. the same subjects with the in-toto Test Result predicate
   (``https://in-toto.io/attestation/test-result/v0.1``): each claim is a test named by its id
   (``holds`` passed; ``inconclusive`` and ``not_comparable`` warned; ``fails`` failed);
   ``result`` FAILED if a claim fails, else WARNED if one is warned, else PASSED;
   ``configuration`` the claims specification and the study definition.

Every value is derived from the payload (:func:`kbrepro.bundle.facts.bundle_facts` and the
claims verdicts), so the verifier derives both statements again and compares them byte for
byte. Serialisation: each statement is canonical JSON (sorted keys, separators ``,`` and
``:``, ASCII); each envelope is ``{"payload": <base64>, "payloadType":
"application/vnd.in-toto+json", "signatures": [{"keyid": <hex>, "sig": <base64>}]}`` in the
same canonical JSON (standard base64 with padding), one line ending in LF. The signature is
Ed25519 (RFC 8032, deterministic, so two packs with one key give the same bytes) over the DSSE
v1 pre-authentication encoding (github.com/secure-systems-lab/dsse protocol.md)::

    PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body

with LEN the byte length in ASCII decimal. The **key id** is the lower-case hex sha256 of the
public key's DER SubjectPublicKeyInfo (the bytes ``openssl pkey -pubout -outform DER``
writes). Keys are PEM files as ``openssl genpkey -algorithm ed25519`` writes them: an
unencrypted PKCS#8 private key, a SubjectPublicKeyInfo public key. No key is ever written into
a bundle: the packer refuses a payload that holds the private key's bytes.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from kbrepro import schemas
from kbrepro.bundle.facts import BundleFacts
from kbrepro.bundle.pack import ATTESTATIONS
from kbrepro.errors import InputPathError, OutputPathError, UnreadableInputError, UsageError
from kbrepro.paths import check_input_file, prepare_output_dir
from kbrepro.harness import jsonio
from kbrepro.model import problems as P
from kbrepro.model.problems import Problem

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PROVENANCE_TYPE = "https://slsa.dev/provenance/v1"
TEST_RESULT_TYPE = "https://in-toto.io/attestation/test-result/v0.1"
BUILD_TYPES = {"study": "https://kbrepro.invalid/build-types/study-run/v1",
               "candidates": "https://kbrepro.invalid/build-types/candidate-run/v1"}
BUILDER_ID = "https://kbrepro.invalid/builders/kbrepro/v1"
PREDICATE_TYPES = (PROVENANCE_TYPE, TEST_RESULT_TYPE)
#: the files written by ``make_bundle.py --keygen DIR``
PRIVATE_KEY_FILE = "bundle-signing-key.pem"
PUBLIC_KEY_FILE = "bundle-signing-key.pub.pem"
#: the largest key file read, attestation file and statement parsed
MAX_KEY_BYTES = 64 * 1024
MAX_ATTESTATION_BYTES = 32 * 1024 * 1024
MAX_STATEMENT_BYTES = 12 * 1024 * 1024
KEY_HINT = "make a key pair with 'python make_bundle.py keygen DIR' (or 'openssl genpkey -algorithm ed25519')"
_B64 = re.compile(r"^[A-Za-z0-9+/]*={0,2}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_VERDICT_TEST = {"holds": "passed", "fails": "failed", "inconclusive": "warned", "not_comparable": "warned"}


# ------------------------------------------------------------------------------------ keys


@dataclass(frozen=True)
class PublicKey:
    """An Ed25519 public key and its key id (sha256 of the DER SubjectPublicKeyInfo)."""

    key: object
    keyid: str


@dataclass(frozen=True)
class SigningKey:
    """An Ed25519 private key, its public key, and the byte forms of the private key that must
    never appear in a bundle (the PEM file as read, its DER PKCS#8, the raw 32-byte seed)."""

    key: object
    public: PublicKey
    secrets: tuple[bytes, ...]


def key_id(public_key) -> str:
    """The key id of an Ed25519 public key: sha256 hex of its DER SubjectPublicKeyInfo."""
    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


def _read_key_file(path, what: str) -> bytes:

    p = check_input_file(path, what, KEY_HINT)
    try:
        with open(p, "rb") as fh:
            data = fh.read(MAX_KEY_BYTES + 1)
    except OSError as exc:
        raise InputPathError(f"cannot read {what} {p}: {(exc.strerror or type(exc).__name__).lower()}", KEY_HINT) from exc
    if len(data) > MAX_KEY_BYTES:
        raise UsageError(f"{what} {p} is larger than {MAX_KEY_BYTES} bytes: not a PEM key file", KEY_HINT)
    return data


def load_signing_key(path) -> SigningKey:
    """The Ed25519 private key of the PEM file ``path`` (unencrypted PKCS#8, as ``openssl
    genpkey -algorithm ed25519`` writes it). Raises InputPathError (3) if the file cannot be
    read, UsageError (2) if it is not such a key (encrypted, another algorithm, a public key)."""
    data = _read_key_file(path, "--sign key")
    if b"PUBLIC KEY-----" in data and b"PRIVATE KEY-----" not in data:
        raise UsageError(f"--sign {path} is a public key; signing needs the private key", KEY_HINT)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError as exc:  # encrypted, and no password given
        raise UsageError(f"--sign {path} is an encrypted private key; kbrepro reads unencrypted PKCS#8 PEM keys",
                         "decrypt it (openssl pkey -in KEY -out PLAIN.pem) or make one with --keygen") from exc
    except (ValueError, TypeError) as exc:
        raise UsageError(f"--sign {path} is not a PEM private key: {' '.join(str(exc).split())[:120]}", KEY_HINT) from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise UsageError(f"--sign {path} is a {type(key).__name__.replace('_', '')} key, not Ed25519", KEY_HINT)
    der = key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    raw = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    pub = key.public_key()
    return SigningKey(key, PublicKey(pub, key_id(pub)), tuple({data.strip(), pem.strip(), der, raw}))


def load_public_key(path) -> PublicKey:
    """The Ed25519 public key of the PEM file ``path`` (SubjectPublicKeyInfo, as ``openssl pkey
    -pubout`` writes it). Raises InputPathError (3) if it cannot be read, UsageError (2) if it
    is not an Ed25519 public key (a private key is refused: give the public one)."""
    data = _read_key_file(path, "--public-key")
    if b"PRIVATE KEY-----" in data:
        raise UsageError(f"--public-key {path} is a private key; give the public key (it never needs to leave the "
                         "signer's machine)", "openssl pkey -in KEY -pubout -out KEY.pub.pem")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"--public-key {path} is not a PEM public key: {' '.join(str(exc).split())[:120]}",
                         KEY_HINT) from exc
    if not isinstance(key, Ed25519PublicKey):
        raise UsageError(f"--public-key {path} is a {type(key).__name__.replace('_', '')} key, not Ed25519", KEY_HINT)
    return PublicKey(key, key_id(key))


def check_key_pair_paths(folder) -> tuple[Path, Path]:
    """The two files :func:`write_key_pair` would write in ``folder``, refused (OutputPathError,
    exit 2) if either exists: a key is never overwritten."""
    priv, pub = Path(folder) / PRIVATE_KEY_FILE, Path(folder) / PUBLIC_KEY_FILE
    for p in (priv, pub):
        if os.path.lexists(p):
            raise OutputPathError(f"{p} exists; a key is never overwritten", "choose another folder for the keys (make_bundle.py keygen DIR)")
    return priv, pub


def write_key_pair(folder, what: str = "--keygen") -> tuple[Path, Path, str]:
    """Make an Ed25519 key pair in ``folder`` (created if missing, mode 0700): :data:`PRIVATE_KEY_FILE`
    (unencrypted PKCS#8 PEM, mode 0600, created with O_EXCL) and :data:`PUBLIC_KEY_FILE`
    (SubjectPublicKeyInfo PEM, 0644). Returns ``(private, public, key id)``. Raises
    OutputPathError (2) if either file exists or the folder cannot be written, naming the folder
    as ``what`` (the option or argument the user gave); nothing is left half-written."""

    folder, created = prepare_output_dir(folder, what, must_be_empty=False)
    if created:  # a folder made here holds a private key: owner only, whatever the umask
        try:
            os.chmod(folder, 0o700)
        except OSError:
            pass
    priv, pub = check_key_pair_paths(folder)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    pub_pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                            serialization.PublicFormat.SubjectPublicKeyInfo)
    written = []
    try:
        for path, data, mode in ((priv, pem, 0o600), (pub, pub_pem, 0o644)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
            written.append(path)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.chmod(path, mode)
    except OSError as exc:
        for p in written:
            try:
                p.unlink()
            except OSError:
                pass
        raise OutputPathError(f"cannot write the key pair into {folder}: {(exc.strerror or type(exc).__name__).lower()}"
                              "; nothing was kept", "choose another folder for the keys (make_bundle.py keygen DIR)") from exc
    return priv, pub, key_id(key.public_key())


def key_material_in(files: Mapping[str, bytes], key: SigningKey) -> list[str]:
    """The paths of ``files`` whose bytes hold the private key in any common text or binary
    form: its PEM, DER or raw 32-byte seed as bytes; the base64 of the DER or of the seed
    (padded or not) with all whitespace removed first, so any line length and CRLF or LF line
    ends are found; the seed in hexadecimal, either case."""
    raw = [s for s in key.secrets if s and b"-----" not in s]
    texts = set()
    for s in raw:
        b64 = base64.b64encode(s)
        texts |= {b64, b64.rstrip(b"=")}
    hexes = {s.hex().encode() for s in raw if len(s) <= 64}

    def holds(data: bytes) -> bool:
        if any(s and s in data for s in key.secrets):
            return True
        flat = re.sub(rb"\s+", b"", data)
        low = data.lower()
        return any(t in flat for t in texts) or any(h in low for h in hexes)

    return sorted(p for p, data in files.items() if holds(data))


# ------------------------------------------------------------------------------ DSSE, JSON


def canonical(obj) -> bytes:
    """Canonical JSON bytes: sorted keys, separators ``,`` and ``:``, ASCII, no NaN."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode("ascii")


def pae(payload_type: str, body: bytes) -> bytes:
    """The DSSE v1 pre-authentication encoding of ``body`` (what is signed)."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(body), body)


def envelope(statement: Mapping, key: SigningKey) -> bytes:
    """One DSSE envelope line (canonical JSON and LF) of ``statement``, signed with ``key``."""
    body = canonical(statement)
    sig = key.key.sign(pae(PAYLOAD_TYPE, body))
    env = {"payload": base64.b64encode(body).decode("ascii"), "payloadType": PAYLOAD_TYPE,
           "signatures": [{"keyid": key.public.keyid, "sig": base64.b64encode(sig).decode("ascii")}]}
    return canonical(env) + b"\n"


# ------------------------------------------------------------------------------ statements


def subjects(payload: Mapping[str, bytes]) -> list[dict]:
    """Every payload file (path under ``data/`` -> bytes) as a subject: ``data/<path>`` and its sha256."""
    return [{"digest": {"sha256": hashlib.sha256(payload[p]).hexdigest()}, "name": f"data/{p}"}
            for p in sorted(payload)]


def _rd(ref, role: str, uri: str | None = None) -> dict:
    out = {"annotations": {"kbrepro_role": role}, "digest": {"sha256": ref.sha256}, "name": f"data/{ref.path}"}
    if uri:
        out["uri"] = uri
    return out


def _kb_uri(f: BundleFacts, rel: str | None = None) -> str | None:
    if not f.kernelbench_repository or not f.kernelbench_commit:
        return None
    return f"git+{f.kernelbench_repository}@{f.kernelbench_commit}" + (f"#{rel}" if rel else "")


def provenance_predicate(f: BundleFacts) -> dict:
    """The SLSA Provenance v1 predicate of a bundle (see the module docstring)."""
    deps: list[dict] = []
    if f.kernelbench_commit:
        kb = {"annotations": {"kbrepro_role": "kernelbench"}, "name": "KernelBench"}
        if re.fullmatch(r"[0-9a-f]{40}", f.kernelbench_commit):
            kb["digest"] = {"gitCommit": f.kernelbench_commit}
        if _kb_uri(f):
            kb["uri"] = _kb_uri(f)
        if "digest" in kb or "uri" in kb:
            deps.append(kb)
    for x in f.by_role("kernelbench_file", "kernelbench_lock"):
        rel = x.path[len("inputs/kernelbench/"):]
        deps.append(_rd(x, x.role, _kb_uri(f, rel) if x.role == "kernelbench_file" else None))
    for x in f.by_role("kernel_source", "study_file", "claims_spec", "original"):
        deps.append(_rd(x, x.role))
    product = {"annotations": {"kbrepro_role": "product"}, "name": "kbrepro",
               "uri": f"pkg:generic/kbrepro@{f.product_version or 'unknown'}"}
    if f.product_commit:
        product["annotations"]["kbrepro_commit"] = f.product_commit
    if f.product_git_commit:
        product["digest"] = {"gitCommit": f.product_git_commit}
    deps.append(product)
    for s in f.software:
        deps.append({"annotations": {"kbrepro_role": "software"}, "name": s.name, "uri": s.purl})
    external: dict = {"options": {k: v for k, v in f.options}, "profile": f.profile, "study": f.study}
    if f.kind == "candidates":
        external["candidates"] = [{"file": c.file, "name": c.name, "task": c.task} for c in f.candidates]
    internal: dict = {"bundleFormat": f"{f.format} {f.format_version}"}
    if f.gpu is not None:
        internal["gpu"] = {"computeCapability": f.gpu.compute_capability, "name": f.gpu.name,
                           "smCount": f.gpu.sm_count, "memoryBytes": f.gpu.memory_bytes}
    metadata: dict = {"invocationId": f.name}
    if f.started_utc:
        metadata["startedOn"] = f.started_utc
    if f.finished_utc:
        metadata["finishedOn"] = f.finished_utc
    run: dict = {"builder": {"id": BUILDER_ID, "version": {"kbrepro": f.product_version or "unknown"}},
                 "metadata": metadata}
    byproducts = [_rd(x, x.role) for x in f.by_role("log")]
    if byproducts:
        run["byproducts"] = byproducts
    return {"buildDefinition": {"buildType": BUILD_TYPES[f.kind], "externalParameters": external,
                                "internalParameters": internal, "resolvedDependencies": deps},
            "runDetails": run}


def test_result_predicate(f: BundleFacts, verdicts: Sequence[tuple[str, str]]) -> dict:
    """The in-toto Test Result v0.1 predicate of a bundle's claims ``(id, verdict)``, in order."""
    tests = {"passed": [], "warned": [], "failed": []}
    for cid, verdict in verdicts:
        tests[_VERDICT_TEST.get(verdict, "failed")].append(cid)
    result = "FAILED" if tests["failed"] else "WARNED" if tests["warned"] else "PASSED"
    config = [_rd(x, x.role) for x in f.by_role("claims_spec")]
    config += [_rd(x, "study_definition") for x in f.files if x.path == "inputs/study/study.yaml"]
    return {"configuration": config, "failedTests": tests["failed"], "passedTests": tests["passed"], "result": result,
            "warnedTests": tests["warned"]}


def statements(f: BundleFacts, verdicts: Sequence[tuple[str, str]], payload: Mapping[str, bytes]) -> list[dict]:
    """The two statements of a signed bundle: provenance, then the claims' test result."""
    subj = subjects(payload)
    return [{"_type": STATEMENT_TYPE, "predicate": provenance_predicate(f), "predicateType": PROVENANCE_TYPE,
             "subject": subj},
            {"_type": STATEMENT_TYPE, "predicate": test_result_predicate(f, verdicts), "predicateType": TEST_RESULT_TYPE,
             "subject": subj}]


def verdicts_of(claims_doc: Mapping) -> list[tuple[str, str]]:
    """``(id, verdict)`` of every claim of a claims document, in its order."""
    return [(str(c.get("id")), str(c.get("verdict"))) for c in claims_doc.get("claims") or [] if isinstance(c, dict)]


def sign(f: BundleFacts, verdicts: Sequence[tuple[str, str]], payload: Mapping[str, bytes], key: SigningKey) -> bytes:
    """The attestation tag file of a bundle: both statements, each in a DSSE envelope signed
    with ``key``. Raises UsageError if the payload holds the private key."""
    leaked = key_material_in(payload, key)
    if leaked:
        raise UsageError(f"the signing key's bytes are inside the results ({', '.join(leaked[:3])}); a key never goes "
                         "into a bundle", "move the key out of the results folder and remove it from every file")
    return b"".join(envelope(s, key) for s in statements(f, verdicts, payload))


# -------------------------------------------------------------------------------- checking


@dataclass(frozen=True)
class Attestation:
    """What the verifier read from a bundle's attestation file. ``signed``: the file is there;
    ``keyid``: the key id the envelopes name (when they parse); ``checked``: every signature
    verified with the key given (other problems may still fail the bundle); ``statements``: the statements (when they parse);
    ``problems``: each a :class:`~kbrepro.model.problems.Problem` of file
    :data:`~kbrepro.bundle.pack.ATTESTATIONS` with a ``signature.*`` code."""

    signed: bool
    keyid: str | None
    checked: bool
    statements: tuple
    problems: tuple[Problem, ...]

    @property
    def key_refused(self) -> bool:
        """Whether a ``--public-key`` was given and the signature is not that key's (another key
        id, or a signature that does not verify with it)."""
        return any(p.code in (P.SIGNATURE_WRONG_KEY, P.SIGNATURE_BAD) for p in self.problems)

    def line(self) -> str:
        """``signed by key id <hex>, checked with --public-key`` / ``..., NOT the --public-key
        given`` / ``..., not checked`` (no key given) / ``not signed``."""
        if not self.signed:
            return "not signed"
        if self.keyid is None:
            return "signed (the envelopes cannot be read)"
        if self.key_refused:
            return (f"signed by key id {self.keyid}, which the --public-key given does NOT verify (another "
                    "signer, or a signature that is not that key's)")
        return f"signed by key id {self.keyid}, " + ("checked with --public-key" if self.checked else "not checked")


def _b64(s, what: str) -> bytes:
    if not isinstance(s, str) or not _B64.match(s) or len(s) % 4:
        raise ValueError(f"{what} is not standard base64 with padding")
    data = base64.b64decode(s, validate=True)
    if base64.b64encode(data).decode("ascii") != s:
        raise ValueError(f"{what} is not in canonical base64")
    return data


def _envelope_fields(line: bytes, n: int) -> tuple[bytes, str, bytes]:
    """``(statement bytes, keyid, signature)`` of envelope line ``n`` (1-based), in the
    packer's exact form. Raises ValueError saying what is not."""
    try:
        env = jsonio.loads_strict(line, f"envelope {n}", max_bytes=MAX_ATTESTATION_BYTES, max_depth=8)
    except UnreadableInputError as exc:
        raise ValueError(exc.message) from None
    if not isinstance(env, dict) or set(env) != {"payload", "payloadType", "signatures"}:
        raise ValueError(f"envelope {n} is not a DSSE envelope of exactly payload, payloadType and signatures")
    if env["payloadType"] != PAYLOAD_TYPE:
        raise ValueError(f"envelope {n} has payloadType {str(env['payloadType'])[:80]!r}, not {PAYLOAD_TYPE}")
    sigs = env["signatures"]
    if not isinstance(sigs, list) or len(sigs) != 1 or not isinstance(sigs[0], dict) or set(sigs[0]) != {"keyid", "sig"}:
        raise ValueError(f"envelope {n} does not hold exactly one signature of keyid and sig")
    keyid = sigs[0]["keyid"]
    if not isinstance(keyid, str) or not _HEX64.match(keyid):
        raise ValueError(f"envelope {n}: the keyid is not a sha256 in lower-case hex")
    sig = _b64(sigs[0]["sig"], f"envelope {n}: the signature")
    if len(sig) != 64:
        raise ValueError(f"envelope {n}: the signature is {len(sig)} bytes, an Ed25519 signature 64")
    body = _b64(env["payload"], f"envelope {n}: the payload")
    if len(body) > MAX_STATEMENT_BYTES:
        raise ValueError(f"envelope {n}: the statement is larger than {MAX_STATEMENT_BYTES} bytes")
    if canonical(env) + b"\n" != line + b"\n":
        raise ValueError(f"envelope {n} is not in the canonical JSON form the packer writes")
    return body, keyid, sig


def _statement(body: bytes, n: int) -> dict:

    try:
        st = jsonio.loads_strict(body, f"the statement of envelope {n}", max_bytes=MAX_STATEMENT_BYTES, max_depth=16)
    except UnreadableInputError as exc:
        raise ValueError(exc.message) from None
    if not isinstance(st, dict) or canonical(st) != body:
        raise ValueError(f"the statement of envelope {n} is not an object in canonical JSON")
    want = PREDICATE_TYPES[n - 1]
    if st.get("predicateType") != want:
        raise ValueError(f"the statement of envelope {n} has predicateType {str(st.get('predicateType'))[:80]!r}, "
                         f"not {want}")
    problems = schemas.validate(st, "intoto-statement")
    if not problems:
        problems = schemas.validate(st.get("predicate"), "slsa-provenance" if n == 1 else "intoto-test-result")
    if problems:
        p = problems[0]
        raise ValueError(f"the statement of envelope {n} breaks the in-toto/SLSA field definitions at "
                         f"{p.path}: {p.message[:160]}")
    return st


def _problem(code: str, message: str) -> Problem:
    """A problem of the attestations file (:data:`~kbrepro.bundle.pack.ATTESTATIONS`)."""
    return Problem(code, None, message, file=ATTESTATIONS)


def read(raw: bytes | None, payload_sha256: Mapping[str, str], key: PublicKey | None) -> Attestation:
    """Check a bundle's attestation file ``raw`` (None: the bundle is not signed) as hostile
    input: exactly two envelopes in the packer's exact form (size-bounded strict JSON, the
    field sets, one Ed25519 signature each, one key id), each signature against ``key`` where
    one is given, each statement against the in-toto and SLSA field definitions, and the
    subjects against the payload actually in the archive (``payload_sha256``: bag path
    ``data/...`` -> sha256 of its bytes as read). The statements' predicates are compared
    with the documents later (:func:`disagreements`)."""
    if raw is None:
        probs = (_problem(P.SIGNATURE_MISSING, "not signed: --public-key asks for a signature this bundle does not "
                          "carry"),) if key else ()
        return Attestation(False, None, False, (), probs)
    probs: list[Problem] = []

    def bad(kind, msg):
        probs.append(_problem(kind, msg))
        return Attestation(True, None, False, (), tuple(probs))

    if len(raw) > MAX_ATTESTATION_BYTES:
        return bad(P.SIGNATURE_MALFORMED, f"larger than {MAX_ATTESTATION_BYTES} bytes")
    if not raw.endswith(b"\n") or b"\r" in raw:
        return bad(P.SIGNATURE_MALFORMED, "not JSON Lines ending in LF (the envelope was altered)")
    lines = raw[:-1].split(b"\n")
    if len(lines) != 2:
        return bad(P.SIGNATURE_MALFORMED, f"{len(lines)} lines; a signed bundle carries exactly two envelopes (provenance, "
                   "test result)")
    parsed = []
    for n, line in enumerate(lines, 1):
        try:
            parsed.append(_envelope_fields(line, n))
        except ValueError as exc:
            return bad(P.SIGNATURE_MALFORMED, f"the envelope is malformed (altered after signing?): {exc}")
    keyids = {k for _, k, _ in parsed}
    if len(keyids) != 1:
        return bad(P.SIGNATURE_MALFORMED, "the two envelopes name different key ids")
    keyid = keyids.pop()
    checked = False
    if key is not None:
        if keyid != key.keyid:
            probs.append(_problem(P.SIGNATURE_WRONG_KEY, f"signed by key id {keyid}, not by the --public-key given (key id {key.keyid}): "
                          "the wrong key, or not the signer's"))
        else:
            bad_sigs = []
            for n, (body, _, sig) in enumerate(parsed, 1):
                try:
                    key.key.verify(sig, pae(PAYLOAD_TYPE, body))
                except InvalidSignature:
                    bad_sigs.append(n)
            if bad_sigs:
                probs.append(_problem(P.SIGNATURE_BAD, f"the signature of envelope {', '.join(map(str, bad_sigs))} does not "
                              f"verify with key id {keyid}: the envelope was altered after it was signed"))
            else:
                checked = True
    stmts = []
    for n, (body, _, _) in enumerate(parsed, 1):
        try:
            stmts.append(_statement(body, n))
        except ValueError as exc:
            probs.append(_problem(P.SIGNATURE_MALFORMED, f"the envelope is malformed (altered after signing?): {exc}"))
            return Attestation(True, keyid, False, (), tuple(probs))
    if stmts[0]["subject"] != stmts[1]["subject"]:
        probs.append(_problem(P.SIGNATURE_MALFORMED, "the two statements name different subjects"))
    probs += [_problem(P.SIGNATURE_PAYLOAD, m) for m in subject_problems(stmts[0]["subject"], payload_sha256)]
    return Attestation(True, keyid, checked, tuple(stmts), tuple(probs))


def subject_problems(subject: list, payload_sha256: Mapping[str, str], limit: int = 20) -> list[str]:
    """Subjects against the payload files in the archive: every payload file a subject with its
    sha256, and nothing else (messages, at most ``limit``)."""
    named = {}
    for s in subject:
        named[str(s.get("name"))] = (s.get("digest") or {}).get("sha256")
    out = []
    for p in sorted(set(payload_sha256) | set(named)):
        if p not in named:
            out.append(f"the payload file {p} is not a subject of the signed statements: the payload was altered "
                       "after signing")
        elif p not in payload_sha256:
            out.append(f"the signed statements name {p}, which the payload does not hold: the payload was altered "
                       "after signing")
        elif named[p] != payload_sha256[p]:
            out.append(f"the signed statements give {p} sha256 {named[p]}, the payload file has {payload_sha256[p]}: "
                       "the payload was altered after signing")
        if len(out) >= limit:
            break
    return out


def disagreements(signed: Sequence[Mapping], expected: Sequence[Mapping], limit: int = 20) -> list[tuple[str, object, object]]:
    """Where the signed statements differ from the ones the verifier derives from the
    documents: ``(JSON path, expected, found)`` (paths prefixed ``envelope N``)."""
    out: list[tuple[str, object, object]] = []

    def walk(a, b, path):
        if len(out) >= limit:
            return
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b)):
                sub = f"{path}.{k}" if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(k)) else f"{path}[{json.dumps(k)}]"
                if k not in a:
                    out.append((sub, b[k], None))
                elif k not in b:
                    out.append((sub, None, a[k]))
                else:
                    walk(a[k], b[k], sub)
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b)):
                walk(x, y, f"{path}[{i}]")
        elif json.dumps(a, sort_keys=True) != json.dumps(b, sort_keys=True):
            # as JSON text, not as Python values: 132.0 is not 132, and false is not 0
            out.append((path, b, a))

    for n, (s, e) in enumerate(zip(signed, expected), 1):
        walk(s, e, f"envelope {n} $")
    return out
