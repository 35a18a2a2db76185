"""Typed errors. Each encodes what the caller should do: fix the input, fix the config, or retry later.

`InputError` and `ConfigError` are the user's to fix: the CLI prints their one line and exits 2.
"""

from __future__ import annotations


class GpuscaleError(Exception):
    """Base of every error gpuscale raises on purpose."""


class InputError(GpuscaleError):
    """Bad user data (a cluster dump, a trace): names the object and the field."""

    def __init__(self, obj: str, field: str, problem: str) -> None:
        self.obj = obj
        self.field = field
        self.problem = problem
        super().__init__(f"{obj}: {field}: {problem}")


class ConfigError(GpuscaleError):
    """An invalid or impossible configuration: names the setting."""

    def __init__(self, where: str, problem: str) -> None:
        self.where = where
        self.problem = problem
        super().__init__(f"{where}: {problem}")


class TransientError(GpuscaleError):
    """Something outside failed in a way that may pass: retry after `retry_after_s`."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(message)
