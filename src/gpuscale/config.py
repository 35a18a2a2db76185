"""The configuration file: YAML validated by pydantic, names familiar to Cluster Autoscaler users.

`load_config(path)` returns a frozen `Config` of model values; any problem raises `ConfigError` with the file and the
setting's path (`pools[1].allocatable.cpu`), so the CLI prints one line and exits 2. Unknown keys are errors:
a misspelt option silently ignored is how autoscalers surprise people.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gpuscale.model.errors import ConfigError
from gpuscale.model.pool import NodePool
from gpuscale.model.quantity import QuantityError, to_milli, to_units
from gpuscale.model.resources import CPU, GPU_MILLI, NVIDIA_GPU, Resources
from gpuscale.model.taints import Taint, TaintEffect

GPU_COUNT_LABEL = "nvidia.com/gpu.count"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TaintConfig(_Strict):
    key: str = Field(min_length=1)
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class GpuConfig(_Strict):
    model: str = Field(min_length=1, description="GPU product, e.g. nvidia-tesla-a100 or NVIDIA-A100-SXM4-40GB")
    count: int = Field(ge=1, description="physical GPUs per node")
    resource: str = Field(default=NVIDIA_GPU, description="extended resource the device plugin advertises")


def _quantity(name: str, value: Any) -> int:
    return to_milli(value) if name in (CPU, GPU_MILLI) else to_units(value)


class PoolConfig(_Strict):
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    instance_type: str = ""
    min_size: int = Field(default=0, ge=0)
    max_size: int = Field(default=1000, ge=0)
    usd_per_hour: float = Field(default=0.0, ge=0)
    zones: tuple[str, ...] = ()
    labels: dict[str, str] = Field(default_factory=dict)
    taints: tuple[TaintConfig, ...] = ()
    allocatable: dict[str, int | float | str]
    gpu: GpuConfig | None = None

    @field_validator("allocatable")
    @classmethod
    def _quantities(cls, value: dict[str, int | float | str]) -> dict[str, int | float | str]:
        for name, text in value.items():
            try:
                amount = _quantity(name, text)
            except QuantityError as err:
                raise ValueError(f"{name}: {err}") from None
            if amount < 0:
                raise ValueError(f"{name}: must not be negative")
        if "cpu" not in value or "memory" not in value:
            raise ValueError("must give at least cpu and memory")
        return value

    @model_validator(mode="after")
    def _bounds(self) -> PoolConfig:
        if self.min_size > self.max_size:
            raise ValueError(f"min_size {self.min_size} is above max_size {self.max_size}")
        return self

    def to_pool(self) -> NodePool:
        amounts = {name: _quantity(name, text) for name, text in self.allocatable.items()}
        amounts.setdefault("pods", 110)
        labels = dict(self.labels)
        if self.instance_type:
            labels.setdefault("node.kubernetes.io/instance-type", self.instance_type)
        if self.gpu is not None:
            amounts.setdefault(self.gpu.resource, self.gpu.count)
            labels.setdefault(GPU_PRODUCT_LABEL, self.gpu.model)
            labels.setdefault(GPU_COUNT_LABEL, str(self.gpu.count))
        return NodePool(
            name=self.name, allocatable=Resources.of(amounts), labels=labels,
            taints=tuple(Taint(key=t.key, value=t.value, effect=TaintEffect(t.effect)) for t in self.taints),
            gpu_model=self.gpu.model if self.gpu else None, gpus_per_node=self.gpu.count if self.gpu else 0,
            usd_per_hour=self.usd_per_hour, min_size=self.min_size, max_size=self.max_size, zones=self.zones,
        )


class ConfigFile(_Strict):
    pools: Annotated[tuple[PoolConfig, ...], Field(min_length=1)]

    @model_validator(mode="after")
    def _unique(self) -> ConfigFile:
        names = [p.name for p in self.pools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"pool names must be unique, repeated: {', '.join(dupes)}")
        return self


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    pools: tuple[NodePool, ...]


def _location(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def parse_config(raw: Mapping[str, Any], source: str = "config") -> Config:
    try:
        parsed = ConfigFile.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        message = str(first["msg"]).removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            message = "unknown setting"
        raise ConfigError(f"{source}: {_location(first['loc'])}", message) from None
    return Config(pools=tuple(p.to_pool() for p in parsed.pools))


def load_config(path: Path) -> Config:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ConfigError(str(path), err.strerror or str(err)) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}: line {mark.line + 1}" if mark else str(path)
        raise ConfigError(where, f"bad YAML: {getattr(err, 'problem', None) or err}") from None
    if not isinstance(raw, Mapping):
        raise ConfigError(str(path), "expected a mapping at the top level")
    return parse_config(raw, str(path))
