"""Instructions a routed call executes, native against flagos, counted by valgrind (callgrind).

Counts swing less than timings (one commit's model rows have differed by ~130 instructions a routed call). Per operator:
a loop under callgrind on each device, counting inside the operator's dispatcher entry (`at::_ops::<op>::call`).
A last row counts a tiny Qwen3's decode (needs transformers) per routed call, own functions and L1 misses.

    python -m benchmarks.route_instructions         # host backing: writes route-instructions-host.json

Needs valgrind on PATH (`apt install valgrind`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap

from benchmarks import common

# name -> (the dispatcher entry counted, the statement timed; a and b are 4x4, w is 4x4)
OPS = {
    "mul.Tensor": ("mul_Tensor", "a * b"),
    "add.Tensor": ("add_Tensor", "a + b"),
    # inference mode makes inference tensors (no autograd keys); flagos retags them in place too
    "add, inference mode": ("add_Tensor", "with torch.inference_mode(): a + b"),
    "mm": ("mm", "torch.mm(a, w)"),
    "cat": ("cat", "torch.cat([a, b])"),
    "_to_copy (dtype)": ("_to_copy", "a.to(torch.float64)"),
    "topk (two results)": ("topk", "torch.topk(a, 2)"),
    "view (metadata)": ("view", "a.view(16)"),
}
CALLS = 1000
MISSES = ("I1mr", "D1mr", "D1mw")  # callgrind's first-level misses: code reads, data reads, data writes

LOOP = """
import sys, torch, torch_fl
torch.set_num_threads(1)
dev = sys.argv[1]
a, b, w = (torch.randn(4, 4, device=dev) for _ in range(3))
for _ in range(50):
    {stmt}
for _ in range({calls}):
    {stmt}
"""


# A model workload of the tiny Qwen3, counted from inside libc's qsort (callgrind collects only while a named
# function runs; qsort's first comparison runs exactly the workload). `{setup}` warms up; `{work}` is counted.
MODEL = """
import ctypes, gc, sys, torch, torch_fl
from torch_fl import routing
from torch_fl.models import qwen3, workloads
torch.set_num_threads(1)
dev = sys.argv[1]
model = qwen3.build("tiny", seed=0).eval().to(dev)
{setup}
routing.reset_stats()
gc.collect()
gc.disable()
ran = []
def work(a, b):
    if not ran:
        with torch.no_grad():
            ran.append({work})
    return 0
cmp = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)(work)
ctypes.CDLL(None).qsort((ctypes.c_long * 2)(1, 2), 2, 8, cmp)
print("routed", sum(s.calls for s in routing.stats()) if dev == "flagos" else 0)
"""
DECODE_TOKENS = 16
DECODE = (
    "ids = qwen3.tokens(model.config.vocab_size, 1, 32).to(dev)\nworkloads.greedy(model, ids, 4)",
    f"workloads.greedy(model, ids, {DECODE_TOKENS})",
)


def callgrind(toggle: str, source: str, device: str, workdir: str, cache: bool = False) -> tuple[dict, str]:
    """Callgrind's event totals while `toggle` runs in the script ("Ir": instructions; with `cache`, first-level
    misses as well, "I1mr" for code and "D1mr"/"D1mw" for data, in fixed 32 KiB caches), and its output."""
    script = os.path.join(workdir, "loop.py")
    with open(script, "w") as f:
        f.write(textwrap.dedent(source))
    out = os.path.join(workdir, "callgrind.out")
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--collect-atstart=no"]
    cmd += ["--cache-sim=yes", "--I1=32768,8,64", "--D1=32768,8,64", "--LL=8388608,16,64"] if cache else []
    cmd += [f"--toggle-collect={toggle}", sys.executable, script, device]
    # Python salts its string hashes per process, which moves the dict lookups' probing and so the counts: a
    # prefill's native forward varied by 13,000 instructions between runs (100 per routed call, as much as a change
    # to the route is worth). One fixed seed makes runs comparable.
    run = subprocess.run(cmd, check=True, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"})
    with open(out) as f:
        text = f.read()
    events = re.search(r"^events: (.+)$", text, re.MULTILINE)
    totals = re.search(r"^(?:summary|totals): ([\d ]+)$", text, re.MULTILINE)
    if events is None or totals is None:
        raise RuntimeError(f"no event totals in {out}")
    return dict(zip(events.group(1).split(), map(int, totals.group(1).split()), strict=True)), run.stdout


def instructions(entry: str, stmt: str, device: str, workdir: str) -> int:
    """Instructions inside at::_ops::<entry>::call for the whole script (warm-up included)."""
    return callgrind(f"at::_ops::{entry}::call(*", LOOP.format(stmt=stmt, calls=CALLS), device, workdir)[0]["Ir"]


def function_events(annotate_text: str) -> tuple[list[str], dict[str, dict[str, int]]]:
    """The events shown and each function's exclusive counts in `callgrind_annotate --auto=no` output, by
    short_name (a function's clones and files summed)."""
    events_line = re.search(r"^Events shown:\s+(.+)$", annotate_text, re.MULTILINE)
    if events_line is None or "file:function" not in annotate_text:
        raise ValueError("not callgrind_annotate output")
    events = events_line.group(1).split()
    count = r"([\d,]+|\.)(?: \([^)]*\))?\s+"  # "." is a zero
    row = re.compile(r"^\s*" + count * len(events) + r"(.+)$")
    found: dict[str, dict[str, int]] = {}
    for line in annotate_text.split("file:function", 1)[1].splitlines():
        m = row.match(line)
        if m is None:
            continue
        values = found.setdefault(short_name(m.group(len(events) + 1)), dict.fromkeys(events, 0))
        for i, event in enumerate(events):
            values[event] += int(m.group(i + 1).replace(",", "").replace(".", "0"))
    return events, found


def own_functions(annotate_text: str, top: int = 8) -> dict:
    """torch_fl's own functions in `callgrind_annotate --auto=no --threshold=100` output: each one's exclusive
    events and their sum, the `top` by instructions."""
    events, every = function_events(annotate_text)
    found = {name: v for name, v in every.items() if name.startswith("torch_fl::")}
    total = {e: sum(v[e] for v in found.values()) for e in events}
    ranked = sorted(found.items(), key=lambda kv: -kv[1][events[0]])[:top]
    return {"total": total, "top": [{"function": n, **v} for n, v in ranked]}


def added_by_function(native_text: str, flagos_text: str, per: int, top: int = 12) -> list[dict]:
    """Where flagos's added first-level code misses are: the `top` functions by I1mr added to native's (both
    `callgrind_annotate --show=Ir,I1mr` outputs), each with its instructions added, per `per` routed calls. A function
    only flagos runs counts whole; native's functions that flagos runs less count below zero and are left out."""
    _, native = function_events(native_text)
    _, flagos = function_events(flagos_text)
    zero = {"Ir": 0, "I1mr": 0}
    added = {
        name: {e: (flagos.get(name, zero)[e] - native.get(name, zero)[e]) / per for e in zero}
        for name in native.keys() | flagos.keys()
    }
    ranked = sorted(added.items(), key=lambda kv: -kv[1]["I1mr"])[:top]
    return [{"function": n, "I1mr": round(v["I1mr"], 1), "Ir": round(v["Ir"], 1)} for n, v in ranked if v["I1mr"] > 0]


def short_name(symbol: str) -> str:
    """`torch_fl::RoutedArgs::borrow_held` for a callgrind symbol with its file, library, template
    arguments and parameters; a typed kernel keeps its operator: `torch_fl::Typed<mul_Tensor>::call`.
    Other functions lose their file the same way (`_int_malloc`, `c10::TensorImpl::TensorImpl`)."""
    symbol = re.sub(r"(?:\s*\[[^\]]*\])+$", "", symbol)  # the library and clone markers
    symbol = re.sub(r"^(?:\?\?\?|\S*\.\w+):(?!:)", "", symbol)  # the file: ???: or a path with an extension
    head = re.split(r"[<(]", symbol, maxsplit=1)[0]
    if "torch_fl::" in head:  # one of torch_fl's own functions (not one with torch_fl in its template arguments)
        symbol = symbol[head.index("torch_fl::") :]  # a function template's return type dropped
    symbol = re.sub(r"'\d+$", "", symbol.replace("(anonymous namespace)::", ""))  # callgrind's recursion depth
    typed = re.search(r"Typed<at::_ops::(\w+)", symbol)
    depth, out = 0, []
    for ch in symbol:  # template arguments dropped; the parameter list ends the name
        depth += {"<": 1, ">": -1}.get(ch, 0)
        if ch == "(" and depth == 0:
            break
        if depth == 0 and ch != ">":
            out.append(ch)
    name = "".join(out)
    return name.replace("Typed::", f"Typed<{typed.group(1)}>::") if typed else name


def model_row(native: str, workdir: str) -> dict:
    """Instructions per token of the tiny Qwen3's greedy decode, and flagos's addition per routed call."""
    source = MODEL.format(setup=DECODE[0], work=DECODE[1])
    profiles, counts = {}, {}
    for device in (native, "flagos"):
        counts[device], printed = callgrind("qsort*", source, device, workdir, True)
        profiles[device] = os.path.join(workdir, f"{device}.callgrind.out")
        os.replace(os.path.join(workdir, "callgrind.out"), profiles[device])
    n_native, n_flagos = counts[native], counts["flagos"]
    routed = int(re.search(r"^routed (\d+)", printed, re.MULTILINE).group(1))
    added = n_flagos["Ir"] - n_native["Ir"]
    row = {
        "op": f"tiny Qwen3 greedy decode, per token ({routed // DECODE_TOKENS} routed calls)",
        "native": round(n_native["Ir"] / DECODE_TOKENS),
        "flagos": round(n_flagos["Ir"] / DECODE_TOKENS),
        "added": round(added / DECODE_TOKENS),
        "added_per_routed_call": round(added / routed),
        # in a model, a routed call's code has left the first-level cache by its next call: nearly every line misses
        "added_misses_per_routed_call": {e: round((n_flagos[e] - n_native[e]) / routed, 1) for e in MISSES},
    }
    annotated = {
        device: subprocess.run(
            ["callgrind_annotate", "--auto=no", "--threshold=100", "--show=Ir,I1mr", path],
            check=True, capture_output=True, text=True,
        ).stdout
        for device, path in profiles.items()
    }  # fmt: skip
    own = own_functions(annotated["flagos"])
    row["torch_fl_functions_per_routed_call"] = {
        "total": {e: round(v / routed, 1) for e, v in own["total"].items()},
        "top": [{k: (round(v / routed, 1) if k != "function" else v) for k, v in f.items()} for f in own["top"]],
    }
    # where the added code misses are: torch_fl's functions, and libtorch's or libc's that flagos runs more of
    row["added_by_function_per_routed_call"] = added_by_function(annotated[native], annotated["flagos"], routed)
    return row


def main(argv=None) -> int:
    args = common.parser(__doc__, "route-instructions").parse_args(argv)
    if shutil.which("valgrind") is None:
        print("valgrind is not on PATH (apt install valgrind)", file=sys.stderr)
        return 2

    import torch_fl

    native = torch_fl.backing()
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for name, (entry, stmt) in OPS.items():
            counts = {d: instructions(entry, stmt, d, workdir) / (CALLS + 50) for d in (native, "flagos")}
            row = {"op": name, "native": round(counts[native]), "flagos": round(counts["flagos"])}
            row["added"] = row["flagos"] - row["native"]
            rows.append(row)
        rows.append(model_row(native, workdir))
    out = common.write("route-instructions", {"backing": native, "calls": CALLS + 50, "rows": rows}, args.out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
