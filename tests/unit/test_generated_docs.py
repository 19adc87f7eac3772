"""The generated documents match what their generators give now: docs/benchmarks.md and README.md's
performance table from benchmarks/results/*.json (benchmarks/report.py), and docs/verification.md's
command transcripts (scripts/gen_verification.py), so none can drift from the files or commands
they come from. Each generator runs on copies in a temporary folder; the committed files are compared."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _run(*argv: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=timeout, cwd=REPO)


@pytest.mark.anyplatform
def test_benchmarks_doc_and_readme_table_are_current(tmp_path):
    doc, readme = tmp_path / "benchmarks.md", tmp_path / "README.md"
    shutil.copy(REPO / "README.md", readme)
    proc = _run("-m", "benchmarks.report", "--doc", str(doc), "--readme", str(readme))
    assert proc.returncode == 0, proc.stderr
    assert doc.read_text() == (REPO / "docs" / "benchmarks.md").read_text(), "run: python -m benchmarks.report"
    assert readme.read_text() == (REPO / "README.md").read_text(), "run: python -m benchmarks.report"


@pytest.mark.anyplatform
def test_report_refuses_a_readme_without_markers(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# torch_fl\n\nno table here\n")
    proc = _run("-m", "benchmarks.report", "--doc", str(tmp_path / "b.md"), "--readme", str(readme))
    assert proc.returncode == 1 and "<!-- benchmarks:start -->" in proc.stderr
    assert readme.read_text() == "# torch_fl\n\nno table here\n"
    assert not (tmp_path / "b.md").exists()


@pytest.mark.anyplatform
def test_report_tables_name_their_source_file_and_run():
    text = (REPO / "docs" / "benchmarks.md").read_text()
    for path in sorted((REPO / "benchmarks" / "results").glob("*.json")):
        assert f"From `benchmarks/results/{path.name}`:" in text, path.name


@pytest.mark.anyplatform
def test_verification_doc_is_current(tmp_path):
    import torch_fl

    if torch_fl.backing() != "cpu":
        pytest.skip("the document's transcripts are the host backing's; this machine's backing differs")
    doc = tmp_path / "verification.md"
    shutil.copy(REPO / "docs" / "verification.md", doc)
    proc = _run("scripts/gen_verification.py", "--doc", str(doc))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert doc.read_text() == (REPO / "docs" / "verification.md").read_text(), "run: python scripts/gen_verification.py"


OPERATOR_SUPPORT = [
    "--native",
    "docs/conformance/native_backward.json",
    "--cuda",
    "docs/conformance/h200/sweep_cuda.json",
    "--flaggems",
    "docs/conformance/h200/sweep_flaggems_own_part1.json",
    "docs/conformance/h200/sweep_flaggems_own_part2.json",
]


@pytest.mark.anyplatform
def test_operator_support_doc_is_current(tmp_path):
    """docs/verification.md section 3 names this command: it rebuilds the committed document exactly."""
    out = tmp_path / "operator-support.md"
    proc = _run("-m", "torch_fl.conformance", "report", *OPERATOR_SUPPORT, "-o", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert out.read_text() == (REPO / "docs" / "operator-support.md").read_text()
    assert " ".join(OPERATOR_SUPPORT) in (REPO / "docs" / "verification.md").read_text().replace("\n", " ")
