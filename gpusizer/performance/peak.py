"""Which peak rate a precision's matmuls run at on a GPU.

The precision table (:mod:`gpusizer.domain.precision`) says which Tensor Core
rate applies and where the math runs without it; this module reads those
rates off a catalog entry and says which one it used.

Unknown is not absent. Loading the catalog derives what the derivation rules
can (``data/derivations.yaml``). A GPU whose Tensor Core rate is still unknown
(it has Tensor Cores, but no source gives the rate and no rule computes it) is
never said to lack them: :func:`peak_detail` marks the rate unknown, and the
CUDA-core rate it falls back to is a stated lower bound, not a silent stand-in.
"""

from __future__ import annotations

from typing import NamedTuple

from gpusizer.domain.precision import Precision, precision_spec
from gpusizer.domain.run import RunConfig
from gpusizer.errors import UsageError
from gpusizer.hardware.catalog import Gpu

#: Pascal GP10x chips with compute capability 6.1 have DP4A: 4 int8 multiply-adds
#: per FP32 lane and clock, so INT8 = 4x FP32 (Tesla P40 datasheet: 47 INT8 TOPS
#: vs 12 FP32 TFLOPS; Tesla P4: 22 vs 5.5).
DP4A_SPEEDUP = 4.0
DP4A_COMPUTE_CAPABILITIES = ("6.1",)

Peak = tuple[float, str, tuple[str, ...]]

#: The error band of an estimate whose Tensor Core rate is unknown: its peak is the CUDA-core
#: rate, a lower bound, so the true speed can be several times higher.
UNKNOWN_RATE_BAND = 1.0


class PeakDetail(NamedTuple):
    """The peak a precision's matmuls run at, and how sure it is."""

    tflops: float
    label: str
    notes: tuple[str, ...]
    #: the Tensor Core rate that applies is unknown: ``tflops`` is the CUDA-core rate,
    #: a lower bound, and the estimate's error band must widen
    unknown_rate: bool = False


def default_compute_precision(cfg: RunConfig) -> str:
    """The performance precision implied by a memory RunConfig."""
    return cfg.precision


def _tf32(gpu: Gpu, spec: Precision, tf32: bool) -> PeakDetail | None:
    """fp32 matmuls on TF32 Tensor Cores, when allowed and the GPU has them."""
    if not (tf32 and spec.tf32_field):
        return None
    rate = getattr(gpu, spec.tf32_field)
    if rate is None:
        if gpu.provenance(spec.tf32_field) == "unknown":
            return _unknown(gpu, "tf32", spec.tf32_field)
        return None
    note = (f"fp32 on {gpu.architecture.capitalize()} runs as TF32 on Tensor Cores, as cuDNN convolutions, "
            "TensorFlow and NGC containers do by default (plain PyTorch >= 1.12 keeps matmuls in FP32 unless "
            "torch.backends.cuda.matmul.allow_tf32 = True); turn TF32 off to model strict FP32")
    return PeakDetail(rate, "tf32 Tensor Core", (note,))


def _fp32(gpu: Gpu, why: str) -> float:
    """The FP32 rate, which every estimate that falls back to it needs: a part whose maker
    publishes none (Intel Gaudi 2) has no estimate at such a precision."""
    if gpu.fp32_tflops is None:
        raise UsageError(f"{gpu.id}: {why}, and the catalog has no FP32 rate for it (none is published)",
                         hint="pick a precision whose matrix rate the catalog knows (gpusizer catalog show)")
    return gpu.fp32_tflops


def _unknown(gpu: Gpu, name: str, field: str) -> PeakDetail:
    """A Tensor Core rate the GPU has but the catalog cannot give: the FP32 rate as a lower bound."""
    fp32 = _fp32(gpu, f"its {name} matrix rate ({field}) is unknown")
    note = (f"{gpu.id} has Tensor Cores, but its {name.upper()} Tensor Core rate is unknown (no source gives "
            f"{field} and no derivation rule applies): this estimate uses the FP32 CUDA-core rate, "
            f"{fp32:g} TFLOPS, as a lower bound, and its error band is widened")
    return PeakDetail(fp32, f"unknown {name} Tensor Core rate (lower bound: fp32 CUDA cores)", (note,),
                      unknown_rate=True)


def _same_rate(gpu: Gpu, spec: Precision, tf32: bool) -> PeakDetail | None:
    """A precision that runs at another's Tensor Core rate on this architecture (BF16 at FP16's)."""
    if not (spec.same_rate_as and spec.same_rate_from):
        return None
    if not gpu.arch_at_least(spec.same_rate_from):
        return None
    other = peak_detail(gpu, spec.same_rate_as, tf32=tf32)
    if other.unknown_rate or precision_spec(spec.same_rate_as).tensor_field is None or "Tensor" not in other.label:
        return None
    return PeakDetail(other.tflops, f"{spec.name} Tensor Core (the {spec.same_rate_as} rate)", other.notes)


def _without_tensor(gpu: Gpu, spec: Precision, tf32: bool) -> PeakDetail:
    """The rate where the GPU has no Tensor Cores for ``spec``."""
    lacks = (f"{gpu.id} has no Tensor Cores" if gpu.has_tensor_cores is False
             else f"{gpu.id} ({gpu.architecture.capitalize()}) has no {spec.name.upper()} Tensor Cores")
    if spec.without_tensor == "fp64-units":
        if gpu.fp64_tflops is None:
            raise UsageError(f"{gpu.id} has no FP64 figure in the catalog", hint="pick another precision")
        return PeakDetail(gpu.fp64_tflops, "fp64", ())
    if spec.without_tensor == "fp32-units":
        notes = () if spec.tensor_field is None else (f"{lacks}; computing at the FP32 CUDA-core rate",)
        return PeakDetail(_fp32(gpu, f"{spec.name} runs on its FP32 units"), "fp32 (CUDA cores)", notes)
    if spec.without_tensor == "cuda-16bit":
        note = f"{lacks}; 16-bit math runs on CUDA cores"
        # cuDNN/cuBLAS run 16-bit storage with FP32 math where FP16 units are slow
        fp16 = gpu.fp16_tflops
        if fp16 is not None and (gpu.fp32_tflops is None or fp16 > gpu.fp32_tflops):
            return PeakDetail(fp16, "fp16 (CUDA cores)", (note,))
        return PeakDetail(_fp32(gpu, f"{spec.name} runs on its vector units"), "fp32 (CUDA cores; 16-bit storage)",
                          (note,))
    sixteen = peak_detail(gpu, "fp16", tf32=tf32)
    return PeakDetail(sixteen.tflops, sixteen.label, (f"{lacks}; computing at the 16-bit rate", *sixteen.notes),
                      sixteen.unknown_rate)


def peak_detail(gpu: Gpu, precision: str, *, tf32: bool = True) -> PeakDetail:
    """The peak TFLOPS for matmuls at ``precision`` on ``gpu``, which peak it is, notes, and
    whether the Tensor Core rate that applies is unknown (then the peak is a lower bound)."""
    spec = precision_spec(precision)
    got = _tf32(gpu, spec, tf32)
    if got is not None:
        return got
    if spec.tensor_field is not None:
        rate = getattr(gpu, spec.tensor_field)
        if rate is not None:
            return PeakDetail(rate, spec.tensor_label or spec.tensor_field, ())
        same = _same_rate(gpu, spec, tf32)
        if same is not None:
            return same
        if gpu.provenance(spec.tensor_field) == "unknown":
            return _unknown(gpu, spec.name, spec.tensor_field)
    if spec.dp4a and gpu.compute_capability in DP4A_COMPUTE_CAPABILITIES:
        return PeakDetail(_fp32(gpu, "int8 runs as DP4A") * DP4A_SPEEDUP, "int8 DP4A (4x fp32)", ())
    return _without_tensor(gpu, spec, tf32)


def peak_tflops(gpu: Gpu, precision: str, *, tf32: bool = True) -> Peak:
    """(peak TFLOPS, which peak, notes) for matmuls at ``precision`` on ``gpu``; see :func:`peak_detail`."""
    detail = peak_detail(gpu, precision, tf32=tf32)
    return detail.tflops, detail.label, detail.notes
