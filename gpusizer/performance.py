"""Performance: how fast a workload trains or serves on a GPU or a cluster.

A calibrated roofline. Every formula is explained in ``docs/method.md``
("Performance"); in brief, for one step of one GPU:

* **work**: matmul/convolution FLOPs (training = 3x the forward pass; for
  transformers 2 * matrix params per token forward plus attention
  4 * layers * seq * heads * head_dim; CNNs scale the zoo's forward GFLOPs by
  (image_size / reference)^2), weight and KV-cache bytes read, activation bytes
  moved (twice what memory.py says is saved for backward: written and read once,
  forward; 3x that for a training step) and optimizer-state bytes;
* **time**: ``roofline(FLOPs / (peak * eta_c), bytes / (bandwidth * eta_m))``, a smooth
  maximum of compute time and memory time, plus the optimizer step's traffic
  over bandwidth and a fixed per-layer overhead where calibrated (single-stream
  decode);
* **peak**: the precision's Tensor Core peak where the GPU has one, else the
  CUDA-core rate; ``fp32`` runs as TF32 on Ampere and newer unless ``tf32=False``.
  Decode at batch <= 8 runs matrix-vector kernels on CUDA cores (FP32 rate), and
  their weight stream is capped at SMs x a calibrated bandwidth per SM (Little's
  law: these kernels keep few bytes in flight per SM);
* **communication**: ring all-reduce ``2(N-1)/N * S / B`` plus NCCL's per-step
  latency, overlapped with the backward pass; tensor parallelism all-reduces
  activations twice per layer and pass. GeForce cards cannot use GPUDirect RDMA
  across nodes, so they fall back to TCP with host staging.

``eta_c`` and ``eta_m`` come from ``data/calibration.yaml``: a few constants
per workload class and architecture generation, fitted by
``benchmarks/calibrate.py`` on published measurements (tests/data/perf_refs.yaml).

The engine is pure: no printing, no environment reads. Memory figures
(activations, weights, KV cache, optimizer state) all come from
``gpusizer.memory``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpusizer import datafiles
from gpusizer.catalog import ARCH_ORDER, Gpu, Source
from gpusizer.choices import PERF_PRECISIONS, AttentionKernels, Phase
from gpusizer.errors import DataFileError, UsageError
from gpusizer.memory import (
    DEFAULT_SEQ_CAP,
    GRAD_BYTES,
    ModelShape,
    RunConfig,
    activation_bytes,
    attention_params,
    estimate_memory,
    kv_cache_bytes,
    mlp_params,
    transformer_seq_len,
)
from gpusizer.zoo import Model

#: transformer-infer is a forward pass over whole sequences: encoders, and the
#: prefill of decoders; llm-decode generates one token per sequence per step.
WorkloadClass = Literal["cnn-train", "transformer-train", "cnn-infer", "transformer-infer", "llm-decode"]
WORKLOAD_CLASSES: tuple[str, ...] = get_args(WorkloadClass)
#: per-layer overheads are given at this clock and scale with 1 / boost clock
#: (small, latency-bound kernels run at the SM clock)
REFERENCE_CLOCK_MHZ = 1500.0
#: share of the full score matrix a causal fused-attention kernel computes: tiles
#: wholly above the diagonal are skipped (FlashAttention-2, Dao 2023, section 3.1.1)
CAUSAL_FLASH_FRACTION = 0.5
Bound = Literal["compute", "memory", "communication"]

#: PyTorch DDP's default gradient bucket (bucket_cap_mb=25): the last bucket's
#: all-reduce cannot overlap the backward pass.
DDP_BUCKET_BYTES = 25 * 2**20
#: Element bytes of the matmul operands, by performance precision.
COMPUTE_ELEMENT_BYTES: dict[str, float] = {
    "fp64": 8, "fp32": 4, "tf32": 4, "mixed": 2, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1, "int4": 0.5,
}
#: KV-cache element bytes during decode: FP8 engines (TensorRT-LLM use_fp8) keep
#: an FP8 cache; weight-only int8/int4 (llama.cpp, GPTQ, AWQ) keep a 16-bit one.
KV_ELEMENT_BYTES: dict[str, int] = {
    "fp64": 8, "fp32": 4, "tf32": 4, "mixed": 2, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 2, "int4": 2,
}
#: Pascal GP10x chips with compute capability 6.1 have DP4A: 4 int8 multiply-adds
#: per FP32 lane and clock, so INT8 = 4x FP32 (Tesla P40 datasheet: 47 INT8 TOPS
#: vs 12 FP32 TFLOPS; Tesla P4: 22 vs 5.5).
DP4A_SPEEDUP = 4.0
DP4A_COMPUTE_CAPABILITIES = ("6.1",)
#: Bytes per activation element in memory-bound layers, by performance precision.
ACTIVATION_ELEMENT_BYTES: dict[str, int] = {
    "fp64": 8, "fp32": 4, "tf32": 4, "mixed": 2, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1, "int4": 2,
}
#: FLOPs per convolution output element, from torchvision's ResNet-50 v1.5 at
#: 224x224: 4.089 GMACs (8.178 GFLOPs) over 11,113,984 conv outputs per image
#: (counted layer by layer from the architecture; docs/method.md). The zoo's
#: per-sample activation figures for CNNs are placeholders until measured, so
#: CNN activation traffic is scaled from FLOPs with this ratio.
CNN_FLOPS_PER_ACTIVATION = 8.178e9 / 11_113_984
#: LSTM elements written per layer, step and hidden unit: four gates before and
#: after their nonlinearity, the cell and the hidden state.
LSTM_ACTIVATIONS_PER_HIDDEN = 10
#: Decode batches up to this size run matrix-vector kernels, not Tensor Core GEMMs:
#: llama.cpp's mul_mat_vec_q handles batches up to MMVQ_MAX_BATCH_SIZE = 8
#: (ggml/src/ggml-cuda/mmvq.cuh); Tensor Core MMA tiles are at least 8 rows wide.
GEMV_MAX_BATCH = 8
#: FP32 lanes ("CUDA cores") per SM by compute capability, from the CUDA C++
#: Programming Guide's table "Throughput of Native Arithmetic Instructions"
#: (32-bit floating-point add, multiply, multiply-add results per clock per SM).
FP32_LANES_PER_SM: dict[str, int] = {
    "5.0": 128, "5.2": 128, "5.3": 128, "6.0": 64, "6.1": 128, "6.2": 128, "7.0": 64, "7.2": 64, "7.5": 64,
    "8.0": 64, "8.6": 128, "8.7": 128, "8.9": 128, "9.0": 128, "10.0": 128, "12.0": 128,
}


# --------------------------------------------------------------------------
# data files: interconnects and calibration


class Interconnect(BaseModel):
    """One link or network (data/interconnects.yaml). Bandwidth per direction."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    name: str
    scope: Literal["intra", "inter"]
    kind: Literal["nvlink", "pcie", "infiniband", "roce", "ethernet"]
    generation: int | None = Field(default=None, ge=1, le=10)
    #: per GPU (NVLink, PCIe) or per NIC port (networks), decimal GB/s per direction
    bandwidth_gb_s: float = Field(gt=0, le=100_000)
    #: achievable fraction of bandwidth_gb_s for a NCCL ring (bus bandwidth)
    efficiency: float = Field(gt=0, le=1)
    #: NCCL per-hop latency of a ring step
    latency_us: float = Field(ge=0, le=10_000)
    rdma: bool
    #: when GPUDirect RDMA is not possible: TCP with host staging
    tcp_efficiency: float | None = Field(default=None, gt=0, le=1)
    tcp_latency_us: float | None = Field(default=None, ge=0, le=100_000)
    sources: tuple[Source, ...] = Field(min_length=1)


class Interconnects(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = 1
    collective_base_latency_us: float = Field(ge=0)
    collective_base_latency_source: Source
    interconnects: tuple[Interconnect, ...]

    def get(self, key: str) -> Interconnect:
        wanted = key.strip().lower()
        for link in self.interconnects:
            if link.id == wanted:
                return link
        import difflib

        ids = [i.id for i in self.interconnects]
        close = difflib.get_close_matches(wanted, [*ids, "nvlink", "pcie"], n=3, cutoff=0.4)
        hint = f"did you mean {', '.join(close)}?" if close else f"one of: nvlink, pcie, {', '.join(ids)}"
        raise UsageError(f"unknown interconnect {key!r}", hint=hint)

    def nvlink(self, generation: int | None) -> Interconnect:
        links = [i for i in self.interconnects if i.kind == "nvlink"]
        for link in links:
            if link.generation == generation:
                return link
        return links[-1]

    def pcie(self, generation: int | None) -> Interconnect:
        links = sorted((i for i in self.interconnects if i.kind == "pcie"), key=lambda i: i.generation or 0)
        for link in links:
            if link.generation == generation:
                return link
        if generation is not None and generation > (links[-1].generation or 0):
            return links[-1]
        return links[0]


class Efficiency(BaseModel):
    """Calibrated efficiencies for one workload class on one architecture generation."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    workload: WorkloadClass
    #: a key of Calibration.generations, or "all" (the class's fallback)
    generation: str
    #: achieved fraction of the precision's peak on matmul/convolution FLOPs
    compute_efficiency: float = Field(gt=0, le=1)
    #: achieved fraction of memory bandwidth on the modelled traffic
    memory_efficiency: float = Field(gt=0, le=1)
    #: achieved fraction of the peak in the fused-attention kernels LLM Foundry ran in
    #: 2023, on the FLOPs they execute (causal: half the score matrix); used for runs
    #: with attention_kernels="llm-foundry-2023" (its reference rows); current kernels
    #: are timed at compute_efficiency. 0 = not fitted
    attention_efficiency: float = Field(default=0.0, ge=0, le=1)
    #: fixed time per layer and step (kernel launches, synchronisation) at
    #: REFERENCE_CLOCK_MHZ when the host launches kernels one by one; it scales
    #: with 1 / the GPU's boost clock
    layer_overhead_us: float = Field(default=0.0, ge=0, le=100_000)
    #: the same when a step's kernels are replayed as one CUDA graph (or enqueued
    #: by a compiled engine such as TensorRT): only the GPU-side gaps and small
    #: kernels remain
    graph_layer_overhead_us: float = Field(default=0.0, ge=0, le=100_000)
    #: memory bandwidth one SM sustains in matrix-vector (small-batch decode)
    #: kernels, decimal GB/s; 0 = no such limit. Little's law: bandwidth = bytes
    #: in flight / latency, and these kernels keep few bytes in flight per SM.
    sm_bandwidth_gb_s: float = Field(default=0.0, ge=0, le=10_000)
    #: which of the values above were fitted for this entry; the others are
    #: taken from the workload's "all" entry
    fitted: tuple[Literal["compute_efficiency", "memory_efficiency", "attention_efficiency", "layer_overhead_us",
                          "graph_layer_overhead_us", "sm_bandwidth_gb_s"], ...] = (
        "compute_efficiency", "memory_efficiency",
    )
    #: reference case ids (tests/data/perf_refs.yaml) the values were fitted on
    fitted_on: tuple[str, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _graphs_remove_overhead(self) -> Efficiency:
        if self.graph_layer_overhead_us > self.layer_overhead_us:
            raise ValueError(
                f"graph_layer_overhead_us ({self.graph_layer_overhead_us}) exceeds layer_overhead_us "
                f"({self.layer_overhead_us}): a CUDA graph only removes launch time")
        return self


class Calibration(BaseModel):
    """data/calibration.yaml: written by benchmarks/calibrate.py."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = 1
    fitted_by: str
    references: str
    split: str
    generations: dict[str, tuple[str, ...]]
    efficiencies: tuple[Efficiency, ...]
    #: k in the smooth roofline (c^k + m^k)^(1/k) that combines compute and memory time
    roofline_exponent: float = Field(default=2.0, ge=1, le=64)
    #: fraction by which a data-parallel step slows when N > 1 beyond the modelled
    #: communication (NCCL kernels sharing SMs and memory, stragglers, input pipeline)
    data_parallel_overhead: float = Field(ge=0, le=1)
    data_parallel_overhead_fitted_on: tuple[str, ...] = Field(min_length=1)
    #: median relative error on held-out references; reported as the error band
    error_band: float = Field(gt=0, le=10)
    errors: dict[str, Any] = Field(default_factory=dict)
    excluded: tuple[dict[str, str], ...] = ()

    def generation_of(self, architecture: str) -> str:
        for name, archs in self.generations.items():
            if architecture in archs:
                return name
        return "all"

    def lookup(self, workload: str, architecture: str) -> Efficiency:
        gen = self.generation_of(architecture)
        fallback = None
        for entry in self.efficiencies:
            if entry.workload == workload and entry.generation == gen:
                return entry
            if entry.workload == workload and entry.generation == "all":
                fallback = entry
        if fallback is None:
            raise DataFileError(
                f"calibration.yaml: no efficiency for workload {workload!r} (generation {gen!r} or 'all')",
                hint="rerun benchmarks/calibrate.py --write",
            )
        return fallback

    @property
    def constant_count(self) -> int:
        """How many fitted numbers the model carries."""
        return 2 + sum(len(e.fitted) for e in self.efficiencies)  # + overhead and exponent


def _validate(model: type[BaseModel], doc: Any, origin: str) -> Any:
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        raise DataFileError(datafiles.describe_validation_error(exc, origin)) from None


@functools.cache
def load_interconnects(cache_dir: Path | None = None) -> Interconnects:
    path = datafiles.bundled_path("interconnects.yaml")
    return _validate(Interconnects, datafiles.load_yaml(path, cache_dir), str(path))


@functools.cache
def load_calibration(path: Path | None = None, cache_dir: Path | None = None) -> Calibration:
    path = path or datafiles.bundled_path("calibration.yaml")
    cal = _validate(Calibration, datafiles.load_yaml(path, cache_dir), str(path))
    for archs in cal.generations.values():
        for arch in archs:
            if arch not in ARCH_ORDER:
                raise DataFileError(f"{path}: generations: unknown architecture {arch!r}")
    return cal


# --------------------------------------------------------------------------
# the result


class PerfEstimate(BaseModel):
    """Predicted speed of one run. Times are per optimizer/decode step of one GPU."""

    model_config = ConfigDict(frozen=True)

    #: whole cluster (all GPUs x nodes)
    throughput_per_s: float
    throughput_unit: Literal["images/s", "sequences/s", "tokens/s"]
    step_time_s: float
    #: matmul/convolution time at the calibrated fraction of the precision's peak
    compute_s: float
    #: all modelled memory traffic at the calibrated fraction of bandwidth
    memory_s: float
    #: communication time (all-reduce, tensor-parallel traffic), before overlap
    comm_s: float
    bound: Bound
    per_gpu_throughput_per_s: float
    scaling_efficiency: float
    speedup_vs_1gpu: float
    #: relative error expected (median held-out error of the calibration)
    error_band: float
    notes: tuple[str, ...] = ()

    # details -----------------------------------------------------------
    #: the part of comm_s that the step waits for
    comm_exposed_s: float = 0.0
    #: fixed per-layer overheads within step_time_s
    overhead_s: float = 0.0
    gpus_total: int = 1
    samples_per_step: int = 1
    tokens_per_sample: int | None = None
    flops_per_step: float = 0.0
    memory_traffic_bytes: float = 0.0
    comm_bytes: float = 0.0
    workload: str = ""
    compute_precision: str = ""
    peak_tflops: float = 0.0
    peak_label: str = ""
    compute_efficiency: float = 0.0
    memory_efficiency: float = 0.0
    interconnect: str | None = None
    comm_bandwidth_gb_s: float | None = None
    transport: Literal["none", "nvlink", "pcie", "rdma", "tcp"] = "none"
    phase: str | None = None
    #: decode steps replayed as CUDA graphs (see estimate_performance); None
    #: outside decode, where the choice changes nothing
    cuda_graphs: bool | None = None


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


# --------------------------------------------------------------------------
# work per step


class Work(BaseModel):
    """What one GPU does in one step, before any efficiency is applied."""

    model_config = ConfigDict(frozen=True)

    workload: str
    unit: Literal["images/s", "sequences/s", "tokens/s"]
    #: samples (images, sequences, or tokens for tokens/s) one model replica finishes per step
    samples_per_step: float
    tokens_per_sample: int | None
    matmul_flops: float
    #: the part of matmul_flops in attention's score and value matmuls (QK^T, PV);
    #: these take 16-bit inputs even where the weights' matmuls run in FP8 or INT4
    attention_flops: float = 0.0
    #: attention runs in fused kernels (FlashAttention, SDPA's flash backend); only
    #: LLM Foundry's 2023 kernels are timed apart from the GEMMs (attention_kernels)
    fused_attention: bool = False
    #: bytes read by the matmul phase (weights, KV cache), overlapped with its FLOPs
    matmul_bytes: float
    #: activation traffic (memory-bound elementwise work)
    activation_bytes: float
    #: optimizer step traffic
    optimizer_bytes: float
    layers: int
    #: data-parallel gradient bytes to all-reduce per step (per GPU)
    gradient_bytes: float
    #: tensor-parallel: number of all-reduces per step and bytes each
    tp_allreduces: int
    tp_allreduce_bytes: float
    #: micro-batches per optimizer step: the optimizer step and the gradient
    #: all-reduce happen once per this many steps
    grad_accumulation: int = 1
    #: small-batch decode: the weights stream through matrix-vector kernels on
    #: CUDA cores (batch <= GEMV_MAX_BATCH), not Tensor Core GEMMs
    gemv: bool = False
    notes: tuple[str, ...] = ()


def roofline(compute_s: float, memory_s: float, exponent: float) -> float:
    """Smooth maximum of compute and memory time: (c^k + m^k)^(1/k).

    k = 1 adds them (no overlap), k -> infinity is the classic roofline max.
    The exponent is calibrated (data/calibration.yaml).
    """
    if compute_s <= 0 or memory_s <= 0:
        return max(compute_s, memory_s)
    hi = max(compute_s, memory_s)
    return hi * ((compute_s / hi) ** exponent + (memory_s / hi) ** exponent) ** (1.0 / exponent)


def workload_class(shape: ModelShape, cfg: RunConfig, phase: str | None = None) -> str:
    """cnn-train, transformer-train, cnn-infer, transformer-infer or llm-decode.

    RNNs (no reference measurements) use the transformer classes: both are
    GEMM-bound sequence models. A model given only by --params is a transformer.
    """
    kind = shape.model.kind if shape.model is not None else shape.kind
    if cfg.mode == "train":
        return "cnn-train" if kind == "cnn" else "transformer-train"
    if kind == "cnn":
        return "cnn-infer"
    if kind in ("decoder", "unknown"):
        return "transformer-infer" if phase == "prefill" else "llm-decode"
    return "transformer-infer"


def params_only_layers(params: int) -> int:
    """Layer count for a model known only by its parameter count, used for per-layer
    overheads: 12 * L * d^2 weights with d = 128 * L, the width-to-depth ratio of
    GPT-3 175B (12288 / 96) and Llama-2-7B (4096 / 32). Gives 33 for 7B, 71 for 70B."""
    return max(1, round((params / (12 * 128**2)) ** (1 / 3)))


def default_seq_len(shape: ModelShape) -> int:
    """The sequence length memory.py assumes when none is given."""
    m = shape.model
    if m is not None and m.is_transformer:
        return transformer_seq_len(m, RunConfig())
    if m is not None and m.seq_len:
        return m.seq_len
    return DEFAULT_SEQ_CAP


def _active_matrix_params(m: Model) -> int:
    """Linear-layer weights one token passes through (MoE: the routed experts only)."""
    k = m.experts_per_token or 1
    per_layer = attention_params(m) + k * mlp_params(m)
    layers = m.layers + (m.decoder_layers or 0)
    return layers * per_layer + (m.decoder_layers or 0) * attention_params(m)


def _head_params(m: Model, head: str) -> int:
    return m.vocab * m.hidden if head in ("lm", "logits") else 0


def _attention_flops_per_token(m: Model, context: int) -> float:
    """QK^T and attention-times-V, forward: 2 matmuls x 2 FLOPs x context x heads x head_dim
    per layer (PaLM, Chowdhery et al. 2022, appendix B, counts it this way)."""
    layers = m.layers + 2 * (m.decoder_layers or 0)  # decoder self + cross attention
    return 4.0 * layers * context * m.heads * m.attention_head_dim


def _embedding_bytes(shape: ModelShape, mem_precision: str) -> float:
    """Input-embedding bytes, which a forward pass does not stream (one row per token)."""
    m = shape.model
    if m is None or not m.is_transformer:
        return 0.0
    width = 2 if mem_precision in ("int8", "int4") else COMPUTE_ELEMENT_BYTES.get(mem_precision, 2)
    if mem_precision == "mixed":
        width = 4
    return float(m.vocab * m.hidden * width)


def model_work(
    shape: ModelShape, cfg: RunConfig, precision: str, *, phase: str | None = None, tp: int = 1,
    dp: int = 1, grad_accumulation: int = 1,
) -> Work:
    """FLOPs and bytes for one step of one GPU (``cfg.batch`` per model replica)."""
    m = shape.model
    mem_prec = memory_precision(precision, cfg.mode)
    mem_cfg = cfg.model_copy(update={"precision": mem_prec, "gpus": tp if cfg.strategy == "tp" else dp})
    mem = estimate_memory(shape, mem_cfg)
    wl = workload_class(shape, cfg, phase)
    b = cfg.batch
    elem = COMPUTE_ELEMENT_BYTES[precision]
    notes: list[str] = []
    train = cfg.mode == "train"
    passes = 3.0 if train else 1.0  # forward + backward (2x forward)
    if train and cfg.checkpointing:
        passes = 4.0  # the forward pass is recomputed during backward
        notes.append("activation checkpointing recomputes the forward pass: 4x forward FLOPs")
    tp_allreduces, tp_bytes = 0, 0.0
    attn = 0.0

    if m is not None and m.kind == "cnn":
        scale = (cfg.image_size / m.image_size) ** 2 if (cfg.image_size and m.image_size) else 1.0
        if m.forward_gflops_per_sample is None:
            raise DataFileError(f"models.yaml: entry '{m.id}': forward_gflops_per_sample: needed for performance")
        flops = m.forward_gflops_per_sample * 1e9 * scale * b * passes
        unit, samples, tokens, layers = "images/s", float(b), None, 0
        weights_read = shape.params * elem * (2 if train else 1)
    elif m is not None and m.kind == "rnn":
        seq = cfg.seq_len or m.seq_len or 1
        scale = seq / m.seq_len if m.seq_len else 1.0
        if m.forward_gflops_per_sample is None:
            raise DataFileError(f"models.yaml: entry '{m.id}': forward_gflops_per_sample: needed for performance")
        flops = m.forward_gflops_per_sample * 1e9 * scale * b * passes
        unit, samples, tokens, layers = "sequences/s", float(b), seq, (m.layers or 2) * seq
        # the recurrence is sequential: every timestep re-reads each layer's
        # hidden-to-hidden weights (4 gates x hidden x hidden for an LSTM), forward
        # and again in backward. This is what makes RNNs bandwidth-bound.
        recurrent = (m.layers or 1) * 4 * (m.hidden or 0) ** 2
        weights_read = shape.params * elem + recurrent * elem * seq * (2 if train else 1)
    elif m is not None and m.is_transformer:
        seq = cfg.seq_len or default_seq_len(shape)
        layers = m.layers + (m.decoder_layers or 0)
        mm = _active_matrix_params(m) + _head_params(m, cfg.head)
        if wl == "llm-decode":
            # one new token for each of b sequences, attending to `seq` cached tokens
            attn = _attention_flops_per_token(m, seq) * b / tp
            flops = 2.0 * mm * b / tp + attn
            unit, samples, tokens = "tokens/s", float(b), None
            experts = m.experts or 1
            k = m.experts_per_token or 1
            weights = mem.weights_bytes
            if not m.tied_embeddings:
                weights -= _embedding_bytes(shape, mem_prec) / tp
            if experts > 1:
                # expected fraction of experts touched by b tokens routed to k of E each
                touched = 1.0 - (1.0 - k / experts) ** b
                expert_share = min(1.0, m.layers * experts * mlp_params(m) / shape.params)
                weights *= (1.0 - expert_share) + expert_share * touched
            kv = kv_cache_bytes(m, b, seq, KV_ELEMENT_BYTES[precision], tp)
            weights_read = weights + kv
            if tp > 1:
                tp_allreduces, tp_bytes = 2 * layers, float(b * m.hidden * 2)
        else:
            tokens_per_step = b * seq
            attn_per_token = _attention_flops_per_token(m, seq)
            if m.kind == "decoder" and cfg.flash_attention:
                # causal fused kernels skip the masked half of the score matrix
                # (FlashAttention-2, Dao 2023, section 3.1.1); eager attention computes
                # the whole matrix and masks it afterwards
                attn_per_token *= CAUSAL_FLASH_FRACTION
            attn = attn_per_token * tokens_per_step * passes / tp
            flops = 2.0 * mm * tokens_per_step * passes / tp + attn
            if m.kind == "decoder" and (train or phase == "prefill"):
                unit, samples, tokens = "tokens/s", float(tokens_per_step), None
            else:
                unit, samples, tokens = "sequences/s", float(b), seq
            weights_read = (mem.weights_bytes - _embedding_bytes(shape, mem_prec) / tp) * (2 if train else 1)
            if mem_prec == "mixed":
                weights_read /= 2  # matmuls read the 16-bit copies
            if tp > 1:
                per = 4 if train else 2
                tp_allreduces, tp_bytes = per * layers, float(tokens_per_step * m.hidden * 2)
    else:
        # --params only: a dense transformer-like model, 2 * params FLOPs per token forward
        seq = cfg.seq_len or default_seq_len(shape)
        layers = params_only_layers(shape.params)
        if wl == "llm-decode":
            flops = 2.0 * shape.params * b / tp
            unit, samples, tokens = "tokens/s", float(b), None
            weights_read = mem.weights_bytes
            notes.append("model given by --params only: the KV cache is not modelled (no layer shapes)")
        else:
            flops = 2.0 * shape.params * b * seq * passes / tp
            unit, samples, tokens = "tokens/s", float(b * seq), None
            weights_read = mem.weights_bytes * (2 if train else 1)
        notes.append("model given by --params only: treated as a dense transformer, "
                     f"{'6' if train else '2'} x params FLOPs per token; activations not modelled")

    # activation traffic (memory-bound elementwise work), written and read once per
    # forward pass; a training step moves 3x that (passes).
    act = 0.0
    act_elem = ACTIVATION_ELEMENT_BYTES[precision]
    if m is not None and m.kind == "cnn":
        # conv outputs per FLOP as in ResNet-50 (see CNN_FLOPS_PER_ACTIVATION)
        act = 2.0 * (flops / passes) / CNN_FLOPS_PER_ACTIVATION * act_elem * passes
    elif m is not None and m.kind == "rnn":
        seq = cfg.seq_len or m.seq_len or 1
        act = 2.0 * b * seq * (m.layers or 1) * LSTM_ACTIVATIONS_PER_HIDDEN * (m.hidden or 1) * act_elem * passes
    elif wl != "llm-decode" and m is not None:
        # what memory.py says a training step saves for backward: every
        # intermediate tensor of the forward pass, once
        act_cfg = mem_cfg
        if precision in ("int8", "fp8") and not train:
            act_cfg = mem_cfg.model_copy(update={"precision": "fp16"})
        saved = float(activation_bytes(shape, act_cfg)[0])
        if precision in ("int8", "fp8") and not train:
            saved *= 0.5  # one-byte activations in INT8/FP8 inference engines
        act = 2.0 * saved * passes

    opt = 0.0
    if train:
        # optimizer step: read and write weights and optimizer state, read gradients
        opt = 2.0 * mem.weights_bytes + mem.gradients_bytes + 2.0 * mem.optimizer_bytes
        if precision == "fp64":
            opt *= 2
    grads = 0.0
    if train:
        # PyTorch AMP all-reduces fp32 gradients; FP8 training (Transformer Engine
        # with Megatron) reduces them in bf16 (grad_reduce_in_fp32=False)
        width = 2 if precision == "fp8" else GRAD_BYTES.get(mem_prec, 4)
        grads = shape.params * width / tp
    return Work(
        workload=wl, unit=unit, samples_per_step=samples, tokens_per_sample=tokens,
        matmul_flops=flops, attention_flops=attn, matmul_bytes=float(weights_read),
        fused_attention=bool(attn) and cfg.flash_attention and wl != "llm-decode", activation_bytes=act, optimizer_bytes=opt,
        layers=int(layers), gradient_bytes=grads, tp_allreduces=tp_allreduces, tp_allreduce_bytes=tp_bytes,
        grad_accumulation=grad_accumulation if train else 1, notes=tuple(notes),
        gemv=wl == "llm-decode" and b <= GEMV_MAX_BATCH,
    )


# --------------------------------------------------------------------------
# communication


class Link(BaseModel):
    """The effective path for a collective: bus bandwidth and per-step latency."""

    model_config = ConfigDict(frozen=True)

    label: str
    bandwidth_gb_s: float
    intra_latency_us: float
    inter_latency_us: float
    base_latency_us: float
    transport: Literal["none", "nvlink", "pcie", "rdma", "tcp"]
    notes: tuple[str, ...] = ()


def _intra_link(gpu: Gpu, gpus: int, links: Interconnects, requested: Interconnect | None) -> tuple[Interconnect, float, str]:
    """The link a ring uses inside a node and its per-GPU bandwidth (GB/s per direction)."""
    if requested is not None and requested.scope == "intra":
        if requested.kind == "nvlink":
            if not gpu.nvlink:
                raise UsageError(f"{gpu.id} has no NVLink", hint="use --interconnect pcie")
            return requested, (gpu.nvlink_gb_s or 2 * requested.bandwidth_gb_s) / 2, "nvlink"
        return requested, requested.bandwidth_gb_s, "pcie"
    # NVLink bridges on PCIe cards join pairs; a ring over more than two needs PCIe hops
    sxm = gpu.form_factor.upper().startswith("SXM")
    if gpu.nvlink and (sxm or gpus <= 2):
        link = links.nvlink(gpu.nvlink_generation)
        return link, (gpu.nvlink_gb_s or 2 * link.bandwidth_gb_s) / 2, "nvlink"
    link = links.pcie(gpu.pcie_generation)
    return link, link.bandwidth_gb_s, "pcie"


def resolve_interconnect(key: str | None, links: Interconnects, gpu: Gpu) -> Interconnect | None:
    if key is None:
        return None
    k = key.strip().lower()
    if k in ("nvlink", "nvswitch"):
        if not gpu.nvlink:
            raise UsageError(f"{gpu.id} has no NVLink", hint="use --interconnect pcie")
        return links.nvlink(gpu.nvlink_generation)
    if k == "pcie":
        return links.pcie(gpu.pcie_generation)
    return links.get(k)


def collective_link(
    gpu: Gpu, gpus_per_node: int, nodes: int, interconnect: str | None, *, nics_per_node: int | None = None,
    links: Interconnects | None = None,
) -> Link:
    """Effective bus bandwidth and latencies for a ring over gpus_per_node x nodes GPUs."""
    links = links or load_interconnects()
    notes: list[str] = []
    requested = resolve_interconnect(interconnect, links, gpu)
    intra, intra_bw, intra_kind = _intra_link(gpu, gpus_per_node, links, requested)
    intra_eff = intra_bw * intra.efficiency
    if nodes <= 1:
        if requested is not None and requested.scope == "inter":
            notes.append(f"--interconnect {requested.id} is a network; inside one node GPUs talk over {intra.name}")
        return Link(
            label=intra.name, bandwidth_gb_s=intra_eff, intra_latency_us=intra.latency_us,
            inter_latency_us=intra.latency_us, base_latency_us=links.collective_base_latency_us,
            transport=intra_kind, notes=tuple(notes),
        )
    net = requested if (requested is not None and requested.scope == "inter") else None
    if net is None:
        net = links.get("ib-hdr")
        notes.append("no network given for a multi-node run: assuming InfiniBand HDR (--interconnect to change)")
    nics = max(1, min(nics_per_node or 1, gpus_per_node))
    if net.rdma and gpu.gpudirect_rdma:
        per_nic, latency, transport = net.bandwidth_gb_s * net.efficiency, net.latency_us, "rdma"
    else:
        if net.rdma and not gpu.gpudirect_rdma:
            notes.append(
                f"{gpu.id} cannot use GPUDirect RDMA across nodes ({gpu.segment} card): traffic falls back "
                "to TCP with staging through host memory"
            )
        eff = net.tcp_efficiency if net.tcp_efficiency is not None else net.efficiency
        lat = net.tcp_latency_us if net.tcp_latency_us is not None else net.latency_us
        per_nic, latency, transport = net.bandwidth_gb_s * eff, lat, "tcp"
        # host staging: every byte also crosses PCIe to and from host memory
        pcie = links.pcie(gpu.pcie_generation)
        per_nic = min(per_nic, pcie.bandwidth_gb_s * pcie.efficiency / 2)
    bus = min(intra_eff, nics * per_nic)
    return Link(
        label=f"{net.name} x{nics} per node" + (" (TCP, host-staged)" if transport == "tcp" else ""),
        bandwidth_gb_s=bus, intra_latency_us=intra.latency_us, inter_latency_us=latency,
        base_latency_us=links.collective_base_latency_us, transport=transport, notes=tuple(notes),
    )


def allreduce_time_s(size_bytes: float, gpus_per_node: int, nodes: int, link: Link, *, calls: int = 1) -> float:
    """Ring all-reduce: 2(N-1)/N * S / B, plus NCCL's latency model per call.

    Latency per call = base + 2(N - nodes) intra-node steps + 2(nodes - 1)
    inter-node steps (NCCL src/graph/tuning.cc).
    """
    n = gpus_per_node * nodes
    if n <= 1 or size_bytes <= 0:
        return 0.0
    bandwidth = 2.0 * (n - 1) / n * size_bytes / (link.bandwidth_gb_s * 1e9)
    steps_inter = 2 * (nodes - 1)
    steps_intra = 2 * (n - 1) - steps_inter
    latency = link.base_latency_us + steps_intra * link.intra_latency_us + steps_inter * link.inter_latency_us
    return bandwidth + calls * latency * 1e-6


# --------------------------------------------------------------------------
# the estimate


def sm_count(gpu: Gpu) -> int | None:
    """Streaming multiprocessors: CUDA cores over the FP32 lanes per SM of the compute capability.

    Without a core count, FP32 peak / (2 x lanes x boost clock), the same identity
    the datasheet's FP32 figure comes from (H100 NVL: 60 TFLOPS at 1785 MHz -> 131,
    against 132 on the die); None when the clock is unknown too.
    """
    lanes = FP32_LANES_PER_SM.get(gpu.compute_capability)
    if lanes is None:
        return None
    if gpu.cuda_cores is not None:
        return max(1, round(gpu.cuda_cores / lanes))
    if gpu.boost_clock_mhz:
        return max(1, round(gpu.fp32_tflops * 1e12 / (2 * lanes * gpu.boost_clock_mhz * 1e6)))
    return None


def _step(
    work: Work, gpu: Gpu, precision: str, tf32: bool, cal: Calibration, cuda_graphs: bool = True,
    attention_kernels: AttentionKernels = "current",
) -> tuple[float, float, float, float, float, str, tuple[str, ...], Any]:
    """(compute_s, memory_s, overhead_s, step_s without comm, peak, label, notes, efficiency)."""
    peak, label, notes = peak_tflops(gpu, precision, tf32=tf32)
    if work.gemv and gpu.fp32_tflops < peak:
        # matrix-vector kernels (llama.cpp mul_mat_vec_q / dequantize_mul_mat_vec, the GEMV
        # paths of serving engines) dequantize and multiply on CUDA cores, not Tensor Cores
        peak, label = gpu.fp32_tflops, "fp32 CUDA cores (matrix-vector decode)"
        notes = (f"decode at batch <= {GEMV_MAX_BATCH} runs matrix-vector kernels on CUDA cores, not Tensor Cores",)
        if work.samples_per_step > 1:
            notes = (*notes, (
                f"batch 2-{GEMV_MAX_BATCH} follows llama.cpp's matrix-vector kernels, which become compute-bound "
                "on CUDA cores (measured on an RTX 3090: 571 tok/s at 8 tokens per pass against 155 at 1); past "
                f"batch {GEMV_MAX_BATCH} llama.cpp switches to tensor-core kernels and its throughput about doubles, "
                "while this estimate jumps by 2-5x depending on the context; engines that use tensor-core GEMMs at "
                "these batches (TensorRT-LLM, vLLM) can run up to about 2x faster than this estimate"))
    eff = cal.lookup(work.workload, gpu.architecture)
    flops_rate = peak * 1e12 * eff.compute_efficiency
    byte_rate = gpu.bandwidth_gb_s * 1e9 * eff.memory_efficiency
    compute_s = work.matmul_flops / flops_rate
    if work.attention_flops > 0 and not work.gemv:
        attn_peak = peak
        if precision in ("fp8", "int4"):
            # attention multiplies 16-bit Q, K and V (Transformer Engine without fp8_dpa,
            # weight-only INT4 engines): those FLOPs run at the 16-bit rate
            attn_peak = peak_tflops(gpu, "fp16", tf32=tf32)[0]
        if attn_peak != peak:
            notes = (*notes, (f"attention multiplies 16-bit Q, K and V, so its FLOPs run at the {attn_peak:,.0f} "
                              f"TFLOPS 16-bit rate, not the {precision} rate"))
        attn_eff = eff.compute_efficiency
        share = work.attention_flops / work.matmul_flops
        if work.fused_attention and eff.attention_efficiency > 0:
            if attention_kernels == "llm-foundry-2023":
                attn_eff = eff.attention_efficiency
            elif share >= 0.02:
                notes = (*notes, (
                    f"fused attention is {share:.0%} of the FLOPs, timed at the matmuls' efficiency "
                    f"({eff.compute_efficiency:.0%} of peak), as current kernels (FlashAttention-2/3, cuDNN) run; the "
                    f"kernels LLM Foundry measured in 2023 reached {eff.attention_efficiency:.0%} on this GPU "
                    "generation, which would make the attention part "
                    f"{eff.compute_efficiency / eff.attention_efficiency:.1f}x slower"))
        compute_s += work.attention_flops * (1 / (attn_peak * 1e12 * attn_eff) - 1 / flops_rate)
    matmul_rate = byte_rate
    sms = sm_count(gpu)
    if work.gemv and eff.sm_bandwidth_gb_s > 0 and sms and sms * eff.sm_bandwidth_gb_s * 1e9 < byte_rate:
        matmul_rate = sms * eff.sm_bandwidth_gb_s * 1e9
        notes = (*notes, f"matrix-vector kernels keep few bytes in flight: the weight stream is capped at {sms} SMs "
                         f"x {eff.sm_bandwidth_gb_s:.1f} GB/s = {matmul_rate / 1e9:,.0f} GB/s (calibrated, Little's law)")
    elif work.gemv and eff.sm_bandwidth_gb_s > 0 and not sms:
        notes = (*notes, f"{gpu.id}'s SM count is unknown (the catalog has neither cuda_cores nor a boost clock "
                         "for it), so the per-SM cap on matrix-vector decode is not applied: this decode estimate "
                         "may be high")
    matmul_mem_s = work.matmul_bytes / matmul_rate
    clock = REFERENCE_CLOCK_MHZ / gpu.boost_clock_mhz if gpu.boost_clock_mhz else 1.0
    per_layer_us = eff.graph_layer_overhead_us if cuda_graphs else eff.layer_overhead_us
    overhead_s = work.layers * per_layer_us * 1e-6 * clock
    if overhead_s > 0:
        how = ("replayed as one CUDA graph (gpusizer estimate --no-cuda-graphs: kernels launched one by one)"
               if cuda_graphs else "launched kernel by kernel (gpusizer estimate --cuda-graphs: one CUDA graph)")
        notes = (*notes, f"fixed overhead {per_layer_us * clock:.0f} us per layer and step, each step {how}")
    act_mem_s = work.activation_bytes / byte_rate
    opt_mem_s = work.optimizer_bytes / byte_rate / work.grad_accumulation
    step = roofline(compute_s, matmul_mem_s + act_mem_s, cal.roofline_exponent) + opt_mem_s + overhead_s
    return compute_s, matmul_mem_s + act_mem_s + opt_mem_s, overhead_s, step, peak, label, notes, eff


def estimate_performance(
    gpu: Gpu,
    shape: ModelShape,
    cfg: RunConfig,
    *,
    nodes: int = 1,
    interconnect: str | None = None,
    tf32: bool = True,
    compute_precision: str | None = None,
    phase: Phase | None = None,
    nics_per_node: int | None = None,
    grad_accumulation: int = 1,
    cuda_graphs: bool = True,
    attention_kernels: AttentionKernels = "current",
    calibration: Calibration | None = None,
    interconnects: Interconnects | None = None,
) -> PerfEstimate:
    """Predict throughput of ``shape`` under ``cfg`` on ``cfg.gpus`` x ``nodes`` GPUs.

    ``cfg.batch`` is per GPU (per model replica with ``strategy="tp"``, where
    ``cfg.gpus`` GPUs of a node share one replica and nodes are replicas).
    ``compute_precision`` overrides the matmul precision implied by
    ``cfg.precision`` (fp64, tf32 and fp8 have no memory precision of their own).
    ``phase`` picks decode (default) or prefill for decoder inference.
    ``grad_accumulation`` micro-batches share one optimizer step and one
    gradient all-reduce; a step here is one micro-batch.
    ``cuda_graphs`` says whether each decode step's kernels are replayed as one
    CUDA graph (TensorRT-LLM, vLLM, SGLang, llama.cpp at batch 1 since May 2024)
    or launched one by one from the host; it sets the per-layer overhead.
    ``attention_kernels`` times fused attention at the matmuls' efficiency
    ("current") or at the calibrated efficiency of the kernels LLM Foundry ran in
    2023 ("llm-foundry-2023", what its reference rows need).
    """
    if grad_accumulation < 1:
        raise UsageError("--grad-accumulation must be at least 1")
    if nodes < 1:
        raise UsageError("--nodes must be at least 1")
    cal = calibration or load_calibration()
    links = interconnects or load_interconnects()
    precision = compute_precision or default_compute_precision(cfg)
    if precision not in PERF_PRECISIONS:
        raise UsageError(f"unknown precision {precision!r}", hint=f"one of {', '.join(PERF_PRECISIONS)}")
    if cfg.mode == "train" and precision in ("int8", "int4"):
        raise UsageError(f"precision {precision} is for inference only")
    n_total = cfg.gpus * nodes
    tp = cfg.gpus if cfg.strategy == "tp" else 1
    replicas = n_total // tp
    dp = replicas if cfg.mode == "train" else 1

    work = model_work(shape, cfg, precision, phase=phase, tp=tp, dp=n_total if tp == 1 else 1,
                      grad_accumulation=grad_accumulation)
    compute_s, memory_s, overhead_s, base_step, peak, label, peak_notes, eff = _step(
        work, gpu, precision, tf32, cal, cuda_graphs, attention_kernels)
    notes: list[str] = [*peak_notes, *work.notes]

    comm_s = 0.0
    exposed = 0.0
    comm_bytes = 0.0
    link_label: str | None = None
    link_bw: float | None = None
    transport = "none"
    step = base_step
    if cfg.mode == "train" and dp > 1:
        # data-parallel gradient all-reduce; with tp, each rank's shard across nodes
        link = collective_link(gpu, cfg.gpus, nodes, interconnect, nics_per_node=nics_per_node, links=links)
        ring_gpn = 1 if tp > 1 else cfg.gpus
        volume = 1.5 if cfg.strategy in ("zero3", "fsdp") else 1.0
        size = work.gradient_bytes * volume
        calls = max(1, math.ceil(size / DDP_BUCKET_BYTES))
        t_ar = allreduce_time_s(size, ring_gpn, nodes, link, calls=calls)
        # DDP overlaps all-reduce with backward (Li et al., "PyTorch Distributed", VLDB 2020),
        # and backward is 2/3 of the step: twice the forward FLOPs (the 6N-per-token count
        # of Kaplan et al. 2020, 2N forward + 4N backward). ZeRO-3/FSDP prefetch parameters
        # during forward too. The last bucket never overlaps.
        # With gradient accumulation it runs once per grad_accumulation micro-batches.
        window = base_step if cfg.strategy in ("zero3", "fsdp") else base_step * 2.0 / 3.0
        tail = t_ar * min(1.0, DDP_BUCKET_BYTES / size) if size > 0 else 0.0
        comm_s += t_ar / grad_accumulation
        exposed += max(tail, t_ar - window) / grad_accumulation
        comm_bytes += 2.0 * (dp - 1) / dp * size
        notes.extend(link.notes)
        link_label, link_bw, transport = link.label, link.bandwidth_gb_s, link.transport
        step = base_step * (1.0 + cal.data_parallel_overhead)
    if tp > 1:
        # Megatron-style: two activation all-reduces per layer and pass, on the critical path
        link = collective_link(gpu, cfg.gpus, 1, interconnect if nodes == 1 else None, links=links)
        t_tp = allreduce_time_s(work.tp_allreduce_bytes, cfg.gpus, 1, link) * work.tp_allreduces
        comm_s += t_tp
        exposed += t_tp
        comm_bytes += 2.0 * (tp - 1) / tp * work.tp_allreduce_bytes * work.tp_allreduces
        if link_label is None:
            link_label, link_bw, transport = link.label, link.bandwidth_gb_s, link.transport
        notes.extend(link.notes)
    step += exposed

    per_replica = work.samples_per_step / step
    throughput = per_replica * replicas
    per_gpu = throughput / n_total
    if tp > 1:
        # against one GPU holding the whole replica with the same batch
        single_cfg = cfg.model_copy(update={"gpus": 1, "strategy": "ddp"})
        single_work = model_work(shape, single_cfg, precision, phase=phase, grad_accumulation=grad_accumulation)
        single_step = _step(single_work, gpu, precision, tf32, cal, cuda_graphs, attention_kernels)[3]
        speedup = throughput / (single_work.samples_per_step / single_step)
        efficiency = speedup / n_total
    else:
        # each GPU does the same work as a lone GPU would; parallelism only adds time
        efficiency = base_step / step
        speedup = efficiency * n_total
    bound_times = {"compute": compute_s, "memory": memory_s, "communication": exposed}
    bound: Bound = max(bound_times, key=lambda k: bound_times[k])  # type: ignore[assignment]
    return PerfEstimate(
        throughput_per_s=throughput,
        throughput_unit=work.unit,
        step_time_s=step,
        compute_s=compute_s,
        memory_s=memory_s,
        comm_s=comm_s,
        bound=bound,
        per_gpu_throughput_per_s=per_gpu,
        scaling_efficiency=efficiency,
        speedup_vs_1gpu=speedup,
        error_band=cal.error_band,
        notes=tuple(dict.fromkeys(notes)),
        comm_exposed_s=exposed,
        overhead_s=overhead_s,
        gpus_total=n_total,
        samples_per_step=int(round(work.samples_per_step)),
        tokens_per_sample=work.tokens_per_sample,
        flops_per_step=work.matmul_flops,
        memory_traffic_bytes=work.matmul_bytes + work.activation_bytes + work.optimizer_bytes,
        comm_bytes=comm_bytes,
        workload=work.workload,
        compute_precision=precision,
        peak_tflops=peak,
        peak_label=label,
        compute_efficiency=eff.compute_efficiency,
        memory_efficiency=eff.memory_efficiency,
        interconnect=link_label,
        comm_bandwidth_gb_s=link_bw,
        transport=transport,  # type: ignore[arg-type]
        phase=(phase or "decode") if work.workload == "llm-decode" or phase == "prefill" else None,
        cuda_graphs=cuda_graphs if overhead_s > 0 else None,
    )


# --------------------------------------------------------------------------
# the default batch


class BatchChoice(BaseModel):
    model_config = ConfigDict(frozen=True)

    batch: int
    #: the largest per-GPU batch that fits (memory.largest_batch); null if none fits
    largest_fitting: int | None
    cap: int
    reason: str


def batch_cap(shape: ModelShape, cfg: RunConfig, phase: str | None = None) -> int:
    """A sensible ceiling for the default batch: beyond it throughput barely grows
    while memory and latency do. CNNs: 256 images (the per-GPU batch of the
    DeepLearningExamples ResNet-50 recipe); transformers in training: 16,384 tokens
    per GPU; decode: 32 concurrent sequences; other inference: 64 sequences."""
    wl = workload_class(shape, cfg, phase)
    if wl in ("cnn-train", "cnn-infer"):
        return 256
    if wl == "llm-decode":
        return 32
    seq = cfg.seq_len or default_seq_len(shape)
    if wl == "transformer-train":
        return max(1, 16_384 // seq)
    return 64


def default_batch(
    shape: ModelShape, cfg: RunConfig, capacity_bytes: int, *, precision: str | None = None,
    phase: str | None = None, nodes: int = 1,
) -> BatchChoice:
    """The largest per-GPU batch that fits in ``capacity_bytes`` (memory.largest_batch),
    capped by :func:`batch_cap`. Raises NothingFitsError when batch 1 does not fit."""
    from gpusizer.errors import NothingFitsError
    from gpusizer.memory import MAX_BATCH, largest_batch, sharding_gpus

    prec = precision or default_compute_precision(cfg)
    mem_cfg = cfg.model_copy(update={
        "precision": memory_precision(prec, cfg.mode),
        "gpus": sharding_gpus(cfg.strategy, cfg.gpus, nodes),
    })
    largest = largest_batch(shape, mem_cfg, capacity_bytes)
    cap = batch_cap(shape, cfg, phase)
    if largest is None:
        raise NothingFitsError(
            f"{shape.name} does not fit at batch 1 ({cfg.mode}, {prec}, {cfg.strategy} on {mem_cfg.gpus} GPU(s))",
            hint="shard it (--strategy zero3/fsdp/tp with more --gpus), lower the precision, or force --batch",
        )
    if largest > cap:
        more = "memory allows more" if largest >= MAX_BATCH else f"largest that fits is {largest}"
        return BatchChoice(batch=cap, largest_fitting=largest, cap=cap, reason=f"{more}; capped at {cap}")
    return BatchChoice(batch=largest, largest_fitting=largest, cap=cap, reason="largest that fits")


# --------------------------------------------------------------------------
# scaling curves, time to train and cost


class ScalingPoint(BaseModel):
    model_config = ConfigDict(frozen=True)

    gpus_per_node: int
    nodes: int
    gpus_total: int
    throughput_per_s: float
    speedup_vs_1gpu: float
    scaling_efficiency: float
    bound: Bound


def scaling_counts(gpus_per_node: int, nodes: int) -> tuple[tuple[int, int], ...]:
    """GPU counts for a scaling curve up to the requested cluster: 1, 2, 4, ...
    inside a node, then whole nodes 2, 4, ... up to ``nodes``. For a single GPU
    the curve shows what 2, 4 and 8 GPUs in one node would give."""
    if gpus_per_node == 1 and nodes == 1:
        gpus_per_node = 8
    counts: list[tuple[int, int]] = []
    g = 1
    while g < gpus_per_node:
        counts.append((g, 1))
        g *= 2
    counts.append((gpus_per_node, 1))
    k = 2
    while k < nodes:
        counts.append((gpus_per_node, k))
        k *= 2
    if nodes > 1:
        counts.append((gpus_per_node, nodes))
    return tuple(dict.fromkeys(counts))


def scaling_curve(
    gpu: Gpu, shape: ModelShape, cfg: RunConfig, counts: Sequence[tuple[int, int]], **kwargs: Any,
) -> tuple[ScalingPoint, ...]:
    """Estimates at several (gpus_per_node, nodes) with the same per-GPU batch."""
    points = []
    for gpn, nodes in counts:
        est = estimate_performance(gpu, shape, cfg.model_copy(update={"gpus": gpn}), nodes=nodes, **kwargs)
        points.append(ScalingPoint(
            gpus_per_node=gpn, nodes=nodes, gpus_total=gpn * nodes, throughput_per_s=est.throughput_per_s,
            speedup_vs_1gpu=est.speedup_vs_1gpu, scaling_efficiency=est.scaling_efficiency, bound=est.bound,
        ))
    return tuple(points)


class TrainingTime(BaseModel):
    model_config = ConfigDict(frozen=True)

    work_amount: float
    work_unit: str
    seconds: float
    hours: float
    gpu_hours: float
    #: null unless a price per GPU-hour is given (catalog prices are purchase prices)
    cost_usd: float | None
    price_per_gpu_hour_usd: float | None


def time_to_train(
    est: PerfEstimate, *, samples: float | None = None, tokens: float | None = None,
    price_per_gpu_hour: float | None = None,
) -> TrainingTime:
    """Wall time (and cost, given a price per GPU-hour) for ``samples`` or ``tokens``."""
    if (samples is None) == (tokens is None):
        raise UsageError("give either a number of samples (--epochs with --dataset-size) or --tokens")
    if tokens is not None:
        if est.throughput_unit == "tokens/s":
            seconds, amount, unit = tokens / est.throughput_per_s, tokens, "tokens"
        elif est.tokens_per_sample:
            seconds = tokens / (est.throughput_per_s * est.tokens_per_sample)
            amount, unit = tokens, "tokens"
        else:
            raise UsageError("--tokens needs a sequence model", hint="use --epochs with --dataset-size")
    else:
        assert samples is not None
        if est.throughput_unit == "tokens/s" and est.tokens_per_sample is None and est.samples_per_step:
            raise UsageError("this model's speed is in tokens/s", hint="use --tokens instead of --dataset-size")
        seconds, amount, unit = samples / est.throughput_per_s, samples, "samples"
    hours = seconds / 3600
    gpu_hours = hours * est.gpus_total
    cost = gpu_hours * price_per_gpu_hour if price_per_gpu_hour is not None else None
    return TrainingTime(
        work_amount=amount, work_unit=unit, seconds=seconds, hours=hours, gpu_hours=gpu_hours,
        cost_usd=cost, price_per_gpu_hour_usd=price_per_gpu_hour,
    )


__all__ = [
    "Calibration",
    "Interconnects",
    "PerfEstimate",
    "ScalingPoint",
    "TrainingTime",
    "estimate_performance",
    "load_calibration",
    "load_interconnects",
    "peak_tflops",
    "scaling_curve",
    "sm_count",
    "time_to_train",
]
