"""Forged bundles of a red-team round (2026-12-05): each module builds one kind with the
project's own packer; tests/test_forgeries_round2.py asserts the verifier refuses each."""
