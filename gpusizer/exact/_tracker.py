"""Counting live tensor memory: a dispatch mode over every ATen op, and the CPU
code paths changed to behave as CUDA's do. Needs torch."""

from __future__ import annotations

import weakref
from collections import Counter, defaultdict
from typing import Any

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensor
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map


class Info:
    """One live storage: its size and what holds it (weight, buffer, input, grad,
    optimizer, kv_cache or other)."""

    __slots__ = ("nbytes", "kind", "dtype", "weight_copy")

    def __init__(self, nbytes: int, kind: str, dtype: torch.dtype) -> None:
        self.nbytes = nbytes
        self.kind = kind
        #: the dtype of the first tensor seen on the storage
        self.dtype = dtype
        #: a _to_copy of a weight (autocast's cached 16-bit copies)
        self.weight_copy = False


class LiveTensorTracker(TorchDispatchMode):  # type: ignore[misc]
    """The sum of the bytes of all distinct live tensor storages, and its peak.

    Every op's outputs are registered by storage, so views are counted once; a
    ``weakref.finalize`` on the storage subtracts it when PyTorch frees it. The
    peak is checked after every op, so an op's output and its still-referenced
    inputs count together, as on a GPU.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, Info] = {}
        self.current = 0
        self.peak = 0
        self.peak_infos: list[Info] = []
        self.peak_phase = "setup"
        self.phase = "setup"
        self.ops = 0
        #: the highest live bytes seen in each phase
        self.phase_peaks: dict[str, int] = defaultdict(int)

    def _free(self, key: int, info: Info) -> None:
        if self.live.get(key) is info:
            del self.live[key]
            self.current -= info.nbytes

    def register(self, t: object, kind: str = "other") -> Info | None:
        if not isinstance(t, torch.Tensor) or t.is_sparse or t.is_nested:
            return None
        st = t.untyped_storage()
        key = id(st)
        nbytes = st.nbytes()
        info = self.live.get(key)
        if info is not None:
            if info.nbytes != nbytes:  # resized in place
                self.current += nbytes - info.nbytes
                info.nbytes = nbytes
                self._update_peak()
            if kind != "other":
                info.kind = kind
            return info
        info = Info(nbytes, kind, t.dtype)
        self.live[key] = info
        self.current += nbytes
        weakref.finalize(st, self._free, key, info)
        self._update_peak()
        return info

    def register_model(self, model: Any, inputs: dict[str, Any]) -> None:
        """Register a model's parameters and buffers, and its input batch, before a step."""
        for p in model.parameters():
            self.register(p, "weight")
        for b in model.buffers():
            self.register(b, "buffer")
        for t in inputs.values():
            self.register(t, "input")

    def classify(self, t: object, kind: str) -> None:
        """Mark a live tensor as ``kind`` (its Info is shared with the peak's snapshot)."""
        self.register(t, kind)

    def enter(self, phase: str) -> None:
        """Start ``phase``: what is live now counts toward its peak."""
        self.phase = phase
        self._update_peak()

    def _update_peak(self) -> None:
        if self.current > self.phase_peaks[self.phase]:
            self.phase_peaks[self.phase] = self.current
        if self.current > self.peak:
            self.peak = self.current
            self.peak_phase = self.phase
            self.peak_infos = list(self.live.values())

    def reset_peak(self) -> None:
        self.peak = self.current
        self.peak_phase = self.phase
        self.peak_infos = list(self.live.values())
        self.ops = 0
        self.phase_peaks = defaultdict(int)

    def snapshot(self) -> list[Info]:
        return list(self.live.values())

    def bytes_by_kind(self, infos: list[Info] | None = None) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for i in self.live.values() if infos is None else infos:
            out[i.kind] += i.nbytes
        return dict(out)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        self.ops += 1
        copy_of_weight = False
        if func is torch.ops.aten._to_copy.default and isinstance(args[0], torch.Tensor):
            src = self.live.get(id(args[0].untyped_storage()))
            copy_of_weight = src is not None and src.kind == "weight"
        for t in tree_flatten(out)[0]:
            info = self.register(t)
            if info is not None and copy_of_weight:
                info.weight_copy = True
        return out


def storage_bytes(tensors: Any) -> int:
    """Bytes of the distinct storages behind ``tensors``."""
    seen: dict[int, int] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor):
            st = t.untyped_storage()
            seen[id(st)] = st.nbytes()
    return sum(seen.values())


_LOW = (torch.bfloat16, torch.float16)


def _autocast_fp32_funcs() -> tuple[set[Any], set[Any]]:
    """CUDA autocast's float32 policies (aten/src/ATen/autocast_mode.h) for the ops
    these models use: ``cast`` ops get float32 copies of 16-bit inputs, ``opt_dtype``
    ops (softmax, log_softmax, sum, cumsum) run with ``dtype=torch.float32``."""
    cast: set[Any] = {F.layer_norm, F.group_norm, torch.Tensor.__pow__}
    for n in ("pow", "exp", "log", "rsqrt", "reciprocal"):
        for owner in (torch, torch.Tensor):
            cast.add(getattr(owner, n))
    opt_dtype: set[Any] = {F.softmax, F.log_softmax}
    for n in ("softmax", "log_softmax", "sum", "cumsum"):
        for owner in (torch, torch.Tensor):
            opt_dtype.add(getattr(owner, n))
    return cast, opt_dtype


#: the grouped GEMM entry points MoE layers call (transformers 5's experts)
_GROUPED_MM: tuple[Any, ...] = tuple(f for f in (getattr(F, "grouped_mm", None), getattr(torch, "_grouped_mm", None))
                                     if f is not None)


class GpuLike(TorchFunctionMode):  # type: ignore[misc]
    """Make the CPU keep what CUDA keeps where the two differ (docs/method.md):

    * dropout keeps a 1-byte mask (CUDA's fused ``native_dropout``), not a float noise tensor;
    * SDPA with dropout stays on the fused path (CUDA's kernels regenerate the mask);
    * SDPA with a mask, or with values narrower than keys, runs CUDA's memory-efficient
      kernel, not the CPU's math path;
    * under autocast, the ops CUDA runs in float32 get float32 inputs.
    """

    def __init__(self) -> None:
        super().__init__()
        self.cast_fp32, self.opt_dtype_fp32 = _autocast_fp32_funcs()
        #: how often each rerouting applied, for reports
        self.counts: Counter[str] = Counter()

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        if func is F.dropout:
            p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
            training = kwargs.get("training", args[2] if len(args) > 2 else True)
            if training and p > 0:
                self.counts["dropout->native_dropout"] += 1
                return torch.native_dropout(args[0], p, True)[0]
            return args[0]
        if func is F.scaled_dot_product_attention:
            if len(args) > 4 and args[4]:
                self.counts["sdpa dropout_p->0"] += 1
                args = (*args[:4], 0.0, *args[5:])
            elif kwargs.get("dropout_p"):
                self.counts["sdpa dropout_p->0"] += 1
                kwargs["dropout_p"] = 0.0
            return self._sdpa(args, kwargs)
        if func in _GROUPED_MM and self._grouped_mm_fallback(args, kwargs):
            # CUDA's grouped GEMM takes other dtypes than bf16 through its own loop of matmuls
            # (aten's _grouped_mm_fallback); the fake kernel checks for bf16 only. transformers'
            # fallback op computes the same (S, N) output and saves the same inputs.
            self.counts["grouped_mm (not bf16)->mm per expert"] += 1
            offs = args[2] if len(args) > 2 else kwargs["offs"]
            return torch.ops.transformers.grouped_mm_fallback(args[0], args[1], offs=offs)
        if torch.is_autocast_enabled("cpu"):
            args, kwargs = self._fp32_policy(func, args, kwargs)
        return func(*args, **kwargs)

    def kernel_notes(self) -> list[str]:
        """Notes on the kernels chosen as CUDA would choose them, where a CPU would not."""
        notes = []
        if n := self.counts["sdpa->memory-efficient kernel"]:
            notes.append(f"attention ran on SDPA's memory-efficient kernel, as CUDA runs it with a mask or values "
                         f"narrower than keys ({n} calls)")
        if n := self.counts["grouped_mm (not bf16)->mm per expert"]:
            notes.append(f"experts' grouped GEMM outside bf16 ran one matmul per expert, as CUDA runs it ({n} calls)")
        return notes

    @staticmethod
    def _grouped_mm_fallback(args: Any, kwargs: dict[str, Any]) -> bool:
        """Whether a grouped GEMM call needs the per-expert path: not bf16, no bias or output
        dtype, and transformers' fallback op registered (its MoE module is loaded)."""
        a, b = args[0], args[1]
        offs = args[2] if len(args) > 2 else kwargs.get("offs")
        return (a.dtype != torch.bfloat16 or b.dtype != torch.bfloat16) and len(args) <= 3 \
            and kwargs.get("bias") is None and kwargs.get("out_dtype") is None and offs is not None \
            and hasattr(torch.ops.transformers, "grouped_mm_fallback")

    def _sdpa(self, args: Any, kwargs: dict[str, Any]) -> Any:
        """SDPA as CUDA runs it. FlashAttention takes no mask and one head width for
        queries, keys and values; otherwise CUDA picks the memory-efficient kernel, which
        keeps its output and an fp32 log-sum-exp, never the probabilities. A CPU would run
        the math path (the s x s probabilities, upcast to fp32) for a mask (T5's position
        bias) or a value width unlike the keys' (latent attention), so those go to the
        memory-efficient kernel by name."""
        names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
        call = {**dict(zip(names, args, strict=False)), **kwargs}
        q, k, v, mask = call["query"], call["key"], call["value"], call.get("attn_mask")
        if (mask is None and q.shape[-1] == v.shape[-1]) or not isinstance(q, FakeTensor):
            # (real tensors, in the check against MemTracker, keep the CPU's own kernels:
            # the memory-efficient one exists on CUDA only)
            return F.scaled_dot_product_attention(*args, **kwargs)
        if call.get("enable_gqa") and k.shape[-3] != q.shape[-3]:
            groups = q.shape[-3] // k.shape[-3]  # the kernel takes every head's keys: repeated, as CUDA does
            k, v = k.repeat_interleave(groups, dim=-3), v.repeat_interleave(groups, dim=-3)
        # CUDA's autocast runs attention in its 16-bit type, the mask included
        dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else q.dtype
        q, k, v = (t.to(dtype) for t in (q, k, v))
        if mask is not None and mask.dtype == torch.bool:
            mask = torch.where(mask, torch.zeros((), dtype=dtype), torch.full((), float("-inf"), dtype=dtype))
        elif mask is not None:
            mask = mask.to(dtype)
        self.counts["sdpa->memory-efficient kernel"] += 1
        grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (q, k, v, mask))
        return torch.ops.aten._scaled_dot_product_efficient_attention(
            q, k, v, mask, grad, call.get("dropout_p", 0.0), call.get("is_causal", False), scale=call.get("scale"))[0]

    def _fp32_policy(self, func: Any, args: Any, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        def low(t: object) -> bool:
            return isinstance(t, torch.Tensor) and t.dtype in _LOW

        def up(t: Any) -> Any:
            return t.float() if low(t) else t

        name = getattr(func, "__name__", str(func))
        if func in self.cast_fp32:
            if func in (F.layer_norm, F.group_norm):
                if low(args[0]):
                    self.counts[f"{name}: input cast to fp32"] += 1
                    args = (up(args[0]), *args[1:])
            elif any(low(t) for t in tree_flatten((args, kwargs))[0]):
                self.counts[f"{name}: inputs cast to fp32"] += 1
                args, kwargs = tree_map(up, (args, kwargs))
        elif func in self.opt_dtype_fp32 and kwargs.get("dtype") is None and low(args[0]):
            self.counts[f"{name}: dtype=float32"] += 1
            kwargs["dtype"] = torch.float32
        return args, kwargs


def run_backward(loss: torch.Tensor) -> None:
    """``loss.backward()`` without passing through ``__torch_function__``: a function
    mode is off while it handles a call, so ``loss.backward()`` would run the whole
    backward (and checkpointing's recomputation) without GpuLike."""
    from torch.autograd.graph import _engine_run_backward

    _engine_run_backward((loss,), (torch.ones_like(loss),), False, False, (),
                         allow_unreachable=True, accumulate_grad=True)
