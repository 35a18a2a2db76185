"""How `gpuscale run` writes its log: `text` (a timestamp, level and logger before each message, the default) or
`json` (one JSON object per line, the form cluster logging pipelines — Fluent Bit, Vector, Loki, Cloud Logging —
parse into fields without a regex).

The controller's messages are already JSON objects (`{"msg": "tick", …}`); in `json` format their keys become the
line's fields beside `time`, `level` and `logger`, so a query can match `msg="plan item" and kind="unplaceable"`.
Plain-text messages (from the provider, the cache) become the `msg` field. Side effect: `configure` adds a handler
to the root logger.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TextIO

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
_RESERVED = ("time", "level", "logger")


class LogFormat(StrEnum):
    TEXT = "text"
    JSON = "json"


def _message_fields(message: str) -> dict[str, Any] | None:
    """The message's fields if it is one JSON object, else None."""
    if not message.startswith("{"):
        return None
    try:
        parsed = json.loads(message)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


class JsonLines(logging.Formatter):
    """One JSON object per record: `time` (RFC 3339, UTC, milliseconds), `level`, `logger`, then the message's own
    fields (or `msg`), then `exception` with the formatted traceback if there is one."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        line: dict[str, Any] = {"time": stamp, "level": record.levelname, "logger": record.name}
        message = record.getMessage()
        fields = _message_fields(message)
        if fields is None:
            line["msg"] = message
        else:
            line |= {(f"field.{k}" if k in _RESERVED else k): v for k, v in fields.items()}
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def configure(log_format: LogFormat, *, level: int = logging.INFO, stream: TextIO | None = None) -> bool:
    """Send every logger's records at `level` or above to `stream` (stderr) in `log_format`, as `logging.basicConfig`
    does: not if the root logger has a handler already (an embedding program's, or pytest's), then False."""
    root = logging.getLogger()
    if root.handlers:
        return False
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonLines() if log_format is LogFormat.JSON else logging.Formatter(TEXT_FORMAT))
    root.addHandler(handler)
    root.setLevel(level)
    return True
