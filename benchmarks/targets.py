"""README.md's performance table: each target the canonical results in benchmarks/results/*.json speak to, what
they measured and whether it is met (rendered by `python -m benchmarks.report`)."""

from __future__ import annotations

from benchmarks import report
from benchmarks.common import exception_line

START, END = "<!-- benchmarks:start -->", "<!-- benchmarks:end -->"


def _span(values: list[float], fmt: str) -> str:
    lo, hi = min(values), max(values)
    return fmt.format(lo) if lo == hi else f"{fmt.format(lo)} to {fmt.format(hi)}"


def overhead_targets(res: list[dict]) -> list[tuple]:
    rows = []
    large = [r for r in res if r["unit"] != "us/call"]
    if large:
        text = ", ".join(f"{r['name'].split(' (')[0]} {r['ratio']:.3f}x" for r in large)
        # throughput ratios (flagos / native): faster than native is within the target, not outside it
        rows.append(("large operators at most 2 % below native", text, all(r["ratio"] >= 0.98 for r in large)))
    timed = [r for r in res if r["unit"] == "us/call" and r.get("added_us") is not None]
    if small := [r for r in timed if "flaggems" not in r["name"]]:
        text = _span([r["added_us"] for r in small], "{:+.2f}") + " us"
        rows.append(("small operators <= native + 1.0 us per call", text, all(r["added_us"] <= 1.0 for r in small)))
    for words, target, limit in (
        (("flaggems replay", "fast path"), "FlagGems replay 4x4 <= native CUDA + 5 us per call", 5.0),
        (("flaggems_python",), "flaggems_python call <= 3 us over calling `flag_gems` directly", 3.0),
    ):
        if got := [r for r in timed if any(w in r["name"] for w in words)]:
            text = ", ".join(f"`{r['name'].split()[0]}` {r['added_us']:+.2f} us" for r in got)
            rows.append((target, text, all(r["added_us"] <= limit for r in got)))
    return [(*r, "overhead") for r in rows]


def e2e_targets(e2e: dict) -> list[tuple]:
    rows = []
    pairs = dict(report.e2e_pairs(e2e))
    flagos = e2e.get("summary", {}).get("flagos", {})
    # eager native routes: decode within 1 % of native, training within 2 %, each judged by its steadiest pairs
    # (training's: native and flagos in worker processes taking turns; a child round is shown beside them)
    for task, floor, name in (("decode", 0.99, "decode"), ("prefill", 0.97, "prefill"), ("train", 0.98, "training")):
        labels = report.PAIR_LABELS[task][:1] if task == "train" else report.PAIR_LABELS[task]
        got = [(lab, pairs[lab]) for lab in labels if lab in pairs]
        parts = [f"{report.ratio_interval(e)} ({lab}, {e['pairs']} pairs)" for lab, e in got]
        if task == "train" and "ratio_to_native" in (train := flagos.get("train", {})):
            parts.append(f"{train['ratio_to_native']:.3f}x ({report.n_rounds(train['rounds_ok'], 'child ')})")
        if parts:
            met = bool(got) and got[0][1]["ratio_median"] >= floor
            rows.append((f"Qwen3-0.6B {name} >= {floor}x native", ", ".join(parts), met))
    rows = [(*r, "e2e") for r in rows]
    eager = pairs.get(report.PAIR_TASKS["decode"])
    rows += graph_targets(e2e.get("summary", {}), pairs.get(report.PAIR_TASKS["graphs"]), eager)
    rows += generate_targets(flagos, pairs.get(report.PAIR_TASKS["static_generate"]), eager)
    rows += flaggems_profile_targets(e2e) + calibrated_targets(e2e)
    if mem := [e["peak_memory_ratio"] for e in flagos.values() if "peak_memory_ratio" in e]:
        rows.append(("peak memory <= 1.02x native", f"{max(mem):.3f}x at most", max(mem) <= 1.02, "e2e"))
    if match := [e["tokens_match_native"] for e in [*flagos.values(), *pairs.values()] if "tokens_match_native" in e]:
        text = "identical" if all(match) else "DIFFER"
        rows.append(("greedy tokens identical to native", text, all(match), "e2e"))
    return rows


def gpu_machine(results: dict[str, dict]) -> str:
    """The GPU machine README's table reads: the one with the most benchmarks' results, then the newest file."""
    names = {stem: stem[len(b) + 1 :] for stem in results for b in report.TITLES if stem.startswith(f"{b}-")}
    count = {m: list(names.values()).count(m) for m in set(names.values()) - {"host"}}  # one rerun does not move it
    newest = {m: max(results[s].get("meta", {}).get("date") or "" for s in names if names[s] == m) for m in count}
    return max(count, key=lambda m: (count[m], newest[m], m)) if count else "h200"


def targets(results: dict[str, dict]) -> list[tuple[str, str, bool, str]]:
    """(target, measured, met, source file) for each performance target the results of one GPU machine speak to."""
    machine, rows = gpu_machine(results), []
    if over := results.get(f"overhead-{machine}"):
        rows += overhead_targets(over["results"])
    if e2e := results.get(f"e2e-{machine}"):
        rows += e2e_targets(e2e)
    if comp := results.get(f"compile-{machine}"):
        for task, label in (("prefill", "prefill"), ("train", "training step")):
            e, target = comp[task], f"compiled Qwen3-0.6B {label} >= 0.97x compiled native"
            text, met = f"{report.ratio_interval(e)} ({e['pairs']} pairs)", e["ratio_median"] >= 0.97
            rows.append((target, text, met, "compile"))
        if small := comp.get("small"):
            text = ", ".join(f"{kind} {e['ratio_median']:.3f}x" for kind, e in small.items())
            met = all(e["ratio_median"] >= 0.97 for e in small.values())
            target = "compiled small Hugging Face models >= 0.97x compiled native, each"
            rows.append((target, text, met, "compile"))
    rows += trainer_targets(results.get(f"trainer-{machine}")) + calibrate_targets(results.get(f"calibrate-{machine}"))
    return [(*r, f"{src}-{machine}") for *r, src in rows]


def graph_targets(summary: dict, pair: dict | None = None, eager: dict | None = None) -> list[tuple]:
    """The CUDA graph decoding targets (docs/graphs.md); `pair`, the in-process pairs, judges where present (with
    `eager`, the eager decode pairs, where no child round ran)."""
    rows = []
    graphs = summary.get("flagos", {}).get("graphs", {})
    gems = summary.get("flagos_flaggems", {}).get("graphs", {})
    got = [(pair["ratio_median"], f"{report.paired_ratio(pair)} ({pair['pairs']} pairs)")] if pair else []
    if "ratio_to_native" in graphs:
        r = graphs["ratio_to_native"]
        got.append((r, f"{r:.3f}x ({report.n_rounds(graphs.get('rounds_ok', '?'), 'child ')})"))
    if got:
        text = ", ".join(t for _, t in got)
        rows.append(("Qwen3-0.6B graph decode >= 0.99x native graph decode", text, got[0][0] >= 0.99))
    r = graphs.get("ratio_to_native_eager_decode") or (
        pair and eager and pair["flagos_tokens_per_s"] / eager["native_tokens_per_s"]
    )
    if r:
        rows.append(("Qwen3-0.6B graph decode >= 2x native eager decode", f"{r:.2f}x", r >= 2.0))
    if "ratio_to_native" in gems:
        r = gems["ratio_to_native"]
        rows.append(("FlagGems profile graph decode >= 1.0x native graph decode", f"{r:.3f}x", r >= 1.0))
    return [(*r, "e2e") for r in rows]


def generate_targets(flagos: dict, pair: dict | None, eager: dict | None = None) -> list[tuple]:
    """Hugging Face's compiled static-cache generate() on flagos against the same on native, and against flagos's
    eager decode; `pair`, the in-process pairs, judges where present (with `eager`, as in graph_targets)."""
    rows, gen = [], flagos.get("static_generate", {})
    got = [(pair["ratio_median"], f"{report.paired_ratio(pair)} ({pair['pairs']} pairs)")] if pair else []
    if "ratio_to_native" in gen:
        got.append((gen["ratio_to_native"], f"{gen['ratio_to_native']:.3f}x ({report.n_rounds(gen['rounds_ok'])})"))
    if got:
        text = ", ".join(t for _, t in got)
        rows.append(("Qwen3-0.6B compiled static-cache generate() >= 0.97x native's", text, got[0][0] >= 0.97))
    dec, tps = flagos.get("decode", {}).get("tokens_per_s"), gen.get("tokens_per_s")
    r = tps / dec if tps and dec else (pair and eager and pair["flagos_tokens_per_s"] / eager["flagos_tokens_per_s"])
    if r:
        rows.append(("Qwen3-0.6B compiled static-cache generate() >= 3x flagos eager decode", f"{r:.2f}x", r >= 3))
    return [(*r, "e2e") for r in rows]


def variant_targets(e2e: dict, variant: str, target: str, floors: dict[str, float]) -> list[tuple]:
    """A routing variant of e2e.py against native eager: met when every task in `floors` that ran reaches its
    floor, judged by its in-process pairs where there are (the steadier figure), else by the child rounds."""
    runs, pairs = e2e.get("summary", {}).get(variant, {}), dict(report.e2e_pairs(e2e, variant))
    got = []
    for t in floors:
        if paired := [pairs[lab] for lab in report.PAIR_LABELS.get(t, ()) if lab in pairs]:
            e = paired[0]
            got.append((t, e["ratio_median"], f"{report.paired_ratio(e)} ({e['pairs']} pairs)"))
        elif "ratio_to_native" in runs.get(t, {}):
            e = runs[t]
            got.append(
                (t, e["ratio_to_native"], f"{e['ratio_to_native']:.3f}x ({report.n_rounds(e.get('rounds_ok', '?'))})")
            )
    failed = [runs[t]["errors"][0] for t in floors if runs.get(t, {}).get("errors") and not runs[t].get("rounds_ok")]
    if not got and failed:  # it ran and failed: the target is missed, with the error
        return [(target, f"failed: {exception_line(failed[0])[:160]}", False, "e2e")]
    if not got:
        return []
    text = ", ".join(f"{t} {shown}" for t, _, shown in got)
    return [(target, text, all(r >= floors[t] for t, r, _ in got), "e2e")]


def agreement_targets(summary: dict, variant: str, target: str) -> list[tuple]:
    """A routing variant's greedy tokens: met when its prompt logits agree with native's within the tests'
    tolerance and its tokens are native's or differ explained (operators ran on other kernels)."""
    runs = summary.get(variant, {})
    got = [(t, runs[t]) for t in ("decode", "graphs") if "tokens_match_native" in runs.get(t, {})]
    logits = runs.get("decode", {})
    if not got or "logits_within_tolerance" not in logits:
        return []  # a run from before the logits were compared
    parts = []
    for t, e in got:
        if e["tokens_match_native"]:
            parts.append(f"{t} identical")
        else:
            how = f"explained: {', '.join(e['other_kernels'])} ran" if e.get("tokens_explained") else "NOT explained"
            parts.append(f"{t} differ from token {e.get('first_difference', 0) + 1} ({how})")
    close = logits["logits_within_tolerance"]
    diff = f"{logits['logits_max_diff']:.3g}" if "logits_max_diff" in logits else "n/a"
    text = "; ".join(parts) + f"; prompt logits max abs diff {diff}, {'within' if close else 'BEYOND'} tolerance"
    met = close and all(e["tokens_match_native"] or e.get("tokens_explained") for _, e in got)
    return [(target, text, met, "e2e")]


def flaggems_profile_targets(e2e: dict) -> list[tuple]:
    """The FlagGems profile (FLAGOS_USE_FLAGGEMS=1, routes replayed) against native eager, and its tokens."""
    floors = {"decode": 0.9, "prefill": 0.9, "train": 0.9}
    target = "FlagGems profile greedy tokens native's or explained, logits within tolerance"
    return variant_targets(
        e2e, "flagos_flaggems", "FlagGems profile Qwen3-0.6B eager >= 0.9x native", floors
    ) + agreement_targets(e2e.get("summary", {}), "flagos_flaggems", target)


def calibrated_targets(e2e: dict) -> list[tuple]:
    """Routing from `python -m torch_fl calibrate` (e2e.py --calibrated FILE) against native eager."""
    floors = {"decode": 1.0, "prefill": 1.02, "train": 1.02}
    target = "calibrated routing Qwen3-0.6B >= 1.02x native (decode >= 1.0x)"
    agree = "calibrated routing greedy tokens native's or explained, logits within tolerance"
    rows = variant_targets(e2e, "flagos_calibrated", target, floors) + agreement_targets(
        e2e.get("summary", {}), "flagos_calibrated", agree
    )
    if rows and (note := report.calibrated_file_changed(e2e)):
        rows[0] = (rows[0][0], f"{rows[0][1]}; {note}", *rows[0][2:])
    return rows


def trainer_targets(d: dict | None) -> list[tuple]:
    """The Trainer fine-tune's targets (trainer_bench.py); a run that failed misses them, with its error."""
    if not d:
        return []
    speed, mem, agree = d.get("speed"), d.get("peak_memory"), d.get("loss_agreement")
    rows, name = [], "Trainer fine-tune of Qwen3-0.6B"
    if agree:
        text = f"max relative difference {agree['max_rel_diff']:.3g} over {agree['steps']} steps (rtol {agree['rtol']})"
        rows.append((f"{name}: losses within bf16 tolerance of native", text, agree["within_all"]))
    if speed:
        text = f"{report.ratio_interval(speed)} ({speed['pairs']} pairs)"
        rows.append((f"{name} >= 0.97x native steps/s", text, speed["ratio_median"] >= 0.97))
    if mem:
        rows.append((f"{name} peak memory <= 1.02x native", f"{mem['ratio']:.3f}x", mem["ratio"] <= 1.02))
    if not rows and d.get("errors"):
        text = f"failed: {exception_line(next(iter(d['errors'].values())))[:160]}"
        rows.append((f"{name} on flagos", text, False))
    return [(*r, "trainer") for r in rows]


def calibrate_targets(d: dict | None) -> list[tuple]:
    """calibrate's routing files on the standard workloads (calibrate_models.py), each as its whole workload ran
    with the classes it routes against all native (calibrate's confirmation). A file with nothing confirmed routes
    nothing to FlagGems: it runs at native's speed."""
    if not d or not d.get("models"):
        return []
    parts, ratios = [], []
    for model, r in d["models"].items():
        if "error" in r:
            parts.append(f"{model} failed")
        elif r["confirmed"]:
            ratios.append(r["workload_ratio"])
            parts.append(f"{model} {r['workload_ratio']:.3f}x ± {r['workload_noise']:.3f}")
        else:
            ratios.append(1.0)
            parts.append(f"{model} all native (no class confirmed)")
    met = len(ratios) == len(d["models"]) and max(ratios) >= 1.05 and min(ratios) >= 0.99
    target = "calibrated routing >= 1.05x the native routes on a standard workload, >= 0.99x on each"
    return [(target, ", ".join(parts), met, "calibrate")]


def readme_table(results: dict[str, dict]) -> str:
    """The README's short table: each performance target, what the canonical files measured, whether met."""
    rows = targets(results)
    sources = sorted({src for *_, src in rows})
    meta = {s: results[s].get("meta", {}) for s in sources}
    dates = (f"`benchmarks/results/{s}.json` ({m.get('date')}, commit {m.get('commit')})" for s, m in meta.items())
    table = report.md("target|measured|met", [[t, m, "yes" if ok else "NO"] for t, m, ok, _ in rows])
    line = f"Generated by `python -m benchmarks.report` from {', '.join(dates)}; ± is the noise (half the "
    return "\n".join([*table, line + "interquartile range of the pairs)."])


def with_readme_table(readme: str, table: str) -> str:
    if START not in readme or END not in readme or readme.index(START) > readme.index(END):
        raise ValueError(f"README.md has no {START} ... {END} markers: add them where the table belongs")
    head, rest = readme.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table}\n{END}{tail}"
