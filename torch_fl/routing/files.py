"""Reading a routing file: once, a regular file only, bounded in size, UTF-8 (a BOM is fine).

Every way a file can be unreadable becomes one message naming the file, what is
wrong and the fix, so import, `load_config` and `validate` say the same thing.
"""

from __future__ import annotations

import codecs
import os
import stat

from torch_fl.vocab.errors import shorten

#: Routing files are a few hundred lines; this bound keeps `/dev/zero`-like mistakes from reading forever.
MAX_BYTES = 1 << 20


class Unreadable(Exception):
    """Why a routing file cannot be used. `line`: where (for bad bytes); `text`: what could still be parsed
    (the text with bad bytes replaced, so the file's other problems are listed too), else None."""

    def __init__(self, message: str, line: int | None = None, text: str | None = None):
        super().__init__(message)
        self.message, self.line, self.text = message, line, text


def _not_regular(path: str, mode: int) -> str:
    if stat.S_ISDIR(mode):
        kind, fix = "a directory", "name a routing file inside it"
    elif stat.S_ISFIFO(mode):
        kind, fix = "a pipe", "write the rules to a file and name that"
    elif stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        kind, fix = "a device", "name a routing file (for no rules, an empty file)"
    else:
        kind, fix = "a socket or other special file", "name a routing file"
    return f"routing file '{shorten(path)}' is {kind}, not a regular file; {fix}"


def read_text(path: str) -> str:
    """The text of the routing file at `path`; Unreadable says why not."""
    try:
        # O_NONBLOCK: opening a pipe must not wait for a writer; fstat on the descriptor then decides.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise Unreadable(f"routing file '{shorten(path)}' does not exist; check the path") from None
    except OSError as e:
        raise Unreadable(
            f"cannot open routing file '{shorten(path)}' ({e.strerror}); check the path and its permissions"
        ) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise Unreadable(_not_regular(path, mode))
        chunks, size = [], 0
        while size <= MAX_BYTES:  # read(2) may return less than asked: read until EOF or past the limit
            chunk = os.read(fd, MAX_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > MAX_BYTES:
        raise Unreadable(
            f"routing file '{shorten(path)}' is larger than {MAX_BYTES // (1 << 20)} MiB, far more than a routing file "
            "needs; check that this is the file you meant (a glob such as *_backward covers many operators in one line)"
        )
    return decode(b"".join(chunks))


def decode(data: bytes) -> str:
    """UTF-8 text (a leading BOM dropped); Unreadable at the first byte that is not UTF-8."""
    bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[bom:].decode("utf-8")
    except UnicodeDecodeError as e:
        at = bom + e.start
        line = data.count(b"\n", 0, at) + 1
        column = at - (data.rfind(b"\n", 0, at) + 1) + 1
        raise Unreadable(
            f"not UTF-8: byte 0x{data[at]:02x} at byte offset {at} (line {line}, byte {column} of the line). "
            "Routing files are UTF-8, comments included: re-save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8) "
            "or remove that character",
            line,
            data[bom:].decode("utf-8", errors="replace"),
        ) from None
