"""Reading inductor's generated wrapper in tests: the code of a compiled call and the part that runs per call."""

from __future__ import annotations

import re


def run_and_get_code(fn, *args):
    """(fn(*args), [the generated wrapper's source, one per compiled graph]); inductor is imported on first use."""
    from torch._inductor import utils

    return utils.run_and_get_code(fn, *args)


def call_body(code: str) -> str:
    """The generated wrapper's `call`: what runs per call (the header defines helpers it may not use, and the
    benchmark harness inductor appends makes random inputs on the device)."""
    body = code[code.index("def call(") :]
    end = re.search(r"\n\S", body)
    return body if end is None else body[: end.start()]
