"""Which peak rate a precision's matmuls run at on a GPU."""

from __future__ import annotations

from gpusizer.choices import PERF_PRECISIONS
from gpusizer.errors import UsageError
from gpusizer.hardware.catalog import Gpu
from gpusizer.memory.estimate import (
    RunConfig,
)

#: Pascal GP10x chips with compute capability 6.1 have DP4A: 4 int8 multiply-adds
#: per FP32 lane and clock, so INT8 = 4x FP32 (Tesla P40 datasheet: 47 INT8 TOPS
#: vs 12 FP32 TFLOPS; Tesla P4: 22 vs 5.5).
DP4A_SPEEDUP = 4.0
DP4A_COMPUTE_CAPABILITIES = ("6.1",)


# --------------------------------------------------------------------------
# precision


def default_compute_precision(cfg: RunConfig) -> str:
    """The performance precision implied by a memory RunConfig."""
    return cfg.precision


def memory_precision(precision: str, mode: str) -> str:
    """Map a performance precision to RunConfig's memory precisions.

    tf32 is counted as fp32 (tf32 keeps fp32 storage); fp8 trains like mixed
    precision (Transformer Engine keeps fp32 master weights and 16-bit
    activations) and serves like int8 (one byte per weight).
    """
    if precision in ("fp32", "tf32"):
        return "fp32"
    if precision == "fp8":
        return "mixed" if mode == "train" else "int8"
    return precision


def peak_tflops(gpu: Gpu, precision: str, *, tf32: bool = True) -> tuple[float, str, tuple[str, ...]]:
    """(peak TFLOPS, which peak, notes) for matmuls at ``precision`` on ``gpu``."""
    notes: list[str] = []

    def cuda_fp16() -> tuple[float, str]:
        # cuDNN/cuBLAS run 16-bit storage with FP32 math where FP16 units are slow
        fp16 = gpu.fp16_tflops or 0.0
        if fp16 > gpu.fp32_tflops:
            return fp16, "fp16 (CUDA cores)"
        return gpu.fp32_tflops, "fp32 (CUDA cores; 16-bit storage)"

    if precision == "fp64":
        if gpu.fp64_tflops is None:
            raise UsageError(f"{gpu.id} has no FP64 figure in the catalog", hint="pick another --precision")
        return gpu.fp64_tflops, "fp64", ()
    if precision in ("fp32", "tf32"):
        use_tf32 = precision == "tf32" or tf32
        if use_tf32 and gpu.tensor_tf32_tflops is not None:
            if precision == "fp32":
                notes.append(
                    f"fp32 on {gpu.architecture.capitalize()} runs as TF32 on Tensor Cores, as cuDNN convolutions, "
                    "TensorFlow and NGC containers do by default (plain PyTorch >= 1.12 keeps matmuls in FP32 unless "
                    "torch.backends.cuda.matmul.allow_tf32 = True); --no-tf32 models strict FP32"
                )
            return gpu.tensor_tf32_tflops, "tf32 Tensor Core", tuple(notes)
        if precision == "tf32":
            notes.append(f"{gpu.id} has no TF32 Tensor Cores; computing at the FP32 CUDA-core rate")
        return gpu.fp32_tflops, "fp32 (CUDA cores)", tuple(notes)
    if precision in ("mixed", "fp16", "int4"):
        if gpu.tensor_fp16_tflops is not None:
            return gpu.tensor_fp16_tflops, "fp16 Tensor Core (fp32 accumulate)", ()
        if precision == "int4" and gpu.compute_capability in DP4A_COMPUTE_CAPABILITIES:
            return gpu.fp32_tflops * DP4A_SPEEDUP, "int8 DP4A (4x fp32)", ()
        value, label = cuda_fp16()
        return value, label, (f"{gpu.id} has no Tensor Cores; 16-bit math runs on CUDA cores",)
    if precision == "bf16":
        if gpu.tensor_bf16_tflops is not None:
            return gpu.tensor_bf16_tflops, "bf16 Tensor Core", ()
        return gpu.fp32_tflops, "fp32 (CUDA cores)", (
            f"{gpu.id} ({gpu.architecture}) has no BF16 hardware; frameworks emulate it at FP32 speed or slower",
        )
    if precision == "fp8":
        if gpu.tensor_fp8_tflops is not None:
            return gpu.tensor_fp8_tflops, "fp8 Tensor Core", ()
        notes.append(f"{gpu.id} has no FP8 Tensor Cores; computing at the 16-bit rate")
        value, label, more = peak_tflops(gpu, "fp16", tf32=tf32)
        return value, label, (*notes, *more)
    if precision == "int8":
        if gpu.tensor_int8_tops is not None:
            return gpu.tensor_int8_tops, "int8 Tensor Core", ()
        if gpu.compute_capability in DP4A_COMPUTE_CAPABILITIES:
            return gpu.fp32_tflops * DP4A_SPEEDUP, "int8 DP4A (4x fp32)", ()
        value, label, more = peak_tflops(gpu, "fp16", tf32=tf32)
        return value, label, (f"{gpu.id} has no fast INT8 path; computing at the 16-bit rate", *more)
    raise UsageError(f"unknown precision {precision!r}", hint=f"one of {', '.join(PERF_PRECISIONS)}")
