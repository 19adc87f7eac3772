"""python -m torch_fl.conformance [run options] | report ... | _worker ...

Without a subcommand it runs the OpInfo sweep (see --help); `report` writes
the operator-support document from sweep JSON files.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _add_run_options(p: argparse.ArgumentParser) -> None:
    from torch_fl.conformance.sweep import FIRST_PHASE_OVERLOADS

    p.add_argument("--backend", default="native", help="route to sweep: native (default), flaggems, ...")
    p.add_argument(
        "--route-ops",
        type=_csv,
        default=list(FIRST_PHASE_OVERLOADS),
        help="aten overloads routed to --backend (comma list; `all`: every overload the backend "
        "implements; `own`: per op, only that op's overloads the backend implements; "
        "default: FEP first-phase operators)",
    )
    p.add_argument("--dtypes", default=None, help="comma list of dtypes (default: float32,int64,bool,complex64)")
    p.add_argument("--limit", type=int, default=None, help="at most N sample inputs per op and dtype")
    p.add_argument("--backward", action=argparse.BooleanOptionalAction, default=False, help="also compare gradients")
    p.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)


def build_run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m torch_fl.conformance",
        description="Run PyTorch's OpInfo sample inputs on flagos and compare with CPU. "
        "Subcommand `report` writes docs/operator-support.md from the JSON.",
    )
    _add_run_options(p)
    p.add_argument("--ops", type=_csv, default=None, help="comma list of globs over op names (e.g. 'add,nn.*')")
    p.add_argument("--subset", choices=["ci"], default=None, help="a fixed list of ops (ci: ~40 representative)")
    p.add_argument("--json", dest="json_out", default=None, help="write results to this JSON file")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes (0: run in this process)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds one op may take before its worker is killed")
    p.add_argument(
        "--deadline",
        type=float,
        default=None,
        help="seconds after which no new op is started; unstarted ops are listed in the JSON as not run",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress output")
    p.add_argument("-v", "--verbose", action="store_true", help="print every op's outcome")
    return p


def _progress(total: int, enabled: bool, verbose: bool):
    if not enabled:
        return lambda key, out: None, lambda: None
    try:
        from tqdm import tqdm

        bar = tqdm(total=total, unit="op", file=sys.stderr)

        def tick(key, out):
            bar.set_postfix_str(key[:30])
            bar.update(1)
            if verbose or out["status"] in ("fail", "error"):
                bar.write(f"{out['status']:5} {key}  {out.get('first_error') or ''}"[:200], file=sys.stderr)

        return tick, bar.close
    except ImportError:
        done = [0]

        def tick(key, out):
            done[0] += 1
            if verbose or out["status"] in ("fail", "error") or done[0] % 25 == 0 or done[0] == total:
                msg = (out.get("first_error") or "")[:120]
                print(f"[{done[0]:4}/{total}] {out['status']:5} {key} {msg}", file=sys.stderr, flush=True)

        return tick, lambda: None


def run_main(argv: list[str]) -> int:
    args = build_run_parser().parse_args(argv)
    import torch

    import torch_fl  # noqa: F401  (registers the device)
    from torch_fl.conformance import sweep as sw
    from torch_fl.conformance.runner import load_op_db, op_key, parse_dtypes

    parse_dtypes(args.dtypes)  # fail early on a typo
    patterns = list(args.ops or [])
    if args.subset == "ci":
        patterns += sw.SUBSET_CI
    ops = sw.select_ops(load_op_db(), patterns or None)
    if not ops:
        print(f"no OpInfo matches {patterns}", file=sys.stderr)
        return 2
    args.startup_timeout = 180.0
    args.stop_at = time.monotonic() + args.deadline if args.deadline else float("inf")
    if args.jobs > 1 and not args.threads:
        args.threads = max(1, (os.cpu_count() or 1) // args.jobs)
    print(
        f"sweeping {len(ops)} OpInfos on flagos ({torch_fl.backing()} backing, torch {torch.__version__}), "
        f"backend={args.backend}, backward={args.backward}, jobs={args.jobs}",
        file=sys.stderr,
    )
    tick, close = _progress(len(ops), not args.no_progress, args.verbose)
    start = time.perf_counter()
    if args.jobs == 0:
        results, refused = sw.run_in_process(ops, args, tick)
    else:
        refused = {}
        results = sw.run_in_workers([op_key(o) for o in ops], args, tick, refused)
    close()
    seconds = time.perf_counter() - start
    summary = sw.summarize(results)
    not_run = sorted(set(map(op_key, ops)) - set(results))
    doc = {
        "meta": {**sw.metadata(args, seconds, refused), "not_run": not_run},
        "summary": summary,
        "ops": {k: {kk: vv for kk, vv in results[k].items() if kk != "op"} for k in sorted(results)},
    }
    if args.json_out:
        os.makedirs(os.path.dirname(os.path.abspath(args.json_out)), exist_ok=True)
        with open(args.json_out, "w") as f:
            json.dump(doc, f, indent=1, sort_keys=False)
            f.write("\n")
    if not_run:
        print(f"deadline reached: {len(not_run)} ops not run", file=sys.stderr)
    rate = summary["pass_rate_judged"]
    print(
        f"{summary['ops']} ops in {seconds:.0f}s: pass {summary['pass']}, fail {summary['fail']}, "
        f"error {summary['error']}, skip {summary['skip']}; pass rate {rate:.2%} of judged ops"
        if rate is not None
        else f"{summary['ops']} ops, none judged",
    )
    for k in sorted(results):
        r = results[k]
        if r["status"] in ("fail", "error"):
            print(f"  {r['status']:5} {k}: {r['first_error']}")
    return 0 if summary["fail"] == 0 and summary["error"] == 0 else 1


def worker_args(argv: list[str]):
    p = argparse.ArgumentParser(prog="python -m torch_fl.conformance _worker")
    _add_run_options(p)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "report":
        from torch_fl.conformance.report import main as report_main

        return report_main(argv[1:])
    if argv and argv[0] == "_worker":
        import torch_fl  # noqa: F401
        from torch_fl.conformance.sweep import worker_main

        return worker_main(worker_args(argv[1:]))
    if argv and argv[0] == "run":
        argv = argv[1:]
    return run_main(argv)


if __name__ == "__main__":
    sys.exit(main())
