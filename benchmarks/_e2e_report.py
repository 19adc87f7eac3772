"""benchmarks/e2e.py's report: the summary of the child rounds, its table, the one-line briefs and the chart."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from benchmarks import common
from benchmarks.common import errors_brief, exception_line


def compare_logits(res: dict, reference: dict) -> None:
    """A child's decode logits (the file _e2e_child.save_prompt_logits wrote) against native's first round's,
    in place: logits_max_diff and logits_within_tolerance (workloads.LOGITS_TOLERANCE, the tests' tolerance
    for the model's dtype) replace the file, which is removed. `reference` keeps native's logits."""
    dec = res.get("tasks", {}).get("decode", {})
    path = dec.pop("logits_file", None)
    if path is None:
        return
    import torch

    common.models()
    import workloads

    logits = torch.load(path)
    Path(path).unlink()
    if res["variant"] == "native" and "logits" not in reference:
        reference["logits"] = logits
    ref = reference.get("logits")
    if ref is None:
        return  # native's first decode failed: nothing to compare with
    if logits.shape != ref.shape:
        dec["logits_within_tolerance"] = False
        dec["logits_error"] = f"shape {list(logits.shape)}, native's {list(ref.shape)}"
        return
    tol = workloads.LOGITS_TOLERANCE[getattr(torch, dec["logits_dtype"])]
    dec["logits_max_diff"] = float((logits - ref).abs().max())
    dec["logits_within_tolerance"] = bool(torch.allclose(logits, ref, **tol))


def _first_difference(runs: list[dict], native: list) -> int | None:
    """The first generated position (0-based) where any run's tokens leave native's, or None."""
    firsts = [
        next((i for i, (a, b) in enumerate(zip(row, ref, strict=True)) if a != b), None)
        for x in runs
        for row, ref in zip(x["tokens"], native, strict=True)
    ]
    firsts = [i for i in firsts if i is not None]
    return min(firsts) if firsts else None


def _agreement(summary: dict) -> None:
    """Per variant: how close its decode logits are to native's, and whether tokens that differ are explained:
    operators ran on other kernels than native (which round differently, and greedy decoding turns a last-bit
    difference between near-tied logits into another token) while the logits agree within tolerance."""
    for per_task in summary.values():
        dec = per_task.get("decode", {})
        for t in ("decode", "graphs"):
            e = per_task.get(t, {})
            if e.get("tokens_match_native") is False:
                other = sorted(b for b in e.get("backends", {}) if b != "native")
                e["tokens_explained"] = bool(other) and dec.get("logits_within_tolerance") is True
                e["other_kernels"] = other


def summarise(raw: list[dict], variants: list[str], tasks: list[str]) -> dict:
    summary: dict = {}
    native_tokens: dict = {}  # per decoding task (decode, graphs): native's first round's tokens
    for r in raw:
        for t in ("decode", "graphs"):
            if r["variant"] == "native" and t not in native_tokens and "tokens" in r["tasks"].get(t, {}):
                native_tokens[t] = r["tasks"][t]["tokens"]
    for v in variants:
        for t in tasks:
            runs = [r["tasks"].get(t, {"error": r.get("error", "no result")}) for r in raw if r["variant"] == v]
            ok = [x for x in runs if "error" not in x and "tokens_per_s" in x]
            entry: dict = {"rounds_ok": len(ok), "rounds": len(runs)}
            errors = sorted({x["error"] for x in runs if "error" in x})
            if errors:
                entry["errors"] = errors
            if ok:
                entry["tokens_per_s"] = statistics.median(x["tokens_per_s"] for x in ok)
                entry["tokens_per_s_all"] = [round(x["tokens_per_s"], 2) for x in ok]
                peaks = [x["peak_bytes"] for x in ok if x.get("peak_bytes") is not None]
                entry["peak_bytes"] = max(peaks) if peaks else None
                if t in native_tokens:
                    entry["tokens_match_native"] = all(x["tokens"] == native_tokens[t] for x in ok)
                    if not entry["tokens_match_native"]:
                        entry["first_difference"] = _first_difference(ok, native_tokens[t])
                diffs = [x["logits_max_diff"] for x in ok if "logits_max_diff" in x]
                if diffs:
                    entry["logits_max_diff"] = max(diffs)
                checked = [x["logits_within_tolerance"] for x in ok if "logits_within_tolerance" in x]
                if checked:
                    entry["logits_within_tolerance"] = all(checked)
                if t == "graphs":
                    entry["tokens_match_eager"] = all(x.get("tokens_match_eager") for x in ok)
                fb = sorted({op for x in ok for op in x.get("fallback_ops", [])})
                if v.startswith("flagos"):
                    entry["fallback_ops"] = fb
                    entry["backends"] = ok[-1].get("backends", {})
            summary.setdefault(v, {})[t] = entry
    for per_task in summary.values():
        for t, e in per_task.items():
            base = summary.get("native", {}).get(t, {})
            if "tokens_per_s" in e and base.get("tokens_per_s"):
                e["ratio_to_native"] = e["tokens_per_s"] / base["tokens_per_s"]
            eager = summary.get("native", {}).get("decode", {})
            if t == "graphs" and "tokens_per_s" in e and eager.get("tokens_per_s"):
                e["ratio_to_native_eager_decode"] = e["tokens_per_s"] / eager["tokens_per_s"]
            if e.get("peak_bytes") and base.get("peak_bytes"):
                e["peak_memory_ratio"] = e["peak_bytes"] / base["peak_bytes"]
    _agreement(summary)
    return summary


def table(summary: dict, tasks: list[str]) -> str:
    lines = [
        "| variant | task | tokens/s (median) | ratio to native | peak memory (GiB) | memory ratio | greedy = native |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for v, per_task in summary.items():
        for t in tasks:
            e = per_task.get(t, {})
            if not e.get("rounds"):
                continue  # --rounds 0: the in-process pairs alone
            if "tokens_per_s" not in e:
                err = errors_brief(e.get("errors", ["no result"]))
                lines.append(f"| {v} | {t} | error: {err} | | | | |")
                continue
            ratio = f"{e['ratio_to_native']:.3f}x" if "ratio_to_native" in e else ""
            peak = f"{e['peak_bytes'] / 2**30:.2f}" if e.get("peak_bytes") else "n/a"
            mem = f"{e['peak_memory_ratio']:.3f}x" if "peak_memory_ratio" in e else ""
            match = {True: "yes", False: "NO"}.get(e.get("tokens_match_native"), "")
            lines.append(f"| {v} | {t} | {e['tokens_per_s']:,.1f} | {ratio} | {peak} | {mem} | {match} |")
    return "\n".join(lines) if len(lines) > 2 else "(no child rounds: --rounds 0)"


def paired_brief(paired: dict) -> str:
    if "error" in paired:
        return f"error: {exception_line(paired['error'])[:200]}"
    parts = []
    for t, r in paired["tasks"].items():
        if "error" in r:
            parts.append(f"{t} error: {exception_line(r['error'])[:200]}")
            continue
        match = {True: ", greedy = native", False: ", greedy differs"}.get(r.get("tokens_match_native"), "")
        if t == "decode_tokens":
            alone = r["alone_ratio_median"]
            parts.append(
                f"decode token by token {r['ratio_median']:.3f}x (median of {r['pairs']} token pairs, "
                f"{r['ratio_of_sums']:.3f}x summed{match}; alone {alone:.3f}x)"
            )
        else:
            against = f", against {r['against']}" if r.get("against") else ""
            parts.append(f"{t} {r['ratio_median']:.3f}x (median of {r['pairs']} pairs{against}{match})")
    return "; ".join(parts)


def chart(summary: dict, tasks: list[str], path: Path, title: str, paired: dict | None = None) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    # Each variant's ratio over the child rounds, and the median per-pair
    # ratio of the in-process pairs where they ran (the steadier number).
    series = {
        v: [summary[v].get(t, {}).get("ratio_to_native", 0.0) for t in tasks]
        for v in summary
        if any(summary[v].get(t, {}).get("rounds") for t in tasks)  # none with --rounds 0
    }
    pairs = (paired or {}).get("tasks", {})
    if set(pairs) & set(tasks):
        series["flagos, in-process pairs"] = [pairs.get(t, {}).get("ratio_median", 0.0) for t in tasks]
    if "decode_tokens" in pairs:
        by_token = pairs["decode_tokens"]["ratio_median"]
        series["flagos, token-by-token pairs"] = [by_token if t == "decode" else 0.0 for t in tasks]
    variants = list(series)
    fig, ax = plt.subplots(figsize=(8, 4.2))
    width = 0.8 / max(1, len(variants))
    for i, v in enumerate(variants):
        vals = series[v]
        xs = [j + (i - (len(variants) - 1) / 2) * width for j in range(len(tasks))]
        bars = ax.bar(xs, vals, width, label=v)
        for b, val, t in zip(bars, vals, tasks, strict=True):
            label = f"{val:.3f}" if val else ("error" if summary.get(v, {}).get(t, {}).get("errors") else "")
            ax.annotate(label, (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom", fontsize=8)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(tasks)), tasks)
    ax.set_ylabel("tokens/s relative to native (higher is better)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return str(path)


def title(report: dict) -> str:
    rounds = max((s.get("rounds", 0) for v in report["summary"].values() for s in v.values()), default=0)
    where = report["meta"]["versions"].get("gpu") or "host CPU"
    what = f"median of {rounds} rounds" if rounds else "in-process pairs"
    return f"Qwen3 {report['model']} on {where}, {what} ({report['meta']['date'][:10]})"


def replot(json_path: str) -> int:
    """Draws the PNG of a written report again (e.g. after the chart changed)."""
    report = json.loads(Path(json_path).read_text())
    tasks = list(report["sizes"])
    png = chart(report["summary"], tasks, Path(json_path).with_suffix(".png"), title(report), report.get("paired"))
    print(f"wrote {png}" if png else "no PNG: matplotlib is not installed", file=sys.stderr if not png else sys.stdout)
    return 0 if png else 1
