"""`python -m torch_fl validate FILE`: check a routing file; exit 1 with file:line messages on problems."""

from __future__ import annotations

import sys

from torch_fl.routing import config


def add_arguments(parser) -> None:
    parser.add_argument("file", help="routing file (op_overload = backend lines)")


def run(args) -> int:
    problems = config.validate_file(args.file)
    if problems:
        for p in problems:
            print(str(p), file=sys.stderr)
        print(f"{args.file}: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    rules = config.load_file(args.file)
    print(f"{args.file}: OK ({len(rules)} rule(s))")
    return 0
