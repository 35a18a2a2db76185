"""No function under src/gpuscale/engine is more complex than cyclomatic complexity 25, as radon counts it (issue
#26): a decision function past that is split into named steps. Methods and nested functions count on their own, as
`radon cc src/gpuscale/engine` lists them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from radon.complexity import cc_visit
from radon.visitors import Class, Function

ENGINE = Path(__file__).resolve().parent.parent / "src" / "gpuscale" / "engine"
LIMIT = 25


def _functions(blocks: Iterable[Function | Class]) -> Iterator[tuple[str, int, int]]:
    """Every function and method of `blocks` (radon lists methods on their own too), and their closures:
    (qualified name, line, complexity)."""
    for block in blocks:
        if isinstance(block, Function):
            yield block.fullname, block.lineno, block.complexity
            yield from _closures(block.closures, f"{block.fullname}.")


def _closures(blocks: Iterable[Function], prefix: str) -> Iterator[tuple[str, int, int]]:
    for block in blocks:
        yield f"{prefix}{block.name}", block.lineno, block.complexity
        yield from _closures(block.closures, f"{prefix}{block.name}.")


def test_the_engine_has_a_function_to_look_at() -> None:
    found = [f for path in ENGINE.rglob("*.py") for f in _functions(cc_visit(path.read_text()))]
    assert len(found) > 100
    assert max(c for _, _, c in found) > 10  # the measure sees branches


def test_no_engine_function_is_above_complexity_25() -> None:
    offenders = sorted(
        f"{path.relative_to(ENGINE.parent.parent)}:{line} {name} (complexity {complexity})"
        for path in ENGINE.rglob("*.py")
        for name, line, complexity in _functions(cc_visit(path.read_text()))
        if complexity > LIMIT
    )
    assert not offenders, f"engine functions above cyclomatic complexity {LIMIT} (split them into named steps):\n" \
        + "\n".join(offenders)
