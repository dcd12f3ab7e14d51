"""Tracing one training or inference step under fake tensors. Needs torch."""

from __future__ import annotations

import contextlib
import gc
import inspect
import logging
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from gpusizer.domain.run import RunConfig
from gpusizer.errors import GpusizerError, TraceError, UsageError
from gpusizer.exact._build import (
    build_hf_model,
    build_torch_model,
    default_dtype,
    make_inputs,
    masks_as_for_real_tensors,
    transformers_module,
)
from gpusizer.exact._tracker import GpuLike, LiveTensorTracker, run_backward, storage_bytes
from gpusizer.exact.source import ANALYTIC, ExactTrace, ModelSource, check_traceable

Progress = Callable[[str], None]


def storage_dtype(cfg: RunConfig) -> torch.dtype:
    """The dtype the model's weights are stored in: the run's storage precision (AMP keeps
    fp32 weights), for a LoRA run's frozen base too, as the analytic model counts it."""
    name = cfg.precision_storage.torch_dtype
    if name is None:
        raise UsageError(f"exact mode cannot store weights as {cfg.precision}", field="precision")
    return getattr(torch, name)


#: torch.optim keyword arguments for each way of stepping (choices.OptimizerImpl)
_IMPL_KWARGS: dict[str, dict[str, bool]] = {"fused": {"fused": True}, "foreach": {"foreach": True},
                                            "per-tensor": {"foreach": False}}


def _optimizer(name: str, impl: str, params: list[nn.Parameter]) -> torch.optim.Optimizer:
    """The optimizer, stepping as the run says: fused, foreach (multi-tensor, which holds a
    temporary per parameter during the step) or a loop over parameters."""
    kw = _IMPL_KWARGS[impl]
    if name in ("sgd", "momentum"):
        # fused SGD has no fake kernel; its multi-tensor form updates in place just the same
        kw = _IMPL_KWARGS["foreach"] if impl == "fused" else kw
        return torch.optim.SGD(params, lr=0.1, momentum=0.9 if name == "momentum" else 0.0, **kw)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-4, **kw)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, **kw)
    raise UsageError(f"exact mode cannot run the {name} optimizer", field="optimizer")


def _loss(model: nn.Module, inputs: dict[str, Any], source: ModelSource) -> torch.Tensor:
    """The step's loss: the model's own for Hugging Face models (given labels), else
    cross-entropy on a classifier's logits, else the sum of the output."""
    if source.kind != "torch-model":
        return model(**inputs, use_cache=False).loss if _takes(model, "use_cache") else model(**inputs).loss
    out = model(inputs["x"])
    out = getattr(out, "logits", out)
    if isinstance(out, (tuple, list)):
        out = out[0]
    if out.dim() == 2:
        target = torch.randint(0, out.shape[1], (out.shape[0],))
        return F.cross_entropy(out, target)
    return out.float().sum()


def _takes(model: nn.Module, name: str) -> bool:
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _takes_named(model: nn.Module, name: str) -> bool:
    try:
        return name in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def _build(source: ModelSource, cfg: RunConfig) -> tuple[nn.Module, list[str]]:
    dtype = storage_dtype(cfg)
    if source.kind == "torch-model":
        if cfg.flash_attention is False:
            notes = ["the attention setting applies to Hugging Face models; the torch model runs its own attention code"]
        else:
            notes = []
        return build_torch_model(source, dtype), notes
    return build_hf_model(source, "sdpa" if cfg.flash_attention else "eager", dtype)


def _add_adapters(model: nn.Module, cfg: RunConfig) -> tuple[nn.Module, str]:
    try:
        import peft
    except ImportError:
        from gpusizer.errors import MissingExtraError

        raise MissingExtraError("exact mode with LoRA needs peft", hint="pip install 'gpusizer[torch]'") from None
    assert cfg.adapter is not None
    names = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj", "up": "up_proj",
             "down": "down_proj", "head": "lm_head"}
    targets: Any = "all-linear" if cfg.adapter.targets == ("all-linear",) else sorted(
        names[m] for m in cfg.adapter.modules)
    lora = peft.LoraConfig(r=cfg.adapter.rank, lora_alpha=2 * cfg.adapter.rank, target_modules=targets,
                           lora_dropout=0.0)
    try:
        # peft casts adapters to fp32 in place (module._apply), which fake parameters refuse;
        # the adapters are given new fp32 parameters below instead, as that cast leaves them
        # the adapters are created in the base's dtype on the base's (fake) device, so peft's
        # moves of each adapter beside its base layer change nothing; fake parameters refuse
        # even a move that changes nothing (Module._apply swaps them), so .to() is skipped
        to = nn.Module.to
        nn.Module.to = lambda self, *args, **kwargs: self
        try:
            with default_dtype(storage_dtype(cfg)):
                wrapped = peft.get_peft_model(model, lora, autocast_adapter_dtype=False)
        finally:
            nn.Module.to = to
    except Exception as exc:
        raise TraceError(f"peft could not add LoRA adapters: {str(exc).splitlines()[0][:200]}") from None
    if cfg.adapter.bytes_per_param == 4:
        for module in wrapped.modules():
            weight = getattr(module, "weight", None)
            if isinstance(weight, nn.Parameter) and weight.requires_grad and weight.dtype != torch.float32:
                module.weight = nn.Parameter(weight.detach().to(torch.float32))
    return wrapped, peft.__version__


def trace_memory(source: ModelSource, cfg: RunConfig, progress: Progress | None = None, *,
                 fake: bool = True) -> ExactTrace:
    """Build ``source`` and count the live tensors of one step of ``cfg`` (the second
    step when training, so that optimizer state exists). ``fake=False`` runs the same
    step with real tensors, for checking the count on small models."""
    check_traceable(cfg)
    from torch._subclasses.fake_tensor import FakeTensorMode

    say = progress or (lambda _phase: None)
    started = time.perf_counter()
    torch.manual_seed(0)
    versions = {"torch": torch.__version__}
    if source.kind != "torch-model":
        versions["transformers"] = transformers_module().__version__
    # torch logs a traceback for an op its fake kernel rejects; the TraceError below says it in a line
    logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)
    try:
        # no fallback kernels: an op without a fake kernel fails rather than running for real
        # on zero-filled tensors of the model's full size
        mode = FakeTensorMode(allow_non_fake_inputs=False, allow_fallback_kernels=False) if fake \
            else contextlib.nullcontext()
        with mode, masks_as_for_real_tensors(), warnings.catch_warnings():
            # deprecation and tracing warnings of the libraries are not the user's business here
            warnings.simplefilter("ignore")
            say("building the model")
            model, notes = _build(source, cfg)
            if cfg.adapter is not None:
                model, versions["peft"] = _add_adapters(model, cfg)
            run = _train if cfg.training else _infer
            fields = run(model, source, cfg, say)
    except GpusizerError:
        raise
    except (RuntimeError, NotImplementedError, TypeError, ValueError, AttributeError, IndexError) as exc:
        # an op fake tensors cannot run (data-dependent control flow, a custom kernel)
        hint = "a model whose code needs real values (data-dependent control flow) cannot be traced" \
            if source.kind == "torch-model" else ANALYTIC
        raise TraceError(f"the step could not be traced with fake tensors: {str(exc).strip().splitlines()[0][:200]}",
                         hint=hint) from None
    finally:
        gc.collect()
    return ExactTrace(versions=versions, seconds=round(time.perf_counter() - started, 2),
                      notes=(*notes, *fields.pop("notes", ())), **fields)


def _train(model: nn.Module, source: ModelSource, cfg: RunConfig, say: Progress) -> dict[str, Any]:
    model.train()
    notes: list[str] = []
    if cfg.checkpointing:
        if not hasattr(model, "gradient_checkpointing_enable") and not hasattr(model, "activation_checkpointing_enable"):
            raise UsageError("exact mode checkpoints Hugging Face models only (gradient_checkpointing_enable)",
                             field="checkpointing")
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable()
    inputs = make_inputs(model, source, cfg, training=True)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = _optimizer(cfg.optimizer, cfg.optimizer_impl, params)
    tracker = LiveTensorTracker()
    tracker.register_model(model, inputs)
    autocast: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if cfg.precision_storage.autocast or cfg.adapter is not None:
        autocast = torch.autocast("cpu", dtype=torch.bfloat16)
    saved_at_forward_end: dict[str, int] = {}
    gpu_like = GpuLike()
    with gpu_like, tracker:
        for step in (1, 2):
            say(f"step {step} of 2: forward, backward, optimizer")
            gc.collect()
            if step == 2:
                tracker.enter("step-start")
                tracker.reset_peak()
            # gradient accumulation keeps the gradients between micro-batches
            opt.zero_grad(set_to_none=not cfg.persistent_grads)
            tracker.enter("forward")
            with autocast:
                loss = _loss(model, inputs, source)
            if step == 2:
                saved_at_forward_end = tracker.bytes_by_kind()
            tracker.enter("backward")
            run_backward(loss)
            del loss
            tracker.enter("optimizer")
            opt.step()
            tracker.enter("idle")
    for p in model.parameters():
        if p.grad is not None:
            tracker.classify(p.grad, "grad")
    for state in opt.state.values():
        for v in state.values():
            tracker.classify(v, "optimizer")
    peak = tracker.bytes_by_kind(tracker.peak_infos)
    phase = tracker.peak_phase if tracker.peak_phase in ("forward", "backward", "optimizer") else "backward"
    grads = storage_bytes(p.grad for p in model.parameters() if p.grad is not None)
    fields = {
        "model_class": type(model).__name__,
        "params": sum(p.numel() for p in model.parameters()),
        "trainable_params": sum(p.numel() for p in params),
        "weights_bytes": storage_bytes(model.parameters()) + storage_bytes(model.buffers()),
        "gradients_bytes": grads,
        "optimizer_bytes": storage_bytes(v for s in opt.state.values() for v in s.values()
                                         if isinstance(v, torch.Tensor)),
        "activations_bytes": saved_at_forward_end.get("other", 0) + saved_at_forward_end.get("input", 0),
        "kv_cache_bytes": 0,
        "tensor_peak_bytes": tracker.peak,
        "peak_phase": phase,
        "peak_bytes_by_kind": _kinds(peak),
        "ops": tracker.ops,
        "phase_peak_bytes": {k: v for k, v in tracker.phase_peaks.items() if k in ("forward", "backward", "optimizer")},
        "notes": [*notes, *gpu_like.kernel_notes()],
    }
    return fields


def _kinds(peak: dict[str, int]) -> dict[str, int]:
    return {
        "weights": peak.get("weight", 0) + peak.get("buffer", 0),
        "gradients": peak.get("grad", 0),
        "optimizer": peak.get("optimizer", 0),
        "kv_cache": peak.get("kv_cache", 0),
        "other": peak.get("other", 0) + peak.get("input", 0),
    }


def _cache_tensors(cache: Any) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    for layer in getattr(cache, "layers", ()):
        for name in ("keys", "values", "compressed_kv", "k_pe"):
            t = getattr(layer, name, None)
            if isinstance(t, torch.Tensor):
                out.append(t)
    return out


def _infer(model: nn.Module, source: ModelSource, cfg: RunConfig, say: Progress) -> dict[str, Any]:
    model.eval()
    inputs = make_inputs(model, source, cfg, training=False)
    tracker = LiveTensorTracker()
    tracker.register_model(model, inputs)
    notes: list[str] = []
    cache = None
    kwargs: dict[str, Any] = {}
    if source.kind != "torch-model" and getattr(model, "can_generate", lambda: False)() \
            and not model.config.is_encoder_decoder and _takes(model, "past_key_values"):
        tf = transformers_module()
        cache = tf.DynamicCache(config=model.config)
        # transformers 5.x renames past_key_values to cache
        kwargs = {"cache" if _takes_named(model, "cache") else "past_key_values": cache, "use_cache": True}
        if _takes(model, "logits_to_keep"):
            kwargs["logits_to_keep"] = 1 if cfg.logits == "last" else 0
        elif cfg.logits == "last":
            notes.append(f"{type(model).__name__} computes every position's logits (no logits_to_keep)")
    say("forward pass")
    autocast: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if cfg.precision_storage.autocast:
        autocast = torch.autocast("cpu", dtype=torch.bfloat16)
    gpu_like = GpuLike()
    with gpu_like, tracker, torch.no_grad(), autocast:
        tracker.enter("inference")
        tracker.reset_peak()
        out = model(**inputs, **kwargs) if source.kind != "torch-model" else model(inputs["x"])
        kv = _cache_tensors(cache) if cache is not None else []
        for t in kv:
            tracker.classify(t, "kv_cache")  # shared with the peak's snapshot
        del out
    peak = _kinds(tracker.bytes_by_kind(tracker.peak_infos))
    return {
        "model_class": type(model).__name__,
        "params": sum(p.numel() for p in model.parameters()),
        "trainable_params": 0,
        "weights_bytes": storage_bytes(model.parameters()) + storage_bytes(model.buffers()),
        "gradients_bytes": 0,
        "optimizer_bytes": 0,
        "activations_bytes": peak["other"],
        "kv_cache_bytes": storage_bytes(kv),
        "tensor_peak_bytes": tracker.peak,
        "peak_phase": "inference",
        "peak_bytes_by_kind": peak,
        "ops": tracker.ops,
        "phase_peak_bytes": {"inference": tracker.peak},
        "notes": [*notes, *gpu_like.kernel_notes()],
    }
