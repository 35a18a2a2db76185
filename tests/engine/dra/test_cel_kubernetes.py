"""gpuscale's CEL selectors against Kubernetes' own: the documented DRA expressions and more, on the same devices,
through k8s.io/dynamic-resource-allocation/cel v0.37.2 (what kube-scheduler v1.37.2 evaluates selectors with), built
by scripts/celref.sh from the Go module cache. Same outcome (true, false, a runtime error, a compile error) and, for
runtime errors, the same words.

Known differences, left out here and said in `engine/dra/cel.py`: expressions the API server refuses (Kubernetes types
`device`, so a non-bool result, an unknown field or `quantity == 3` fail to compile there and at run time here); `==`
between a version or quantity and another type (an error there, false here); the CEL libraries not provided (lists,
regex `find`, sets, URL, IP/CIDR, format).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuscale.engine.dra import cel
from gpuscale.model.dra import Device, attribute_json
from tests.engine.dra.test_cel import CASES, DEVICES

ROOT = Path(__file__).resolve().parents[3]

MORE = [
    'device.attributes["gpu.nvidia.com"].productName.lowerAscii().contains("h100")',
    'device.attributes["gpu.nvidia.com"].productName.split(" ").size() == 4',
    'device.capacity["gpu.nvidia.com"].memory.asApproximateFloat() > 1.0',
    'device.capacity["gpu.nvidia.com"].memory.add(quantity("1Gi")).compareTo(quantity("81Gi")) == 0',
    'device.capacity["gpu.nvidia.com"].memory.sub(1).isLessThan(device.capacity["gpu.nvidia.com"].memory)',
    'quantity("1.5").isInteger()', 'quantity("1.5").asInteger() == 1', 'isQuantity("1Gi") && !isQuantity("x")',
    'isSemver("1.2.3") && !isSemver("1.2")', 'semver("1.2.3").minor() == 2 && semver("1.2.3").patch() == 3',
    'semver("v1.2.3").major() == 1', 'semver("1.02.3").major() == 1', 'semver("1.2.3-").major() == 1',
    'semver("1.2.3-01").major() == 1', 'semver("1.2.3+").major() == 1', 'semver("1.2").major() == 1',
    'semver("1.2.3+a..b").major() == 1', 'semver("1.2.3+a_b").major() == 1', 'semver("1.2.3-a..b").major() == 1',
    'semver("").major() == 1', 'semver("a.b.c").major() == 1', 'semver("1.2.3.4").major() == 1',
    'device.attributes["gpu.nvidia.com"].exists(k, k == "type")',
    'device.attributes["gpu.nvidia.com"].all(k, k.size() > 0)', 'device.attributes.size() >= 1',
    '1/0 == 1', 'device.attributes["gpu.nvidia.com"].index % 0 == 1',
    'device.attributes["gpu.nvidia.com"].index + 1 == 4',
    'device.attributes["gpu.nvidia.com"].productName + "x" == "NVIDIA H100 80GB HBM3x"',
    'device.attributes["gpu.nvidia.com"]["type"] in ["gpu", "mig"]',
    '"mig" in [device.attributes["gpu.nvidia.com"].?type.orValue("")]',
    'device.attributes["gpu.nvidia.com"].?profile.hasValue()',
    'device.attributes["gpu.nvidia.com"].profile.startsWith("1g")',
    'device.driver.endsWith(".com") && device.driver != "x"',
    'device.capacity["gpu.nvidia.com"].?memory.hasValue()',
    'device.attributes["gpu.nvidia.com"].driverVersion.compareTo(semver("570.124.6")) == 0',
    'device.attributes["gpu.nvidia.com"].cudaComputeCapability.isLessThan(semver("9.0.0-rc.1"))',
]


@pytest.fixture(scope="module")
def celref() -> Path:
    if shutil.which("go") is None:
        pytest.skip("go is not installed: scripts/celref.sh builds Kubernetes' CEL environment with it")
    built = subprocess.run(["bash", str(ROOT / "scripts" / "celref.sh")], capture_output=True, text=True)
    if built.returncode != 0:
        pytest.skip("scripts/celref.sh could not build from the Go module cache (run scripts/k8s-binaries.sh, or "
                    f"CELREF_GOPROXY=…): {built.stderr[-300:]}")
    return Path(built.stdout.strip().splitlines()[-1])



def _quantity(milli: int) -> str:
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def _ours(expression: str, device: Device, driver: str) -> tuple[str, object]:
    compiled = cel.compile(expression)
    if isinstance(compiled, cel.CompileError):
        return "compile", compiled.message
    try:
        return "result", compiled.matches(device, driver)
    except cel.SelectorError as e:
        return "runtime", e.message


def test_outcomes_and_words_are_kubernetes(celref: Path) -> None:
    asked = [(e, name) for e, expected in CASES if e != "device.driver" and "> 3" not in e for name in expected]
    asked += [(e, name) for e in MORE for name in DEVICES]
    lines = []
    for expression, name in asked:
        device, driver = DEVICES[name]
        lines.append(json.dumps({"expression": expression, "driver": driver,
                                 "attributes": {k: attribute_json(v) for k, v in device.attributes.items()},
                                 "capacity": {k: _quantity(c.value_milli) for k, c in device.capacity.items()}}))
    out = subprocess.run([str(celref)], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True)
    differ = []
    for (expression, name), answer in zip(asked, out.stdout.splitlines(), strict=True):
        kind, theirs = next(iter(json.loads(answer).items()))
        mine_kind, mine = _ours(expression, *DEVICES[name])
        same = kind == mine_kind and (kind == "compile" or theirs == mine or
                                      (mine == "no such overload" and theirs.startswith("no such overload")))
        if not same:
            differ.append(f"{expression} on {name}: gpuscale {mine_kind} {mine!r}, Kubernetes {kind} {theirs!r}")
    assert differ == []
    assert len(asked) > 150
