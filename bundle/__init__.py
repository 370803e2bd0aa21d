"""Bundles: validate results, fingerprint, manifest, deterministic archive; verify and replay."""
