"""Writes docs/torch-flagos-api.md: every public torch.cuda name and what it is on torch.flagos, and
every public torch.accelerator name and how flagos answers it.

The statuses and reasons come from torch_fl/flagos/_coverage.py and the live
torch.cuda / torch.flagos modules; rerun this after changing either:

    python scripts/gen_flagos_api.py [--output PATH]

tests/integration/test_flagos_api_coverage.py fails when the committed file
differs from what this writes.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import torch

# This checkout's torch_fl, not another one installed (a git worktree's table is its own).
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from torch_fl.flagos import _coverage as coverage  # noqa: E402

DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "torch-flagos-api.md"

_INTRO = """\
`torch.flagos` is shaped like `torch.cuda`: each name below that torch.flagos
implements takes the same arguments and means the same, with the differences
listed. Device arguments accept an index, `'flagos:N'`, a `torch.device` or
`None` (the current device); another device type raises `ValueError`, another
argument type `TypeError`, and an index out of range `torch.AcceleratorError`
(CUDA's type for an invalid ordinal) naming the device count (and
`FLAGOS_HOST_DEVICES` on host backing).

On a CUDA backing `flagos:i` is `cuda:i`: streams are CUDA streams, memory is
the CUDA caching allocator's (shared with CUDA tensors), RNG state is CUDA's,
and these functions report that real state. On host backing they work over
host memory and `FLAGOS_HOST_DEVICES` virtual devices.

The public names of `torch.cuda` are its `__all__` plus its other attributes
without a leading underscore, less the modules and helpers it imports for its
own use (listed at the end)."""


_ACCELERATOR_INTRO = """\
PyTorch's generic device API, which libraries written for no particular device use (accelerate, Trainer,
Lightning, diffusers): every public name of the installed `torch.accelerator`, each checked by
`tests/integrations/test_accelerator_api.py`."""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _table(rows: list[tuple[str, str]], heading: str) -> list[str]:
    lines = [f"| name | {heading} |", "| --- | --- |"]
    lines += [f"| `{name}` | {_cell(note)} |" for name, note in rows]
    return lines


def render() -> str:
    names = coverage.cuda_public_names()
    unclassified, contradicted = coverage.missing(), coverage.contradictions()
    if unclassified or contradicted:
        raise SystemExit(
            "torch_fl/flagos/_coverage.py is out of step with the modules: torch.cuda names neither in "
            f"torch.flagos nor in its tables: {unclassified}; names its tables contradict: {contradicted}"
        )
    by_category: dict[str, list[tuple[str, str]]] = {c: [] for c in coverage.CATEGORIES}
    for name in names:
        category, note = coverage.classify(name)
        by_category[category].append((name, note))
    major, minor = torch.__version__.split(".")[:2]
    out = [
        "# torch.flagos API: coverage of torch.cuda",
        "",
        f"Generated against torch {major}.{minor} by `python scripts/gen_flagos_api.py` from",
        "`torch_fl/flagos/_coverage.py` and the live modules; do not edit by hand.",
        "",
        _INTRO,
        "",
        "| status | names |",
        "| --- | --- |",
    ]
    out += [f"| {c} | {len(by_category[c])} |" for c in coverage.CATEGORIES]
    out += [f"| all public torch.cuda names | {len(names)} |", ""]
    out += [f"## Same as torch.cuda ({len(by_category[coverage.SAME])})", ""]
    out += [", ".join(f"`{name}`" for name, _ in by_category[coverage.SAME]), ""]
    sections = (
        (coverage.SPECIFIC, "Implemented, with flagos-specific behaviour", "on flagos"),
        (coverage.PLANNED, "Planned", "by"),
        (coverage.NOT_APPLICABLE, "Not applicable", "why"),
    )
    for category, title, heading in sections:
        out += [f"## {title} ({len(by_category[category])})", ""]
        out += _table(by_category[category], heading) + [""]
    extra = [(n, coverage.FLAGOS_ONLY[n]) for n in coverage.flagos_only_names()]
    out += [f"## torch.flagos names that torch.cuda lacks ({len(extra)})", ""]
    out += _table(extra, "what for") + [""]
    out += ["## Not counted: torch.cuda's imports for its own use", ""]
    out += [", ".join(f"`{n}`" for n in coverage.cuda_import_names()), ""]
    accelerator = coverage.accelerator_public_names()
    unlisted = sorted(set(accelerator) - set(coverage.ACCELERATOR))
    if unlisted:
        raise SystemExit(f"torch_fl/flagos/_coverage.py's ACCELERATOR lacks torch.accelerator names: {unlisted}")
    out += [f"## torch.accelerator on flagos ({len(accelerator)} names, all answered)", "", _ACCELERATOR_INTRO, ""]
    out += _table([(n, coverage.ACCELERATOR[n]) for n in accelerator], "on flagos") + [""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=pathlib.Path, default=DOC, help=f"where to write (default {DOC})")
    args = parser.parse_args(argv)
    args.output.write_text(render())
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
