"""Bounded reads of user files: at most a limit of bytes (checked before reading where the size is known, counted
while reading from pipes and devices), UTF-8 text only, no NUL bytes (no JSON, YAML or CSV holds one)."""

from __future__ import annotations

import os
from pathlib import Path

from gpuscale.model.errors import InputError

MiB = 2**20
DUMP_BYTES = 1024 * MiB
"""A cluster dump: a 100,000-pod `kubectl get -o json` with managed fields is about 600 MiB."""
CONFIG_BYTES = 4 * MiB
"""A configuration, scenario or start-up profile file."""
TRACE_BYTES = 1024 * MiB
"""A JSON-lines trace file, or a trace endpoint's answer."""
CSV_BYTES = 256 * MiB
"""A pack or job-trace CSV."""
MAX_DEPTH = 100
"""Nesting of objects and lists in a dump, configuration, scenario or trace record."""
EXCERPT_CHARS = 60
"""How much of a bad value an error message repeats."""
_CHUNK = MiB
_NUL = b"\0"


def excerpt(value: object, limit: int = EXCERPT_CHARS) -> str:
    """`repr(value)`, cut to `limit` characters: error messages never echo a whole hostile input."""
    text = repr(value) if len(str(value)) <= 4 * limit else repr(str(value)[: 4 * limit])
    return text if len(text) <= limit else text[: limit - 1] + "…"


def one_line(message: str, limit: int = 500) -> str:
    """A message as one line of at most `limit` characters (line breaks and tabs become spaces)."""
    flat = " ".join(message.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _size_text(limit: int) -> str:
    return f"{limit // MiB} MiB" if limit >= MiB else f"{limit} bytes"


def read_bytes(path: Path, limit: int, what: str) -> bytes:
    """At most `limit` bytes of `path`; more is an `InputError` (a file's size is checked before it is read)."""
    try:
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > limit:
                raise InputError(str(path), "file", f"{size} bytes is over the {_size_text(limit)} limit for {what}")
            chunks, total = [], 0
            while chunk := f.read(min(_CHUNK, limit + 1 - total)):
                if _NUL in chunk:
                    raise InputError(str(path), f"byte {total + chunk.index(_NUL)}", "not a text file (a NUL byte)")
                chunks.append(chunk)
                total += len(chunk)
                if total > limit:
                    raise InputError(str(path), "file", f"over the {_size_text(limit)} limit for {what}")
    except IsADirectoryError:
        raise InputError(str(path), "file", "is a directory") from None
    except OSError as err:
        raise InputError(str(path), "file", err.strerror or one_line(str(err))) from None
    return b"".join(chunks)


def read_text(path: Path, limit: int, what: str) -> str:
    """UTF-8 text of at most `limit` bytes; see `read_bytes`."""
    data = read_bytes(path, limit, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(str(path), f"byte {err.start}", "not UTF-8 text") from None
