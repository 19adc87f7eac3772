"""docs/benchmarks.md and README.md's performance table, generated from benchmarks/results/*.json.

    python -m benchmarks.report            # rewrite both from the canonical result files
    python -m benchmarks.report --check    # exit 1 if either differs from what the files give

Every table names the file, command, date, commit and machine it comes from; README.md's table (targets.py)
goes between the markers `<!-- benchmarks:start -->` and `<!-- benchmarks:end -->`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from benchmarks.common import REPO, RESULTS, errors_brief, exception_line, format_ratio, quartiles

DOC = REPO / "docs" / "benchmarks.md"
README = REPO / "README.md"
TITLES = {
    "e2e": "Qwen3 end to end: decode, prefill, training (benchmarks/e2e.py)",
    "overhead": "Per-call overhead against native PyTorch (benchmarks/overhead.py)",
    "route-breakdown": "Where a routed call's host time goes (benchmarks/route_breakdown.py)",
    "route-instructions": "Instructions per routed call, counted by callgrind (benchmarks/route_instructions.py)",
    "alias-pool": "Alias pool borrows and misses in a model's steady state (benchmarks/alias_pool.py)",
    "compile": "torch.compile: Qwen3 prefill and training step, flagos against native (benchmarks/compile_bench.py)",
    "ddp-step": "A DDP training step at world size 1, flagos against native (benchmarks/ddp_step.py)",
    "trainer": "Hugging Face Trainer fine-tune of Qwen3, flagos against native (benchmarks/trainer_bench.py)",
    "calibrate": "calibrate on the standard workloads: FlagGems against native (benchmarks/calibrate_models.py)",
}


def load_results(results: Path = RESULTS) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(results.glob("*.json"))}


def _noise(values: list[float] | None) -> float | None:
    if not values or len(values) < 2:
        return None
    q1, q3 = quartiles(sorted(values))
    return (q3 - q1) / 2


def _ratio(r: float, noise: float | None) -> str:
    return f"{r:.3f}x" + (f" ± {noise:.3f}" if noise is not None else "")


def paired_ratio(e: dict) -> str:
    """A paired or per-round entry's median ratio ± its noise."""
    return _ratio(e["ratio_median"], pair_noise(e))


def ratio_interval(e: dict) -> str:
    """A paired entry's median ratio ± noise, with the median's 95% interval where the result has one."""
    return format_ratio({**e, "noise": pair_noise(e)})


def _yes(ok, none: str = "") -> str:
    return none if ok is None else ("yes" if ok else "NO")


def n_rounds(n, kind: str = "") -> str:
    return f"{n} {kind}round" if n == 1 else f"{n} {kind}rounds"


def pair_noise(e: dict) -> float | None:
    """The noise of a paired or per-round entry; None for a single pair or round, which has no spread."""
    if e.get("pairs", 2) < 2:
        return None
    if "noise" in e:
        return e["noise"]
    if "ratio_quartiles" in e:
        return (e["ratio_quartiles"][1] - e["ratio_quartiles"][0]) / 2
    return _noise(e.get("ratios"))


def md(head: str, rows: list[list[str]]) -> list[str]:
    """A Markdown table and the blank line after it: `head` names the columns, `|`-separated, a trailing `:`
    right-aligning one; `rows` are lists of cells."""
    cols = head.split("|")
    lines = [[c.rstrip(":") for c in cols], ["---:" if c.endswith(":") else "---" for c in cols], *rows]
    return ["| " + " | ".join(cells) + " |" for cells in lines] + [""]


def provenance(stem: str, meta: dict) -> str:
    """The line under each heading: file, command, date, commit, machine, versions."""
    date, commit = meta.get("date") or "not recorded", meta.get("commit") or "not recorded"
    if meta.get("dirty"):
        commit += " (with uncommitted changes)"
    versions = ", ".join(f"{k} {v}" for k, v in meta.get("versions", {}).items() if v)
    return (
        f"From `benchmarks/results/{stem}.json`: `{meta.get('command')}`; date {date}; commit {commit}; "
        f"machine `{meta.get('machine')}`" + (f" ({versions})" if versions else "") + "."
    )


# e2e's in-process pair tasks by the label the tables and targets give them
PAIR_TASKS = {
    "decode": "decode, generate() pairs",
    "prefill": "prefill pairs",
    "decode_tokens": "decode token by token",
    "graphs": "graph decode pairs",
    "static_generate": "compiled static-cache generate() pairs",
    "train": "train pairs, against flagos's native routes",
    "train_workers": "train, worker processes taking turns",
}
# the in-process pairs that judge a task, steadiest first (token by token: 64 pairs of short calls)
PAIR_LABELS = {
    "decode": ("decode token by token", "decode, generate() pairs"),
    "prefill": ("prefill pairs",),
    "train": ("train, worker processes taking turns", "train pairs, against flagos's native routes"),
}


def e2e_pairs(d: dict, variant: str = "flagos") -> list[tuple[str, dict]]:
    """(label, entry) of the pairs of native and `variant` that did not fail: in one process, and (flagos's
    training) in worker processes taking turns."""
    pair = d.get("paired") if variant == "flagos" else (d.get("paired_routed") or {}).get(variant)
    tasks = dict((pair or {}).get("tasks", {}))
    if variant == "flagos" and d.get("train_workers"):
        tasks["train_workers"] = d["train_workers"]
    return [(PAIR_TASKS.get(t, t), e) for t, e in tasks.items() if "ratio_median" in e]


def replay_brief(fast: dict, top: int = 3) -> str:
    """One line of e2e's per-operator replay counts: totals, then the operators most often not replayed."""
    total = {k: sum(c[k] for c in fast.values()) for k in ("hits", "recorded", "python")}
    text = f"{total['hits']:,} replayed, {total['recorded']:,} recorded, {total['python']:,} on Python"
    worst = sorted(fast.items(), key=lambda kv: -(kv[1]["recorded"] + kv[1]["python"]))[:top]
    parts = []
    for op, c in worst:
        if c["recorded"] + c["python"]:
            why = max(c["reasons"], key=c["reasons"].get) if c["reasons"] else ""
            parts.append(f"`{op}` {c['recorded']:,} recorded, {c['python']:,} on Python" + (f" ({why})" if why else ""))
    return text + ("; " + "; ".join(parts) if parts else "")


def e2e_tables(d: dict) -> list[str]:
    out = []
    if note := calibrated_file_changed(d):
        out += [f"The flagos_calibrated rows were {note}: run e2e.py again to measure it.", ""]
    pairs = [(v, *p) for v in ("flagos", *(d.get("paired_routed") or {})) for p in e2e_pairs(d, v)]
    if pairs:
        out += [
            "Native and a flagos variant alternating in one process, the steadier figure on a shared host (training: "
            "flagos against native in worker processes taking turns, as native CUDA backward cannot share a process "
            "with torch_fl; a routing variant against flagos's native routes in one process): the median of per-pair "
            "tokens/s ratios flagos / native, ± half their interquartile range; routed: the flagos calls by backend.",
            "",
        ]
        # per-pair ratios are native seconds / flagos seconds: flagos's throughput relative to native
        head = "variant|task|pairs:|flagos / native:|native tokens/s:|flagos tokens/s:|greedy = native|routed"
        out += md(
            head,
            [
                [v, label, str(e["pairs"]), paired_ratio(e), f"{e['native_tokens_per_s']:,.1f}"]
                + [f"{e['flagos_tokens_per_s']:,.1f}", _yes(e.get("tokens_match_native"))]
                + [", ".join(f"{b} {n:,}" for b, n in (e.get("backends") or {}).items())]
                for v, label, e in pairs
            ],
        )
        fast = [(v, label, e.get("replay")) for v, label, e in pairs]
        if fast := [f"- {v}, {label}: {replay_brief(r)}" for v, label, r in fast if r]:
            out += [
                "FlagGems replay in those pairs (calls replayed, recording a new signature, or left on "
                "FlagGems' Python function; the operators with the most calls not replayed):",
                "",
                *fast,
                "",
            ]
    rows = [(v, t, e) for v, per in d.get("summary", {}).items() for t, e in per.items() if e.get("rounds")]
    if rows:
        out += [
            f"Each variant in its own child process, {d.get('rounds')} round(s), median tokens/s; noise: half the "
            "interquartile range of the per-round ratios where there are several.",
            "",
        ]
        cells = []
        for v, t, e in rows:
            if "tokens_per_s" not in e:
                err = errors_brief(e.get("errors", ["no result"]))
                cells.append([v, t, f"{e['rounds_ok']}/{e['rounds']}", f"error: {err}", "", "", "", ""])
                continue
            base = d["summary"].get("native", {}).get(t, {}).get("tokens_per_s_all") or []
            mine = e.get("tokens_per_s_all") or []
            per_round = [m / n for m, n in zip(mine, base, strict=False) if n] if v != "native" else []
            ratio = _ratio(e["ratio_to_native"], _noise(per_round)) if "ratio_to_native" in e else ""
            mem = f"{e['peak_memory_ratio']:.3f}x" if "peak_memory_ratio" in e else ""
            fb = ", ".join(e.get("fallback_ops", [])) or ("none" if "fallback_ops" in e else "")
            cells.append([v, t, f"{e['rounds_ok']}/{e['rounds']}", f"{e['tokens_per_s']:,.1f}", ratio, mem])
            cells[-1] += [_yes(e.get("tokens_match_native")), fb]
        head = "variant|task|rounds:|tokens/s:|flagos / native:|peak memory ratio:|greedy = native|fallbacks"
        out += md(head, cells)
    if d.get("skipped"):
        out += [f"Skipped: {', '.join(f'{v} ({why})' for v, why in d['skipped'].items())}.", ""]
    return out


def _added(r: dict) -> str:
    if r.get("added_us") is None:
        return ""
    n = _noise(r.get("round_diffs"))
    return f"{r['added_us']:+.2f}" + (f" ± {n:.2f}" if n is not None else "")


def _own(r: dict) -> str:
    own = (r.get("torch_fl_functions_per_routed_call") or {}).get("total", {}).get("Ir")
    return "" if own is None else f"{own:,.1f}"


def _compile_intro(d: dict) -> str:
    sizes, calls = d.get("sizes", {}), d.get("args", {}).get("calls", 1)  # prefill calls per timed sample
    per_sample = f" ({calls} calls per sample)" if calls > 1 else ""
    how = f"in a worker process per variant, alternating pairs ({d['train'].get('steps_per_sample')} steps per sample)"
    return (
        f"Qwen3 `{sizes.get('variant')}` in {sizes.get('dtype')}, both variants compiled with torch.compile "
        f"(inductor). Prefill {sizes.get('prefill')} (batch x length) in alternating pairs{per_sample} in one "
        f"process; training step {sizes.get('train')} (forward, backward, AdamW) {how}; small Hugging Face models' "
        "inference (4 layers, hidden 256, 1 x 32 tokens: host-bound) in alternating pairs in one process. Ratio: "
        "native time / flagos time, the median of the pairs' ratios, ± the noise, and the interval that holds the true "
        "median with 95% probability (order statistics, torch_fl/calibration/stats.py). Compile time: first call minus "
        "a steady call, from an empty inductor cache."
    )


def _trainer_intro(d: dict) -> str:
    c = d.get("config", {})
    return (
        f"Qwen3 `{c.get('model')}` ({'bf16 autocast, fp32 weights' if c.get('bf16') else 'fp32'}), batch "
        f"{c.get('batch')} x {c.get('length')}, `Trainer.train()` for {c.get('steps')} steps in a worker process per "
        "side (native never imports torch_fl). Step time: from one `on_step_end` to the next, each to a device "
        f"sync, in {c.get('pairs')} ABBA pairs of {c.get('per_sample')}-step samples taken inside those runs; ratio: "
        "native step time / flagos step time (above 1: flagos faster), the median of the pairs ± the noise, with "
        f"the median's 95% interval. Losses: each step's, relative to native's, within {c.get('rtol')}."
    )


def _trainer_row(d: dict) -> list[str]:
    speed, mem, agree = d.get("speed"), d.get("peak_memory"), d.get("loss_agreement")
    cells = ["n/a", "", ""]
    if speed:
        cells = [ratio_interval(speed), f"{speed['native_steps_per_s']:.2f}", f"{speed['flagos_steps_per_s']:.2f}"]
    cells.append(f"{mem['ratio']:.3f}x" if mem else "n/a")
    if agree:
        first, every = _yes(agree["within_first_20"], "n/a"), _yes(agree["within_all"], "n/a")
        cells += [f"{agree['max_abs_diff']:.3g}", f"{first} / {every}"]
    return cells + [""] * (6 - len(cells))


# benchmark -> (the paragraph above its table: a format string of the result's fields, or a function of the result;
# the table's columns; its rows)
SPECS = {
    "overhead": (
        "Native and flagos alternating, {rounds} rounds of {calls} calls, median per round. Added: flagos - native in "
        "microseconds per call (the median of call-by-call pair differences where timed in pairs); noise: half the "
        "interquartile range of the per-round differences where kept.",
        "row|unit|native:|flagos:|flagos / native:|added (us/call):",
        lambda d: [
            [r["name"], r["unit"], f"{r['native']:,.2f}", f"{r['flagos']:,.2f}", f"{r['ratio']:.3f}x", _added(r)]
            for r in d["results"]
        ],
    ),
    "route-breakdown": (
        "Host microseconds per call, each part timed in the same run.",
        "part|us/call:",
        lambda d: [[name, f"{us:+.2f}"] for name, us in d["us_per_call"].items()],
    ),
    "route-instructions": (
        "Instructions per call inside the operator's dispatcher entry ({calls} calls), native backing `{backing}` "
        "against flagos; model rows count the whole process, per routed call. Counts swing less than timings: one "
        "commit's model rows have differed by ~130 instructions a routed call (its own functions' by a few).",
        "row|native:|flagos:|added:|added per routed call:|torch_fl's own functions per routed call:|"
        "L1 misses added per routed call (code, data read, data write):",
        lambda d: [
            [r["op"], f"{r['native']:,}", f"{r['flagos']:,}", f"{r['added']:+,}"]
            + ["" if r.get("added_per_routed_call") is None else f"{r['added_per_routed_call']:+,}", _own(r)]
            + [" / ".join(f"{v:+.1f}" for v in r.get("added_misses_per_routed_call", {}).values())]
            for r in d["rows"]
        ],
    ),
    "alias-pool": (
        "Qwen3-0.6B architecture, {args[layers]} layers, prefill {args[batch]} x {args[length]}, decode "
        "{args[decode_tokens]} tokens, `{backing}` backing. Counts, not timings.",
        "workload|borrows:|made:|reshaped:|missed:",
        lambda d: [
            [name, f"{r['borrows']:,}", str(r["made"]), str(r["reshaped"]), f"{r['missed']:.1%}"]
            for name, r in d["rows"].items()
        ],
    ),
    "calibrate": (
        "`python -m torch_fl calibrate --model M --rounds {args[rounds]} --per-op {args[per_op]}` per model (its "
        "default tasks and batch sizes); the routing files are beside this one. Per-operator wins: measured classes "
        "where FlagGems was at least 1.05x native alone, the largest first; the workload row is calibrate's "
        "confirmation, the whole workload with its routed classes against all native. A model measured at another "
        "commit than the file's names it.",
        "model|classes to FlagGems:|workload with them / native:|per-operator wins (of classes measured):",
        lambda d: [_calibrate_row(m, r, d["meta"]["commit"]) for m, r in d["models"].items()],
    ),
    "compile": (
        _compile_intro,
        "task|flagos / native:|native compile s:|flagos compile s:",
        lambda d: [
            [f"{label} ({e['pairs']} pairs)", ratio_interval(e), str(e["compile_s"]["native"])]
            + [str(e["compile_s"]["flagos"])]
            for label, e in [("prefill", d["prefill"]), ("training step", d["train"])]
            + [(f"{kind} inference", e) for kind, e in d.get("small", {}).items()]
        ],
    ),
    "ddp-step": (
        "MLP of {args[layers]} x {args[hidden]} hidden, batch {args[batch]}, {args[steps]} timed steps per child, "
        "{args[rounds]} ABBA rounds; DDP at world size 1 (flagos: the flagos backend; native: NCCL on cuda, gloo on "
        "the CPU). flagos throughput / native: {ratio_text}.",
        "side|backing|step (ms, median of rounds):",
        lambda d: [[side, v["backing"], f"{v['step_ms_median']:.3f}"] for side, v in d["sides"].items()],
    ),
    "trainer": (
        _trainer_intro,
        "flagos / native:|native steps/s:|flagos steps/s:|peak memory flagos / native:|loss max abs diff:"
        "|losses within tolerance (first 20 / all)",
        lambda d: [_trainer_row(d)],
    ),
}


def _calibrate_row(model: str, r: dict, file_commit: str | None = None) -> list[str]:
    if r.get("commit") and (r["commit"], bool(r.get("dirty"))) != (file_commit, False):
        model += f" (at {r['commit']}{'+' if r.get('dirty') else ''})"
    if "error" in r:
        return [model, "", "", f"failed: {r['error']}"[:120].replace("|", "/")]
    wins = sorted((x for x in r["rules"] if (x["speedup"] or 0) >= 1.05), key=lambda x: -x["speedup"])
    best = ", ".join(f"{x['rule']} {x['speedup']:.2f}x" for x in wins[:4]) + (", ..." if len(wins) > 4 else "")
    trial = "" if r["workload_ratio"] is None else f"{r['workload_ratio']:.3f}x ± {r['workload_noise']:.3f}"
    trial += " (confirmed)" if r["confirmed"] else (" (not confirmed: all native)" if trial else "")
    return [model, str(len(r["routed"])), trial, f"{len(wins)} of {len(r['rules'])}" + (f": {best}" if wins else "")]


def _tables(benchmark: str, d: dict) -> list[str]:
    if benchmark == "e2e":
        return e2e_tables(d)
    intro, head, rows = SPECS[benchmark]
    fields = {**d, "ratio_text": format_ratio(d["ratio"]) if "ratio" in d else ""}
    out = [intro(d) if callable(intro) else intro.format_map(fields), "", *md(head, rows(d))]
    for r in d.get("rows", []) if benchmark == "route-instructions" else []:
        if r.get("added_by_function_per_routed_call"):
            out += [f"Where the {r['op'].split(',')[0]} adds its first-level code misses, per routed call: the "
                    "functions whose misses flagos adds most to native's (torch_fl's own, and those it runs more of "
                    "than native does).", ""]  # fmt: skip
            out += md("function|code misses added:|instructions added:", [
                [f"`{f['function']}`", f"{f['I1mr']:+.1f}", f"{f['Ir']:+,.1f}"]
                for f in r["added_by_function_per_routed_call"]
            ])  # fmt: skip
    if benchmark == "trainer" and d.get("errors"):
        out += ["Failed: " + "; ".join(f"{k}: {exception_line(e)}" for k, e in d["errors"].items()) + ".", ""]
    return out


TABLES = {b: (lambda d, b=b: _tables(b, d)) for b in ("e2e", *SPECS)}


def benchmarks_md(results: dict[str, dict]) -> str:
    lines = [
        "# Benchmarks",
        "",
        "Generated by `python -m benchmarks.report` from `benchmarks/results/*.json`; do not edit by hand.",
        "",
        "One canonical result file per benchmark and machine, `benchmarks/results/<benchmark>-<machine>.json`, "
        "overwritten by each run of its script (the GPU runs: `bash scripts/gpu_bench.sh`, then copy the files "
        "it writes to `$OUT` into benchmarks/results/ and run `python -m benchmarks.report`). Ratios are "
        "flagos relative to native; ± is the noise, half the interquartile range of the per-pair or per-round "
        "samples (torch_fl/calibration/stats.py).",
        "",
    ]
    for stem, d in results.items():
        meta = d["meta"]
        lines += [f"## {stem}: {TITLES.get(meta['benchmark'], meta['benchmark'])}", "", provenance(stem, meta), ""]
        lines += TABLES[meta["benchmark"]](d)
    return "\n".join(lines).rstrip() + "\n"


def calibrated_file_changed(e2e: dict) -> str | None:
    """A note when the routing file e2e.py measured (--calibrated) is not the one committed now."""
    words = (e2e.get("meta", {}).get("command") or "").split()
    if "--calibrated" not in words or words.index("--calibrated") + 1 >= len(words):
        return None
    path = REPO / words[words.index("--calibrated") + 1]
    if not path.is_file() or REPO not in path.resolve().parents:
        return None
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    if e2e.get("calibrated_sha256") == sha:
        return None
    date = next(
        (line.split(":", 1)[1].strip() for line in path.read_text().splitlines() if line.startswith("# date:")), ""
    )
    return f"measured with an earlier {path.name} than the committed one" + (f" (written {date[:10]})" if date else "")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if a generated file is stale")
    p.add_argument("--results", default=str(RESULTS), help=argparse.SUPPRESS)
    p.add_argument("--doc", default=str(DOC), help=argparse.SUPPRESS)
    p.add_argument("--readme", default=str(README), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    from benchmarks.targets import readme_table, with_readme_table  # it builds on this module's helpers

    results = load_results(Path(args.results))
    doc, readme = Path(args.doc), Path(args.readme)
    try:
        new_readme = with_readme_table(readme.read_text(), readme_table(results))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    wanted = {doc: benchmarks_md(results), readme: new_readme}
    stale = [path for path, text in wanted.items() if not path.exists() or path.read_text() != text]
    if args.check:
        for path in stale:
            print(f"{path} is stale: run python -m benchmarks.report", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(wanted[path])
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
