"""`--log-format json`: one JSON object per record, the controller's JSON messages as fields."""

from __future__ import annotations

import io
import json
import logging

import pytest

from gpuscale.kube.logs import JsonLines, LogFormat, configure


def _record(message: str, *args: object, exc: bool = False) -> logging.LogRecord:
    info = None
    if exc:
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            import sys
            info = sys.exc_info()
    return logging.LogRecord("gpuscale.controller", logging.WARNING, __file__, 1, message, args or None, info)


def test_a_json_message_becomes_the_lines_fields() -> None:
    line = json.loads(JsonLines().format(_record(json.dumps({"msg": "plan item", "kind": "scale_up", "pool": "t4",
                                                             "codes": ["ScaleUp"], "level": "mine"}))))
    assert line["level"] == "WARNING" and line["logger"] == "gpuscale.controller"
    assert line["time"].endswith("Z") and "T" in line["time"]
    assert (line["msg"], line["kind"], line["pool"], line["codes"]) == ("plan item", "scale_up", "t4", ["ScaleUp"])
    assert line["field.level"] == "mine"  # a message's own key never hides the record's level


@pytest.mark.parametrize("message", ["scaled %s up: replicas %d -> %d", "{not json", "[1, 2]"])
def test_other_messages_are_the_msg_field(message: str) -> None:
    record = _record(message, "md/a100", 1, 2) if "%" in message else _record(message)
    line = json.loads(JsonLines().format(record))
    assert line["msg"] == record.getMessage()


def test_an_exception_is_one_field_on_the_same_line() -> None:
    text = JsonLines().format(_record("tick failed", exc=True))
    assert "\n" not in text
    assert "RuntimeError: boom" in json.loads(text)["exception"]


def test_configure_writes_json_lines_and_leaves_an_existing_setup_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(root, "level", logging.WARNING)
    out = io.StringIO()
    assert configure(LogFormat.JSON, stream=out) is True
    logging.getLogger("gpuscale.test").info(json.dumps({"msg": "tick", "synced": True}))
    assert json.loads(out.getvalue())["synced"] is True
    assert configure(LogFormat.TEXT, stream=io.StringIO()) is False  # a handler is there now: kept as it is
    assert len(root.handlers) == 1
