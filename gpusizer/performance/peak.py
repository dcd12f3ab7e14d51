"""Which peak rate a precision's matmuls run at on a GPU.

The precision table (:mod:`gpusizer.domain.precision`) says which Tensor Core
rate applies and where the math runs without it; this module reads those
rates off a catalog entry and says which one it used.
"""

from __future__ import annotations

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


def default_compute_precision(cfg: RunConfig) -> str:
    """The performance precision implied by a memory RunConfig."""
    return cfg.precision


def _tf32(gpu: Gpu, spec: Precision, tf32: bool) -> Peak | None:
    """fp32 matmuls on TF32 Tensor Cores, when allowed and the GPU has them."""
    if not (tf32 and spec.tf32_field):
        return None
    rate = getattr(gpu, spec.tf32_field)
    if rate is None:
        return None
    note = (f"fp32 on {gpu.architecture.capitalize()} runs as TF32 on Tensor Cores, as cuDNN convolutions, "
            "TensorFlow and NGC containers do by default (plain PyTorch >= 1.12 keeps matmuls in FP32 unless "
            "torch.backends.cuda.matmul.allow_tf32 = True); turn TF32 off to model strict FP32")
    return rate, "tf32 Tensor Core", (note,)


def _without_tensor(gpu: Gpu, spec: Precision, tf32: bool) -> Peak:
    """The rate where the GPU has no Tensor Core rate for ``spec`` in the catalog."""
    missing = f"the catalog has no {spec.name.upper()} Tensor Core rate for {gpu.id}"
    if spec.without_tensor == "fp64-units":
        if gpu.fp64_tflops is None:
            raise UsageError(f"{gpu.id} has no FP64 figure in the catalog", hint="pick another precision")
        return gpu.fp64_tflops, "fp64", ()
    if spec.without_tensor == "fp32-units":
        notes = () if spec.tensor_field is None else (f"{missing}; computing at the FP32 CUDA-core rate",)
        return gpu.fp32_tflops, "fp32 (CUDA cores)", notes
    if spec.without_tensor == "cuda-16bit":
        note = f"{missing}; 16-bit math runs on CUDA cores"
        # cuDNN/cuBLAS run 16-bit storage with FP32 math where FP16 units are slow
        fp16 = gpu.fp16_tflops or 0.0
        if fp16 > gpu.fp32_tflops:
            return fp16, "fp16 (CUDA cores)", (note,)
        return gpu.fp32_tflops, "fp32 (CUDA cores; 16-bit storage)", (note,)
    value, label, more = peak_tflops(gpu, "fp16", tf32=tf32)
    return value, label, (f"{missing}; computing at the 16-bit rate", *more)


def peak_tflops(gpu: Gpu, precision: str, *, tf32: bool = True) -> Peak:
    """(peak TFLOPS, which peak, notes) for matmuls at ``precision`` on ``gpu``."""
    spec = precision_spec(precision)
    got = _tf32(gpu, spec, tf32)
    if got is not None:
        return got
    if spec.tensor_field is not None:
        rate = getattr(gpu, spec.tensor_field)
        if rate is not None:
            return rate, spec.tensor_label or spec.tensor_field, ()
    if spec.dp4a and gpu.compute_capability in DP4A_COMPUTE_CAPABILITIES:
        return gpu.fp32_tflops * DP4A_SPEEDUP, "int8 DP4A (4x fp32)", ()
    return _without_tensor(gpu, spec, tf32)
