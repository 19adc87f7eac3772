"""FLAGOS_* variables: one list of valid names (env.VARIABLES), docs/routing.md's table lists exactly
those, and any other FLAGOS_* name is warned about, once, with the nearest valid one."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

from tests.helpers import run_python
from torch_fl.routing import env

pytestmark = pytest.mark.anyplatform

REPO = Path(__file__).resolve().parents[2]


def test_a_misspelt_variable_names_the_nearest_valid_one_and_the_list():
    msgs = env.unknown_variables({"FLAGOS_STIRCT": "1", "FLAGOS_STRICT": "1", "OTHER": "x"})
    assert list(msgs) == ["FLAGOS_STIRCT"]
    msg = msgs["FLAGOS_STIRCT"]
    assert "Did you mean FLAGOS_STRICT?" in msg and "ignored" in msg
    for name in env.VARIABLES:
        assert name in msg
    assert "FLAGOS_OP_<op>" in msg


def test_op_overrides_accept_any_operator_name_and_are_not_unknown_variables():
    assert env.unknown_variables({"FLAGOS_OP_add__Tensor": "cpu", "FLAGOS_OP___and____Tensor": "cpu"}) == {}


def test_the_integrations_opt_in_is_a_known_variable():
    assert env.unknown_variables({"FLAGOS_INTEGRATIONS": "1"}) == {}
    p = run_python("import torch_fl", {"FLAGOS_INTEGRATIONS": "0"})
    assert p.returncode == 0, p.stderr
    assert "not a torch_fl variable" not in p.stderr


def test_unknown_variables_are_warned_once_each(monkeypatch):
    monkeypatch.setattr(env, "_warned", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env.warn_unknown_variables({"FLAGOS_LOG_DISPATH": "1"})
        env.warn_unknown_variables({"FLAGOS_LOG_DISPATH": "1"})
    texts = [str(w.message) for w in caught]
    assert len(texts) == 1 and "FLAGOS_LOG_DISPATH" in texts[0] and "FLAGOS_LOG_DISPATCH" in texts[0]


def test_import_warns_about_a_misspelt_variable():
    p = run_python("import torch_fl", {"FLAGOS_STIRCT": "1"})
    assert p.returncode == 0, p.stderr
    assert "FLAGOS_STIRCT is not a torch_fl variable" in p.stderr and "Did you mean FLAGOS_STRICT?" in p.stderr
    assert p.stderr.count("FLAGOS_STIRCT is not") == 1


def test_routing_doc_lists_exactly_the_valid_variables():
    text = (REPO / "docs" / "routing.md").read_text()
    section = text.split("## Environment", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `(FLAGOS_[A-Z_]+?)(?:[=<`])", section, re.M))
    assert documented == {*env.VARIABLES, env.OP_PREFIX}
