"""Regenerates the command transcripts inside docs/verification.md.

    python scripts/gen_verification.py           # re-run every transcript, rewrite the blocks in place
    python scripts/gen_verification.py --check   # exit 1 if a block differs from what it gives now

The document is written by hand except for its blocks:

    <!-- run: NAME -->            a host command, re-run here (FLAGOS_HOST_DEVICES=2, no other FLAGOS_*
    ```                           variable from the caller's environment), its output pasted
    $ command
    output
    ```
    <!-- /run -->

Results are not copied into the document: it links to the generated pages (docs/benchmarks.md, the
README's performance table, docs/operator-support.md).

Timings, memory sizes and absolute paths are normalised (`<t>`, `<N> GiB`, the repository as `.`) and
lines printed only on some timings left out, so
a block changes only when what the command says changes; tests/unit/test_generated_docs.py checks it.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "verification.md"
BLOCK = re.compile(r"<!-- run: ([\w-]+) -->\n.*?<!-- /run -->", re.S)
PY = "python"

# name -> (the command as shown, with any VAR=value before it; files written first into its folder)
BAD_CONF = "add.Tensor = cuda\nmul.Tensor = nosuch\nbogus line\n"
LOG_SNIPPET = "import torch, torch_fl; x = torch.ones(2, device='flagos'); y = (x + x).cpu()"
STATS_SNIPPET = (
    "import torch, torch_fl; from torch_fl import routing; routing.set_route('add.Tensor', 'cpu_fallback'); "
    "x = torch.ones(2, device='flagos'); y = x + x * 2; print(*routing.stats(), sep='\\n')"
)
TRANSCRIPTS: dict[str, tuple[str, dict]] = {
    "info": ("python -m torch_fl info", {}),
    "explain-env": ("FLAGOS_OP_add__Tensor=cpu_fallback python -m torch_fl explain add.Tensor", {}),
    "log-dispatch": (f'FLAGOS_LOG_DISPATCH=1 python -c "{LOG_SNIPPET}"', {}),
    "set-route-stats": (f'python -c "{STATS_SNIPPET}"', {}),
    "validate-bad": ("python -m torch_fl validate bad.conf", {"bad.conf": BAD_CONF}),
    "demo": ("python -m torch_fl demo --model tiny --tokens 8 --rounds 2", {}),
}
# the transcripts whose stderr is what they show (the others' stderr holds progress bars)
WITH_STDERR = {"log-dispatch", "validate-bad"}
# the transcripts whose failure is what they show
MAY_FAIL = {"validate-bad"}

NORMALISE = [
    (re.compile(r"tokens/s +flagos +[\d.]+ +native +[\d.]+"), lambda m: "tokens/s   flagos <N>   native <N>"),
    (re.compile(r"\b\d+(\.\d+)? ?(tokens/s|tok/s|GiB)"), lambda m: f"<N> {m.group(2)}"),
    (re.compile(r"\[\d+(\.\d+)? s\]"), lambda m: "[<t> s]"),
    (re.compile(r"\b\d+\.\d+x\b"), lambda m: "<r>x"),
    (re.compile(r" in \d+(\.\d+)?s( \(\d+:\d+:\d+\))?"), lambda m: " in <t>s"),
    (re.compile(r"transformers \d+[\w.]*"), lambda m: "transformers <version>"),
]


# lines a run prints or not depending on its timings (the demo's note on rounds that differ): left out
TIMING_DEPENDENT = re.compile(r"^ *\(the rounds differ by .*\n", re.M)


def normalise(text: str, workdir: str | None = None) -> str:
    text = TIMING_DEPENDENT.sub("", text)
    text = text.replace(str(REPO) + "/", "./").replace(str(REPO), ".")
    if workdir:
        text = text.replace(workdir + "/", "").replace(workdir, ".")
    for pattern, repl in NORMALISE:
        text = pattern.sub(repl, text)
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def run_transcript(name: str) -> str:
    shown, files = TRANSCRIPTS[name]
    words = shlex.split(shown)
    assigns = [w for w in words[: next(i for i, w in enumerate(words) if w == PY)]]
    argv = words[len(assigns) + 1 :]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLAGOS_")}
    env.update(FLAGOS_HOST_DEVICES="2", PYTHONHASHSEED="0", TRANSFORMERS_VERBOSITY="error")
    env.update(a.split("=", 1) for a in assigns)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory(prefix="torch_fl_verification_") as tmp:
        for fname, text in files.items():
            (Path(tmp) / fname).write_text(text)
        proc = subprocess.run(
            [sys.executable, *argv],
            cwd=tmp if files else REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if name in WITH_STDERR else subprocess.PIPE,
            text=True,
            timeout=600,
        )
        if proc.returncode != 0 and name not in MAY_FAIL:
            raise RuntimeError(f"{shown} exited {proc.returncode}:\n{(proc.stderr or proc.stdout)[-2000:]}")
        shown_files = "".join(f"$ cat {f}\n{t}" for f, t in files.items())
        status = f"\n(exit status {proc.returncode})" if proc.returncode else ""
        return f"{shown_files}$ {shown}\n{normalise(proc.stdout, tmp)}{status}"


def render(doc: str) -> str:
    names = [m.group(1) for m in BLOCK.finditer(doc)]
    if unknown := [n for n in names if n not in TRANSCRIPTS]:
        raise KeyError(f"unknown transcript(s) {unknown}; known: {', '.join(TRANSCRIPTS)}")
    with ThreadPoolExecutor(max(1, min(len(names), os.cpu_count() or 1))) as pool:  # each a process of its own
        transcripts = dict(zip(names, pool.map(run_transcript, names), strict=True))

    def block(m: re.Match) -> str:
        name = m.group(1)
        return f"<!-- run: {name} -->\n```\n{transcripts[name]}\n```\n<!-- /run -->"

    return BLOCK.sub(block, doc)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if docs/verification.md is stale")
    p.add_argument("--doc", default=str(DOC), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    path = Path(args.doc)
    old = path.read_text()
    new = render(old)
    if args.check:
        if new != old:
            print(f"{path} is stale: run python scripts/gen_verification.py", file=sys.stderr)
            return 1
        return 0
    if new != old:
        path.write_text(new)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
