"""Benchmark: two maintained CEL libraries for Python on the device selectors of Dynamic Resource Allocation.

The candidates: `cel-python` (module `celpy`, a pure-Python interpreter) and `cel-expr-python` (module
`cel_expr_python`, the CEL project's Python binding of its C++ runtime). Neither is a dependency of gpuscale yet; run
    .venv/bin/pip install cel-python==0.5.0 cel-expr-python==0.1.3
    PYTHONPATH=. .venv/bin/python bench/cel.py [--devices 40000]

What it checks, on the expressions Kubernetes documents for DRA (`ResourceClaim` `selectors[].cel.expression`) and
NVIDIA's driver uses:
- **semantics**: each expression against a few devices, with the answer Kubernetes gives (true, false, or an error
  that aborts the allocation): string, int, bool and version attributes, quantity capacities compared with the
  Kubernetes `quantity` library, a domain the device does not publish (an empty map, so `in` is false and a field
  lookup an error), a missing attribute (an error), a type mismatch (an error), a syntax error (a compile error);
- **speed**: compile time per expression, and evaluation time per device over `--devices` devices (5,000 nodes with
  8 GPUs each by default), in process CPU time, both libraries in the same run.

Kubernetes' own environment adds `quantity(string)` with `compareTo`, `isGreaterThan`, `isLessThan`, and
`semver(string)` with the same comparisons; each adapter below provides them in its library's way: `celpy` through
Python types, `cel_expr_python` through tagged maps (its Python functions exchange plain values only).
"""

from __future__ import annotations

import argparse
import platform
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

ERROR = "error"
"""The answer when Kubernetes aborts the allocation: a runtime error, or an expression that does not compile."""

_SUFFIX = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30,
           "Ti": 2**40, "m": Decimal("0.001")}
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|k|M|G|T|m)?$")


def milli(text: str) -> int:
    """A quantity in thousandths (enough for these expressions; gpuscale's own parser is `model.quantity`)."""
    m = _QUANTITY.match(text)
    if m is None:
        raise ValueError(f"not a quantity: {text!r}")
    return int(Decimal(m.group(1)) * Decimal(_SUFFIX[m.group(2) or ""]) * 1000)


def version(text: str) -> tuple[int, int, int]:
    major, minor, patch = (int(p) for p in text.split("-")[0].split("."))
    return major, minor, patch


def cmp(a: Any, b: Any) -> int:
    return (a > b) - (a < b)


@dataclass(frozen=True)
class Device:
    """A device as a ResourceSlice publishes it: attributes and capacities by fully qualified name."""

    driver: str
    attributes: Mapping[str, str | int | bool | tuple[str, str]]
    """Values; a version is ("version", "1.2.3")."""
    capacity: Mapping[str, str]


def by_domain(names: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """`device.attributes` as CEL sees it: grouped by the name's domain (`gpu.nvidia.com/productName`)."""
    grouped: dict[str, dict[str, Any]] = {}
    for name, value in names.items():
        domain, _, attr = name.rpartition("/")
        grouped.setdefault(domain, {})[attr] = value
    return grouped


H100 = Device("gpu.nvidia.com", {"gpu.nvidia.com/productName": "NVIDIA H100 80GB HBM3", "gpu.nvidia.com/type": "gpu",
                                  "gpu.nvidia.com/index": 3, "gpu.nvidia.com/architecture": "Hopper",
                                  "gpu.nvidia.com/driverVersion": ("version", "570.124.6"),
                                  "gpu.nvidia.com/cudaComputeCapability": ("version", "9.0.0"),
                                  "resource.kubernetes.io/pcieRoot": "pci0000:00"},
              {"gpu.nvidia.com/memory": "80Gi"})
A100 = Device("gpu.nvidia.com", {"gpu.nvidia.com/productName": "NVIDIA A100-SXM4-40GB", "gpu.nvidia.com/type": "gpu",
                                  "gpu.nvidia.com/index": 0, "gpu.nvidia.com/architecture": "Ampere",
                                  "gpu.nvidia.com/driverVersion": ("version", "535.161.8"),
                                  "gpu.nvidia.com/cudaComputeCapability": ("version", "8.0.0")},
              {"gpu.nvidia.com/memory": "40Gi"})
MIG = Device("gpu.nvidia.com", {"gpu.nvidia.com/type": "mig", "gpu.nvidia.com/profile": "1g.10gb",
                                 "gpu.nvidia.com/productName": "NVIDIA A100-SXM4-80GB"},
             {"gpu.nvidia.com/memory": "9728Mi", "gpu.nvidia.com/multiprocessors": "14"})
NIC = Device("rdma.example.com", {"rdma.example.com/model": "cx7"}, {"rdma.example.com/bandwidth": "400G"})

CASES: list[tuple[str, dict[str, object]]] = [
    ('device.driver == "gpu.nvidia.com"', {"H100": True, "NIC": False}),
    ('device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"',
     {"H100": True, "A100": False, "NIC": ERROR}),
    ('device.attributes["gpu.nvidia.com"].type == "gpu"', {"H100": True, "MIG": False}),
    ('device.attributes["gpu.nvidia.com"].type == "mig" && device.attributes["gpu.nvidia.com"].profile == "1g.10gb"',
     {"MIG": True, "H100": False}),
    ('device.attributes["gpu.nvidia.com"].index >= 2', {"H100": True, "A100": False, "MIG": ERROR}),
    ('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("64Gi")) >= 0',
     {"H100": True, "A100": False, "MIG": False, "NIC": ERROR}),
    ('device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("12G"))', {"A100": True, "MIG": False}),
    ('device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("550.0.0"))',
     {"H100": True, "A100": False}),
    ('device.attributes["gpu.nvidia.com"].cudaComputeCapability.compareTo(semver("8.0.0")) >= 0',
     {"H100": True, "A100": True}),
    ('"gpu.nvidia.com" in device.attributes && "productName" in device.attributes["gpu.nvidia.com"]',
     {"H100": True, "NIC": False}),
    ('"productName" in device.attributes["gpu.nvidia.com"]', {"NIC": False}),
    ('has(device.attributes["gpu.nvidia.com"].profile)', {"MIG": True, "H100": False}),
    ('device.attributes["gpu.nvidia.com"].architecture in ["Hopper", "Blackwell"]', {"H100": True, "A100": False}),
    ('device.attributes["gpu.nvidia.com"].productName > 3', {"H100": ERROR}),
    ('device.driver == "gpu.nvidia.com" &&', {"H100": ERROR}),
]
DEVICES = {"H100": H100, "A100": A100, "MIG": MIG, "NIC": NIC}


class Adapter:
    name: str

    def compile(self, expression: str) -> Any: ...

    def device(self, device: Device, expression: str) -> Any: ...

    def evaluate(self, program: Any, device: Any) -> object:
        """True, False, or ERROR."""
        ...


class CelPython(Adapter):
    """`celpy`: quantities and versions as Python types with the comparison methods; domains not published read as
    an empty map (a `MapType` that answers a missing domain with one)."""

    name = "cel-python 0.5.0"

    def __init__(self) -> None:
        import celpy
        from celpy import celtypes

        self.celpy, self.t = celpy, celtypes
        t = celtypes

        class Quantity:
            def __init__(self, m: int) -> None:
                self.m = m

        class Semver:
            def __init__(self, v: tuple[int, int, int]) -> None:
                self.v = v

        class Domains(t.MapType):  # type: ignore[misc,name-defined]
            def __getitem__(self, key: Any) -> Any:
                return super().__getitem__(key) if key in self else t.MapType({})

        self.Quantity, self.Semver, self.Domains = Quantity, Semver, Domains

        def key(x: Any) -> Any:
            return x.m if isinstance(x, Quantity) else x.v

        self.functions: dict[str, Callable[..., Any]] = {
            "quantity": lambda s: Quantity(milli(str(s))), "semver": lambda s: Semver(version(str(s))),
            "compareTo": lambda a, b: t.IntType(cmp(key(a), key(b))),
            "isGreaterThan": lambda a, b: t.BoolType(key(a) > key(b)),
            "isLessThan": lambda a, b: t.BoolType(key(a) < key(b)),
        }
        self.env = celpy.Environment()

    def compile(self, expression: str) -> Any:
        try:
            return self.env.program(self.env.compile(expression), functions=self.functions)
        except Exception:  # the library's parse errors
            return None

    def _value(self, v: Any) -> Any:
        t = self.t
        if isinstance(v, tuple):
            return self.Semver(version(v[1]))
        if isinstance(v, bool):
            return t.BoolType(v)
        return t.IntType(v) if isinstance(v, int) else t.StringType(v)

    def device(self, device: Device, expression: str) -> Any:
        t = self.t
        attributes = {d: t.MapType({t.StringType(k): self._value(v) for k, v in m.items()})
                      for d, m in by_domain(device.attributes).items()}
        capacity = {d: t.MapType({t.StringType(k): self.Quantity(milli(v)) for k, v in m.items()})
                    for d, m in by_domain(device.capacity).items()}
        return t.MapType({t.StringType("driver"): t.StringType(device.driver),
                          t.StringType("attributes"): self.Domains({t.StringType(k): v for k, v in attributes.items()}),
                          t.StringType("capacity"): self.Domains({t.StringType(k): v for k, v in capacity.items()})})

    def evaluate(self, program: Any, device: Any) -> object:
        if program is None:
            return ERROR
        try:
            result = program.evaluate({"device": device})
        except Exception:
            return ERROR
        return bool(result) if isinstance(result, self.t.BoolType) else ERROR


_DOMAIN_LITERAL = re.compile(r'"([a-z0-9]([-a-z0-9.]*[a-z0-9])?)"')


class CelExprPython(Adapter):
    """`cel_expr_python`: quantities and versions as tagged maps (its Python functions take and return plain values);
    a domain the device does not publish is an empty map for every domain-like string literal of the expression
    (the C++ maps it builds cannot answer a missing key with a default)."""

    name = "cel-expr-python 0.1.3"

    def __init__(self) -> None:
        from cel_expr_python import cel

        self.cel = cel
        tagged = cel.Type.Map(cel.Type.STRING, cel.Type.DYN)

        def key(x: Mapping[str, Any]) -> Any:
            return x["q"] if "q" in x else tuple(x["v"])

        def member(name: str, returns: Any, impl: Callable[..., Any]) -> Any:
            return cel.FunctionDecl(name, [cel.Overload(f"tagged_{name}", returns, [tagged, tagged], is_member=True,
                                                        impl=impl)])

        self.env = cel.NewEnv(variables={"device": cel.Type.DYN}, functions=[
            cel.FunctionDecl("quantity", [cel.Overload("quantity_string", tagged, [cel.Type.STRING],
                                                       impl=lambda s: {"q": milli(s)})]),
            cel.FunctionDecl("semver", [cel.Overload("semver_string", tagged, [cel.Type.STRING],
                                                     impl=lambda s: {"v": list(version(s))})]),
            member("compareTo", cel.Type.INT, lambda a, b: cmp(key(a), key(b))),
            member("isGreaterThan", cel.Type.BOOL, lambda a, b: key(a) > key(b)),
            member("isLessThan", cel.Type.BOOL, lambda a, b: key(a) < key(b)),
        ])

    def compile(self, expression: str) -> Any:
        try:
            return self.env.compile(expression)
        except RuntimeError:
            return None

    def device(self, device: Device, expression: str) -> Any:
        domains = {m.group(1) for m in _DOMAIN_LITERAL.finditer(expression) if "." in m.group(1)}

        def value(v: Any) -> Any:
            return {"v": list(version(v[1]))} if isinstance(v, tuple) else v

        attributes = {d: {} for d in domains} | {d: {k: value(v) for k, v in m.items()}
                                                  for d, m in by_domain(device.attributes).items()}
        capacity = {d: {} for d in domains} | {d: {k: {"q": milli(v)} for k, v in m.items()}
                                                for d, m in by_domain(device.capacity).items()}
        return {"driver": device.driver, "attributes": attributes, "capacity": capacity}

    def evaluate(self, program: Any, device: Any) -> object:
        if program is None:
            return ERROR
        result = program.eval(data={"device": device})
        value = result.value()
        return value if isinstance(value, bool) else ERROR


def semantics(adapter: Adapter) -> list[str]:
    """The cases whose answer differs from Kubernetes'."""
    wrong = []
    for expression, expected in CASES:
        program = adapter.compile(expression)
        for device_name, answer in expected.items():
            got = adapter.evaluate(program, adapter.device(DEVICES[device_name], expression))
            if got != answer:
                wrong.append(f"{expression} on {device_name}: {got} (Kubernetes: {answer})")
    return wrong


SPEED = ('device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].productName == '
         '"NVIDIA H100 80GB HBM3" && device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("64Gi")) >= 0')


def speed(adapter: Adapter, n: int) -> tuple[float, float, float, int]:
    """Compile ms, device-build µs, evaluation µs per device, devices selected."""
    t0 = time.process_time()
    for _ in range(50):
        program = adapter.compile(SPEED)
    compile_ms = (time.process_time() - t0) / 50 * 1e3
    kinds = [H100, A100, MIG, NIC]
    t0 = time.process_time()
    devices = [adapter.device(kinds[i % 4], SPEED) for i in range(n)]
    build_us = (time.process_time() - t0) / n * 1e6
    t0 = time.process_time()
    selected = sum(adapter.evaluate(program, d) is True for d in devices)
    eval_us = (time.process_time() - t0) / n * 1e6
    return compile_ms, build_us, eval_us, selected


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=40_000)
    args = parser.parse_args()
    print(f"{platform.python_implementation()} {platform.python_version()} on {platform.machine()}")
    cases = sum(len(e) for _, e in CASES)
    for adapter in (CelPython(), CelExprPython()):
        wrong = semantics(adapter)
        compile_ms, build_us, eval_us, selected = speed(adapter, args.devices)
        print(f"{adapter.name}: {cases - len(wrong)}/{cases} answers as Kubernetes gives them; compile "
              f"{compile_ms:.3f} ms; device input {build_us:.1f} µs, evaluation {eval_us:.1f} µs per device "
              f"({args.devices:,} devices, {selected:,} selected)")
        for line in wrong:
            print(f"  differs: {line}")


if __name__ == "__main__":
    main()
