"""Errors and warnings of routing. Each message names the problem and the fix."""

from __future__ import annotations

from dataclasses import dataclass

#: User input quoted in a message is cut to this many characters (a routing file line may hold megabytes).
QUOTE_LIMIT = 80


def shorten(text: str, limit: int = QUOTE_LIMIT) -> str:
    """`text` (user input) as an error message quotes it: whole up to `limit` characters, else its first
    `limit`, '...' and its length, so a message stays readable whatever the input."""
    text = str(text)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


class KernelRefused(Exception):  # noqa: N818  (a refusal, not an error of the caller's)
    """A backend refused a call before any of its kernels ran: nothing was written, so even an in-place or out=
    call can run natively instead (the message says why)."""


class RoutingError(ValueError):
    """Bad routing input: unknown operator or backend, bad env override, bad call."""


@dataclass(frozen=True)
class Problem:
    file: str | None
    line: int | None
    message: str
    text: str = ""

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}: " if self.file is not None and self.line is not None else ""
        where = where or (f"{self.file}: " if self.file else "")
        shown = f"\n    {self.text}" if self.text else ""
        return f"{where}{self.message}{shown}"


class ConfigError(RoutingError):
    """One or more problems in a routing file; `problems` lists them with file:line."""

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        head = f"{len(self.problems)} problem(s) in the flagos routing configuration:"
        super().__init__("\n".join([head, *(f"  {p}" for p in self.problems)]))


class FallbackWarning(UserWarning):
    """An operator routed to a backend that cannot run it ran on the native route instead."""
