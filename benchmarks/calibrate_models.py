"""`python -m torch_fl calibrate` on the standard workloads: where FlagGems beats native, and by how much.

For each model (GPT-2 small, BERT-base, ViT-B/16 and Qwen3-0.6B, built from their configurations; their default
tasks and batch sizes, `calibrate --help`), one calibrate run writes its routing file to the output folder, and
this file records what each found: the per-operator measurements (median time per call, native and FlagGems),
the classes routed to FlagGems and what the whole workload measured with them against all native (calibrate's
confirmation). A routing file with no FlagGems class means no kernel won on that workload: its rules say by how much.

    python -m benchmarks.calibrate_models                        # GPU: results/calibrate-<machine>.json
    python -m benchmarks.calibrate_models --models gpt2 --keep   # one model again, the others kept
    python -m benchmarks.calibrate_models --models bert-tiny --smoke   # any backing, to a temporary file
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import common

MODELS = ("bert", "vit", "gpt2", "0.6b")
# A rule line of a calibrated file: `add.Tensor[float32, numel>=16] = native   # calibrated: native 10.0 us,
# flaggems 9.3 us (1.09x), 477 calls, ...` (torch_fl/calibration/decide.py writes them).
RULE = re.compile(
    r"^(?P<rule>\S+\[[^\]]*\])\s*=\s*(?P<backend>\S+)\s+# calibrated: native (?P<native>[\d.]+) us"
    r"(?:, \S+ (?P<candidate>[\d.]+) us \((?P<speedup>[\d.]+)x\))?(?P<detail>.*)$"
)
TRIAL = re.compile(r"([\d.]+)x the workload's speed with none \(noise ([\d.]+)\)")


def parse(text: str) -> dict:
    """What a calibrated routing file says: its summary lines, the workload trial and each rule's measurements."""
    header = [ln[2:] for ln in text.splitlines() if ln.startswith("# ")]
    said = ("recorded", "measured", "estimated", "confirmed", "not confirmed")
    summary = [ln for ln in header if ln.startswith(said)]
    rules = []
    for line in text.splitlines():
        if m := RULE.match(line):
            cand = m["candidate"]
            rules.append(
                {
                    "rule": m["rule"],
                    "backend": m["backend"],
                    "native_us": float(m["native"]),
                    "candidate_us": float(cand) if cand else None,
                    "speedup": float(m["speedup"]) if m["speedup"] else None,
                    "detail": m["detail"].strip(", ;"),
                }
            )
    trial = next((TRIAL.search(ln) for ln in summary if TRIAL.search(ln)), None)
    return {
        "summary": summary,
        "confirmed": any(ln.startswith("confirmed on the workload") for ln in summary),
        "workload_ratio": float(trial[1]) if trial else None,
        "workload_noise": float(trial[2]) if trial else None,
        "routed": sorted(r["rule"] for r in rules if r["backend"] != "native"),
        "rules": rules,
    }


def calibrate(model: str, folder: Path, extra: list[str], timeout: float) -> dict:
    path = folder / f"calibrated-{model}-{common.machine()}.conf"
    cmd = [sys.executable, "-m", "torch_fl", "calibrate", "--model", model, "-o", str(path), "--quiet", *extra]
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=common.REPO)
    except subprocess.TimeoutExpired:
        return {"error": f"calibrate did not finish in {timeout:.0f} s"}
    # --keep puts models of several runs in one file: each names the commit and date it was measured at
    commit, dirty = common.git_commit()
    got = {"commit": commit, "dirty": dirty, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    got |= {"seconds": round(time.perf_counter() - start, 1), "returncode": proc.returncode}
    if not path.is_file():
        return {**got, "error": common.exception_line(proc.stderr or proc.stdout)}
    return {**got, "file": path.name, **parse(path.read_text())}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = common.parser(__doc__, "calibrate")
    p.add_argument("--models", default=",".join(MODELS), help=f"comma list (default {','.join(MODELS)})")
    p.add_argument("--rounds", type=int, default=3, help="calibrate's timing rounds (default 3)")
    p.add_argument("--per-op", type=int, default=16, help="signatures measured per operator (default 16)")
    p.add_argument("--timeout", type=float, default=900, help="seconds per model (default 900)")
    p.add_argument("--keep", action="store_true", help="keep the other models of the committed result file")
    p.add_argument("--smoke", action="store_true", help="to a temporary file")
    args = p.parse_args(argv)
    out = common.out_path("calibrate", args.out, smoke=args.smoke)
    out.parent.mkdir(parents=True, exist_ok=True)
    extra = ["--rounds", str(args.rounds), "--per-op", str(args.per_op)]
    kept = common.canonical_path("calibrate")  # a run of some models adds them to the committed file's others
    models = json.loads(kept.read_text())["models"] if args.keep and kept.is_file() else {}
    for model in args.models.split(","):
        models[model] = r = calibrate(model, out.parent, extra, args.timeout)
        print(f"{model}: {r.get('error') or '; '.join(r['summary'][-2:])}", flush=True)
        # written after each model: a run cut short keeps the models it finished
        report = {"args": {"rounds": args.rounds, "per_op": args.per_op}, "models": models}
        path = common.write("calibrate", report, out, smoke=args.smoke)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
