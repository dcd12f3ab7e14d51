"""Performance: how fast a workload trains or serves on a GPU or a cluster.

A calibrated roofline. Every formula is explained in ``docs/method.md``
("Performance"); in brief, for one step of one GPU:

* **work**: matmul/convolution FLOPs (training = 3x the forward pass; for
  transformers 2 * matrix params per token forward plus attention
  2 * layers * seq * heads * (query/key width + value width), 4 * head_dim when they are
  equal; CNNs scale the zoo's forward GFLOPs by
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
``gpusizer.memory``."""

from __future__ import annotations

import math
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict

from gpusizer.choices import AttentionKernels, Phase
from gpusizer.domain.parallelism import Parallelism, within_node
from gpusizer.domain.precision import SIXTEEN_BIT_MATRIX, check_mode, precision_spec
from gpusizer.domain.run import RunConfig
from gpusizer.domain.shape import ModelShape
from gpusizer.errors import UsageError
from gpusizer.hardware.catalog import Catalog, Gpu
from gpusizer.hardware.systems import Systems
from gpusizer.memory.estimate import default_seq_len, estimate_memory
from gpusizer.performance.calibration import (
    PHYSICAL_BOUNDS,
    Calibration,
    Efficiency,
    Interconnects,
    Selection,
    load_calibration,
    load_interconnects,
    out_of_range,
)
from gpusizer.performance.comm import Link, allreduce_time_s, collective_link
from gpusizer.performance.peak import UNKNOWN_RATE_BAND, default_compute_precision, peak_detail, peak_tflops
from gpusizer.performance.topology import Topology, node_topology
from gpusizer.performance.work import GEMV_MAX_BATCH, Work, model_work
from gpusizer.units import format_bytes, plural

#: per-layer overheads are given at this clock and scale with 1 / boost clock
#: (small, latency-bound kernels run at the SM clock)
REFERENCE_CLOCK_MHZ = 1500.0


Bound = Literal["compute", "memory", "communication"]

#: PyTorch DDP's default gradient bucket (bucket_cap_mb=25): the last bucket's
#: all-reduce cannot overlap the backward pass.
DDP_BUCKET_BYTES = 25 * 2**20


#: FP32 lanes ("CUDA cores") per SM by compute capability, from the CUDA C++
#: Programming Guide's table "Throughput of Native Arithmetic Instructions"
#: (32-bit floating-point add, multiply, multiply-add results per clock per SM).
FP32_LANES_PER_SM: dict[str, int] = {
    "5.0": 128, "5.2": 128, "5.3": 128, "6.0": 64, "6.1": 128, "6.2": 128, "7.0": 64, "7.2": 64, "7.5": 64,
    "8.0": 64, "8.6": 128, "8.7": 128, "8.9": 128, "9.0": 128, "10.0": 128, "10.3": 128, "12.0": 128,
}


# --------------------------------------------------------------------------
# the result


class PerfEstimate(BaseModel):
    """Predicted speed of one run. Times are per optimizer/decode step of one GPU."""

    model_config = ConfigDict(frozen=True, defer_build=True)

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
    #: what the step waits for; None where compute against memory rests on an efficiency outside its
    #: physical range (calibration.PHYSICAL_BOUNDS): the model cannot tell them apart there
    bound: Bound | None
    per_gpu_throughput_per_s: float
    scaling_efficiency: float
    speedup_vs_1gpu: float
    #: relative error expected: the median held-out error of the calibration, widened where no
    #: measurement covers the GPU's class or its Tensor Core rate is unknown (the notes say why)
    error_band: float
    notes: tuple[str, ...] = ()
    #: the speed is an upper bound rather than an estimate: matrix-vector decode on a GPU whose SM
    #: count is unknown (or that has no SMs in NVIDIA's sense) runs without the calibrated per-SM cap
    #: (see upper_bound_reason); the error band is widened too
    upper_bound: bool = False
    upper_bound_reason: str | None = None

    # details -----------------------------------------------------------
    #: the part of comm_s that the step waits for
    comm_exposed_s: float = 0.0
    #: fixed per-layer overheads within step_time_s
    overhead_s: float = 0.0
    #: pipeline parallelism: the part of step_time_s the 1F1B bubble idles each GPU, per micro-batch
    pipeline_bubble_s: float = 0.0
    #: micro-batches per optimizer step (1F1B's m with pipeline stages)
    micro_batches: int = 1
    gpus_total: int = 1
    nodes: int = 1
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
    transport: Literal["none", "nvlink", "scale-up", "pcie", "rdma", "tcp"] = "none"
    #: how the GPUs are linked (a system's, or the GPU's defaults); None for one GPU
    topology: Topology | None = None
    phase: str | None = None
    #: decode steps replayed as CUDA graphs (see estimate_performance); None
    #: outside decode, where the choice changes nothing
    cuda_graphs: bool | None = None


def roofline(compute_s: float, memory_s: float, exponent: float) -> float:
    """Smooth maximum of compute and memory time: (c^k + m^k)^(1/k).

    k = 1 adds them (no overlap), k -> infinity is the classic roofline max.
    The exponent is calibrated (data/calibration.yaml).
    """
    if compute_s <= 0 or memory_s <= 0:
        return max(compute_s, memory_s)
    hi = max(compute_s, memory_s)
    return float(hi * ((compute_s / hi) ** exponent + (memory_s / hi) ** exponent) ** (1.0 / exponent))


# --------------------------------------------------------------------------
# the estimate


def sm_count(gpu: Gpu) -> int | None:
    """Streaming multiprocessors: CUDA cores over the FP32 lanes per SM of the compute capability.

    Without a core count, FP32 peak / (2 x lanes x boost clock), the same identity
    the datasheet's FP32 figure comes from (H100 NVL: 60 TFLOPS at 1785 MHz -> 131,
    against 132 on the die); None when the clock is unknown too.
    """
    # no compute capability (an AMD or Intel part): no SMs in NVIDIA's sense
    lanes = FP32_LANES_PER_SM.get(gpu.compute_capability) if gpu.compute_capability else None
    if lanes is None:
        return None
    if gpu.cuda_cores is not None:
        return max(1, round(gpu.cuda_cores / lanes))
    if gpu.boost_clock_mhz and gpu.fp32_tflops is not None:
        return max(1, round(gpu.fp32_tflops * 1e12 / (2 * lanes * gpu.boost_clock_mhz * 1e6)))
    return None


#: How much wider the error band is when a decode speed is an upper bound (no per-SM cap applied).
#: On the calibrated GPUs the cap is what binds batch-1 decode: 132 SMs x 12.47 GB/s = 1,647 GB/s
#: against 86.6% of the HBM stream, 1.8x lower on the H100 SXM (3,350 GB/s) and 2.5x on the H200
#: (4,800 GB/s), so an uncapped speed may be that much high. A judgement, like
#: calibration.UNCOVERED_BAND_FACTOR, not a fit.
UPPER_BOUND_BAND_FACTOR = 2.0


def uncapped_decode_reason(gpu: Gpu) -> str:
    """Why the per-SM matrix-vector cap cannot be applied to ``gpu``, in words."""
    if gpu.compute_capability and gpu.compute_capability not in FP32_LANES_PER_SM:
        return f"{gpu.id}'s SM count is unknown (no FP32 lanes per SM known for compute capability {gpu.compute_capability})"
    if not gpu.compute_capability:
        from gpusizer.hardware.vendors import VENDOR_NAMES

        who = VENDOR_NAMES.get(gpu.vendor, gpu.vendor)
        return (f"{gpu.id} is not an NVIDIA GPU with a known compute capability ({who}): its compute units are "
                "not NVIDIA SMs, and no per-unit decode rate is calibrated for them")
    return f"{gpu.id}'s SM count is unknown (the catalog has neither cuda_cores nor a boost clock for it)"


class StepTime(NamedTuple):
    """One GPU's step before communication."""

    compute_s: float
    memory_s: float
    overhead_s: float
    #: the step without communication
    step_s: float
    peak_tflops: float
    peak_label: str
    notes: tuple[str, ...]
    efficiency: Efficiency
    #: the calibration entry and whether measurements cover the GPU's class
    selection: Selection
    #: the Tensor Core rate that applies is unknown: the peak is a CUDA-core lower bound
    unknown_rate: bool = False
    #: why the step is an upper bound (matrix-vector decode without the per-SM cap); None: it is not
    upper_bound: str | None = None


def _step(
    work: Work, gpu: Gpu, precision: str, tf32: bool, cal: Calibration, cuda_graphs: bool = True,
    attention_kernels: AttentionKernels = "current",
) -> StepTime:
    """The compute, memory and fixed-overhead time of one step on one GPU."""
    peak, label, notes, unknown_rate = peak_detail(gpu, precision, tf32=tf32)
    if work.gemv and gpu.fp32_tflops is not None and gpu.fp32_tflops < peak:
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
    selection = cal.select(work.workload, gpu.architecture, gpu.segment, gpu.vendor)
    eff = selection.entry
    if selection.note:
        notes = (*notes, selection.note)
    flops_rate = peak * 1e12 * eff.compute_efficiency
    byte_rate = gpu.bandwidth_gb_s * 1e9 * eff.memory_efficiency
    if work.ops:
        return _step_by_operation(work, cal, flops_rate, byte_rate, peak, label, notes, eff, selection, unknown_rate)
    compute_s = work.matmul_flops / flops_rate
    if work.attention_flops > 0 and not work.gemv:
        attn_peak = peak
        if precision_spec(precision).attention_at_16bit:
            # attention multiplies 16-bit Q, K and V (Transformer Engine without fp8_dpa,
            # weight-only INT4 engines): those FLOPs run at the 16-bit rate
            attn_peak = _sixteen_bit_peak(gpu, tf32)
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
    upper = None
    if work.gemv and eff.sm_bandwidth_gb_s > 0 and not sms:
        upper = uncapped_decode_reason(gpu)
        notes = (*notes, f"{upper}, so the per-SM cap on matrix-vector decode (calibrated on NVIDIA GPUs) is not "
                         f"applied: this decode speed is an upper bound, and its error band is at least "
                         f"{UPPER_BOUND_BAND_FACTOR:g}x the calibration's")
    matmul_mem_s = work.matmul_bytes / matmul_rate
    clock = REFERENCE_CLOCK_MHZ / gpu.boost_clock_mhz if gpu.boost_clock_mhz else 1.0
    per_layer_us = eff.graph_layer_overhead_us if cuda_graphs else eff.layer_overhead_us
    overhead_s = work.layers * per_layer_us * 1e-6 * clock
    if overhead_s > 0:
        how = ("replayed as one CUDA graph (without CUDA graphs, kernels are launched one by one)"
               if cuda_graphs else "launched kernel by kernel (with CUDA graphs, one graph per step)")
        notes = (*notes, f"fixed overhead {per_layer_us * clock:.0f} us per layer and step, each step {how}")
    act_mem_s = work.activation_bytes / byte_rate
    opt_mem_s = work.optimizer_bytes / byte_rate / work.grad_accumulation
    step = roofline(compute_s, matmul_mem_s + act_mem_s, cal.roofline_exponent) + opt_mem_s + overhead_s
    return StepTime(compute_s, matmul_mem_s + act_mem_s + opt_mem_s, overhead_s, step, peak, label, notes, eff,
                    selection, unknown_rate, upper)


def _communication(work: Work, st: StepTime, at: _Layout, links: Interconnects, cal: Calibration,
                   shape: ModelShape, cfg: RunConfig, micro_batches: int,
                   grad_accumulation: int) -> tuple[_Comm, float, float]:
    """(communication, step time with what of it is exposed, the pipeline bubble within the step)."""
    par = at.par
    comm = _Comm()
    step = st.step_s
    if cfg.training and par.zero_ranks > 1:
        comm = _data_parallel(comm, work, st.step_s, at, links, grad_accumulation)
        step = st.step_s * (1.0 + cal.data_parallel_overhead)
    if par.tp > 1:
        comm = _tensor_parallel(comm, work, at, links)
    if work.offload_bytes > 0:
        comm = _offload_time(comm, work, at.gpu, links, at.topology.pcie_generation)
    if par.pp > 1 or par.cp > 1 or par.ep > 1:
        comm = _model_parallel(comm, work, st, at, links, shape, cfg, micro_batches)
    step += comm.exposed_s
    # 1F1B: m micro-batches take (m + pp - 1) stage times, so each costs (m + pp - 1) / m of one
    bubble = step * (par.pp - 1) / micro_batches
    return comm, step + bubble, bubble


def _run_layout(cfg: RunConfig, nodes: int) -> tuple[Parallelism, RunConfig]:
    """The run's degrees over its nodes, and the run whose work one GPU does: a pipeline's stages
    each run layers / pp of the model, so the model without its pipeline, over one stage's GPUs
    (:func:`_stage_share` then takes a pp-th of it)."""
    if cfg.tp is None and max(cfg.pp, cfg.cp, cfg.ep) == 1:
        return Parallelism.of_cluster(cfg.strategy, cfg.gpus, nodes), cfg
    par = Parallelism.of_cluster(cfg.strategy, cfg.gpus, nodes, tp=cfg.tp, pp=cfg.pp, cp=cfg.cp, ep=cfg.ep)
    return par, cfg.model_copy(update={"pp": 1, "tp": par.tp, "gpus": cfg.gpus * nodes // par.pp})


def _stage_share(work: Work, st: StepTime, pp: int) -> tuple[Work, StepTime]:
    """One pipeline stage's share (1 / pp) of the model's work and step time."""
    if pp == 1:
        return work, st
    work = work.model_copy(update={
        "tp_allreduces": work.tp_allreduces // pp, "gradient_bytes": work.gradient_bytes / pp,
        "layers": max(1, work.layers // pp),
        **{k: getattr(work, k) / pp for k in ("matmul_flops", "attention_flops", "matmul_bytes",
                                              "activation_bytes", "optimizer_bytes", "offload_bytes")}})
    return work, st._replace(compute_s=st.compute_s / pp, memory_s=st.memory_s / pp, overhead_s=st.overhead_s / pp,
                             step_s=st.step_s / pp)


def _sixteen_bit_peak(gpu: Gpu, tf32: bool) -> float:
    """The 16-bit matrix rate attention runs at: FP16's, else BF16's where only that one is
    known (Intel Gaudi 2 publishes BF16 alone)."""
    for precision in SIXTEEN_BIT_MATRIX:
        try:
            detail = peak_detail(gpu, precision, tf32=tf32)
        except UsageError:
            continue
        if not detail.unknown_rate:
            return detail.tflops
    return peak_tflops(gpu, SIXTEEN_BIT_MATRIX[0], tf32=tf32)[0]  # the lower bound, or the error that says why


#: a kernel shorter than this is dominated by its launch, which per-operation timing leaves out
#: (eager PyTorch launches a CUDA kernel in roughly 5-10 us of host time)
MIN_KERNEL_S = 10e-6


def _step_by_operation(
    work: Work, cal: Calibration, flops_rate: float, byte_rate: float, peak: float, label: str,
    notes: tuple[str, ...], eff: Efficiency, selection: Selection, unknown_rate: bool,
) -> StepTime:
    """A step timed kernel by kernel: each operation against its own roofline (its FLOPs at the
    matmul rate, its bytes at the streaming rate), then summed, as kernels run one after another.
    compute_s and memory_s are the two parts summed over the operations."""
    compute_s = memory_s = step = 0.0
    for op in work.ops:
        t_c = op.flops / flops_rate if op.matmul else 0.0
        t_m = op.bytes / byte_rate
        compute_s += op.count * t_c
        memory_s += op.count * t_m
        step += op.count * (roofline(t_c, t_m, cal.roofline_exponent) if t_c > 0 else t_m)
    opt_mem_s = work.optimizer_bytes / byte_rate / work.grad_accumulation
    kernels = sum(op.count for op in work.ops)
    if step / kernels < MIN_KERNEL_S:
        notes = (*notes, (
            f"{kernels} kernels in {step * 1e6:,.0f} us is {step / kernels * 1e6:.1f} us each: below the few "
            "microseconds an eager PyTorch kernel launch takes, which this per-operation time does not include "
            "(it was checked at batch 1024); at this batch the estimate is an upper bound"))
    return StepTime(compute_s, memory_s + opt_mem_s, 0.0, step + opt_mem_s, peak, label, notes, eff, selection,
                    unknown_rate)


def _error_band(cal: Calibration, st: StepTime) -> float:
    """The calibration's held-out error, widened for an uncovered GPU class or an unknown rate, and
    for an upper bound (UPPER_BOUND_BAND_FACTOR: matrix-vector decode without the per-SM cap)."""
    band = cal.error_band_for(st.selection)
    band = max(band, UNKNOWN_RATE_BAND) if st.unknown_rate else band
    return max(band, cal.error_band * UPPER_BOUND_BAND_FACTOR) if st.upper_bound else band


class _Layout(BaseModel):
    """Where a run's GPUs sit and how they are linked."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True, defer_build=True)

    gpu: Gpu
    gpus_per_node: int
    nodes: int
    topology: Topology
    par: Parallelism


class _Comm(BaseModel):
    """Communication of one step: its time, the part the step waits for, and the link."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    comm_s: float = 0.0
    exposed_s: float = 0.0
    bytes: float = 0.0
    link_label: str | None = None
    link_gb_s: float | None = None
    transport: Literal["none", "nvlink", "scale-up", "pcie", "rdma", "tcp"] = "none"
    notes: tuple[str, ...] = ()
    #: host-memory transfers of offloaded state, on the critical path (not overlapped)
    offload_s: float = 0.0


def _offload_time(comm: _Comm, work: Work, gpu: Gpu, links: Interconnects, topology_pcie: int | None) -> _Comm:
    """Offloaded state crosses the GPU's link to its host each step (:meth:`Interconnects.host_path`:
    a Grace superchip's NVLink-C2C, else its PCIe slot); counted in full, as the step cannot finish
    before the weights it needs arrive. ``topology_pcie``: the generation the topology resolved
    (performance.topology.pcie_generation_for, where the catalog has none)."""
    name, rate_gb_s = links.host_path(gpu, gpu.pcie_generation or topology_pcie)
    seconds = work.offload_bytes / (rate_gb_s * 1e9)
    note = (f"offload moves {work.offload_bytes / 1e9:,.1f} GB over {name} each step "
            f"({seconds * 1e3:,.0f} ms, not overlapped); the CPU optimizer step and NVMe reads are not timed, "
            "and each GPU moves its own share over its own link, so speed-ups of GPUs sharing a host are optimistic")
    return comm.model_copy(update={"offload_s": seconds, "comm_s": comm.comm_s + seconds,
                                   "exposed_s": comm.exposed_s + seconds, "notes": (*comm.notes, note)})


def _data_parallel(
    comm: _Comm, work: Work, base_step: float, at: _Layout, links: Interconnects, grad_accumulation: int,
) -> _Comm:
    """The data-parallel gradient all-reduce; with tp, each rank's shard across nodes."""
    par = at.par
    ring_gpn, ring_nodes = 1 if par.tp > 1 else at.gpus_per_node, at.nodes
    if par.pp > 1 or par.cp > 1 or par.ep > 1:
        # Megatron's rank order (tp, cp, dp, pp from the innermost): the dp x cp ring's ranks sit tp
        # apart, and with pipeline stages outermost it may stay inside a node
        ring_gpn, ring_nodes = group_span(par.zero_ranks, par.tp, at.gpus_per_node)
    link = collective_link(at.gpu, at.gpus_per_node, ring_nodes, links=links, topology=at.topology)
    # ZeRO-3/FSDP gather the weights forward and backward and reduce-scatter the gradients:
    # (N-1)/N x (2 W + G), which the all-reduce's 2 (N-1)/N x S times with S = W + G / 2
    size = work.gather_bytes + work.gradient_bytes / 2 if par.gathers_layers else work.gradient_bytes
    # DDP all-reduces 25 MB buckets; FSDP/ZeRO-3 wrapped per block (LLM Foundry, torchtitan) issues
    # three collectives per block: an all-gather forward and backward, a reduce-scatter backward
    calls = 3 * max(1, work.layers) if par.gathers_layers else max(1, math.ceil(size / DDP_BUCKET_BYTES))
    t_ar = allreduce_time_s(size, ring_gpn, ring_nodes, link, calls=calls)
    # DDP overlaps all-reduce with backward (Li et al., "PyTorch Distributed", VLDB 2020),
    # and backward is 2/3 of the step: twice the forward FLOPs (the 6N-per-token count
    # of Kaplan et al. 2020, 2N forward + 4N backward). ZeRO-3/FSDP prefetch parameters
    # during forward too. The last bucket never overlaps.
    # With gradient accumulation it runs once per grad_accumulation micro-batches.
    # Copies staged through host memory hide behind only part of it (link.overlap, data/interconnects.yaml).
    window = (base_step if par.gathers_layers else base_step * 2.0 / 3.0) * link.overlap
    # ZeRO-1/2: the gradients' reduce-scatter overlaps backward, the weights' all-gather (the other
    # half of the volume) follows the optimizer step in full
    after = t_ar / 2.0 if par.gathers_after_step else 0.0
    tail = (t_ar - after) * min(1.0, DDP_BUCKET_BYTES / size) if size > 0 else 0.0
    return comm.model_copy(update={
        "comm_s": comm.comm_s + t_ar / grad_accumulation,
        "exposed_s": comm.exposed_s + (max(tail, t_ar - after - window) + after) / grad_accumulation,
        "bytes": comm.bytes + 2.0 * (par.zero_ranks - 1) / par.zero_ranks * size,
        "link_label": link.label, "link_gb_s": link.bandwidth_gb_s, "transport": link.transport,
        "notes": (*comm.notes, *link.notes),
    })


def _tensor_parallel(comm: _Comm, work: Work, at: _Layout, links: Interconnects) -> _Comm:
    """Megatron-style: two activation all-reduces per layer and pass, on the critical path."""
    tp = at.par.tp
    # the tensor-parallel group: a node's GPUs (strategy tp), or tp of them where a layout gives tp
    ring_gpn, ring_nodes = (at.gpus_per_node, 1) if tp == at.gpus_per_node else group_span(tp, 1, at.gpus_per_node)
    link = collective_link(at.gpu, ring_gpn, ring_nodes, links=links, topology=at.topology)
    t_tp = allreduce_time_s(work.tp_allreduce_bytes, ring_gpn, ring_nodes, link) * work.tp_allreduces
    update: dict[str, Any] = {
        "comm_s": comm.comm_s + t_tp, "exposed_s": comm.exposed_s + t_tp,
        "bytes": comm.bytes + 2.0 * (tp - 1) / tp * work.tp_allreduce_bytes * work.tp_allreduces,
        "notes": (*comm.notes, *link.notes),
    }
    if comm.link_label is None:
        update.update(link_label=link.label, link_gb_s=link.bandwidth_gb_s, transport=link.transport)
    return comm.model_copy(update=update)


def group_span(size: int, stride: int, gpus_per_node: int) -> tuple[int, int]:
    """(ranks in a node, nodes) of a group of ``size`` ranks placed ``stride`` ranks apart,
    ranks filling nodes of ``gpus_per_node`` in order (Megatron-Core's default rank order puts
    tp innermost, then cp, ep and dp, and pp outermost)."""
    in_node = max(1, min(size, gpus_per_node // max(1, stride)))
    return in_node, -(-size // in_node)


def _p2p_gb_s(link: Link, in_node: bool, gpus_per_node: int) -> float:
    """Point-to-point bandwidth of one GPU: its NVLink/PCIe share inside a node; across nodes
    its share of the node's network (every GPU of a node sends at once)."""
    return link.bandwidth_gb_s if in_node else link.bandwidth_gb_s / max(1, gpus_per_node)


def _model_parallel(comm: _Comm, work: Work, st: StepTime, at: _Layout, links: Interconnects, shape: ModelShape,
                    cfg: RunConfig, micro_batches: int) -> _Comm:
    """Pipeline sends, context-parallel KV exchange and expert-parallel all-to-all of one
    micro-batch on one GPU of the stage (``st`` is the stage's step). Each is counted where it
    waits: pipeline sends and the all-to-all in full, the ring's exchange beyond the attention it
    overlaps with (Megatron-Core's context parallelism overlaps them)."""
    par, gpn = at.par, at.gpus_per_node
    m = shape.transformer
    notes: list[str] = []
    if m is None:
        return comm
    storage = cfg.storage
    p = storage.activation_bytes  # K, V and the MoE layers' inputs, in the compute dtype
    # the residual stream crosses between stages: fp32 under autocast, as the memory model keeps it
    p_stage = 4 if storage.autocast else p
    seq = cfg.seq_len or default_seq_len(shape)
    # a decode step moves one new token a sequence; otherwise every token of this rank's share
    tokens = float(cfg.batch) if work.workload == "llm-decode" else cfg.batch * seq / par.cp
    forwards = work.forward_passes  # a checkpointed step runs the forward again in backward
    passes = forwards + (2 if cfg.training else 0)  # and backward's two
    total_s = exposed_s = volume = 0.0
    if par.pp > 1:
        # each stage boundary: the activation forward and its gradient backward; Megatron's
        # scatter/gather sends 1/tp of it per tensor-parallel rank (Narayanan et al. 2021, 4.1)
        in_node = par.tp * par.cp * par.dp * par.pp <= gpn
        link = collective_link(at.gpu, gpn, 1 if in_node else 2, links=links, topology=at.topology)
        size = tokens * m.hidden * p_stage / par.tp
        sends = 2 if cfg.training else 1
        t = sends * (size / (_p2p_gb_s(link, in_node, gpn) * 1e9) + link.base_latency_us * 1e-6)
        total_s += t
        exposed_s += t
        volume += sends * size
        idle = f"{bubble_fraction(par.pp, micro_batches):.0%}"
        more = 4 * par.pp  # an example count to show, not a model constant (Narayanan et al. 2021 run m >> pp)
        fill = (f"; {more} micro-batches a step (more gradient accumulation, a smaller micro-batch) would cut it to "
                f"{bubble_fraction(par.pp, more):.0%}") if micro_batches < more else ""
        schedule = (f"1F1B over {plural(micro_batches, 'micro-batch', 'micro-batches')} a step (the gradient accumulation): the bubble idles "
                    f"each GPU (pp - 1) / (m + pp - 1) = {idle} of the step (Narayanan et al. 2021){fill}"
                    if cfg.training else
                    f"one batch passes through the stages in turn, each GPU idle {idle} of the time (batches that "
                    "could fill the pipeline are not modelled)")
        notes.append(f"pipeline: {par.pp} stages, {schedule}; each micro-batch sends {format_bytes(int(size), binary=False)} a GPU "
                     f"({8 * p_stage}-bit) between stages {'forward and backward ' if cfg.training else ''}over "
                     f"{'the node' if in_node else 'the network'}; stages are timed as equal (layers / pp each; "
                     "the embedding and the output head are not balanced)")
    if par.cp > 1:
        # ring attention: each rank passes its K and V chunk cp - 1 times a layer forward, and K, V and
        # their gradients backward (twice that)
        in_node = par.tp * par.cp <= gpn
        link = collective_link(at.gpu, gpn, 1 if in_node else 2, links=links, topology=at.topology)
        kv = 2 * m.n_kv_heads * m.attention_head_dim * tokens * p / par.tp
        size = (par.cp - 1) * kv * m.layers / par.pp * passes
        t = size / (_p2p_gb_s(link, in_node, gpn) * 1e9)
        attention_s = st.compute_s * work.attention_flops / work.matmul_flops if work.matmul_flops else 0.0
        total_s += t
        exposed_s += max(0.0, t - attention_s)
        volume += size
        notes.append(f"context parallelism: {par.cp} ranks pass {8 * p}-bit K and V round a ring, {format_bytes(int(size), binary=False)} a GPU "
                     "and "
                     f"micro-batch over {'the node' if in_node else 'the network'}, overlapped with attention; "
                     f"the sequence is split in 2 x {par.cp} chunks for balanced causal work (Megatron-Core)")
    if par.ep > 1 and m.moe_layers:
        # all-to-all dispatch and combine around every MoE layer, forward and backward: each token's
        # k hidden vectors go to the experts' ranks, (ep - 1) / ep of them off this rank
        in_node = par.tp * par.ep <= gpn
        link = collective_link(at.gpu, gpn, 1 if in_node else 2, links=links, topology=at.topology)
        k = m.experts_per_token or 1
        size = tokens * k * m.hidden * p * (par.ep - 1) / par.ep
        calls = 2 * (forwards + (1 if cfg.training else 0)) * m.moe_layers / par.pp
        t = calls * (size / (_p2p_gb_s(link, in_node, gpn) * 1e9) + link.base_latency_us * 1e-6)
        total_s += t
        exposed_s += t
        volume += calls * size
        notes.append(f"expert parallelism: {par.ep} ranks, an all-to-all dispatch and combine around each MoE layer "
                     f"({format_bytes(int(size), binary=False)} of {8 * p}-bit activations a GPU each, over "
                     f"{'the node' if in_node else 'the network'}), not "
                     "overlapped with compute; routing assumed balanced (every rank gets its share of tokens)")
    return comm.model_copy(update={"comm_s": comm.comm_s + total_s, "exposed_s": comm.exposed_s + exposed_s,
                                   "bytes": comm.bytes + volume, "notes": (*comm.notes, *notes)})


def bubble_fraction(pp: int, micro_batches: int) -> float:
    """The share of a 1F1B step each GPU idles: (pp - 1) / (m + pp - 1) (Narayanan et al. 2021,
    section 2.2.1: the bubble is (pp - 1) micro-batch times against m of work)."""
    return (pp - 1) / (micro_batches + pp - 1)


def _bound(st: StepTime, exposed_comm_s: float, notes: list[str]) -> Bound | None:
    """The resource the step waits for. Where an efficiency lies outside its physical range
    (calibration.PHYSICAL_BOUNDS), compute or memory is named only if it binds for every physical
    value of both efficiencies (a time scales with 1 / efficiency)."""
    times: dict[Bound, float] = {"compute": st.compute_s, "memory": st.memory_s, "communication": exposed_comm_s}
    bound = max(times, key=lambda k: times[k])
    odd = out_of_range(st.efficiency)
    if bound == "communication" or not odd:
        return bound
    eff = st.efficiency
    (c_lo, c_hi), (m_lo, m_hi) = PHYSICAL_BOUNDS["compute_efficiency"], PHYSICAL_BOUNDS["memory_efficiency"]
    compute = (st.compute_s * eff.compute_efficiency / c_hi, st.compute_s * eff.compute_efficiency / c_lo)
    memory = (st.memory_s * eff.memory_efficiency / m_hi, st.memory_s * eff.memory_efficiency / m_lo)
    if compute[0] > memory[1]:
        return "compute"
    if memory[0] > compute[1]:
        return "memory"
    notes.append(f"not called compute- or memory-bound: the fitted {' and '.join(odd)} lies outside its "
                 "physical range, and within that range either could bind (docs/method.md)")
    return None


def _lone_throughput(gpu: Gpu, shape: ModelShape, cfg: RunConfig, precision: str, tf32: bool, cal: Calibration,
                     links: Interconnects, phase: Phase | None, grad_accumulation: int, cuda_graphs: bool,
                     attention_kernels: AttentionKernels, topology_pcie: int | None) -> float:
    """Throughput of ``cfg`` on one GPU holding the whole replica with the same batch: its
    compute step plus the offload it moves (a lone GPU has nothing else to communicate). Model
    parallelism becomes plain data parallelism; a ZeRO strategy on one GPU keeps DeepSpeed's layout."""
    single_cfg = _lone_config(cfg)
    work = model_work(shape, single_cfg, precision, phase=phase, grad_accumulation=grad_accumulation)
    step = _step(work, gpu, precision, tf32, cal, cuda_graphs, attention_kernels).step_s
    if work.offload_bytes:
        step += _offload_time(_Comm(), work, gpu, links, topology_pcie).offload_s
    return work.samples_per_step / step


def _lone_config(cfg: RunConfig) -> RunConfig:
    """The run on one GPU holding the whole replica with the same batch (the speed-up's baseline)."""
    model_parallel = cfg.tp is not None or max(cfg.pp, cfg.cp, cfg.ep) > 1 or within_node(cfg.strategy)
    return cfg.model_copy(update={"gpus": 1, "tp": None, "pp": 1, "cp": 1, "ep": 1,
                                  **({"strategy": "ddp"} if model_parallel else {})})


def _baseline_notes(gpu: Gpu, shape: ModelShape, cfg: RunConfig, par: Parallelism, speedup: float,
                    n_total: int, exposed_s: float, step_s: float) -> list[str]:
    """What the speed-up is measured against, where it would otherwise read oddly: above N GPUs'
    worth, or against a run one GPU cannot hold. ``exposed_s``: the communication a step of
    ``step_s`` waits for."""
    notes: list[str] = []
    if speedup > n_total and par.optimizer_shards > 1:
        comm = ("the communication it adds is all but hidden behind compute here" if exposed_s < 0.01 * step_s else
                f"that saves more than the {exposed_s * 1e3:,.1f} ms a step waits for communication")
        notes.append(f"scaling above 100%: under {cfg.strategy} each GPU runs the optimizer step on 1/{par.optimizer_shards} "
                     f"of the weights, which the one-GPU baseline updates whole; {comm}, and what the model leaves out "
                     "(stragglers, uneven layers) is not counted")
    try:
        needed = estimate_memory(shape, _lone_config(cfg)).total_bytes
    except UsageError:
        return notes  # a layout one GPU cannot take at all: the speed-up's own baseline says so
    if needed > gpu.memory_bytes:
        notes.append(f"the speed-up is against a hypothetical run: on one GPU this run needs "
                     f"{format_bytes(needed)}, and {gpu.id} has {format_bytes(gpu.memory_bytes)}")
    return notes


def _check_counts(grad_accumulation: int, nodes: int) -> None:
    if grad_accumulation < 1:
        raise UsageError("gradient accumulation must be at least 1 micro-batch", field="grad_accumulation")
    if nodes < 1:
        raise UsageError("a run needs at least 1 node", field="nodes")


def estimate_performance(
    gpu: Gpu, shape: ModelShape, cfg: RunConfig, *, nodes: int = 1, interconnect: str | None = None,
    tf32: bool = True, compute_precision: str | None = None, phase: Phase | None = None,
    nics_per_node: int | None = None, grad_accumulation: int = 1, cuda_graphs: bool = True,
    attention_kernels: AttentionKernels = "current", calibration: Calibration | None = None,
    interconnects: Interconnects | None = None, topology: Topology | None = None,
    systems: Systems | None = None, catalog: Catalog | None = None,
) -> PerfEstimate:
    """Predict throughput of ``shape`` under ``cfg`` on ``cfg.gpus`` x ``nodes`` GPUs.

    ``cfg.batch`` is per GPU (per model replica with ``strategy="tp"``, where
    ``cfg.gpus`` GPUs of a node share one replica and nodes are replicas).
    ``compute_precision`` overrides the matmul precision implied by
    ``cfg.precision`` (fp64, tf32 and fp8 have no memory precision of their own).
    ``phase``: decode (default) or prefill for decoder inference. ``grad_accumulation``
    micro-batches share one optimizer step and all-reduce; a step is one micro-batch.
    ``cuda_graphs``: each decode step's kernels replay as one CUDA graph (TensorRT-LLM,
    vLLM, SGLang, llama.cpp at batch 1) or launch one by one; it sets the per-layer overhead.
    ``attention_kernels`` times fused attention at the matmuls' efficiency ("current")
    or as the kernels LLM Foundry ran in 2023 ("llm-foundry-2023", for its rows).
    ``topology``: how the GPUs are linked (performance.topology); default: the GPU's defaults,
    with ``interconnect`` and ``nics_per_node`` as overrides. ``calibration``, ``interconnects``,
    ``systems`` and ``catalog``: the data files, as the caller loaded them (default: the bundled ones).
    """
    _check_counts(grad_accumulation, nodes)
    cal = calibration or load_calibration()
    links = interconnects or load_interconnects()
    precision = compute_precision or default_compute_precision(cfg)
    check_mode(precision, cfg.mode)
    par, work_cfg = _run_layout(cfg, nodes)
    n_total = cfg.gpus * nodes
    tp = par.tp
    work = model_work(shape, work_cfg, precision, phase=phase, tp=tp, dp=n_total if tp == 1 else 1,
                      grad_accumulation=grad_accumulation)
    work, st = _stage_share(work, _step(work, gpu, precision, tf32, cal, cuda_graphs, attention_kernels), par.pp)
    notes: list[str] = [*st.notes, *work.notes]
    topo = topology or node_topology(gpu, cfg.gpus, nodes, interconnect=interconnect, nics_per_node=nics_per_node,
                                     links=links, systems=systems, catalog=catalog)
    layout = _Layout(gpu=gpu, gpus_per_node=cfg.gpus, nodes=nodes, topology=topo, par=par)
    micro_batches = grad_accumulation if cfg.training else 1
    comm, step, bubble = _communication(work, st, layout, links, cal, shape, cfg, micro_batches, grad_accumulation)
    notes.extend(comm.notes)

    throughput = work.samples_per_step / step * par.dp
    # against one GPU running the same run (the whole replica, the same batch), so the speed-up
    # is the ratio of the throughputs the scaling table lists
    speedup = 1.0 if n_total == 1 and max(par.tp, par.pp, par.cp) == 1 else throughput / _lone_throughput(
        gpu, shape, cfg, precision, tf32, cal, links, phase, grad_accumulation, cuda_graphs, attention_kernels,
        topo.pcie_generation)
    if n_total > 1 or max(par.tp, par.pp, par.cp) > 1:
        notes.extend(_baseline_notes(gpu, shape, cfg, par, speedup, n_total, comm.exposed_s, step))
    bound = _bound(st, comm.exposed_s, notes)
    return PerfEstimate(
        throughput_per_s=throughput, throughput_unit=work.unit, step_time_s=step, compute_s=st.compute_s,
        memory_s=st.memory_s, comm_s=comm.comm_s, bound=bound, per_gpu_throughput_per_s=throughput / n_total,
        scaling_efficiency=speedup / n_total, speedup_vs_1gpu=speedup, error_band=_error_band(cal, st),
        upper_bound=st.upper_bound is not None, upper_bound_reason=st.upper_bound,
        notes=tuple(dict.fromkeys(notes)), comm_exposed_s=comm.exposed_s, overhead_s=st.overhead_s,
        pipeline_bubble_s=bubble, micro_batches=micro_batches,
        gpus_total=n_total, nodes=nodes, samples_per_step=int(round(work.samples_per_step)),
        tokens_per_sample=work.tokens_per_sample, flops_per_step=work.matmul_flops,
        memory_traffic_bytes=work.matmul_bytes + work.activation_bytes + work.optimizer_bytes,
        comm_bytes=comm.bytes, workload=work.workload, compute_precision=precision, peak_tflops=st.peak_tflops,
        peak_label=st.peak_label, compute_efficiency=st.efficiency.compute_efficiency,
        memory_efficiency=st.efficiency.memory_efficiency, interconnect=comm.link_label,
        comm_bandwidth_gb_s=comm.link_gb_s, transport=comm.transport, topology=topo if n_total > 1 else None,
        phase=(phase or "decode") if work.workload == "llm-decode" or phase == "prefill" else None,
        cuda_graphs=cuda_graphs if st.overhead_s > 0 else None,
    )
