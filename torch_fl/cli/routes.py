"""`python -m torch_fl routes [--op GLOB] [--json]`: the effective routing table and where each route came from."""

from __future__ import annotations

import fnmatch
import json

import torch_fl
from torch_fl import routing
from torch_fl.cli._table import print_table


def add_arguments(parser) -> None:
    parser.add_argument("--op", metavar="GLOB", help="only operators matching GLOB (e.g. 'add*', '*_backward')")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args) -> int:
    entries = routing.table()
    if args.op:
        entries = [e for e in entries if fnmatch.fnmatchcase(e.op, args.op)]
    if args.json:
        print(
            json.dumps(
                {
                    "backing": torch_fl.backing(),
                    "config_file": routing.config_file(),
                    "routes": [e._asdict() for e in entries],
                    "notes": routing.notes(),
                },
                indent=2,
            )
        )
        return 0
    rows = [
        [e.op, e.dtype or "any", e.backend, e.runs_on + (f"  ({e.reason})" if e.reason else ""), e.source]
        for e in entries
    ]
    print_table(
        f"flagos routes (config: {routing.config_file()})",
        ["op", "dtype", "backend", "runs on", "source"],
        rows,
    )
    print(f"every other operator: native route ({torch_fl.backing()})")
    for note in routing.notes():
        print(f"note: {note}")
    return 0
