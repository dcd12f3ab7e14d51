"""GPU systems: node types people buy (DGX, PCIe servers) or rent (cloud instances), from
data/systems.yaml. A system names its GPU by catalog id and says how many, how they talk to
each other inside the node, which network ports the node has, its host memory and, for a cloud
instance, the dated on-demand (and spot) price per hour. Every figure cites a source; unknown
values stay null.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpusizer import datafiles
from gpusizer.errors import DataFileError, UsageError
from gpusizer.hardware.catalog import Source

_FROZEN = ConfigDict(frozen=True, extra="forbid", defer_build=True, allow_inf_nan=False)
#: how the GPUs of a node reach each other: NVSwitch (every pair at full NVLink speed), a
#: hybrid cube-mesh of direct NVLinks (DGX-1, AWS P3), NVLink bridges between pairs, or PCIe
Fabric = Literal["nvswitch", "nvlink-mesh", "nvlink-bridge", "pcie"]
NicKind = Literal["infiniband", "roce", "efa", "ethernet", "gpudirect-tcpx"]
PROVIDERS: tuple[str, ...] = ("aws", "gcp", "azure", "lambda", "runpod", "coreweave")


class IntraNode(BaseModel):
    model_config = _FROZEN

    #: null: a single-GPU instance, or a fabric no source states
    fabric: Fabric | None = None
    #: per GPU, bidirectional
    nvlink_gb_s: float | None = Field(default=None, gt=0, le=100_000)
    pcie_generation: int | None = Field(default=None, ge=1, le=7)
    #: PCIe peer-to-peer path: through a PCIe switch, through the CPU's root complex, or none
    p2p: Literal["switch", "root-complex", "none"] | None = None


class Nics(BaseModel):
    model_config = _FROZEN

    count: int | None = Field(default=None, ge=1, le=1024)
    gbit_s_each: float | None = Field(default=None, gt=0, le=10_000)
    #: where a provider publishes only the node's total network bandwidth
    total_gbit_s: float | None = Field(default=None, gt=0, le=1_000_000)
    #: GPUDirect RDMA over these ports (InfiniBand, RoCE, EFA); false for TCP-based transports
    rdma: bool | None = None
    kind: NicKind | None = None


class CloudPrice(BaseModel):
    model_config = _FROZEN

    #: the whole instance, USD per hour, Linux, no commitment
    on_demand_usd_per_hour: float | None = Field(default=None, gt=0, le=100_000)
    spot_usd_per_hour: float | None = Field(default=None, gt=0, le=100_000)
    region: str | None = None
    #: the month the price was read or published, YYYY-MM
    date: str | None = Field(default=None, pattern=r"^20[1-3][0-9]-(0[1-9]|1[0-2])$")

    @model_validator(mode="after")
    def _dated(self) -> CloudPrice:
        if (self.on_demand_usd_per_hour is not None or self.spot_usd_per_hour is not None) and self.date is None:
            raise ValueError("date: a price needs the month it was read or published")
        return self


class System(BaseModel):
    model_config = _FROZEN

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*[a-z0-9]$", max_length=64)
    name: str = Field(min_length=2)
    kind: Literal["cloud", "on-prem"]
    provider: str | None = None
    instance_type: str | None = None
    #: a catalog id (data/gpus.yaml)
    gpu: str
    gpus: int = Field(ge=1, le=1024)
    intra_node: IntraNode
    nics: Nics | None = None
    cpu_ram_gib: float | None = Field(default=None, gt=0, le=1_000_000)
    price: CloudPrice | None = None
    sources: tuple[Source, ...] = Field(min_length=1)
    notes: str | None = None

    @model_validator(mode="after")
    def _cloud_fields(self) -> System:
        cloud = self.kind == "cloud"
        if cloud and (self.provider not in PROVIDERS or not self.instance_type):
            raise ValueError(f"provider: a cloud system names one of {', '.join(PROVIDERS)} and its instance type")
        if not cloud and (self.provider or self.instance_type or self.price):
            raise ValueError("provider: an on-prem system has no provider, instance type or hourly price")
        if self.gpus == 1 and self.intra_node.fabric is not None:
            raise ValueError("intra_node: a single-GPU system has no GPU-to-GPU fabric")
        return self

    @property
    def usd_per_gpu_hour(self) -> float | None:
        """The on-demand price of one of its GPUs for an hour; None where unknown."""
        if self.price is None or self.price.on_demand_usd_per_hour is None:
            return None
        return self.price.on_demand_usd_per_hour / self.gpus


class Systems(BaseModel):
    model_config = _FROZEN

    schema_version: Literal[1]
    systems: tuple[System, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> Systems:
        seen: set[str] = set()
        for system in self.systems:
            if system.id in seen:
                raise ValueError(f"systems: id {system.id!r} appears twice")
            seen.add(system.id)
        return self

    def with_gpu(self, gpu_id: str) -> tuple[System, ...]:
        return tuple(s for s in self.systems if s.gpu == gpu_id)

    def resolve(self, name: str) -> System:
        """A system by id, name or instance type, case, punctuation and a leading "NVIDIA" aside."""
        key = _key(name).removeprefix("nvidia")
        for system in self.systems:
            names = (system.id, system.name, system.instance_type or "")
            if key and key in {_key(n).removeprefix("nvidia") for n in names}:
                return system
        raise UsageError(f"unknown system {name!r}", hint="see 'gpusizer systems list'")


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


@functools.cache
def load_systems(path: Path | None = None, cache_dir: Path | None = None) -> Systems:
    """The bundled systems, validated; each names a GPU the catalog holds."""
    from gpusizer.hardware.catalog import load_catalog

    path = path or datafiles.bundled_path("systems.yaml")
    doc: Any = datafiles.load_yaml(path, cache_dir)
    try:
        systems = Systems.model_validate(doc)
    except ValidationError as exc:
        raise DataFileError(datafiles.describe_validation_error(exc, str(path))) from None
    known = {g.id for g in load_catalog(cache_dir=cache_dir).gpus}
    for system in systems.systems:
        if system.gpu not in known:
            raise DataFileError(f"{path}: system {system.id!r}: gpu: {system.gpu!r} is not a catalog id")
    return systems
