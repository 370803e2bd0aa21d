"""Build the corpus of named bad bundles from one good bundle archive.

    python tests/corpus/make_corpus.py GOOD.tar OUTDIR

writes one ``<case>.tar`` per failure class into ``OUTDIR`` and ``OUTDIR/corpus.json``, which
lists for each case: file name, failure class, the exit code ``verify_bundle.py`` must return,
the verification tier expected to fail (DESIGN.md section 6) and a fragment of the message
the verifier must print. As a module: :func:`build_corpus` returns the :class:`Case` records.

The good archive is read in memory with ``tarfile`` (never extracted). Each bad archive
differs from it by one minimal mutation, so that exactly one defence of the verifier can
catch it. Where a case says "manifests recomputed", ``manifest-sha256.txt``,
``tagmanifest-sha256.txt`` and ``Payload-Oxum`` are rebuilt with :mod:`bundle.pack`, as a
forger would, so that the manifest tier passes and a later tier must object. Unmodified,
the rebuild reproduces the good archive byte for byte (checked by :func:`load_good`).
Everything is deterministic: building twice gives the same bytes.
"""
from __future__ import annotations

import hashlib
import io
import random
import sys
import tarfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

if __package__ in (None, ""):  # run as a script: make the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kbrepro.bundle import pack  # noqa: E402
from kbrepro.harness import jsonio  # noqa: E402

CORPUS_JSON = "corpus.json"
# every case build_corpus writes, in order (tests parametrize over these names)
CASE_NAMES = (
    "escape_dotdot", "escape_absolute", "symlink_escape", "hardlink_outside", "duplicate_member", "device_member",
    "not_a_tar", "truncated", "two_top_folders", "unknown_format_version",
    "payload_byte_flipped", "extra_file", "missing_file", "manifest_edited_to_match",
    "document_nan", "document_count_float", "document_missing_field", "schema_version_unknown",
    "cubin_swapped", "ftz_evidence_contradicts", "kernelbench_file_changed", "kernel_source_changed",
    "cubin_swapped_record_updated", "witness_forged",
    "claims_verdict_forged", "claims_spec_loosened",
)
ESCAPE_PAYLOAD = b'{"escaped": true}\n'
#: further case modules beside this file, one per failure class (issue 9's corpus). Each
#: defines ``NAMES`` (its case names, in build order) and ``build(g, kit)`` returning
#: ``[(Case, archive bytes), ...]`` in that order; ``kit`` is this module, so a case module
#: uses its helpers (Case, raw_tar, repack, recomputed, edit_json, ...) without importing it.
EXTRA_MODULES = ("cases_archive", "cases_parsers", "cases_trust", "cases_crosscheck", "cases_redteam",
                 "cases_derived")


def _load_extra_modules() -> list:
    import importlib.util

    here = Path(__file__).resolve().parent
    mods = []
    for m in EXTRA_MODULES:
        f = here / f"{m}.py"
        if not f.is_file():
            continue
        spec = importlib.util.spec_from_file_location(f"kbrepro_corpus_{m}", f)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mods.append(mod)
    return mods


_EXTRA = _load_extra_modules()
BASE_CASE_NAMES = CASE_NAMES
CASE_NAMES = BASE_CASE_NAMES + tuple(n for m in _EXTRA for n in m.NAMES)


@dataclass(frozen=True)
class Case:
    """One bad bundle.

    ``name``: case id (also the file stem); ``file``: archive file name in the corpus folder;
    ``failure_class``: archive, integrity, documents, provenance or claims; ``exit_code``:
    what ``verify_bundle.py --level static`` must return; ``tier``: the tier that must fail
    (the first and only failing tier); ``fragment``: text the verifier's output (tier
    problems, or the error line when the archive cannot be read at all) must contain;
    ``problem_file``: the file (relative to the bag root) a problem of the failing tier must
    name, or None; ``description``: the mutation, in words.
    """

    name: str
    file: str
    failure_class: str
    exit_code: int
    tier: str
    fragment: str
    problem_file: str | None
    description: str


@dataclass
class Good:
    """The good bundle in memory: top folder, files by path relative to it, header mtime."""

    top: str
    files: dict[str, bytes]
    mtime: int
    raw: bytes

    def info(self) -> list[tuple[str, str]]:
        """bag-info.txt fields in order, without Payload-Oxum (the packer recomputes it)."""
        out = []
        for line in self.files["bag-info.txt"].decode("utf-8").splitlines():
            k, v = line.split(": ", 1)
            if k != "Payload-Oxum":
                out.append((k, v))
        return out


def load_good(good: Path) -> Good:
    """Read the good archive in memory. Raises ValueError unless it is a plain tar of regular
    files and folders under one top folder that :func:`repack` reproduces byte for byte
    (otherwise "manifests recomputed" would change more than the intended bytes)."""
    raw = Path(good).read_bytes()
    files: dict[str, bytes] = {}
    tops, mtimes = set(), set()
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tf:
        for m in tf:
            tops.add(m.name.split("/")[0])
            mtimes.add(m.mtime)
            if m.isdir():
                continue
            if not m.isreg():
                raise ValueError(f"{good}: member {m.name} is neither a file nor a folder")
            files[m.name.split("/", 1)[1]] = tf.extractfile(m).read()
    if len(tops) != 1 or len(mtimes) != 1:
        raise ValueError(f"{good}: expected one top folder and one mtime, found {sorted(tops)}, {sorted(mtimes)}")
    g = Good(top=tops.pop(), files=files, mtime=mtimes.pop(), raw=raw)
    if repack(g, g.files) != raw:
        raise ValueError(f"{good}: repacking its own payload does not reproduce it; not a make_bundle.py archive")
    return g


def find_good_bundles(root: Path) -> list[Path]:
    """Candidate good bundles of a checkout: the published study's full-profile bundle
    ``root/examples/pointwise-fusion-ftz-full-*.tar`` (the corpus forges that study's records)."""
    ex = Path(root) / "examples"
    return sorted(ex.glob("pointwise-fusion-ftz-full-*.tar")) or sorted(ex.glob("pointwise-fusion-ftz-full.tar"))


# ------------------------------------------------------------------------------ writers


def recomputed(g: Good, files: dict[str, bytes], info: list[tuple[str, str]] | None = None) -> dict[str, bytes]:
    """``files`` with the tag files rebuilt from its payload (what a forger would do)."""
    payload = {p[len("data/"):]: b for p, b in files.items() if p.startswith("data/")}
    bag = pack.make_bag(g.top, payload, g.info() if info is None else info)
    return bag.members()


def repack(g: Good, files: dict[str, bytes]) -> bytes:
    """Tag files recomputed from the payload, then :func:`bundle.pack.tar_bytes`."""
    payload = {p[len("data/"):]: b for p, b in files.items() if p.startswith("data/")}
    rend = f"{pack.RENDERINGS}/"
    renderings = {p[len(rend):]: b for p, b in files.items() if p.startswith(rend)}
    bag = pack.make_bag(g.top, payload, g.info(), renderings=renderings)
    if pack.SUMMARY in files:
        bag = with_summary(bag)
    return pack.tar_bytes(bag, mtime=g.mtime)


def with_summary(bag):
    """``bag`` with the five-line summary.txt a careful forger writes for its (edited) records
    and their new digest; without one where the records no longer parse."""
    import dataclasses
    import json

    from kbrepro.bundle import report

    try:
        meta = json.loads(bag.payload["bundle.json"])
        docs = {s.split("/", 1)[1]: json.loads(bag.payload[rel]) for rel, s in meta["documents"].items()}
        claims = json.loads(bag.payload["claims.json"])
        text = report.post_summary(meta, docs, claims, bag.digest(), own_claim_ids(bag.payload)).encode()
    except (KeyError, ValueError, TypeError, AttributeError, IndexError, RecursionError):
        return bag
    return dataclasses.replace(bag, summary=text)


def own_claim_ids(payload: dict):
    """:func:`kbrepro.bundle.claims.own_ids` of a bag's payload (paths under data/)."""
    import json

    from kbrepro.bundle import claims as claims_mod

    try:
        spec = payload[json.loads(payload["bundle.json"])["claims"]["file"]]
    except (KeyError, ValueError, TypeError):
        return None
    return claims_mod.own_ids(spec, payload.get("inputs/study/claims.yaml"))


def _header(name: str, *, size: int = 0, kind: bytes = tarfile.REGTYPE, mtime: int = 0,
            linkname: str = "") -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type = kind
    ti.size = size if kind == tarfile.REGTYPE else 0
    ti.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
    ti.mtime = mtime
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    ti.linkname = linkname
    return ti


def raw_tar(top: str, files: dict[str, bytes], mtime: int,
            extra: list[tuple[tarfile.TarInfo, bytes | None]] = ()) -> bytes:
    """A tar of ``files`` (relative to ``top``) exactly as given (no tag file is touched),
    laid out like :func:`bundle.pack.tar_bytes` (sorted, folders included), followed by the
    ``extra`` members verbatim (headers written as given: unsafe names, links, devices)."""
    paths = {f"{top}/{p}": b for p, b in files.items()}
    dirs = {top}
    for p in paths:
        parts = p.split("/")
        dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
    entries = sorted([(d, None) for d in dirs] + list(paths.items()), key=lambda e: e[0])
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for path, data in entries:
            if data is None:
                tf.addfile(_header(path + "/", kind=tarfile.DIRTYPE, mtime=mtime))
            else:
                tf.addfile(_header(path, size=len(data), mtime=mtime), io.BytesIO(data))
        for ti, data in extra:
            tf.addfile(ti, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


# ----------------------------------------------------------------------------- mutations


def _replace_once(data: bytes, old: bytes, new: bytes, where: str) -> bytes:
    i = data.find(old)
    if i < 0:
        raise ValueError(f"{where}: {old!r} not found; the good bundle's layout changed, adapt make_corpus.py")
    return data[:i] + new + data[i + len(old):]


def flip_text_byte(data: bytes, anchor: bytes, where: str) -> bytes:
    """Flip the lowest bit of the byte right after the first ``anchor`` (a letter inside a
    free-text string, so the file stays valid JSON / text and nothing downstream changes)."""
    i = data.find(anchor)
    if i < 0:
        raise ValueError(f"{where}: {anchor!r} not found; adapt make_corpus.py")
    j = i + len(anchor)
    if not chr(data[j]).isalpha():
        raise ValueError(f"{where}: byte after {anchor!r} is not a letter")
    return data[:j] + bytes([data[j] ^ 0x01]) + data[j + 1:]


def edit_json(files: dict[str, bytes], rel: str, fn: Callable[[dict], None]) -> None:
    """Parse ``files[rel]``, apply ``fn`` in place, write it back canonically (the format the
    product writes, so only the edited value changes)."""
    doc = jsonio.loads_strict(files[rel], rel)
    if jsonio.dumps(doc).encode("ascii") != files[rel]:
        raise ValueError(f"{rel} is not in canonical form; adapt make_corpus.py")
    fn(doc)
    files[rel] = jsonio.dumps(doc).encode("ascii")


def trust_module():
    """tests/corpus/cases_trust.py as loaded here (its reforge and report helpers)."""
    return next(mod for mod in _EXTRA if mod.__name__.endswith("cases_trust"))


def _variant(doc: dict, name: str) -> dict:
    for v in doc["variants"]:
        if v["name"] == name:
            return v
    raise ValueError(f"compile.json has no variant {name!r}")


CORRECTNESS = "data/results/correctness.json"
COMPILE = "data/results/compile.json"
WITNESS = "data/results/witness.json"
CLAIMS = "data/claims.json"
KB_TASK = "data/inputs/kernelbench/KernelBench/level2/53_Gemm_Scaling_Hardtanh_GELU.py"
KERNEL_SRC = "data/inputs/study/fused_tails.cu"
# a letter inside a free-text string of correctness.json that no check or claim reads
FREE_TEXT_ANCHOR = b'"domain": "'


def member_offsets(raw: bytes) -> list[tuple[str, int, int, int]]:
    """(name, header offset, data offset, size) of every member of a tar held in ``raw``."""
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tf:
        return [(m.name, m.offset, m.offset_data, m.size) for m in tf]


def _cut_inside_data(g: Good) -> int:
    """About half the archive's length, moved if needed into the middle of a member's data:
    a cut exactly at a header boundary is a different failure (see the tests)."""
    half = len(g.raw) // 2
    regions = [(d, d + n) for _, _, d, n in member_offsets(g.raw) if n > 1]
    if any(a < half < b for a, b in regions):
        return half
    a, b = min(regions, key=lambda r: min(abs(r[0] - half), abs(r[1] - half)))
    return (a + b) // 2


def _archive_cases(g: Good) -> list[tuple[Case, bytes]]:
    top, f, t = g.top, g.files, g.mtime
    esc = ESCAPE_PAYLOAD
    out = []

    def case(name, fragment, problem_file, description):
        return Case(name, f"{name}.tar", "archive", 3, "archive", fragment, problem_file, description)

    out.append((case("escape_dotdot", "unsafe member name", "../escape.json",
                     "an extra regular member named ../escape.json"),
                raw_tar(top, f, t, [(_header("../escape.json", size=len(esc), mtime=t), esc)])))
    out.append((case("escape_absolute", "absolute path", "/abs/escape.json",
                     "an extra regular member named /abs/escape.json"),
                raw_tar(top, f, t, [(_header("/abs/escape.json", size=len(esc), mtime=t), esc)])))
    out.append((case("symlink_escape", "symbolic link -> .. is not allowed", f"{top}/lnk",
                     "a symlink member <top>/lnk -> .. followed by a regular member <top>/lnk/escape.json"),
                raw_tar(top, f, t, [(_header(f"{top}/lnk", kind=tarfile.SYMTYPE, mtime=t, linkname=".."), None),
                                    (_header(f"{top}/lnk/escape.json", size=len(esc), mtime=t), esc)])))
    out.append((case("hardlink_outside", "hard link -> ../../outside is not allowed", f"{top}/data/outside",
                     "a hard link member <top>/data/outside pointing to ../../outside"),
                raw_tar(top, f, t, [(_header(f"{top}/data/outside", kind=tarfile.LNKTYPE, mtime=t,
                                             linkname="../../outside"), None)])))
    forged = _replace_once(f["data/results/run.json"], b'"status": "complete"', b'"status": "completE"', "run.json")
    out.append((case("duplicate_member", "duplicate member", f"{top}/data/results/run.json",
                     "a second member data/results/run.json (other bytes) after the first"),
                raw_tar(top, f, t, [(_header(f"{top}/data/results/run.json", size=len(forged), mtime=t), forged)])))
    dev = _header(f"{top}/data/null", kind=tarfile.CHRTYPE, mtime=t)
    dev.devmajor, dev.devminor = 1, 3
    out.append((case("device_member", "device is not allowed", f"{top}/data/null",
                     "a character device member <top>/data/null (1, 3)"),
                raw_tar(top, f, t, [(dev, None)])))
    out.append((case("not_a_tar", "is not a tar archive", None, "64 KiB of (seeded) random bytes"),
                random.Random(20261201).randbytes(65536)))
    out.append((case("truncated", "corrupt or truncated", None,
                     "the good archive cut in half (inside a member's data)"), g.raw[: _cut_inside_data(g)]))
    other = "second-top"
    out.append((case("two_top_folders", "outside the single top folder", f"{other}/bagit.txt",
                     "a second top folder holding a copy of bagit.txt"),
                raw_tar(top, f, t, [(_header(f"{other}/", kind=tarfile.DIRTYPE, mtime=t), None),
                                    (_header(f"{other}/bagit.txt", size=len(f["bagit.txt"]), mtime=t),
                                     f["bagit.txt"])])))
    info = [(k, "99" if k == "Bundle-Format-Version" else v) for k, v in g.info()]
    out.append((case("unknown_format_version", "unknown bundle format version", "bag-info.txt",
                     "bag-info.txt says Bundle-Format-Version: 99; manifests recomputed"),
                raw_tar(top, recomputed(g, f, info), t)))
    return out


def _integrity_cases(g: Good) -> list[tuple[Case, bytes]]:
    top, t = g.top, g.mtime
    out = []

    def case(name, fragment, problem_file, description):
        return Case(name, f"{name}.tar", "integrity", 1, "manifest", fragment, problem_file, description)

    f = dict(g.files)
    f[CORRECTNESS] = flip_text_byte(f[CORRECTNESS], FREE_TEXT_ANCHOR, CORRECTNESS)
    out.append((case("payload_byte_flipped", "sha256 differs from manifest-sha256.txt", CORRECTNESS,
                     "one byte of data/results/correctness.json flipped (a letter in a free-text field); "
                     "manifests NOT recomputed"), raw_tar(top, f, t)))
    f = dict(g.files)
    f["data/extra.txt"] = b"not listed in any manifest\n"
    out.append((case("extra_file", "not listed in manifest-sha256.txt", "data/extra.txt",
                     "an unlisted data/extra.txt"), raw_tar(top, f, t)))
    f = dict(g.files)
    del f["data/plots/bit_identity.json"]
    out.append((case("missing_file", "listed in manifest-sha256.txt but missing", "data/plots/bit_identity.json",
                     "the listed payload data/plots/bit_identity.json removed"),
                raw_tar(top, f, t)))
    f = dict(g.files)
    f[CORRECTNESS] = flip_text_byte(f[CORRECTNESS], FREE_TEXT_ANCHOR, CORRECTNESS)
    old = hashlib.sha256(g.files[CORRECTNESS]).hexdigest().encode()
    new = hashlib.sha256(f[CORRECTNESS]).hexdigest().encode()
    f["manifest-sha256.txt"] = _replace_once(f["manifest-sha256.txt"], old + b"  " + CORRECTNESS.encode(),
                                             new + b"  " + CORRECTNESS.encode(), "manifest-sha256.txt")
    out.append((case("manifest_edited_to_match", "sha256 differs from tagmanifest-sha256.txt",
                     "manifest-sha256.txt",
                     "a byte of correctness.json flipped and its manifest-sha256.txt line updated; "
                     "tagmanifest-sha256.txt NOT updated"), raw_tar(top, f, t)))
    return out


def _recomputed_case(g: Good, case: Case, mutate: Callable[[dict[str, bytes]], None]) -> tuple[Case, bytes]:
    f = dict(g.files)
    mutate(f)
    data = repack(g, f)
    if data == g.raw:
        raise ValueError(f"{case.name}: the mutation changed nothing")
    return case, data


def _document_cases(g: Good) -> list[tuple[Case, bytes]]:
    def case(name, code, fragment, problem_file, description):
        return Case(name, f"{name}.tar", "documents", code, "documents", fragment, problem_file, description)

    def nan(f):
        f[CORRECTNESS] = _replace_once(f[CORRECTNESS], b'"max_abs_error": 0.0,', b'"max_abs_error": NaN,', CORRECTNESS)

    def count_float(f):
        f[CORRECTNESS] = _replace_once(f[CORRECTNESS], b'"element_count": 16777216,',
                                       b'"element_count": 16777216.0,', CORRECTNESS)

    def missing(f):
        edit_json(f, WITNESS, lambda d: d.pop("task"))

    def version(f):
        edit_json(f, WITNESS, lambda d: d.update(schema_version=99))

    return [
        _recomputed_case(g, case("document_nan", 1, "non-standard JSON token 'NaN'", CORRECTNESS,
                                 "a NaN token in place of the first max_abs_error of correctness.json; "
                                 "manifests recomputed"), nan),
        _recomputed_case(g, case("document_count_float", 1, "16777216.0 is not valid", CORRECTNESS,
                                 "the first element_count 16777216 of correctness.json written as 16777216.0; "
                                 "manifests recomputed"), count_float),
        _recomputed_case(g, case("document_missing_field", 1, "'task' is a required property", WITNESS,
                                 "the required field task removed from witness.json; manifests recomputed"), missing),
        _recomputed_case(g, case("schema_version_unknown", 3, "unsupported version 99", WITNESS,
                                 "witness.json schema_version set to 99; manifests recomputed"), version),
    ]


def _provenance_cases(g: Good) -> list[tuple[Case, bytes]]:
    def case(name, fragment, problem_file, description):
        return Case(name, f"{name}.tar", "provenance", 1, "provenance", fragment, problem_file, description)

    comp = jsonio.loads_strict(g.files[COMPILE], COMPILE)
    victim, donor = _variant(comp, "nvrtc_ftz_false")["cubin"], _variant(comp, "nvrtc_ftz_true")["cubin"]

    def cubin(f):
        f[f"data/{victim['file']}"] = f[f"data/{donor['file']}"]

    def ftz(f):
        def compile_edit(d):
            w = _variant(d, "nvrtc_ftz_true")["ftz_evidence"]["witness"]
            w["flushes"], w["bit_identical_to_reference"] = False, True

        def witness_edit(d):
            d["outputs"]["nvrtc_ftz_true"] = [dict(o) for o in d["outputs"]["reference"]]
            d["verdicts"]["nvrtc_ftz_true"] = {"bit_identical_to_reference": True, "flushes": False}

        edit_json(f, COMPILE, compile_edit)
        edit_json(f, WITNESS, witness_edit)

    def cubin_and_record(f):
        f[f"data/{victim['file']}"] = f[f"data/{donor['file']}"]

        def edit(d):
            _variant(d, "nvrtc_ftz_false")["cubin"].update(sha256=donor["sha256"], bytes=donor["bytes"])

        edit_json(f, COMPILE, edit)

    def witness_only(f):
        def edit(d):
            d["outputs"]["nvrtc_ftz_true"] = [dict(o) for o in d["outputs"]["reference"]]
            d["verdicts"]["nvrtc_ftz_true"] = {"bit_identical_to_reference": True, "flushes": False}

        edit_json(f, WITNESS, edit)

    def kb(f):
        f[KB_TASK] = flip_text_byte(f[KB_TASK], b'"""\n    ', KB_TASK)

    def src(f):
        f[KERNEL_SRC] = flip_text_byte(f[KERNEL_SRC], b"// ", KERNEL_SRC)

    def reforged(fn):
        # claims.json and REPORT.md re-derived with the product's own code (tests/corpus/cases_trust.py),
        # as a careful forger would, so that only the provenance tier can object
        def m(f):
            fn(f)
            trust_module().reforge(f)
        return m

    ftz, cubin_and_record, witness_only = reforged(ftz), reforged(cubin_and_record), reforged(witness_only)
    return [
        _recomputed_case(g, case("cubin_swapped", "cubin does not match its recorded sha256", f"data/{victim['file']}",
                                 f"{victim['file']} replaced by the bytes of {donor['file']}; compile.json unchanged; "
                                 "manifests recomputed"), cubin),
        _recomputed_case(g, case("ftz_evidence_contradicts", "FTZ evidence contradicts the variant", COMPILE,
                                 "compile.json: nvrtc_ftz_true's witness says flushes=false (PTX and SASS still say "
                                 "FTZ; 'agrees' left true); witness.json bits and verdicts made to match; "
                                 "manifests recomputed"), ftz),
        _recomputed_case(g, case("kernelbench_file_changed", "KernelBench file differs from the verifier's pin",
                                 KB_TASK,
                                 "one byte of a bundled KernelBench task file flipped (docstring); "
                                 "manifests recomputed"), kb),
        # the kernel source is a file of the study folder: a changed byte is seen first against the
        # per-file hashes bundle.json and run.json record for that folder (tier documents)
        _recomputed_case(g, Case("kernel_source_changed", "kernel_source_changed.tar", "provenance", 1, "documents",
                                 "the bundled study files differ from the ones bundle.json records: fused_tails.cu",
                                 "data/bundle.json",
                                 "one byte of the bundled kernel source (data/inputs/study/fused_tails.cu) flipped "
                                 "(comment); compile.json and the study's file hashes unchanged; manifests recomputed"),
                         src),
        _recomputed_case(g, case("cubin_swapped_record_updated", "one cubin is recorded for variants that promise "
                                 "different FTZ modes", COMPILE,
                                 f"{victim['file']} replaced by {donor['file']} AND its compile record's sha256 and size "
                                 "updated to match; manifests recomputed"), cubin_and_record),
        _recomputed_case(g, case("witness_forged", "the compile record's witness differs from witness.json", COMPILE,
                                 "witness.json alone edited: nvrtc_ftz_true's outputs set to the reference bits and its "
                                 "verdict to flushes=false; compile.json unchanged; manifests recomputed"), witness_only),
    ]


def _claims_cases(g: Good) -> list[tuple[Case, bytes]]:
    claims = jsonio.loads_strict(g.files[CLAIMS], CLAIMS)
    failing = [c["id"] for c in claims["claims"] if c["verdict"] == "fails"]
    if not failing:
        raise ValueError("the good bundle has no claim whose verdict is 'fails'; cannot forge one")
    cid = failing[0]

    def forge(f):
        def edit(d):
            for c in d["claims"]:
                if c["id"] == cid:
                    c["verdict"] = "holds"
            d["summary"]["fails"] -= 1
            d["summary"]["holds"] += 1

        edit_json(f, CLAIMS, edit)

    spec_rel = "data/" + jsonio.loads_strict(g.files["data/bundle.json"], "bundle.json")["claims"]["file"]

    def loosen(f):
        import hashlib
        import re as _re

        text = f[spec_rel].decode()
        loose, n = _re.subn(r"range: \[2\.8, 5\.5\]", "range: [1.0, 9.9]", text)
        if n != 1:
            raise ValueError("the claims spec has no C10 range to loosen; adapt make_corpus.py")
        f[spec_rel] = loose.encode()
        digest = hashlib.sha256(f[spec_rel]).hexdigest()
        edit_json(f, "data/bundle.json", lambda d: d["claims"].update(sha256=digest))

        def edit(d):
            d["spec"]["sha256"] = digest
            for c in d["claims"]:
                if c["id"] == "C10" and c["verdict"] != "holds":
                    d["summary"][c["verdict"]] -= 1
                    d["summary"]["holds"] += 1
                    c["verdict"] = "holds"
                    for chk in c["checks"]:
                        chk["range"] = [1.0, 9.9]
                        chk["verdict"] = "holds"
                        for it in chk.get("items", []):
                            it["verdict"] = "holds"

        edit_json(f, CLAIMS, edit)

    return [_recomputed_case(g, Case("claims_verdict_forged", "claims_verdict_forged.tar", "claims", 1, "claims",
                                     f"claim {cid}: recorded verdict 'holds', the data give 'fails'", CLAIMS,
                                     f"claims.json: claim {cid}, whose data say 'fails', recorded as 'holds' "
                                     "(summary adjusted); manifests recomputed"), forge),
            _recomputed_case(g, Case("claims_spec_loosened", "claims_spec_loosened.tar", "claims", 1, "claims",
                                     "claim C10 is defined differently from this verifier's spec", spec_rel,
                                     "the bundled claims spec's C10 range loosened to [1.0, 9.9], bundle.json's spec "
                                     "sha256 and claims.json re-forged to match (C10 'holds'); manifests recomputed"),
                             loosen)]


def build_corpus(good: Path, outdir: Path) -> list[Case]:
    """Write one bad archive per failure class into ``outdir`` (created if needed) and
    ``outdir/corpus.json``; return the cases. Raises ValueError if the good archive is not
    shaped as this builder expects (the message says which anchor is missing)."""
    g = load_good(Path(good))
    built = _archive_cases(g) + _integrity_cases(g) + _document_cases(g) + _provenance_cases(g) + _claims_cases(g)
    kit = sys.modules[__name__]
    for mod in _EXTRA:
        got = mod.build(g, kit)
        if tuple(c.name for c, _ in got) != tuple(mod.NAMES):
            raise ValueError(f"{mod.__name__}: built {[c.name for c, _ in got]}, NAMES says {list(mod.NAMES)}")
        built += got
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    names = tuple(c.name for c, _ in built)
    if names != CASE_NAMES:
        raise ValueError(f"built cases {names} differ from CASE_NAMES")
    for c, data in built:
        jsonio.atomic_write_bytes(outdir / c.file, data)
    doc = {"good": {"file": Path(good).name, "sha256": hashlib.sha256(g.raw).hexdigest(),
                    "digest": hashlib.sha256(g.files["tagmanifest-sha256.txt"]).hexdigest()},
           "cases": [asdict(c) for c, _ in built]}
    jsonio.write_json(outdir / CORPUS_JSON, doc)
    return [c for c, _ in built]


def load_corpus(outdir: Path) -> list[Case]:
    """The cases listed in ``outdir/corpus.json``."""
    doc = jsonio.read_json(Path(outdir) / CORPUS_JSON)
    return [Case(**c) for c in doc["cases"]]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] in ("-h", "--help"):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        print("usage: python tests/corpus/make_corpus.py GOOD.tar OUTDIR", file=sys.stderr)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    try:
        cases = build_corpus(Path(argv[0]), Path(argv[1]))
    except (OSError, ValueError, tarfile.TarError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for c in cases:
        print(f"{c.file:<34} {c.failure_class:<10} exit {c.exit_code}  tier {c.tier:<10} {c.fragment}")
    print(f"{len(cases)} cases and {CORPUS_JSON} written to {argv[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
