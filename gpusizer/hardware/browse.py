"""Browsing the catalog: filtering, sorting and side-by-side comparison.

Pure functions over catalog models; rendering lives in ``render``.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from gpusizer.errors import UsageError
from gpusizer.hardware.catalog import Gpu, Resolution

#: Fields shown and compared side by side, in display order, with a label.
COMPARE_FIELDS: tuple[tuple[str, str], ...] = (
    ("memory_gib", "Memory (GiB)"),
    ("bandwidth_gb_s", "Bandwidth (GB/s)"),
    ("fp64_tflops", "FP64 (TFLOPS)"),
    ("fp32_tflops", "FP32 (TFLOPS)"),
    ("fp16_tflops", "FP16 non-tensor (TFLOPS)"),
    ("tensor_tf32_tflops", "Tensor TF32 (TFLOPS)"),
    ("tensor_fp16_tflops", "Tensor FP16, FP32 acc (TFLOPS)"),
    ("tensor_bf16_tflops", "Tensor BF16 (TFLOPS)"),
    ("tensor_fp8_tflops", "Tensor FP8 (TFLOPS)"),
    ("tensor_int8_tops", "Tensor INT8 (TOPS)"),
    ("cuda_cores", "CUDA cores"),
    ("tensor_cores", "Tensor Cores"),
    ("boost_clock_mhz", "Boost clock (MHz)"),
    ("tdp_w", "TDP (W)"),
    ("nvlink_gb_s", "NVLink (GB/s)"),
    ("launch_price_usd", "Launch price (USD)"),
    ("street_price_usd", "Street price (USD)"),
)

#: Non-numeric facts shown in compare.
COMPARE_FACTS: tuple[tuple[str, str], ...] = (
    ("vendor", "Vendor"),
    ("architecture", "Architecture"),
    ("segment", "Segment"),
    ("memory_type", "Memory type"),
    ("ecc", "ECC"),
    ("gpudirect_rdma", "GPUDirect RDMA"),
    ("pcie_generation", "PCIe gen"),
    ("form_factor", "Form factor"),
    ("launch_year", "Launch year"),
)


def numeric_fields() -> tuple[str, ...]:
    """Names of the numeric catalog fields: the ones a listing can be sorted by."""
    out = []
    for name, info in Gpu.model_fields.items():
        ann = str(info.annotation)
        if "Literal" in ann or name == "derived":
            continue
        if name in ("launch_year",) or "float" in ann or ("int" in ann and "bool" not in ann):
            out.append(name)
    return tuple(out)


class CatalogFilter(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    segment: str | None = None
    architecture: str | None = None
    #: nvidia, amd or intel; None: every vendor
    vendor: str | None = None
    min_memory_gib: float | None = None
    #: True: ECC can be on (always, or a driver setting); False: no ECC
    ecc: bool | None = None
    rdma: bool | None = None
    nvlink: bool | None = None
    sort: str | None = None
    descending: bool = True


def filter_gpus(gpus: Sequence[Gpu], spec: CatalogFilter) -> list[Gpu]:
    """Apply filters, then sort. Unknown values (null) always sort last."""
    out = []
    for gpu in gpus:
        if spec.segment is not None and gpu.segment != spec.segment:
            continue
        if spec.architecture is not None and gpu.architecture != spec.architecture.lower():
            continue
        if spec.vendor is not None and gpu.vendor != spec.vendor.lower():
            continue
        if spec.min_memory_gib is not None and gpu.memory_gib < spec.min_memory_gib:
            continue
        if spec.ecc is not None and gpu.ecc_capable != spec.ecc:
            continue
        if spec.rdma is not None and gpu.gpudirect_rdma != spec.rdma:
            continue
        if spec.nvlink is not None and gpu.nvlink != spec.nvlink:
            continue
        out.append(gpu)
    sort = spec.sort
    if sort is not None:
        fields = numeric_fields()
        if sort not in fields:
            import difflib

            close = difflib.get_close_matches(sort, fields, n=3)
            hint = f"did you mean {', '.join(close)}?" if close else f"choose one of: {', '.join(fields)}"
            raise UsageError(f"{sort!r} is not a numeric catalog field", hint=hint, field="sort")
        known = [g for g in out if getattr(g, sort) is not None]
        unknown = [g for g in out if getattr(g, sort) is None]
        known.sort(key=lambda g: getattr(g, sort), reverse=spec.descending)
        out = known + unknown
    return out


class CompareRow(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    field: str
    label: str
    values: tuple[float | int | None, ...]
    #: value / first GPU's value; null where either is unknown or the first is 0
    ratios: tuple[float | None, ...]
    #: per GPU: the value is an upper bound, not an estimate (a modelled speed without a term the model
    #: cannot apply to that GPU; the notes say which); empty where no value is
    upper_bounds: tuple[bool, ...] = ()


class Comparison(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    gpus: tuple[Gpu, ...]
    notes: tuple[str, ...]
    rows: tuple[CompareRow, ...]
    facts: tuple[tuple[str, str, tuple[str | int | bool | None, ...]], ...]


def ratios(values: Sequence[float | int | None]) -> tuple[float | None, ...]:
    """Each value over the first; null where either is unknown or the first is 0."""
    base = values[0]
    return tuple((v / base) if (v is not None and base not in (None, 0)) else None for v in values)


def compare(resolutions: Sequence[Resolution]) -> Comparison:
    """Side-by-side values with ratios against the first GPU."""
    if len(resolutions) < 2:
        raise UsageError("compare needs at least two GPUs", hint="e.g. gpusizer compare 1080ti p100")
    gpus = tuple(r.gpu for r in resolutions)
    rows = []
    for field, label in COMPARE_FIELDS:
        values = tuple(getattr(g, field) for g in gpus)
        rows.append(CompareRow(field=field, label=label, values=values, ratios=ratios(values)))
    facts = tuple((f, label, tuple(getattr(g, f) for g in gpus)) for f, label in COMPARE_FACTS)
    notes = tuple(r.note for r in resolutions if r.note)
    return Comparison(gpus=gpus, notes=notes, rows=tuple(rows), facts=facts)
