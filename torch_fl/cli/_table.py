"""Readable tables: rich when it is installed (optional extra `ui`), plain text otherwise."""

from __future__ import annotations

import sys


def _rich_console():
    if not sys.stdout.isatty():
        return None
    try:
        from rich.console import Console
    except ImportError:
        return None
    return Console()


def print_table(title: str, headers: list[str], rows: list[list[object]]) -> None:
    cells = [["" if c is None else str(c) for c in row] for row in rows]
    console = _rich_console()
    if console is not None:
        from rich.table import Table

        t = Table(title=title)
        for h in headers:
            t.add_column(h)
        for row in cells:
            t.add_row(*row)
        console.print(t)
        return
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    if title:
        print(title)
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    print("  ".join("-" * w for w in widths))
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
