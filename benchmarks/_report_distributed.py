"""report.py's pages for the distributed benchmarks: ddp_step.py (world size 1) and multigpu.py (DDP and
FSDP2 of Qwen3 over several GPUs), and the README targets of the multi-GPU runs."""

from __future__ import annotations

from _timing import format_ratio

MODES = {"ddp": "DDP", "fsdp": "FSDP2"}


def ddp_tables(d: dict) -> list[str]:
    a, sides, r = d.get("args", {}), d["sides"], d["ratio"]
    out = [
        f"MLP of {a.get('layers')} x {a.get('hidden')} hidden, batch {a.get('batch')}, {a.get('steps')} timed steps "
        f"per child, {a.get('rounds')} ABBA rounds; DDP at world size 1 (flagos: the flagos backend; native: "
        f"NCCL on cuda, gloo on the CPU). flagos throughput / native: {format_ratio(r)}.",
        "",
        "| side | backing | step (ms, median of rounds) |",
        "| --- | --- | ---: |",
    ]
    out += [f"| {side} | {v['backing']} | {v['step_ms_median']:.3f} |" for side, v in sides.items()]
    return out + [""]


def multigpu_tables(d: dict) -> list[str]:
    sz, a = d.get("sizes", {}), d.get("args", {})
    out = [
        f"Qwen3 {sz.get('variant')}, batch {sz.get('batch')} x {sz.get('length')} per GPU, bf16 autocast, AdamW; "
        f"{d.get('world_size')} processes per torchrun job, {a.get('steps')} timed steps, ABBA rounds (native: "
        "NCCL on cuda, gloo on the CPU; flagos: the flagos backend). Losses: rank 0's, equal within "
        f"relative {d.get('loss_rtol')}.",
        "",
        "| mode | flagos / native | native tokens/s per GPU | flagos tokens/s per GPU | peak memory ratio "
        "| losses equal |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for mode, label in MODES.items():
        e = d.get(mode, {})
        if "ratio_median" not in e:
            out.append(f"| {label} | error: {'; '.join(e.get('errors', ['not run']))[:90]} | | | | |")
            continue
        peak = f"{e['peak_memory_ratio']:.3f}x" if "peak_memory_ratio" in e else "n/a"
        out.append(
            f"| {label} | {format_ratio(e)} ({e['pairs']} rounds) | {e['native']['tokens_per_s_per_gpu']:,.0f} | "
            f"{e['flagos']['tokens_per_s_per_gpu']:,.0f} | {peak} | {'yes' if e['losses_equal'] else 'NO'} |"
        )
    return out + [""]


def multigpu_targets(results: dict[str, dict]) -> list[tuple]:
    """The multi-GPU targets (flagos >= 0.97x native for DDP and FSDP2, peak memory <= 1.02x, equal losses)
    from every multigpu-<GPU>x<N> result of several GPUs."""
    rows = []
    for stem, d in results.items():
        if d["meta"]["benchmark"] != "multigpu" or stem.startswith("multigpu-host"):
            continue
        for mode, label in MODES.items():
            e = d.get(mode, {})
            if "ratio_median" not in e:
                continue
            peak = e.get("peak_memory_ratio")
            text = f"{format_ratio(e)} ({e['pairs']} rounds), peak memory " + (f"{peak:.3f}x" if peak else "n/a")
            text += ", losses equal" if e["losses_equal"] else ", losses DIFFER"
            met = e["ratio_median"] >= 0.97 and (peak is None or peak <= 1.02) and e["losses_equal"]
            rows.append((f"{label} Qwen3-0.6B on {d['world_size']} GPUs >= 0.97x native", text, met, stem))
    return rows
