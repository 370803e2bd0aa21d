"""The study plug-in contract is checked when a binding loads (harness.plugin.contract_problems):
a misspelled hook, a hook of the wrong kind or one the engine cannot call is a usage error,
never a silent fall-back to the default."""
from __future__ import annotations

from pathlib import Path

import pytest

from kbrepro.errors import UsageError
from kbrepro.harness import plugin

ROOT = Path(__file__).resolve().parents[1]


def _load(tmp_path: Path, body: str) -> plugin.StudyBinding:
    folder = tmp_path / "my_study"
    folder.mkdir()
    (folder / "binding.py").write_text("from kbrepro.harness.plugin import StudyBinding\n\n\n"
                                       "class B(StudyBinding):\n" + body + "\n\nBINDING = B()\n")
    return plugin.load_binding(folder, "binding.py")


@pytest.mark.parametrize("study", ["pointwise_fusion", "layernorm"])
def test_the_shipped_bindings_keep_the_contract(study):
    binding = plugin.load_binding(ROOT / "studies" / study, "binding.py")
    assert plugin.contract_problems(binding) == []


def test_a_binding_with_helpers_of_its_own_loads(tmp_path):
    b = _load(tmp_path, "    def candidate(self, ctx, task, variant, model):\n        return None\n\n"
                        "    def _helper(self):\n        return 1\n\n"
                        "    @staticmethod\n    def cost_protocol(study):\n        return None\n")
    assert plugin.contract_problems(b) == []


@pytest.mark.parametrize("body, said", [
    ("    def scope(self, ctx, task, model, inputs):\n        return []\n", "did you mean 'scopes'?"),
    ("    def report_section(self, study_doc, documents):\n        return []\n", "did you mean 'report_sections'?"),
    ("    scope_name = ('a',)\n", "did you mean 'scope_names'?"),
    ("    def controls(self, ctx, task):\n        return {}\n", "controls() does not take the 5 arguments"),
    ("    def documents(self):\n        return {}\n", "'documents' must be a value, not a method"),
    ("    witness = None\n", "'witness' must be a method"),
])
def test_a_binding_that_breaks_the_contract_is_a_usage_error(tmp_path, body, said):
    with pytest.raises(UsageError) as exc:
        _load(tmp_path, body)
    assert said in exc.value.message and "my_study" in exc.value.message
    assert "starts with '_'" in exc.value.hint
