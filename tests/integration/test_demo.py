"""`python -m torch_fl demo`, the README's first command: it generates on flagos and natively,
says whether the tokens agree, which backend ran each operator, and refuses bad arguments."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytest.importorskip("transformers")


def demo(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "torch_fl", "demo", *args], capture_output=True, text=True, timeout=600
    )


@pytest.mark.anyplatform
def test_demo_generates_on_flagos_and_natively_and_shows_the_routes():
    p = demo("--model", "tiny", "--tokens", "8", "--rounds", "2")
    assert p.returncode == 0, p.stderr[-3000:]
    out = p.stdout
    assert "greedy tokens identical to native: yes" in out
    assert "(medians of 2 alternating rounds)" in out
    # two timed generations per side, alternating: flagos, native, then native, flagos
    timed = re.findall(r"^\s+(flagos:\d+|native [\w:]+): [\d.]+ tokens/s$", out, re.MULTILINE)
    assert len(timed) == 4 and timed[0] == timed[3] and timed[1] == timed[2] and timed[0] != timed[1], timed
    rate = re.search(r"tokens/s\s+flagos\s+([\d.]+)\s+native\s+([\d.]+)\s+ratio\s+([\d.]+)x", out)
    assert rate and float(rate.group(1)) > 0 and float(rate.group(2)) > 0
    # each round's own ratio, and the prompt's logits against native's (identical with native routes)
    assert re.search(r"^\s+each round, flagos / native: [\d.]+x\s+[\d.]+x$", out, re.MULTILINE), out
    assert re.search(r"logits: max \|flagos - native\| 0, within the \w+ tolerance .*: yes$", out, re.MULTILINE)
    # the operator table: one generation's routed calls, each with the backend that ran it
    assert re.search(r"^\s+mul\.Tensor\s+native\s+\d+$", out, re.MULTILINE), out
    assert "fallbacks: none" in out


@pytest.mark.anyplatform
@pytest.mark.parametrize(
    "args,message",
    [
        (["--rounds", "0"], "--rounds must be at least 1"),
        (["--device", "cpu"], "--device must be a flagos device"),
        (["--device", "flagos:99"], "flagos:99 does not exist"),
        (["--model", "no-such-model"], "no-such-model"),
    ],
)
def test_demo_refuses_bad_arguments(args, message):
    p = demo(*args)
    assert p.returncode == 2 and message in p.stderr, (p.returncode, p.stderr[-2000:])
