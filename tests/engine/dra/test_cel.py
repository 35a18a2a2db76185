"""CEL selectors on the expressions Kubernetes documents for DRA and NVIDIA's driver uses, with the answers
kube-scheduler gives: true, false, a runtime error (kube aborts the pod's scheduling) or a compile error."""

from __future__ import annotations

import pytest

from gpuscale.engine.dra import cel
from gpuscale.model.dra import Device, DeviceCapacity, Version
from gpuscale.model.quantity import to_milli

NVIDIA = "gpu.nvidia.com"


def gpu(name: str = "gpu-0", *, memory: str = "80Gi", **attributes: str | int | bool | Version) -> Device:
    return Device(name=name, attributes={f"{NVIDIA}/{k}": v for k, v in attributes.items()},
                  capacity={f"{NVIDIA}/memory": DeviceCapacity(value_milli=to_milli(memory))})


H100 = gpu(productName="NVIDIA H100 80GB HBM3", type="gpu", index=3, architecture="Hopper",
           driverVersion=Version("570.124.6"), cudaComputeCapability=Version("9.0.0"))
A100 = gpu(memory="40Gi", productName="NVIDIA A100-SXM4-40GB", type="gpu", index=0, architecture="Ampere",
           driverVersion=Version("535.161.8"), cudaComputeCapability=Version("8.0.0"))
MIG = Device(name="gpu-0-mig-1g10gb-0",
             attributes={f"{NVIDIA}/type": "mig", f"{NVIDIA}/profile": "1g.10gb",
                         f"{NVIDIA}/productName": "NVIDIA A100-SXM4-80GB"},
             capacity={f"{NVIDIA}/memory": DeviceCapacity(value_milli=to_milli("9728Mi")),
                       f"{NVIDIA}/multiprocessors": DeviceCapacity(value_milli=to_milli("14"))})
NIC = Device(name="nic-0", attributes={"rdma.example.com/model": "cx7"},
             capacity={"rdma.example.com/bandwidth": DeviceCapacity(value_milli=to_milli("400G"))})
DEVICES = {"H100": (H100, NVIDIA), "A100": (A100, NVIDIA), "MIG": (MIG, NVIDIA), "NIC": (NIC, "rdma.example.com")}
ERROR = "error"

CASES: list[tuple[str, dict[str, object]]] = [
    ('device.driver == "gpu.nvidia.com"', {"H100": True, "NIC": False}),
    ('device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"',
     {"H100": True, "A100": False, "NIC": ERROR}),
    ('device.attributes["gpu.nvidia.com"].type == "gpu"', {"H100": True, "MIG": False}),
    ('device.attributes["gpu.nvidia.com"].type == "mig" && device.attributes["gpu.nvidia.com"].profile == "1g.10gb"',
     {"MIG": True, "H100": False}),
    ('device.attributes["gpu.nvidia.com"].index >= 2', {"H100": True, "A100": False, "MIG": ERROR}),
    ('device.attributes["gpu.nvidia.com"].index == 0 || device.attributes["gpu.nvidia.com"].index == 3',
     {"H100": True, "A100": True}),
    ('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("64Gi")) >= 0',
     {"H100": True, "A100": False, "MIG": False, "NIC": ERROR}),
    ('device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("12G"))', {"A100": True, "MIG": False}),
    ('device.capacity["gpu.nvidia.com"].memory.isLessThan(quantity("10Gi"))', {"MIG": True, "A100": False}),
    ('device.capacity["gpu.nvidia.com"].memory == quantity("85899345920")', {"H100": True, "A100": False}),
    ('device.capacity["gpu.nvidia.com"].memory.asInteger() == 42949672960', {"A100": True, "H100": False}),
    ('device.capacity["gpu.nvidia.com"].memory.sub(quantity("40Gi")).isInteger()', {"H100": True}),
    ('device.capacity["gpu.nvidia.com"].multiprocessors.add(2).compareTo(quantity("16")) == 0', {"MIG": True}),
    ('device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("550.0.0"))',
     {"H100": True, "A100": False}),
    ('device.attributes["gpu.nvidia.com"].cudaComputeCapability.compareTo(semver("8.0.0")) >= 0',
     {"H100": True, "A100": True}),
    ('device.attributes["gpu.nvidia.com"].driverVersion.major() >= 570', {"H100": True, "A100": False}),
    ('device.attributes["gpu.nvidia.com"].driverVersion == semver("570.124.6+build.1")', {"H100": True}),
    ('semver("1.0.0-alpha.1").isLessThan(semver("1.0.0-alpha.beta"))'
     ' && semver("1.0.0-rc.1").isLessThan(semver("1.0.0"))', {"H100": True}),
    ('"gpu.nvidia.com" in device.attributes && "productName" in device.attributes["gpu.nvidia.com"]',
     {"H100": True, "NIC": False}),
    ('"gpu.nvidia.com" in device.attributes', {"H100": True, "NIC": False}),
    ('"productName" in device.attributes["gpu.nvidia.com"]', {"NIC": False, "H100": True}),
    ('has(device.attributes["gpu.nvidia.com"].profile)', {"MIG": True, "H100": False}),
    ('device.attributes["gpu.nvidia.com"].?profile.orValue("") == "1g.10gb"', {"MIG": True, "H100": False}),
    ('device.attributes["gpu.nvidia.com"].architecture in ["Hopper", "Blackwell"]', {"H100": True, "A100": False}),
    ('device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA H")', {"H100": True, "A100": False}),
    ('device.attributes["gpu.nvidia.com"].productName.matches("^NVIDIA A100.*40GB$")', {"A100": True, "H100": False}),
    ('cel.bind(g, device.attributes["gpu.nvidia.com"], g.type == "gpu" && g.index < 2)',
     {"A100": True, "H100": False}),
    ('device.attributes["gpu.nvidia.com"]["productName"] == "NVIDIA H100 80GB HBM3"', {"H100": True}),
    ('device.attributes["gpu.nvidia.com"].productName > 3', {"H100": ERROR}),
    ('device.capacity["gpu.nvidia.com"].memory > 3', {"H100": ERROR}),
    ('device.attributes["gpu.nvidia.com"].index.compareTo(semver("1.0.0")) > 0', {"H100": ERROR}),
    ('device.allowMultipleAllocations', {"H100": False}),
    ('device.driver', {"H100": ERROR}),
]


def answer(expression: str, device: Device, driver: str) -> object:
    compiled = cel.compile(expression)
    assert not isinstance(compiled, cel.CompileError), compiled
    try:
        return compiled.matches(device, driver)
    except cel.SelectorError:
        return ERROR


@pytest.mark.parametrize(("expression", "expected"), CASES, ids=[e for e, _ in CASES])
def test_kubernetes_answer(expression: str, expected: dict[str, object]) -> None:
    got = {name: answer(expression, *DEVICES[name]) for name in expected}
    assert got == expected


def test_missing_attribute_is_a_runtime_error_in_kubernetes_words() -> None:
    compiled = cel.compile('device.attributes["gpu.nvidia.com"].profile == "1g.10gb"')
    assert isinstance(compiled, cel.Compiled)
    with pytest.raises(cel.SelectorError) as raised:
        compiled.matches(H100, NVIDIA)
    assert raised.value.message == "no such key: profile" + cel.NO_SUCH_KEY_HINT


def test_unpublished_domain_is_an_empty_map() -> None:
    compiled = cel.compile('device.attributes["rdma.example.com"].model == "cx7"')
    assert isinstance(compiled, cel.Compiled)
    assert compiled.matches(NIC, "rdma.example.com") is True
    with pytest.raises(cel.SelectorError, match=r"^no such key: model"):
        compiled.matches(H100, NVIDIA)


def test_type_mismatch_says_no_such_overload() -> None:
    compiled = cel.compile('device.attributes["gpu.nvidia.com"].productName > 3')
    assert isinstance(compiled, cel.Compiled)
    with pytest.raises(cel.SelectorError, match=r"^no such overload$"):
        compiled.matches(H100, NVIDIA)


def test_a_result_that_is_not_a_bool_is_an_error() -> None:
    compiled = cel.compile("device.driver")
    assert isinstance(compiled, cel.Compiled)
    with pytest.raises(cel.SelectorError, match=r"^CEL result of type string could not be converted to bool: "
                                                r"unsupported native conversion from string to 'bool'$"):
        compiled.matches(H100, NVIDIA)


def test_bad_quantity_literal_is_a_runtime_error() -> None:
    compiled = cel.compile('device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("lots"))')
    assert isinstance(compiled, cel.Compiled)
    with pytest.raises(cel.SelectorError, match="quantities must match the regular expression"):
        compiled.matches(H100, NVIDIA)


@pytest.mark.parametrize("expression", ['device.driver == "gpu.nvidia.com" &&', "device.driver ==== 1",
                                        "nosuchfunction(device)"])
def test_syntax_errors_do_not_compile(expression: str) -> None:
    compiled = cel.compile(expression)
    assert isinstance(compiled, cel.CompileError)
    assert compiled.message.startswith("compilation failed: ERROR: <input>:1:")
    assert "INVALID_ARGUMENT" not in compiled.message


def test_a_string_result_does_not_compile() -> None:
    compiled = cel.compile('"gpu"')
    assert compiled == cel.CompileError('"gpu"', "must evaluate to bool or the unknown type, not string")


def test_compile_is_cached_per_expression() -> None:
    assert cel.compile('device.driver == "a"') is cel.compile('device.driver == "a"')


def test_answers_are_cached_per_shape_not_per_name() -> None:
    compiled = cel.compile('device.attributes["gpu.nvidia.com"].index == 3 && device.driver == "gpu.nvidia.com"')
    assert isinstance(compiled, cel.Compiled)
    twin = gpu("gpu-7", productName="NVIDIA H100 80GB HBM3", type="gpu", index=3, architecture="Hopper",
               driverVersion=Version("570.124.6"), cudaComputeCapability=Version("9.0.0"))
    assert compiled.matches(H100, NVIDIA) and compiled.matches(twin, NVIDIA)
    assert len(compiled.answers) == 1
    assert compiled.matches(H100, "other.example.com") is False  # the driver is part of the shape
    assert len(compiled.answers) == 2


@pytest.mark.parametrize(("text", "inside"), [
    ('device.attributes["a.com"].x', 'device.attributes[?"a.com"].orValue(dyn({})).x'),
    ("device . capacity ['a.com'].x", "device . capacity [?'a.com'].orValue(dyn({})).x"),
    ('"device.attributes[\\"a\\"]" == device.driver', '"device.attributes[\\"a\\"]" == device.driver'),
    ('mydevice.attributes["a"].x', 'mydevice.attributes["a"].x'),
    ('device.attributes[device.attributes["a"].d].x',
     'device.attributes[?device.attributes[?"a"].orValue(dyn({})).d].orValue(dyn({})).x'),
    ('"a.com" in device.attributes', '"a.com" in device.attributes'),
])
def test_domain_rewrite(text: str, inside: str) -> None:
    assert cel.with_domain_defaults(text) == inside


@pytest.mark.parametrize(("text", "parsed"), [("1.2.3", (1, 2, 3, "")), ("1.0.0-rc.1+b.2", (1, 0, 0, "rc.1")),
                                              ("570.124.6", (570, 124, 6, ""))])
def test_semver_parse(text: str, parsed: tuple[int, int, int, str]) -> None:
    assert cel.parse_semver(text) == parsed


@pytest.mark.parametrize("text", ["1.2", "01.2.3", "1.2.3-01", "1.2.3+", "v1.2.3", "1.2.3-"])
def test_semver_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        cel.parse_semver(text)


@pytest.mark.parametrize(("expression", "reads"), [
    ('device.driver == "x"', ()),
    ('device.attributes["gpu.nvidia.com"].productName == "H" && device.capacity["gpu.nvidia.com"].memory.'
     'compareTo(quantity("1")) > 0',
     (("attributes", "gpu.nvidia.com/productName"), ("capacity", "gpu.nvidia.com/memory"))),
    ('device.attributes["a"]["b"] == 1', (("attributes", "a/b"),)),
    ('device.attributes["a"].?b.orValue(1) == 1', (("attributes", "a/b"),)),
    ('has(device.attributes["a"].x)', (("attributes", "a/x"),)),
    ('"device.attributes" == device.driver', ()),
    ('cel.bind(g, device.attributes["a"], g.x)', None),
    ('"a" in device.attributes', None),
    ("device.attributes[device.driver].x", None),
    ('[1].exists(device, device == 1) && device.driver == "x"', None),
])
def test_what_an_expression_reads(expression: str, reads: tuple[tuple[str, str], ...] | None) -> None:
    assert cel.reads_of(expression) == reads


def test_attributes_an_expression_does_not_read_do_not_split_its_answers() -> None:
    compiled = cel.compile('device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"')
    assert isinstance(compiled, cel.Compiled) and compiled.reads is not None
    many = [gpu(f"gpu-{i}", productName="NVIDIA H100 80GB HBM3", uuid=f"GPU-{i}") for i in range(5)]
    assert compiled.matches(many[0], NVIDIA)
    before = len(compiled.answers)
    assert all(compiled.matches(d, NVIDIA) for d in many)
    assert len(compiled.answers) == before
    with pytest.raises(cel.SelectorError, match=r"^no such key: productName"):
        compiled.matches(NIC, "rdma.example.com")
