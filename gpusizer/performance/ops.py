"""The zoo CNNs' operations, one by one (data/cnn_ops.json, written by benchmarks/cnn_ops.py).

A CNN step is hundreds of kernels with very different shapes: convolutions that keep the
Tensor Cores busy, depthwise convolutions and batch norms that only stream memory. Timing each
against its own roofline, as Habitat and LLM-Viewer do per layer, is what lets one pair of
efficiencies serve a ResNet and a MobileNet. This module reads the table and turns a row into
the FLOPs and bytes of one inference step at the run's batch and image size. (Training steps
are traced by the same script, but the engine does not time them this way yet: see
docs/method.md, "CNN operations".)
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpusizer import datafiles
from gpusizer.domain.precision import precision_spec
from gpusizer.errors import DataFileError

_FROZEN = ConfigDict(frozen=True, extra="forbid", defer_build=True)

Count = Annotated[int, Field(ge=1, le=100_000)]
Amount = Annotated[int, Field(ge=0, le=10**15)]
#: [count, kind, flops per sample, bytes per sample, fixed bytes]; kind g: convolution or
#: matrix product, s: streaming operation
Row = tuple[Count, Literal["g", "s"], Amount, Amount, Amount]


class _Tables(BaseModel):
    model_config = _FROZEN

    fp32: tuple[Row, ...] = Field(min_length=1, max_length=10_000)
    mixed: tuple[Row, ...] = Field(min_length=1, max_length=10_000)
    half: tuple[Row, ...] = Field(min_length=1, max_length=10_000)


class _ModelOps(BaseModel):
    model_config = _FROZEN

    image_size: int = Field(ge=8, le=8192)
    infer: _Tables


class CnnOps(BaseModel):
    model_config = _FROZEN

    description: tuple[str, ...] = ()
    schema_version: Literal[1]
    generated_by: str
    torch: str
    models: dict[str, _ModelOps]


class OpTerm(BaseModel):
    """``count`` identical operations of one step: each does ``flops`` and moves ``bytes``."""

    model_config = _FROZEN

    count: int
    matmul: bool
    flops: float
    bytes: float


@functools.cache
def load_cnn_ops(path: Path | None = None) -> CnnOps:
    path = path or datafiles.bundled_path("cnn_ops.json")
    try:
        return CnnOps.model_validate(datafiles.load_json(path))
    except ValidationError as exc:
        raise DataFileError(datafiles.describe_validation_error(exc, str(path))) from None


def op_terms(model_id: str | None, precision: str, batch: int, image_size: int | None) -> tuple[OpTerm, ...] | None:
    """One inference step's operations, or None where no table describes the run (a model outside the
    zoo, or a precision the tables do not cover). Per-sample FLOPs and bytes scale with the
    image's area (convolutions; the classifier's few FLOPs are scaled with them)."""
    table_name = precision_spec(precision).eager_ops
    if model_id is None or table_name is None:
        return None
    entry = load_cnn_ops().models.get(model_id)
    if entry is None:
        return None
    scale = (image_size / entry.image_size) ** 2 if image_size else 1.0
    rows = getattr(entry.infer, table_name)
    return tuple(OpTerm(count=count, matmul=kind == "g", flops=flops * scale * batch,
                        bytes=per_sample * scale * batch + fixed)
                 for count, kind, flops, per_sample, fixed in rows)
