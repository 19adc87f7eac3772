"""`python -m torch_fl validate FILE`: check a routing file; exit 1 with file:line messages on problems."""

from __future__ import annotations

import sys

from torch_fl.routing import config, rules


def add_arguments(parser) -> None:
    parser.add_argument("file", help="routing file (op_overload = backend lines)")


def run(args) -> int:
    found, problems = config.check_file(args.file)  # reads the file (and each include) once
    if problems:
        for p in problems:
            print(str(p), file=sys.stderr)
        print(f"{args.file}: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"{args.file}: OK ({len(found)} rule(s))")
    for note in rules.resolve(found)[1]:
        print(f"note: {note}")
    return 0
