"""Command line: python -m torch_fl <command> ...

Each command lives in torch_fl/cli/<command>.py and provides
`add_arguments(parser)` and `run(args) -> int`.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# command name -> (module under torch_fl.cli, one-line help)
COMMANDS = {
    "info": ("info", "backing device, flagos devices and each backend's availability"),
    "routes": ("routes", "the effective routing table and where each route came from"),
    "explain": ("explain", "why an operator runs on the backend it runs on"),
    "validate": ("validate", "check a routing file (exit 1 with file:line messages)"),
    "calibrate": ("calibrate", "measure native vs FlagGems per operator call of a workload; write a routing file"),
    "demo": ("demo", "Qwen3 generating tokens on flagos next to native PyTorch: tokens/s, routes, fallbacks"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m torch_fl", description="torch_fl: the flagos PyTorch device")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, (module, help_text) in COMMANDS.items():
        mod = importlib.import_module(f"torch_fl.cli.{module}")
        p = sub.add_parser(name, help=help_text, description=help_text)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.argv = argv  # the command line as given (calibrate's worker process runs it again)
    return int(args._run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
