"""calibrate in a worker process (torch_fl/calibration/isolate.py): a candidate that ends the process costs its
operator, not the run.

On a GPU the end is a kernel's illegal memory access; here the workload script stands in for one: it makes
the worker's check of `abs` end the process, as a faulting kernel would, and the tests assert what the
supervisor and the second worker do about it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import torch_fl
from tests.unit.routing_fixtures import flag_gems_with, routing_state  # noqa: F401  (fixtures)
from torch_fl.__main__ import main
from torch_fl.backends import flaggems
from torch_fl.calibration import isolate, measure, record
from torch_fl.routing import config

pytestmark = pytest.mark.anyplatform

REPO = str(Path(torch_fl.__file__).resolve().parents[1])


@pytest.fixture
def importable(monkeypatch):
    """Child processes import this checkout's torch_fl, whatever their working directory."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))


def rules_of(path) -> dict[str, config.Rule]:
    return {r.written: r for r in config.load_file(str(path)) if r.file == str(path)}


def test_the_journal_names_the_phase_a_process_ended_in(tmp_path):
    journal = isolate.Journal(str(tmp_path))
    with journal.phase("mm[float32]", "checking"):
        pass
    assert isolate.open_phase(str(tmp_path)) is None  # every phase ended
    with pytest.raises(RuntimeError), journal.phase("abs[float32]", "timing"):
        raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore")
    assert isolate.open_phase(str(tmp_path)) == (
        "abs[float32]",
        "timing",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
    )
    with open(tmp_path / isolate.JOURNAL, "a") as f:
        f.write('{"begin": "neg[float32]", "phase": "checking"}\n{"end": "neg[flo')  # cut short by the end
    assert isolate.open_phase(str(tmp_path)) == ("neg[float32]", "checking", None)
    isolate.Journal(None).phase("x", "checking").__enter__()  # no directory: writes nothing


def test_an_excluded_operator_is_timed_on_native_only(routing_state):  # noqa: F811
    ran = []
    flaggems.LOADER.use_module(flag_gems_with({"abs": lambda a: ran.append(a) or torch.abs(a)}))
    try:
        rec = record.record(lambda: torch.abs(torch.ones(4, 4, device="flagos")), lambda op: op == "abs")
        timer = lambda run, call, backend: (run(), 1e-5)[1]  # noqa: E731
        why = "checking it on flaggems ended the calibrating process (exit code 3)"
        (m,) = measure.measure(
            list(rec.calls.values()), "flaggems", timer, 1, progress=False, excluded={"abs[float32]": why}
        )
    finally:
        flaggems.LOADER.reset()
    assert ran == []  # the candidate never ran
    assert (m.reason, m.candidate_s, m.native_s) == (why, None, 1e-5)


def test_a_device_fault_in_the_check_is_never_a_rejection(routing_state):  # noqa: F811
    """A candidate's illegal memory access leaves the process's device unusable: the check raises it (the
    worker dies, isolate.py blames the operator) instead of recording a rejection and measuring on."""

    def faulting_abs(a):
        raise torch.AcceleratorError("CUDA error: an illegal memory access was encountered")

    flaggems.LOADER.use_module(flag_gems_with({"abs": faulting_abs, "neg": lambda a: torch.neg(a) + 1}))
    try:
        x = torch.ones(4, 4, device="flagos")
        rec = record.record(lambda: (torch.abs(x), torch.neg(x)), lambda op: op in ("abs", "neg"))
        groups = {c.key.op: [c] for c in rec.calls.values()}
        with pytest.raises(torch.AcceleratorError, match="illegal memory access"):
            measure.check(groups["abs"], "flaggems")
        (reason,) = measure.check(groups["neg"], "flaggems").values()  # a wrong result is a rejection
        assert reason.startswith("results differ from native")
    finally:
        flaggems.LOADER.reset()


WORKER = """
import json, os, sys
from torch_fl.calibration import isolate
state = sys.argv[sys.argv.index("--worker-state") + 1]
command, excluded = isolate.read_state(state)
with open(sys.argv[1], "a") as f:
    f.write(json.dumps({"command": command, "excluded": excluded}) + "\\n")
journal = isolate.Journal(state)
for key in ("mm[float32]", "abs[float32]", "neg[float32]"):
    if key in excluded:
        continue
    with journal.phase(key, "checking"):
        if key == "abs[float32]":
            os._exit(7)
        if key == "neg[float32]":
            os.abort()
"""


def test_the_supervisor_excludes_each_operator_that_ended_a_worker(tmp_path, importable):
    log, said = tmp_path / "runs.jsonl", []
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    rc = isolate.supervise(
        lambda d: [sys.executable, str(script), str(log), "--worker-state", d], "flaggems", "cmd", said.append
    )
    assert rc == 0
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    assert [sorted(r["excluded"]) for r in runs] == [[], ["abs[float32]"], ["abs[float32]", "neg[float32]"]]
    assert {r["command"] for r in runs} == {"cmd"}
    last = runs[-1]["excluded"]
    assert last["abs[float32]"] == "checking it on flaggems ended the calibrating process (exit code 7)"
    assert last["neg[float32]"] == "checking it on flaggems ended the calibrating process (killed by SIGABRT)"
    assert len(said) == 2 and "abs[float32]" in said[0] and "timed on native only" in said[0]


def test_the_supervisor_stops_when_the_fault_is_not_the_candidates(tmp_path, importable):
    script = tmp_path / "worker.py"
    script.write_text("import sys\nsys.exit(5)\n")  # ends outside any phase: not blamed on an operator
    argv = lambda d: [sys.executable, str(script), "--worker-state", d]  # noqa: E731
    assert isolate.supervise(argv, "flaggems", "cmd", print) == 5
    script.write_text(  # blames the same operator again once it is excluded: stop
        "import sys\nfrom torch_fl.calibration import isolate\n"
        "with isolate.Journal(sys.argv[-1]).phase('mm[float32]', 'timing'):\n    sys.exit(4)\n"
    )
    said = []
    assert isolate.supervise(argv, "flaggems", "cmd", said.append) == 4
    assert "again; giving up" in said[-1]
    script.write_text(WORKER)  # blames abs, then neg: past max_excluded=1, stop
    said = []
    worker = lambda d: [sys.executable, str(script), str(tmp_path / "runs.jsonl"), "--worker-state", d]  # noqa: E731
    assert isolate.supervise(worker, "flaggems", "cmd", said.append, max_excluded=1) == 1
    assert said[-1].endswith("checking neg[float32] after 1 operators excluded; giving up")


FAULTING_WORKLOAD = """
import os, torch, torch_fl
from torch_fl.calibration import measure

checked = measure.check


def check(group, candidate):  # stands in for a candidate kernel that faults the device
    if group[0].key.op == "abs":
        os._exit(9)
    return checked(group, candidate)


measure.check = check
x = torch.ones(16, 16, device="flagos")
for _ in range(2):
    x @ x
    torch.abs(x)
"""


def test_cli_isolated_calibration_survives_a_candidate_that_ends_the_worker(routing_state, tmp_path, importable):  # noqa: F811
    script, out = tmp_path / "w.py", tmp_path / "cal.conf"
    script.write_text(textwrap.dedent(FAULTING_WORKLOAD))
    cmd = [sys.executable, "-m", "torch_fl", "calibrate", "--script", str(script), "-o", str(out)]
    cmd += ["--candidate", "cpu_fallback", "--rounds", "1", "--reps", "1", "--isolate", "on", "--quiet"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "abs[float32]: checking it on cpu_fallback ended the calibrating process (exit code 9)" in proc.stderr
    rules = rules_of(out)
    assert "abs[float32] = native" in rules
    assert "ended the calibrating process (exit code 9)" in out.read_text()  # the rule's reason
    assert any(r.startswith("mm[float32]") for r in rules)  # the other operator was measured
    # the header has the user's command, not the worker's
    assert "# command: python -m torch_fl calibrate --script" in out.read_text()
    assert "--isolate on" in out.read_text()
    assert "--worker-state" not in out.read_text()
    assert main(["validate", str(out)]) == 0
