"""`python -m torch_fl info`: what flagos runs on."""

from __future__ import annotations

import torch

import torch_fl


def add_arguments(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def collect() -> dict:
    devices = []
    for i in range(torch.flagos.device_count()):
        props = torch.flagos.get_device_properties(i)
        devices.append({"index": i, "name": props.name, "total_memory": props.total_memory})
    from torch_fl import backends, routing

    return {
        "torch_fl": torch_fl.__version__,
        "torch": torch.__version__,
        "backing": torch_fl.backing(),
        "devices": devices,
        "config_file": routing.config_file(),
        "backends": [b.info() for b in backends.unique()],
    }


def run(args) -> int:
    info = collect()
    if args.json:
        import json

        print(json.dumps(info, indent=2))
        return 0
    print(f"torch_fl {info['torch_fl']} on torch {info['torch']}")
    print(f"backing: {info['backing']}")
    for d in info["devices"]:
        print(f"  flagos:{d['index']}  {d['name']}  {d['total_memory'] / 2**30:.1f} GiB")
    print(f"routing file: {info['config_file']}")
    from torch_fl.cli._table import print_table

    rows = [
        [
            b["name"],
            "yes" if b["available"] else "no",
            b["version"] or "-",
            b["ops"] if b["ops"] is not None else "-",
            b["reason"] or b["description"],
        ]
        for b in info["backends"]
    ]
    print_table("backends", ["backend", "available", "version", "ops", "notes"], rows)
    return 0
