"""Which arguments CUDA's kernels refuse a 0-dim CPU tensor in, measured on a GPU.

A CPU scalar (`torch.tensor(2.)`) mixes with CUDA tensors where TensorIterator takes it as an input; kernels that
check their arguments' devices themselves (masked_fill's mask, embedding's indices, addcdiv's TensorIterator,
which takes none) raise. native_functions.yaml names only the operators whose generated wrapper checks every
device (torch_fl/vocab/device_checks.py reads those); the rest are found here, by running PyTorch's OpInfo samples
on the GPU with each tensor argument in turn (and each sample's out= form) replaced by a 0-dim CPU tensor, and
noting, per ATen overload and argument, whether the call ran or raised a device error.

    python -m torch_fl.conformance.cpu_scalars --write torch_fl/vocab/cpu_scalar_checks.py   # on a GPU

writes the arguments refused in every call that put a CPU scalar there beside an input on the GPU and accepted in
none (operators the yaml already covers left out), with the command, machine and versions, for flagos's device
check to refuse on every backing.
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch

_DEVICE_ERRORS = ("device", "CPU scalars", "is_cuda")
# The argument name under which measure() notes out= calls whose tensor inputs are all CPU scalars.
ALL_INPUTS = "*"


def _leaves(x):
    if isinstance(x, (list, tuple)):
        for y in x:
            yield from _leaves(y)
    else:
        yield x


def _is_cpu_scalar(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.dim() == 0


def measure(device: str = "cuda", budget_s: float = 300.0, samples_per_op: int = 4, ops=None) -> dict:
    """{"op.overload": {"arg": {"ok": n, "refused": n, "message": str}}} over the OpInfo database (the OpInfos
    named in `ops`, or all)."""
    from torch.testing._internal.common_methods_invocations import op_db
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: dict = {}

    class Note(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            schema = func._schema
            if not schema.name.startswith("aten::"):
                return func(*args, **kwargs)
            by_name = {a.name: a for a in schema.arguments}
            named = [(schema.arguments[i], v) for i, v in enumerate(args)] + [
                (by_name[k], v) for k, v in kwargs.items() if k in by_name
            ]
            scalars = [a.name for a, v in named for t in _leaves(v) if _is_cpu_scalar(t)]
            inputs = [t for a, v in named if not a.is_out for t in _leaves(v) if isinstance(t, torch.Tensor)]
            device_input = any(t.device.type == device for t in inputs)
            outs = [t for a, v in named if a.is_out for t in _leaves(v) if isinstance(t, torch.Tensor)]
            device_out = any(t.device.type == device for t in outs)
            if device_input and len(scalars) == 1:
                arg = scalars[0]
            elif device_out and inputs and all(_is_cpu_scalar(t) for t in inputs):
                arg = ALL_INPUTS  # an out= call with nothing on the device to compute on
            else:
                return func(*args, **kwargs)
            key = schema.name[len("aten::") :] + (f".{schema.overload_name}" if schema.overload_name else "")
            note = seen.setdefault(key, {}).setdefault(arg, {"ok": 0, "refused": 0, "message": ""})
            try:
                out = func(*args, **kwargs)
            except Exception as e:
                message = (str(e).splitlines() or [type(e).__name__])[0][:160]
                if any(word in message for word in _DEVICE_ERRORS):
                    note["refused"] += 1
                    note["message"] = message
                raise
            note["ok"] += 1
            return out

    def run(op, sample, inputs, **extra):
        try:
            with Note():
                op(inputs[0], *inputs[1:], **sample.kwargs, **extra)
        except Exception:
            pass  # noted by Note where it was a device error; other errors are the sample's own

    start = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for op in op_db:
            if time.monotonic() - start > budget_s:
                break
            if ops is not None and op.name not in ops:
                continue
            try:
                samples = list(op.sample_inputs(device, torch.float32, requires_grad=False))[:samples_per_op]
            except Exception:
                continue
            for sample in samples:
                inputs = [sample.input, *sample.args]
                for j, a in enumerate(inputs):
                    if not isinstance(a, torch.Tensor) or a.layout != torch.strided or a.numel() == 0:
                        continue
                    swapped = list(inputs)
                    first = a.detach().reshape(-1)[0]
                    swapped[j] = torch.zeros((), dtype=a.dtype) if a.is_meta else first.cpu().clone()
                    run(op, sample, swapped)
                    if op.supports_out:
                        try:
                            want = op(sample.input, *sample.args, **sample.kwargs)
                        except Exception:
                            continue
                        if isinstance(want, torch.Tensor):
                            run(op, sample, swapped, out=torch.empty_like(want))
    if device == "cuda":
        torch.cuda.synchronize()
    return seen


def refused_arguments(seen: dict, already_checked=()) -> dict:
    """{"op.overload": [args]}: refused in every measured call beside an input on the device, accepted in none."""
    skip = set(already_checked)
    table = {}
    for op, args in sorted(seen.items()):
        if op in skip:
            continue
        refused = sorted(a for a, n in args.items() if a != ALL_INPUTS and n["refused"] and not n["ok"])
        if refused:
            table[op] = refused
    return table


def out_ops_refusing_cpu_inputs(seen: dict, already_known=()) -> list:
    """The out= overloads that refused every call whose tensor inputs were all CPU scalars (and took none), beside
    those already known (the structured TensorIterator operators, which native_functions.yaml names)."""
    skip = set(already_known)
    return sorted(
        op
        for op, args in seen.items()
        if op not in skip and args.get(ALL_INPUTS, {}).get("refused") and not args[ALL_INPUTS]["ok"]
    )


def write_module(path: str, table: dict, out_ops, command: str) -> None:
    props = torch.cuda.get_device_properties(0) if torch.cuda.is_available() else None
    lines = [
        '"""The arguments CUDA\'s kernels refuse a 0-dim CPU tensor in, beside those of the operators',
        "native_functions.yaml marks as checking every device (device_checks.py).",
        "",
        f"Measured on {props.name if props else 'no GPU'} (torch {torch.__version__}) with PyTorch's OpInfo "
        "samples, each",
        "tensor argument in turn a 0-dim CPU tensor beside an input on the GPU: the arguments refused in every "
        "such call",
        "(REFUSED), and the out= overloads that refused every call whose tensor inputs were all CPU scalars, beside",
        "the structured TensorIterator ones (OUT_NEEDS_A_DEVICE_INPUT). Written by",
        "",
        f"    {command}",
        '"""',
        "",
        "REFUSED = {",
    ]
    for op, args in table.items():  # as ruff formats it
        names = ", ".join(f'"{a}"' for a in args)
        lines.append(f'    "{op}": ({names}{"," if len(args) == 1 else ""}),')
    lines += ["}", ""]
    if len(out_ops) < 2:  # a one-element tuple's comma is not a magic trailing comma: ruff joins it
        quoted = "".join(f'"{op}",' for op in out_ops)
        lines.append(f"OUT_NEEDS_A_DEVICE_INPUT = ({quoted})")
    else:
        lines += ["OUT_NEEDS_A_DEVICE_INPUT = (", *(f'    "{op}",' for op in out_ops), ")"]
    lines += [""]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--budget", type=float, default=300.0, help="seconds of OpInfo samples at most")
    parser.add_argument("--write", metavar="PATH", help="the generated module (torch_fl/vocab/cpu_scalar_checks.py)")
    parser.add_argument("--json", metavar="PATH", help="every measured call, per operator and argument")
    opts = parser.parse_args(argv)
    from torch_fl.vocab import device_checks

    seen = measure(opts.device, opts.budget)
    table = refused_arguments(seen, device_checks.checked_ops())
    out_ops = out_ops_refusing_cpu_inputs(seen, device_checks.tensor_iterator_ops())
    if opts.json:
        import json

        with open(opts.json, "w", encoding="utf-8") as f:
            json.dump(seen, f, indent=1, sort_keys=True)
    if opts.write:
        write_module(opts.write, table, out_ops, f"python -m torch_fl.conformance.cpu_scalars --write {opts.write}")
    for op, args in table.items():
        print(f"{op}: {', '.join(args)}")
    print(f"out= with CPU inputs alone refused: {', '.join(out_ops)}")
    print(f"{len(table)} operators, {len(out_ops)} out= overloads, {len(seen)} measured")


if __name__ == "__main__":
    main()
