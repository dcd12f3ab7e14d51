"""Serving capacity: how many sequences of a given context a deployment holds at once.

Serving engines (vLLM, SGLang, TensorRT-LLM) keep the KV cache in fixed-size
blocks and give it whatever memory is left once the weights, the activations of
the largest batch they schedule, and their own reserves are placed. This module
follows vLLM's accounting (``gpu_memory_utilization``, 16-token blocks):

    KV budget = utilization x GPU memory - weights - peak activations
                - CUDA context - CUDA-graph reserve - tensor-parallel buffers (tp > 1)
    blocks    = KV budget / (16 tokens x KV bytes per token)
    sequences = blocks / ceil(context / 16)

With tensor parallelism each GPU holds 1/tp of the weights and of the KV heads
(at least one KV head: vLLM replicates them when tp exceeds their number); latent
attention's cache (one latent a token) is held whole on every GPU.

Sliding-window models (gpt-oss, Gemma 2 and 3) follow vLLM V1's hybrid KV-cache
manager (vllm/v1/core/kv_cache_utils.py, :func:`kv_cache_groups`): layers of one
attention type are split into groups of equal size, each block holds 16 tokens of one
layer of every group, and the "GPU KV cache size" vLLM logs is the blocks divided by the
number of groups, in tokens. A request needs ``ceil(context / 16)`` blocks in each full-
attention group and, in each sliding-window group, the blocks of the window plus one
prefill chunk, ``ceil(min(window - 1 + max_batched_tokens, context) / 16) + 1``
(vllm/v1/kv_cache_interface.py, SlidingWindowSpec.max_memory_usage_bytes).
"""

from __future__ import annotations

from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from gpusizer.domain.parallelism import NODE_GPUS, Parallelism, tensor_parallel
from gpusizer.domain.precision import kv_element_bytes
from gpusizer.domain.run import RunConfig
from gpusizer.domain.shape import ModelShape, TransformerShape
from gpusizer.errors import UsageError
from gpusizer.memory.estimate import DEFAULT_CONTEXT_BYTES, check_layout, estimate_memory, kv_cache_bytes
from gpusizer.units import GIB

#: vLLM's paged KV cache: 16 tokens a block (``--block-size`` default).
BLOCK_TOKENS = 16
#: vLLM's default ``--gpu-memory-utilization``: the share of GPU memory the engine may use.
DEFAULT_UTILIZATION = 0.9


class EngineLimits(NamedTuple):
    """The scheduler's limits a serving engine sizes its memory with: the tokens of one step
    (``max_num_batched_tokens``, the prefill chunk the activation peak is profiled with) and the
    sequences in flight (``max_num_seqs``, whose last-position logits are sampled together)."""

    max_batched_tokens: int
    max_num_seqs: int


#: vLLM's defaults for its OpenAI API server, by GPU (vllm/engine/arg_utils.py,
#: EngineArgs.get_batch_defaults, since vllm-project/vllm PR #17885, 2025): a GPU with at least
#: 70 GiB whose name does not contain "a100" ("for GPUs like H100 and MI300x") gets 8,192 tokens
#: and 1,024 sequences; every other GPU 2,048 and 256 (large budgets lowered an A100's throughput)
LARGE_GPU_BYTES = 70 * GIB
LARGE_GPU_LIMITS = EngineLimits(max_batched_tokens=8192, max_num_seqs=1024)
SMALL_GPU_LIMITS = EngineLimits(max_batched_tokens=2048, max_num_seqs=256)
#: The larger prefill chunk: what a note about every GPU may assume
MAX_BATCHED_TOKENS = LARGE_GPU_LIMITS.max_batched_tokens


def engine_limits(gpu_memory_bytes: int, gpu_name: str) -> EngineLimits:
    """vLLM's default scheduler limits on a GPU of ``gpu_memory_bytes`` named ``gpu_name``."""
    large = gpu_memory_bytes >= LARGE_GPU_BYTES and "a100" not in gpu_name.lower()
    return LARGE_GPU_LIMITS if large else SMALL_GPU_LIMITS

#: Memory CUDA-graph capture keeps outside the KV cache. vLLM logs it at start-up
#: ("Graph capturing finished in N secs, took X GiB"); it grows with the batch sizes
#: captured and the model's layers.
CUDA_GRAPH_BYTES = GIB // 2
#: Memory outside PyTorch's allocator that tensor parallelism adds on each GPU: NCCL's
#: communicator buffers and vLLM's custom all-reduce buffers. vLLM's memory profile of
#: Meta-Llama-3-8B on an H100 (vllm-project/vllm PR #10511, 2024-12) logs "non_torch_memory"
#: 1.79 GiB at TP=1 and 3.58 GiB at TP=2: 1.79 GiB more per GPU.
TP_BUFFER_BYTES = round(1.79 * GIB)
#: The context a serving question assumes when none is given: 4,096 tokens (a prompt and its
#: answer; the serving question of issue 16 is "32 users at 4k context"), or the model's own
#: context where that is shorter. Sizing at a model's whole context (vLLM's max_model_len
#: default: 128k for Llama 3.1) would hold a few sequences where engines run hundreds.
DEFAULT_CONTEXT = 4096


def served_decoder(shape: ModelShape) -> TransformerShape:
    """The transformer a serving engine decodes from its KV cache: a decoder's (or an
    encoder-decoder's); any other model is a usage error that names it."""
    m = shape.transformer
    if shape.arch is None:  # (a parameter count alone: no layers to size a KV cache from)
        raise UsageError(f"{shape.name} gives no layers, so no KV cache can be sized: serving needs a decoder's "
                         "shape", hint="name a decoder from the zoo (gpusizer models) or give its Hugging Face config",
                         field="model")
    if m is None or not m.has_kv_cache:
        raise UsageError(f"{shape.name} is not a decoder (kind: {shape.kind}): serving sizes the KV cache a "
                         "decoder generates from", hint="name a decoder LLM, or size this model with fit-model or estimate",
                         field="model")
    return m


def serving_context(shape: ModelShape, given: int | None = None) -> int:
    """The context a serving question sizes: ``given``, else :data:`DEFAULT_CONTEXT`, at most
    the model's own context."""
    m = shape.transformer
    return given or min(DEFAULT_CONTEXT, m.max_seq_len if m is not None and m.max_seq_len else DEFAULT_CONTEXT)


#: Tensor parallelism stays inside a node: its all-reduces run twice per layer and
#: need NVLink-class bandwidth, and nodes hold at most 8 GPUs (DGX/HGX)
MAX_TP = NODE_GPUS


class ServingCapacity(BaseModel):
    """What one GPU of a tensor-parallel group holds when serving, and the concurrency."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    tp: int
    context_tokens: int
    gpu_memory_bytes: int
    utilization: float
    #: utilization x GPU memory
    budget_bytes: int
    weights_bytes: int
    #: activations of the largest scheduled batch (a prefill chunk), the sampler's logits
    activation_bytes: int
    context_bytes: int
    cuda_graph_bytes: int
    #: what is left for the KV cache (negative: the model does not fit)
    kv_budget_bytes: int
    kv_bytes_per_token: int
    #: KV-cache blocks (vLLM's num_gpu_blocks): each holds BLOCK_TOKENS tokens of one layer
    #: of every KV-cache group
    blocks: int
    #: bytes of one block (BLOCK_TOKENS tokens of one layer in each KV-cache group)
    block_bytes: int
    #: blocks one sequence of ``context_tokens`` may hold (vLLM's admission bound)
    blocks_per_sequence: int
    #: the KV cache's size in tokens as vLLM logs it ("GPU KV cache size: N tokens"):
    #: blocks / groups x BLOCK_TOKENS
    kv_tokens: int
    #: sequences of ``context_tokens`` held at once (0: not even one)
    max_concurrency: int
    kv_cache: str
    #: the engine's limits the memory was sized with (EngineLimits): the prefill chunk, and the
    #: sequences it runs at once at most (a concurrency beyond it waits, whatever memory holds)
    max_batched_tokens: int
    max_num_seqs: int

    @property
    def fits(self) -> bool:
        return self.max_concurrency >= 1

    @property
    def max_running(self) -> int:
        """Sequences the group decodes at once at most: what its memory holds, capped at the
        engine's max_num_seqs (more wait in the queue)."""
        return min(self.max_concurrency, self.max_num_seqs)

    def bytes_for(self, sequences: int) -> int:
        """Memory one GPU needs to hold ``sequences`` sequences of the context: everything but the
        KV cache, and their blocks. At most ``budget_bytes`` exactly when ``sequences`` is at most
        ``max_concurrency``."""
        return self.budget_bytes - self.kv_budget_bytes + sequences * self.blocks_per_sequence * self.block_bytes


def _kv_per_token(m: TransformerShape, cfg: RunConfig, tp: int) -> int:
    p = kv_element_bytes(cfg.kv_cache, cfg.storage.activation_bytes)
    return max(1, kv_cache_bytes(m, 1, 1, p, tp))


class KvCacheGroups(BaseModel):
    """How vLLM's hybrid KV-cache manager groups a model's layers: ``full`` and ``sliding``
    groups of ``group_size`` layer slots each (padded where a type's layers do not divide)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    group_size: int
    full: int
    sliding: int

    @property
    def count(self) -> int:
        return self.full + self.sliding


def kv_cache_groups(m: TransformerShape) -> KvCacheGroups:
    """vLLM V1's grouping (kv_cache_utils.py, _get_kv_cache_groups_uniform_page_size): one
    group when every layer has the same attention; otherwise the group size is the smaller
    type's layer count, or the larger's when it is under 1.5 times the smaller (gpt-oss-20b:
    12 sliding and 12 full layers, two groups of 12), and each type takes ceil(its layers /
    group size) groups (Gemma 3 1B: 22 sliding and 4 full layers, 6 + 1 groups of 4)."""
    layers = m.layers + m.decoder_layers
    sliding = min(m.sliding_layers, layers)
    full = layers - sliding
    if not sliding:
        return KvCacheGroups(group_size=layers, full=1, sliding=0)
    if not full:
        return KvCacheGroups(group_size=layers, full=0, sliding=1)
    small, large = min(full, sliding), max(full, sliding)
    size = large if large < 1.5 * small else small
    return KvCacheGroups(group_size=size, full=-(-full // size), sliding=-(-sliding // size))


def blocks_per_request(m: TransformerShape, context: int, max_batched_tokens: int = MAX_BATCHED_TOKENS) -> int:
    """Blocks one request of ``context`` tokens may hold, over every KV-cache group (vLLM's
    admission bound, the denominator of its "Maximum concurrency")."""
    groups = kv_cache_groups(m)
    full = -(-context // BLOCK_TOKENS)
    if not groups.sliding:
        return groups.full * full
    assert m.sliding_window is not None
    window_tokens = min(m.sliding_window - 1 + max_batched_tokens, context)
    return groups.full * full + groups.sliding * (-(-window_tokens // BLOCK_TOKENS) + 1)


def serving_capacity(
    shape: ModelShape, cfg: RunConfig, gpu_memory_bytes: int, context: int, *, gpu_name: str = "",
    utilization: float = DEFAULT_UTILIZATION, limits: EngineLimits | None = None,
    cuda_graph_bytes: int = CUDA_GRAPH_BYTES,
) -> ServingCapacity:
    """The concurrency one tensor-parallel group holds for sequences of ``context``
    tokens; ``cfg.gpus`` with ``cfg.strategy == "tp"`` is the group's size. ``limits``: the
    engine's scheduler limits, by default vLLM's for the GPU (:func:`engine_limits`, which reads
    ``gpu_name``)."""
    limits = limits or engine_limits(gpu_memory_bytes, gpu_name)
    max_batched_tokens = limits.max_batched_tokens
    m = served_decoder(shape)
    if not 0 < utilization <= 1:
        raise UsageError(f"GPU memory utilization {utilization:g} must be in (0, 1]", field="gpu_memory_utilization")
    if context < 1:
        raise UsageError("the context must be at least 1 token", field="seq_len")
    cfg = cfg.model_copy(update={"mode": "inference"})
    check_layout(shape, cfg)
    tp = Parallelism.of(cfg.strategy, cfg.gpus).tp
    # the engine profiles one prefill chunk; its weights and working activations
    chunk = cfg.model_copy(update={"batch": 1, "seq_len": min(max_batched_tokens, max(context, 1))})
    mem = estimate_memory(shape, chunk)
    # fp32 logits of the sequences sampled together, on every rank (vLLM's dummy sampler run:
    # min(max_num_seqs, max_num_batched_tokens) of them)
    sampler = 4 * m.vocab * min(limits.max_num_seqs, max_batched_tokens)
    activations = mem.activations_bytes + mem.transient_bytes + sampler
    context_bytes = DEFAULT_CONTEXT_BYTES if cfg.context_bytes is None else cfg.context_bytes
    budget = int(gpu_memory_bytes * utilization)
    kv_budget = budget - mem.weights_bytes - activations - context_bytes - cuda_graph_bytes
    kv_budget -= TP_BUFFER_BYTES if tp > 1 else 0
    per_token = _kv_per_token(m, cfg, tp)
    groups = kv_cache_groups(m)
    layers = m.layers + m.decoder_layers
    # a block holds BLOCK_TOKENS tokens of group_size layers (of one group each); with every
    # layer alike that is all of them
    block_bytes = BLOCK_TOKENS * per_token * groups.group_size // layers
    blocks = max(0, kv_budget // block_bytes)
    per_sequence = blocks_per_request(m, context, max_batched_tokens)
    concurrency = blocks // per_sequence
    return ServingCapacity(
        tp=tp, context_tokens=context, gpu_memory_bytes=gpu_memory_bytes, utilization=utilization,
        budget_bytes=budget, weights_bytes=mem.weights_bytes, activation_bytes=activations,
        context_bytes=context_bytes, cuda_graph_bytes=cuda_graph_bytes, kv_budget_bytes=kv_budget,
        kv_bytes_per_token=per_token, blocks=blocks, block_bytes=block_bytes, blocks_per_sequence=per_sequence,
        kv_tokens=blocks // groups.count * BLOCK_TOKENS,
        max_concurrency=concurrency, kv_cache=cfg.kv_cache, max_batched_tokens=max_batched_tokens,
        max_num_seqs=limits.max_num_seqs,
    )


def group_capacities(
    shape: ModelShape, cfg: RunConfig, gpu_memory_bytes: int, context: int, *, gpu_name: str = "",
    sizes: tuple[int, ...] | None = None, utilization: float = DEFAULT_UTILIZATION,
) -> dict[int, ServingCapacity]:
    """:func:`serving_capacity` for each tensor-parallel group size in ``sizes`` (default:
    every size the model allows in a node, :func:`tp_sizes`)."""
    m = served_decoder(shape)
    return {t: serving_capacity(shape, cfg.model_copy(update=tensor_parallel(t)), gpu_memory_bytes, context,
                                gpu_name=gpu_name, utilization=utilization)
            for t in (sizes if sizes is not None else tp_sizes(m, MAX_TP))}


class ServingPlan(BaseModel):
    """The fewest GPUs (one tensor-parallel group) that serve ``users`` sequences at once."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    users: int = Field(ge=1)
    #: None: no tensor-parallel size the model allows reaches the users
    gpus: int | None
    capacity: ServingCapacity | None
    #: every tensor-parallel size tried, smallest first
    tried: tuple[ServingCapacity, ...]


def tp_sizes(m: TransformerShape, limit: int = 64) -> tuple[int, ...]:
    """Tensor-parallel sizes a model allows (:meth:`TransformerShape.allows_tp`)."""
    return tuple(n for n in range(1, min(m.heads, limit) + 1) if m.allows_tp(n))


def fewest_gpus_to_serve(
    shape: ModelShape, cfg: RunConfig, gpu_memory_bytes: int, context: int, users: int, *,
    utilization: float = DEFAULT_UTILIZATION, max_gpus: int = MAX_TP, gpu_name: str = "",
) -> ServingPlan:
    """The smallest tensor-parallel group, up to ``max_gpus``, whose KV cache holds ``users``
    sequences of ``context``."""
    m = served_decoder(shape)
    tried = []
    for tp in tp_sizes(m, max_gpus):
        run = cfg.model_copy(update=tensor_parallel(tp))
        cap = serving_capacity(shape, run, gpu_memory_bytes, context, utilization=utilization, gpu_name=gpu_name)
        tried.append(cap)
        if cap.max_concurrency >= users:
            return ServingPlan(users=users, gpus=tp, capacity=cap, tried=tuple(tried))
    return ServingPlan(users=users, gpus=None, capacity=None, tried=tuple(tried))


__all__ = [
    "BLOCK_TOKENS",
    "DEFAULT_CONTEXT",
    "DEFAULT_UTILIZATION",
    "EngineLimits",
    "engine_limits",
    "group_capacities",
    "KvCacheGroups",
    "ServingCapacity",
    "ServingPlan",
    "blocks_per_request",
    "fewest_gpus_to_serve",
    "kv_cache_groups",
    "serving_capacity",
    "serving_context",
    "tp_sizes",
]
