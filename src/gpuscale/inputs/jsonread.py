"""JSON with bounded nesting: a text nested deeper than the parser's recursion limit (about 1000 levels) is an
`InputError`, as is an integer literal of more than 4300 digits, instead of a traceback. `NaN` and `Infinity`
literals decode as Python's `json` decodes them; every field that reads a number refuses non-finite values."""

from __future__ import annotations

import json
from typing import Any

from gpuscale.model.errors import InputError


def loads(text: str, source: str) -> Any:
    """The value of one JSON text; any problem is an `InputError` naming `source` and where."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(source, f"line {err.lineno} column {err.colno}", f"bad JSON: {err.msg}") from None
    except RecursionError:
        raise InputError(source, "document", "bad JSON: nested too deeply (about 1000 levels at most)") from None
    except ValueError as err:  # an integer literal beyond Python's 4300-digit limit
        raise InputError(source, "document", f"bad JSON: {str(err).split(';')[0]}") from None
