"""Tiers 1 and 2, the same for every bundle kind. Tier 1 (archive): member headers read as a
stream, only regular files and folders with safe relative names under one top folder, no
duplicates, size and count limits, known BagIt and bundle format versions. Tier 2 (manifest):
payload completeness, every payload hash, the tag manifest over the tag files, Payload-Oxum,
the bundle digest, and the attestations (:mod:`bundle.attest`).
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

from kbrepro.bundle import archive as arc
from kbrepro.bundle import attest, kinds, pack
from kbrepro.bundle import plots as plots_mod
from kbrepro.bundle.verify.core import Tier, bag_info, has_crate


_MANIFEST_LINE = re.compile(r"^([0-9a-f]{64})  (\S.*)$")


def tier_archive(path: Path, t: Tier) -> arc.ArchiveContents:
    contents = arc.read_archive(path)
    for p in contents.problems:
        t.add(p)
    if t.status == "FAIL":
        return contents
    bagit = contents.files.get("bagit.txt")
    if bagit is None:
        t.fail("bagit.txt", "missing: not a BagIt bag")
    elif bagit.decode("utf-8", "replace").splitlines()[:1] != ["BagIt-Version: 1.0"]:
        t.fail("bagit.txt", "unknown BagIt version", expected="BagIt-Version: 1.0",
               found=bagit.decode("utf-8", "replace").splitlines()[:1])
    info = bag_info(contents.files.get("bag-info.txt", b""))
    formats = {f: k.versions for f, k in kinds.BY_FORMAT.items()}
    fmt = info.get("Bundle-Format")
    if fmt not in formats:
        t.fail("bag-info.txt", "not a kbrepro bundle", expected=pack.FORMAT_NAME, found=fmt)
    elif info.get("Bundle-Format-Version") not in [str(v) for v in formats[fmt]]:
        t.fail("bag-info.txt", f"unknown bundle format version of {fmt}; this verifier reads version"
               f"{'s' if len(formats[fmt]) > 1 else ''} {', '.join(map(str, formats[fmt]))}",
               expected=", ".join(map(str, formats[fmt])), found=info.get("Bundle-Format-Version"))
    t.details.update(members=contents.members, bytes=contents.total_bytes, top=contents.top,
                     compressed=contents.compressed)
    return contents


def _parse_manifest(raw: bytes, file: str, t: Tier) -> dict[str, str]:
    out = {}
    for i, line in enumerate(raw.decode("utf-8", "replace").splitlines(), 1):
        m = _MANIFEST_LINE.match(line)
        if not m:
            t.fail(file, f"line {i} is not '<sha256>  <path>'", found=line[:120])
            continue
        if m.group(2) in out:
            t.fail(file, f"line {i}: {m.group(2)} listed twice")
        out[m.group(2)] = m.group(1)
    return out


def _rendering_name_ok(path: str) -> bool:
    """A file the renderings folder may hold: renderings.json or a PNG of a figure name."""
    name = path[len(f"{pack.RENDERINGS}/"):]
    return name == "renderings.json" or (name.endswith(".png") and bool(plots_mod.NAME_RE.match(name[:-4])))


def tier_manifest(c: arc.ArchiveContents, t: Tier) -> str | None:
    files = c.files
    for tag in ("manifest-sha256.txt", "tagmanifest-sha256.txt", "bag-info.txt"):
        if tag not in files:
            t.fail(tag, "missing tag file")
    if t.status == "FAIL":
        return None
    manifest = _parse_manifest(files["manifest-sha256.txt"], "manifest-sha256.txt", t)
    payload = {p for p in files if p.startswith("data/")}
    for p in sorted(set(manifest) - payload):
        t.fail(p, "listed in manifest-sha256.txt but missing from the archive")
    for p in sorted(payload - set(manifest)):
        t.fail(p, "in the archive but not listed in manifest-sha256.txt (extra file)")
    for p in sorted(set(manifest) & payload):
        if c.sha256[p] != manifest[p]:
            t.fail(p, "sha256 differs from manifest-sha256.txt", expected=manifest[p], found=c.sha256[p])
    tagm = _parse_manifest(files["tagmanifest-sha256.txt"], "tagmanifest-sha256.txt", t)
    rend = f"{pack.RENDERINGS}/"
    tags = {p for p in files if not p.startswith(("data/", rend)) and p not in ("tagmanifest-sha256.txt", pack.SUMMARY)}
    for p in sorted(tags - set(tagm)):
        t.fail(p, "tag file not covered by tagmanifest-sha256.txt")
    for p in sorted(set(tagm) - set(files)):
        t.fail(p, "listed in tagmanifest-sha256.txt but missing")
    for p in sorted(set(tagm) & set(files)):
        if c.sha256[p] != tagm[p]:
            t.fail(p, "sha256 differs from tagmanifest-sha256.txt (a manifest was edited)", expected=tagm[p],
                   found=c.sha256[p])
    oxum = bag_info(files["bag-info.txt"]).get("Payload-Oxum")
    actual = f"{sum(len(files[p]) for p in payload)}.{len(payload)}"
    if oxum != actual:
        t.fail("bag-info.txt", "Payload-Oxum does not match the payload", expected=actual, found=oxum)
    # exactly the bytes the packer writes (sorted lines, two spaces, LF only), so that the same
    # payload cannot carry two digests and BagIt tools read what the verifier reads
    want = "".join(f"{c.sha256[p]}  {p}\n" for p in sorted(payload)).encode("utf-8")
    if t.status == "PASS" and files["manifest-sha256.txt"] != want:
        t.fail("manifest-sha256.txt", "not in the packer's exact form (sorted, '<sha256>  <path>', LF line ends)")
    for p in sorted(p for p in files if p.startswith(rend)):
        if not _rendering_name_ok(p) or p in tagm:
            t.fail(p, "the renderings folder holds only <figure>.png and renderings.json, listed in no manifest")
    if pack.SUMMARY in tagm:
        t.fail(pack.SUMMARY, "summary.txt names the digest, so no manifest may list it")
    signable = has_crate(bag_info(files["bag-info.txt"]))
    known_tags = ("bagit.txt", "bag-info.txt", "manifest-sha256.txt", "tagmanifest-sha256.txt", pack.SUMMARY) + \
        ((pack.ATTESTATIONS,) if signable else ())
    extra_tags = sorted(p for p in files if not p.startswith(("data/", rend)) and p not in known_tags)
    for p in extra_tags:
        t.fail(p, "a tag file the packer does not write" + ("" if p != pack.ATTESTATIONS else
                                                              " (bundles of this format are never signed)"))
    want_tags = "".join(f"{c.sha256[p]}  {p}\n" for p in sorted(("bag-info.txt", "bagit.txt", "manifest-sha256.txt",
                                                                  pack.ATTESTATIONS)) if p in files).encode("utf-8")
    if t.status == "PASS" and files["tagmanifest-sha256.txt"] != want_tags:
        t.fail("tagmanifest-sha256.txt", "not in the packer's exact form")
    if files.get("bagit.txt") != pack.BAGIT_TXT:
        t.fail("bagit.txt", "not the packer's bagit.txt")
    info_raw = files["bag-info.txt"]
    keys = [line.split(":", 1)[0] for line in info_raw.decode("utf-8", "replace").split("\n") if line]
    if b"\r" in info_raw or not info_raw.endswith(b"\n") or keys != list(BAG_INFO_KEYS):
        t.fail("bag-info.txt", "not in the packer's exact form (its fields, once each, in order, LF line ends)",
               expected=list(BAG_INFO_KEYS), found=keys[:12])
    else:  # and byte for byte as the packer writes the values it holds ("Key: value\n")
        parsed = bag_info(info_raw)
        if "".join(f"{k}: {parsed.get(k, '')}\n" for k in BAG_INFO_KEYS).encode("utf-8") != info_raw:
            t.fail("bag-info.txt", "not in the packer's exact form (one space after each colon, no other spaces "
                   "around a value, UTF-8)")
    agent = bag_info(info_raw).get("Bag-Software-Agent")
    if agent is not None and not re.fullmatch(r"kbrepro ([0-9][0-9A-Za-z.+-]{0,40}|unknown)", agent):
        t.fail("bag-info.txt", "Bag-Software-Agent is not the packer's 'kbrepro VERSION'", found=agent)
    digest = hashlib.sha256(files["tagmanifest-sha256.txt"]).hexdigest()
    t.details.update(payload_files=len(payload), digest=digest)
    return digest


def tier_attestation(c: arc.ArchiveContents, t: Tier, public_key):
    """Tier 2, after the manifests: a signed bundle's attestations (:mod:`bundle.attest`):
    the envelopes in the packer's exact form, their signature with ``public_key`` (if given),
    their statements against the in-toto and SLSA field definitions, their subjects against
    the payload bytes in the archive (not against the manifest: an edit re-hashed into the
    manifests is still caught). Returns the :class:`~bundle.attest.Attestation`."""
    raw = c.files.get(pack.ATTESTATIONS) if has_crate(bag_info(c.files.get("bag-info.txt", b""))) else None
    att = attest.read(raw, {p: c.sha256[p] for p in c.files if p.startswith("data/")}, public_key)
    for p in att.problems:
        t.add(p)
    t.details["signature"] = att.line()
    return att


#: the fields the packers write into bag-info.txt, in order (pack.bag_info, then pack.Bag's Payload-Oxum)
BAG_INFO_KEYS = (*pack.BAG_INFO_KEYS, "Payload-Oxum")
