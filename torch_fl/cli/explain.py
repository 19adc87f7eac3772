"""`python -m torch_fl explain OP [--dtype DTYPE] [--json]`: why an operator runs where it runs."""

from __future__ import annotations

import json
import sys

from torch_fl import routing


def add_arguments(parser) -> None:
    parser.add_argument("op", help="ATen overload: add.Tensor, mm, _softmax (bare name = default overload)")
    parser.add_argument("--dtype", help="explain for calls of this dtype (bfloat16, float32, ...)")
    parser.add_argument("--json", action="store_true", help="print JSON")


def run(args) -> int:
    try:
        e = routing.explain(args.op, args.dtype)
    except (routing.RoutingError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(json.dumps(e.as_dict(), indent=2) if args.json else str(e))
    return 0
