"""Building the model exact mode traces, and one batch of inputs for it. Needs torch."""

from __future__ import annotations

import contextlib
import importlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from gpusizer.domain.run import RunConfig
from gpusizer.errors import MissingExtraError, TraceError, UsageError
from gpusizer.exact.source import ModelSource, parse_callable

#: the image side when a vision model's config and --image-size are both silent
DEFAULT_IMAGE_SIZE = 224
#: the sequence length when --seq-len is not given: the model's context, capped as the analytic path does
DEFAULT_SEQ_CAP = 2048
#: Whisper-style audio models take this many mel frames (30 s of audio)
AUDIO_FRAMES = 3000

_INSTALL = "pip install 'gpusizer[torch]'"


def import_torchvision() -> Any:
    """torchvision, or None. When its compiled ops do not load (a torchvision wheel
    built for another torch), skip registering their fake kernels so that the Python
    model definitions, all exact mode uses, still import."""
    import sys

    try:
        import torchvision
    except ImportError:
        return None
    except RuntimeError:
        for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
            del sys.modules[name]
        import torch.library as tl

        original = tl.register_fake
        tl.register_fake = lambda *a, **k: (lambda fn: fn)
        try:
            import torchvision
        finally:
            tl.register_fake = original
    return torchvision


def transformers_module() -> Any:
    """transformers, quiet, with its fake-tensor special cases turned off (see below)."""
    import_torchvision()  # transformers imports it when present
    try:
        import transformers as tf
    except ImportError:
        raise MissingExtraError("exact mode for Hugging Face models needs transformers", hint=_INSTALL) from None
    tf.logging.set_verbosity_error()
    _decide_masks_as_for_real_tensors(tf)
    return tf


#: whether a trace is running: the masking patches below act only then, so transformers
#: behaves as released for anything else in the process (torch.compile, a user's own tracing)
_TRACING = [False]


@contextlib.contextmanager
def masks_as_for_real_tensors() -> Iterator[None]:
    """Turn on the masking patches of :func:`_decide_masks_as_for_real_tensors` for a trace."""
    previous = _TRACING[0]
    _TRACING[0] = True
    try:
        yield
    finally:
        _TRACING[0] = previous


def _decide_masks_as_for_real_tensors(tf: Any) -> None:
    """transformers treats fake tensors as "tracing" and then builds the full causal
    mask for SDPA instead of passing is_causal=True, as it does for real tensors. With
    no padding (our inputs have none) the choice depends on shapes only, so make it as
    for real tensors. It cannot read fake position ids to rule out packed sequences
    either; ours are plain ranges. Both patches act only inside
    :func:`masks_as_for_real_tensors`."""
    mu = getattr(tf, "masking_utils", None)
    if mu is None or getattr(mu, "_gpusizer_patched", False):
        return
    from torch._subclasses.fake_tensor import FakeTensor

    if hasattr(mu, "_ignore_causal_mask_sdpa") and hasattr(mu, "is_tracing"):
        original = mu._ignore_causal_mask_sdpa

        def ignore_causal_mask_sdpa(*args: Any, **kwargs: Any) -> Any:
            if not _TRACING[0]:
                return original(*args, **kwargs)
            saved = mu.is_tracing
            mu.is_tracing = lambda *a, **k: False
            try:
                return original(*args, **kwargs)
            finally:
                mu.is_tracing = saved

        mu._ignore_causal_mask_sdpa = ignore_causal_mask_sdpa
    if hasattr(mu, "find_packed_sequence_indices"):
        find_packed = mu.find_packed_sequence_indices
        mu.find_packed_sequence_indices = lambda pos: None if _TRACING[0] and isinstance(pos, FakeTensor) \
            else find_packed(pos)
    mu._gpusizer_patched = True


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def hf_config_object(source: ModelSource) -> tuple[Any, list[str]]:
    """The transformers config for a config.json, and notes on what was changed."""
    tf = transformers_module()
    path = Path(source.path or source.ref)
    notes: list[str] = []
    if source.trust_remote_code:
        try:
            return tf.AutoConfig.from_pretrained(str(path.parent), trust_remote_code=True), notes
        except Exception as exc:
            raise TraceError(f"{path}: transformers could not read the config: {_first_line(exc)}") from None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: cannot read the config: {_first_line(exc)}", field="hf_config") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("model_type"), str):
        raise UsageError(f"{path}: a Hugging Face config.json has a string model_type", field="hf_config")
    if doc.pop("quantization_config", None) is not None:
        notes.append("the checkpoint's quantization_config is ignored: weights are traced in the run's precision")
    if "auto_map" in doc:
        doc.pop("auto_map")
        notes.append("the repository's own modelling code (auto_map) is not run; "
                     f"transformers' {doc['model_type']} classes are used")
    model_type = doc.pop("model_type")
    try:
        return tf.AutoConfig.for_model(model_type, **doc), notes
    except Exception as exc:
        raise TraceError(f"transformers {tf.__version__} does not know model_type {model_type!r}: {_first_line(exc)}",
                         hint="upgrade transformers, or trust the repository's own code (trust_remote_code)") from None


#: Auto classes tried in order when a config names no architecture transformers has
_AUTO_CLASSES = ("AutoModelForCausalLM", "AutoModelForSeq2SeqLM", "AutoModelForSpeechSeq2Seq",
                 "AutoModelForImageClassification", "AutoModelForMaskedLM", "AutoModel")
#: an encoder-decoder config (Whisper, T5, BART) builds the whole model, not its decoder alone
_SEQ2SEQ_FIRST = ("AutoModelForSeq2SeqLM", "AutoModelForSpeechSeq2Seq",
                  *(a for a in _AUTO_CLASSES if "Seq2Seq" not in a))


def build_hf_model(source: ModelSource, attention: str, dtype: torch.dtype) -> tuple[nn.Module, list[str]]:
    tf = transformers_module()
    config, notes = hf_config_object(source)
    names = [a for a in (getattr(config, "architectures", None) or []) if hasattr(tf, a)]
    kwargs: dict[str, Any] = {"attn_implementation": attention}
    if source.trust_remote_code:
        kwargs["trust_remote_code"] = True
    errors: list[str] = []
    with default_dtype(dtype), skipped_init():
        for name in names[:1] or (_SEQ2SEQ_FIRST if getattr(config, "is_encoder_decoder", False) else _AUTO_CLASSES):
            cls = getattr(tf, name)
            if attention == "sdpa" and getattr(cls, "_supports_sdpa", True) is False:
                # (Gemma 2 keeps eager attention for its logit softcapping)
                kwargs["attn_implementation"] = "eager"
                notes.append(f"{name} does not support SDPA in transformers {tf.__version__}: traced with eager "
                             "attention, as it runs")
            try:
                # the dtype is given: transformers would otherwise take the config's torch_dtype
                build = cls.from_config if name.startswith("Auto") else cls._from_config
                model = _with_dtype(build, config, dtype, kwargs)
                wrong = {str(p.dtype) for p in model.parameters() if p.is_floating_point() and p.dtype != dtype}
                if wrong:
                    notes.append(f"some parameters are stored as {', '.join(sorted(wrong))}, as the model defines")
                return model, notes
            except (ValueError, KeyError) as exc:
                errors.append(f"{name}: {_first_line(exc)}")
            except Exception as exc:
                raise TraceError(f"{name} could not be built: {_first_line(exc)}") from None
    raise TraceError(f"no transformers class builds this {config.model_type} config ({errors[-1] if errors else ''})",
                     hint="build it from a Python callable (MODULE:CALLABLE) instead")


@contextlib.contextmanager
def skipped_init() -> Iterator[None]:
    """Make ``torch.nn.init``'s functions no-ops while a model is built: fake tensors
    hold no values to initialise, and some initialisers read a value back (.item()),
    which fake tensors cannot do."""
    import torch.nn.init as init

    names = [n for n in dir(init) if n.endswith("_") and not n.startswith("_") and callable(getattr(init, n))]
    saved = {n: getattr(init, n) for n in names}
    for n in names:
        setattr(init, n, lambda tensor, *args, **kwargs: tensor)
    try:
        yield
    finally:
        for n, fn in saved.items():
            setattr(init, n, fn)


def _with_dtype(build: Any, config: Any, dtype: torch.dtype, kwargs: dict[str, Any]) -> Any:
    """Build with ``dtype`` (transformers >= 4.56 names it ``dtype``, older ones ``torch_dtype``)."""
    try:
        return build(config, dtype=dtype, **kwargs)
    except TypeError as exc:
        if "dtype" not in str(exc):
            raise
        return build(config, torch_dtype=dtype, **kwargs)


def build_torch_model(source: ModelSource, dtype: torch.dtype) -> nn.Module:
    module_name, attr = parse_callable(source.ref)
    if module_name.split(".")[0] == "torchvision":
        import_torchvision()
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"cannot import {module_name}: {_first_line(exc)}", hint="install it, or check the name",
                         field="torch_model") from None
    except (Exception, SystemExit) as exc:  # the module's own code failed on import
        raise TraceError(f"importing {module_name} failed: {type(exc).__name__}: {_first_line(exc)}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"{module_name} has no {attr}", field="torch_model")
        obj = getattr(obj, part)
    if not callable(obj):
        raise UsageError(f"{source.ref} is not callable", field="torch_model")
    try:
        with default_dtype(dtype), skipped_init():
            model = obj()
    except (Exception, SystemExit) as exc:
        raise TraceError(f"{source.ref}() failed: {type(exc).__name__}: {_first_line(exc)}") from None
    if not isinstance(model, nn.Module):
        raise TraceError(f"{source.ref}() returned {type(model).__name__}, not a torch.nn.Module")
    return model


def seq_len_for(model: nn.Module, cfg: RunConfig) -> int:
    if cfg.seq_len:
        return cfg.seq_len
    config = getattr(model, "config", None)
    context = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None) or 512
    return int(min(context, DEFAULT_SEQ_CAP))


def make_inputs(model: nn.Module, source: ModelSource, cfg: RunConfig, training: bool) -> dict[str, Any]:
    """One batch for the model: token ids, pixels or audio features, with labels when training."""
    b = cfg.batch
    if source.kind == "torch-model":
        side = cfg.image_size or DEFAULT_IMAGE_SIZE
        shape = source.input_shape or (3, side, side)
        # the input in the weights' dtype (autocast takes fp32 inputs to fp32 weights)
        return {"x": torch.randn(b, *shape, dtype=_float_dtype(model))}
    config = model.config
    name = getattr(model, "main_input_name", "input_ids")
    inputs: dict[str, Any] = {}
    vocab = getattr(config, "vocab_size", None) or 32000
    if name == "input_ids":
        ids = torch.randint(0, vocab, (b, seq_len_for(model, cfg)))
        inputs["input_ids"] = ids
        if training:
            inputs["labels"] = _decoder_labels(config, cfg, vocab) if config.is_encoder_decoder else ids
    elif name == "pixel_values":
        side = cfg.image_size or getattr(config, "image_size", None) or DEFAULT_IMAGE_SIZE
        side = side if isinstance(side, int) else int(side[0])
        inputs["pixel_values"] = torch.randn(b, getattr(config, "num_channels", 3), side, side, dtype=_float_dtype(model))
        if training:
            inputs["labels"] = torch.randint(0, max(1, getattr(config, "num_labels", 2)), (b,))
    elif name == "input_features":
        inputs["input_features"] = torch.randn(b, getattr(config, "num_mel_bins", 80), AUDIO_FRAMES,
                                               dtype=_float_dtype(model))
        if training:
            inputs["labels"] = _decoder_labels(config, cfg, vocab)
    else:
        raise TraceError(f"exact mode does not know how to feed {type(model).__name__} (its input is {name!r})",
                         hint="wrap it in a Python callable (MODULE:CALLABLE) with an input shape")
    return inputs


def _float_dtype(model: nn.Module) -> torch.dtype:
    return next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)


def _decoder_labels(config: Any, cfg: RunConfig, vocab: int) -> torch.Tensor:
    length = cfg.target_len or cfg.seq_len or min(getattr(config, "max_target_positions", 448) or 448, DEFAULT_SEQ_CAP)
    return torch.randint(0, vocab, (cfg.batch, length))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]
