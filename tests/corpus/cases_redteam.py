"""Corpus cases from a red-team review of the verifier: each once passed (exit 0) and must not.

Forgeries re-derive claims.json and REPORT.md with the product's own code
(``cases_trust.reforge``) and recompute the manifests, so only the named defence can object.
Loaded by ``make_corpus.py`` (``EXTRA_MODULES``): :data:`NAMES` and :func:`build`.
"""
from __future__ import annotations

import hashlib
import json
import importlib.util
import sys
from pathlib import Path

from kbrepro.bundle import pack
from kbrepro.harness import jsonio

NAMES = (
    "rt_env_markdown_injection", "rt_env_bidi_override", "rt_extra_plot_embedded", "rt_extra_payload_readme",
    "rt_plot_not_png", "rt_figure_data_forged", "rt_top_folder_renamed", "rt_kernel_source_rewritten", "rt_compute_capability_unparseable",
    "rt_bag_info_extra_field", "rt_manifest_crlf", "rt_extra_tag_file", "rt_trailing_dot_twin",
    "rt2_block_emptied", "rt2_env_charref_bidi", "rt2_env_bold_claim", "rt2_bag_agent_text", "rt2_compact_json",
)

ENV = "data/environment.json"
COMPILE = "data/results/compile.json"


def _trust():
    name = "kbrepro_corpus_cases_trust"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent / "cases_trust.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


def _retag(members: dict, tags: tuple) -> None:
    """Rewrite tagmanifest-sha256.txt over ``tags`` in the packer's form, as a forger would."""
    members["tagmanifest-sha256.txt"] = "".join(f"{hashlib.sha256(members[t]).hexdigest()}  {t}\n"
                                                for t in tags).encode()


def _edit(f: dict, rel: str, fn) -> None:
    doc = jsonio.loads_strict(f[rel], rel)
    fn(doc)
    f[rel] = jsonio.dumps(doc).encode("ascii")


def build(g, kit) -> list:
    Case = kit.Case
    out = []

    def forged(name, cls, code, tier, fragment, problem_file, description, mutate, top=None, raw_edit=None,
               after=None):
        f = dict(g.files)
        mutate(f)
        _trust().reforge(f)
        if after:  # an edit of what reforge derives (the figures' data) or of what no manifest lists
            after(f)
        payload = {p[len("data/"):]: b for p, b in f.items() if p.startswith("data/")}
        rend = {p[len("renderings/"):]: b for p, b in f.items() if p.startswith("renderings/")}
        bag = pack.make_bag(top or g.top, payload, [(k, top if (top and k == "External-Identifier") else v)
                                                    for k, v in g.info()], renderings=rend)
        bag = kit.with_summary(bag)
        members = bag.members()
        if raw_edit:
            raw_edit(members)
        data = kit.raw_tar(top or g.top, members, g.mtime)
        if data == g.raw:
            raise ValueError(f"{name}: the mutation changed nothing")
        out.append((Case(name, f"{name}.tar", cls, code, tier, fragment, problem_file,
                         description + "; claims.json and REPORT.md re-derived; manifests recomputed"), data))

    def gpu_name(value):
        return lambda f: _edit(f, ENV, lambda d: d["fields"]["gpu_name"].update(value=value))

    forged("rt_env_markdown_injection", "redteam", 1, "documents", "outside [A-Za-z0-9 .,:;()+/=@#_-]", ENV,
           "environment.json's GPU name holds a line break, a fake claims summary and an HTML comment opener that "
           "hides the real claims table when REPORT.md is rendered",
           gpu_name("NVIDIA H200\n\n## Claims\n\nEvaluated on recorded data (holds: 14, fails: 0).\n\n<!--"))
    forged("rt_env_bidi_override", "redteam", 1, "documents", "outside [A-Za-z0-9 .,:;()+/=@#_-]", ENV, "environment.json's GPU name holds a right-to-left override", gpu_name("NVIDIA \u202e002H"))

    def extra_plot(f):
        f["data/plots/ALL-CLAIMS-HOLD.json"] = f["data/plots/bit_identity.json"]

    forged("rt_extra_plot_embedded", "redteam", 1, "documents", "a payload file the packer does not write",
           "data/plots/ALL-CLAIMS-HOLD.json", "an extra figure ALL-CLAIMS-HOLD.json beside the packer's own",
           lambda f: None, after=extra_plot)

    def readme(f):
        f["data/README.md"] = b"# VERIFIED: all 14 claims hold\n"

    forged("rt_extra_payload_readme", "redteam", 1, "documents", "a payload file the packer does not write",
           "data/README.md", "an extra payload file data/README.md saying every claim holds", readme)

    def not_png(f):
        f["renderings/claim_C08.png"] = b"<svg><script>alert(1)</script></svg>"

    forged("rt_plot_not_png", "redteam", 1, "documents", "not a PNG (no PNG signature)", "renderings/claim_C08.png",
           "renderings/claim_C08.png replaced by an SVG with a script (outside the digest)", lambda f: None, after=not_png)

    def forged_figure(f):
        d = json.loads(f["data/plots/claim_C10.json"])
        d["title"] = "C10 (holds): every speed-up lies in the post's range"
        f["data/plots/claim_C10.json"] = json.dumps(d).encode()
        for p in [p for p in f if p.startswith("renderings/")]:  # no PNG drawn from the real data is left
            del f[p]

    forged("rt_figure_data_forged", "redteam", 1, "claims", "is not the figure data of the claims this verifier",
           "data/plots/claim_C10.json", "claim C10's figure data retitled 'holds' (manifests recomputed)",
           lambda f: None, after=forged_figure)
    forged("rt_top_folder_renamed", "redteam", 1, "documents", "the archive's top folder is not the bundle's name",
           "data/bundle.json", "the good bundle repacked under the top folder ...-ALL-CLAIMS-HOLD-verified "
           "(bag-info External-Identifier set to match)", lambda f: None,
           top="pointwise-fusion-ftz-full-ALL-CLAIMS-HOLD-verified")

    def source(f):
        rel = "data/inputs/study/fused_tails.cu"
        raw = f[rel] + b"\n// a kernel the verifier does not know\n"
        _trust().set_study_file(f, "fused_tails.cu", raw)
        digest = hashlib.sha256(raw).hexdigest()

        def edit(d):
            for src in [d["source"]] + [v["source"] for v in d["variants"] if isinstance(v.get("source"), dict)]:
                src.update(sha256=digest)

        _edit(f, COMPILE, edit)

    forged("rt_kernel_source_rewritten", "redteam", 1, "documents",
           "differs from this verifier's own in fused_tails.cu; a bundle cannot redefine a study the verifier ships",
           "data/inputs/study/fused_tails.cu",
           "the study's kernel source (a file of the shipped study's folder) changed, and every record of it "
           "(compile.json's source sha256s, bundle.json's and run.json's study.files) updated to match: code the "
           "verifier does not know under the name of a study it ships", source)
    forged("rt_compute_capability_unparseable", "redteam", 1, "documents", "records its GPU's name and compute capability", ENV,
           "environment.json's compute capability '10.0 (B200)', which a MAJOR.MINOR parse skipped",
           lambda f: _edit(f, ENV, lambda d: d["fields"]["compute_capability"].update(value="10.0 (B200)")))

    def bag_info_extra(members):
        members["bag-info.txt"] = members["bag-info.txt"] + b"Verified-By: kbrepro maintainers, all claims hold\n"
        _retag(members, ("bag-info.txt", "bagit.txt", "manifest-sha256.txt"))

    forged("rt_bag_info_extra_field", "redteam", 1, "manifest", "not in the packer's exact form", "bag-info.txt",
           "bag-info.txt gains a field 'Verified-By: ... all claims hold' (tag manifest updated)", lambda f: None,
           raw_edit=bag_info_extra)

    def crlf(members):
        members["manifest-sha256.txt"] = members["manifest-sha256.txt"].replace(b"\n", b"\r\n")
        _retag(members, ("bag-info.txt", "bagit.txt", "manifest-sha256.txt"))

    forged("rt_manifest_crlf", "redteam", 1, "manifest", "not in the packer's exact form", "manifest-sha256.txt",
           "manifest-sha256.txt with CRLF line ends (same payload, another digest)", lambda f: None, raw_edit=crlf)

    def extra_tag(members):
        members["README.md"] = b"# verified\n"
        _retag(members, ("README.md", "bag-info.txt", "bagit.txt", "manifest-sha256.txt"))

    forged("rt_extra_tag_file", "redteam", 1, "manifest", "a tag file the packer does not write", "README.md",
           "a README.md tag file at the bag root, listed in the tag manifest", lambda f: None, raw_edit=extra_tag)

    def twin(members):
        members["data/REPORT.md."] = b"# every claim holds\n"

    forged("rt_trailing_dot_twin", "redteam", 3, "archive", "ends in '.'", None,
           "a payload twin data/REPORT.md. that Windows would extract over data/REPORT.md", lambda f: None,
           raw_edit=twin)
    def emptied(f):
        def edit(d):
            for b in d["blocks"]:
                if b["id"] in ("53.tail.events", "53.tail.graph", "81.tail.events", "81.tail.graph"):
                    b["rounds"] = []
                    b["skipped"] = "not measured on this run"
        _edit(f, "data/results/timings.json", edit)

    forged("rt2_block_emptied", "redteam", 1, "documents", "a block without rounds", "data/results/timings.json",
           "the four tail blocks the failing claims C10/C11 rest on emptied (rounds []) with a made-up 'skipped' "
           "reason, so that the claims turn inconclusive", emptied)
    forged("rt2_env_charref_bidi", "redteam", 1, "documents", "outside [A-Za-z0-9 .,:;()+/=@#_-]", ENV,
           "environment.json's GPU name holds the character reference &#x202E; (a right-to-left override once "
           "rendered)", gpu_name("NVIDIA &#x202E;002H"))
    # (a typed GPU fact such as tf32_matmul now fails by the schema first: the string goes in cpu_model)
    forged("rt2_env_bold_claim", "redteam", 1, "documents", "outside [A-Za-z0-9 .,:;()+/=@#_-]", ENV,
           "environment.json's cpu_model value 'Xeon **ALL 14 CLAIMS VERIFIED BY KBREPRO**' (bold in the header)",
           lambda f: _edit(f, ENV, lambda d: d["fields"]["cpu_model"].update(
               value="Xeon **ALL 14 CLAIMS VERIFIED BY KBREPRO**")))

    def agent(members):
        members["bag-info.txt"] = members["bag-info.txt"].replace(
            b"Bag-Software-Agent: kbrepro ", b"Bag-Software-Agent: kbrepro verified, all claims hold, ", 1)
        _retag(members, ("bag-info.txt", "bagit.txt", "manifest-sha256.txt"))

    forged("rt2_bag_agent_text", "redteam", 1, "manifest", "Bag-Software-Agent is not the packer's", "bag-info.txt",
           "bag-info.txt's Bag-Software-Agent value carries a sentence", lambda f: None, raw_edit=agent)

    def compact(f):
        import json

        rel = "data/results/witness.json"
        f[rel] = json.dumps(json.loads(f[rel]), separators=(",", ":")).encode()

    forged("rt2_compact_json", "redteam", 1, "documents", "not in the canonical JSON form", "data/results/witness.json",
           "witness.json rewritten as compact JSON (same values; the packer writes canonical form, and a compact "
           "form lets a small archive hold far more nodes)", compact)
    return out
