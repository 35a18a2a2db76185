"""Verdicts carried past a decision whose arrangement names the nodes whose pods moved (`Arranged.moved`, "stirred"):
a few stirred nodes are found among the underutilized ones by bisection, many by one pass over all. The churn suite's
tests run with either way forced (its six nodes never reach the bisection's share on their own); a stirred node whose
verdict is kept shows as a plan that differs from a fresh one."""

from __future__ import annotations

from unittest import mock

import pytest

import gpuscale.engine.scaledown as scaledown
from tests.engine import test_scaledown_churn as churn


@pytest.mark.parametrize("few", [0, 10**6], ids=["bisection", "one-pass"])
def test_carried_verdicts_equal_fresh_ones_either_way(few: int) -> None:
    with mock.patch.object(scaledown, "_FEW_STIRRED", few):
        churn.test_carried_verdicts_equal_fresh_ones()
