"""Small helpers shared by tests (import as `from tests.helpers import ...`)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_python(code: str, env: dict[str, str] | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter (from the repo root) and return the finished process."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def load_benchmark(name: str):
    """benchmarks/<name>.py as a module (the folder is not a package), for testing its pure functions. The
    folder goes on sys.path, as for `python benchmarks/<script>.py`: the modules import their shared ones
    (_results, _timing) by name."""
    import importlib.util

    folder = os.path.join(REPO, "benchmarks")
    if folder not in sys.path:
        sys.path.insert(0, folder)

    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", os.path.join(REPO, "benchmarks", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
