"""The integration programs (tests/integrations/programs/) run in their own interpreters, as a user's script
does: each imports torch_fl fresh, so one program's opt-in, accelerate's process-wide state or a launcher's
environment never reaches another test."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROGRAMS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs")
RESULT_TAG = "PROGRAM_RESULT "


class Finished:
    def __init__(self, proc: subprocess.CompletedProcess):
        self.proc = proc
        self.output = proc.stdout + proc.stderr

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.output.splitlines()[-lines:])

    def result(self) -> dict:
        assert self.proc.returncode == 0, self.tail()
        for line in reversed(self.proc.stdout.splitlines()):
            if line.startswith(RESULT_TAG):
                return json.loads(line[len(RESULT_TAG) :])
        raise AssertionError("no result line:\n" + self.tail())


def run_program(*argv: str, launcher: list[str] | None = None, env: dict | None = None, timeout: int = 600):
    """Runs programs/<argv[0]> with the rest of argv (under `launcher`, e.g. torchrun's command line)."""
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", TRANSFORMERS_VERBOSITY="error", HF_HUB_OFFLINE="1")
    full_env.update(env or {})
    cmd = (launcher or [sys.executable]) + [os.path.join(PROGRAMS, argv[0]), *argv[1:]]
    return Finished(subprocess.run(cmd, cwd=PROGRAMS, env=full_env, capture_output=True, text=True, timeout=timeout))


@pytest.fixture
def program():
    return run_program
