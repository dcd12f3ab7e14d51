"""Measure exact tensor memory of training steps and KV-cache inference with PyTorch on CPU.

DEV-ONLY. gpusizer does not depend on PyTorch; this script produces the measured figures that
gpusizer's data and tests use:

* ``--activations``: per-sample activation bytes of the zoo's CNNs and LSTM, written to
  ``benchmarks/out/activation_counts.yaml`` (fp32 and "mixed" = CPU autocast bfloat16), measured at
  batch 1, 2 and 8 and reported as the least-squares slope per sample.
* ``--refs``: reference peak-memory cases, written to ``tests/data/memory_refs_torch.yaml`` in
  the format of ``docs/memory-refs-format.md`` (``measures: tensor``).

How to run (PyTorch must NOT be installed into gpusizer's own environment; use a separate venv,
with a CPU wheel so no CUDA build is pulled)::

    python3 -m venv /tmp/torchenv
    /tmp/torchenv/bin/pip install torch==2.13.0 numpy pyyaml transformers
    /tmp/torchenv/bin/pip install --no-deps torchvision==0.28.0   # Python model code only
    /tmp/torchenv/bin/python benchmarks/torch_memory.py --list
    /tmp/torchenv/bin/python benchmarks/torch_memory.py --activations --refs --write
    /tmp/torchenv/bin/python benchmarks/torch_memory.py --refs 'gpt2-*' --real   # real tensors
    /tmp/torchenv/bin/python benchmarks/torch_memory.py --validate              # fake == real?

(If torchvision's C extension does not load, which is the case for a CUDA torchvision wheel next
to a CPU torch, the import is patched so that its Python model definitions still work.)

What it counts
--------------
A ``TorchDispatchMode`` sees every ATen op below autograd, including those run by the autograd
engine in backward and by the optimizer. Each output tensor's *storage* is registered once (views
share storage and are not counted twice) with its exact ``nbytes``; a ``weakref.finalize`` on the
storage (PyTorch keeps one Python object per live storage) subtracts it when the storage is freed.
Parameters, buffers and the input batch are registered before the step. "Live tensor bytes" is
thus the sum of all distinct live storages -- what ``torch.cuda.memory_allocated()`` would show,
except that the CUDA caching allocator rounds each block up to 512 bytes and this does not, and
that kernel-internal workspaces that are never returned as tensors (cuDNN/cuBLAS workspaces) are
not seen. The peak is taken after every op, so an op's output and its still-referenced inputs count
together, as on a GPU.

By default every case runs under ``FakeTensorMode``: tensors carry shape, dtype and storage size
but no data, so a 7B model costs no RAM and a step runs in seconds. The same PyTorch ops, autograd
formulas and saved tensors are used as with real tensors (``--validate`` checks fake == real,
byte for byte, on small cases); ``--real`` runs with real tensors instead.

Training step (measured on the SECOND step, so that optimizer state exists)::

    opt.zero_grad(set_to_none=True)
    with autocast (mixed only):  loss = loss_fn(model, batch)   # outputs other than loss dropped
    <end of forward: snapshot>
    loss.backward(); del loss
    opt.step()

Reported: the peak of live tensor bytes during step 2 and its composition (weights incl. buffers,
gradients, optimizer state, everything else = activations + temporaries), and the component
sizes: weights (+ buffers), gradients (after backward), optimizer state (after the step) and
``activations`` = bytes live at the end of forward that are neither weights/buffers nor optimizer
state (gradients are None there). That is the tensors autograd saved for backward, plus the input
batch (conv1 / the embedding save it anyway) and, under autocast, the 16-bit weight copies that
the autocast cache made and that matmuls/convs saved. A walk of the autograd graph
(``grad_fn._saved_*``) gives the saved-tensor bytes as a cross-check.

GPU emulation (on by default; ``--cpu-native`` turns all of it off)
-------------------------------------------------------------------
Some CPU kernels keep different tensors than their CUDA counterparts. Since the figures are used
to estimate GPU memory, by default the script makes the CPU behave like CUDA where it matters:

* dropout: CPU ``F.dropout`` keeps a *float* noise tensor of the input's dtype; CUDA's fused
  ``native_dropout`` keeps a 1-byte bool mask. ``F.dropout`` is routed to ``torch.native_dropout``.
* SDPA with ``dropout_p > 0``: the CPU flash kernel has no dropout, so PyTorch falls back to the
  math path, which stores the s x s probabilities; CUDA flash/mem-efficient kernels regenerate the
  dropout mask from the RNG seed and store only the output and logsumexp. ``dropout_p`` is set to
  0 inside SDPA (memory-equivalent to the fused CUDA kernel).
* autocast: CPU autocast runs softmax, log_softmax, layer_norm, group_norm, pow, exp, log, rsqrt,
  sum and cumsum in the input dtype; CUDA autocast runs them in float32. Those ops get their 16-bit
  inputs cast to float32 when autocast is on. The 16-bit type is bfloat16 (CPU autocast); fp16 +
  GradScaler on a GPU has the same sizes (the scaler's state is a few bytes).
* optimizers: ``foreach=True`` (the CUDA default; the CPU default is a per-tensor loop whose
  temporaries are one parameter's size, whereas foreach holds a temporary of every parameter).

* LSTM: the LSTM LM runs PyTorch's portable LSTM (per-step ops that each save their tensors),
  not oneDNN's fused kernel (see ``ZarembaLM``).

Not emulated: cuDNN's fused LSTM keeps a "reserve space" instead of per-op tensors (its size is
not visible here; oneDNN's fused CPU kernel keeps ~1.8x the portable kernel's bytes in fp32);
cuDNN batch-norm may keep a small reserve buffer. Max-pool indices are int64 on CUDA as here.

Known fake-vs-real difference: under autocast the fake (meta) kernel of ``native_batch_norm``
returns bfloat16 ``save_mean``/``save_invstd`` where the CPU (and cuDNN) kernel returns float32:
2 bytes x channels less per BN layer (about 0.1 MB for ResNet-50), independent of the batch.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fnmatch
import gc
import json
import platform
import shlex
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
import yaml

from gpusizer.exact._build import import_torchvision, transformers_module
from gpusizer.exact._tracker import GpuLike, Info, LiveTensorTracker, run_backward
from gpusizer.exact._tracker import storage_bytes as tensor_bytes

REPO = Path(__file__).resolve().parent.parent
ACT_OUT = REPO / "benchmarks" / "out" / "activation_counts.yaml"
REFS_OUT = REPO / "tests" / "data" / "memory_refs_torch.yaml"
SOURCE_TITLE = "gpusizer benchmarks/torch_memory.py"

# ---------------------------------------------------------------------------------------------
# optional imports
# ---------------------------------------------------------------------------------------------


# the model-building helpers, the live-tensor tracker and the CPU-to-CUDA rerouting are exact
# mode's own (gpusizer/exact/), so this script and `fit-model --exact` count the same way
transformers = transformers_module


def by_kind(infos: list[Info]) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for i in infos:
        out[i.kind] += i.nbytes
    return dict(out)


def saved_tensor_bytes(root: torch.Tensor, tracker: LiveTensorTracker) -> dict[str, int]:
    """Walk the autograd graph from ``root`` and sum the distinct storages it saved."""
    seen: set[int] = set()
    storages: dict[int, Info | None] = {}
    sizes: dict[int, int] = {}
    stack = [root.grad_fn]
    nodes = []
    while stack:
        fn = stack.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        nodes.append(fn)  # keep alive so ids stay unique during the walk
        for attr in dir(fn):
            if not attr.startswith("_saved_"):
                continue
            try:
                value = getattr(fn, attr)
            except Exception:
                continue
            for t in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(t, torch.Tensor):
                    st = t.untyped_storage()
                    storages[id(st)] = tracker.live.get(id(st))
                    sizes[id(st)] = st.nbytes()
        for nxt, _ in getattr(fn, "next_functions", ()):
            stack.append(nxt)
    res = {"saved_total": 0, "saved_params": 0, "saved_weight_copies": 0, "saved_activations": 0}
    for key, info in storages.items():
        n = sizes[key]
        res["saved_total"] += n
        if info is not None and info.kind in ("weight", "buffer"):
            res["saved_params"] += n
        elif info is not None and info.weight_copy:
            res["saved_weight_copies"] += n
        else:
            res["saved_activations"] += n
    return res


# ---------------------------------------------------------------------------------------------
# CUDA-like behaviour on CPU
# ---------------------------------------------------------------------------------------------

# ---------------------------------------------------------------------------------------------
# models
# ---------------------------------------------------------------------------------------------

CNN_TV = {  # zoo id -> (torchvision builder name, kwargs, image size)
    "alexnet": ("alexnet", {}, 224),
    "vgg16": ("vgg16", {}, 224),
    "resnet50": ("resnet50", {}, 224),
    "resnet152": ("resnet152", {}, 224),
    "inception-v3": ("inception_v3", {"aux_logits": False, "init_weights": False}, 299),
    "mobilenet-v2": ("mobilenet_v2", {}, 224),
    "densenet121": ("densenet121", {}, 224),
    "efficientnet-b0": ("efficientnet_b0", {}, 224),
}
LSTM_ID = "lstm-zaremba-large"


class ZarembaLM(nn.Module):
    """Zaremba et al. 2014 "large" PTB LSTM LM: 2 x LSTM(1500), embedding 1500, vocab 10000,
    dropout 0.65 on the embedding output, between the layers and before the decoder (non-recurrent
    connections only), untied decoder. Each layer is its own nn.LSTM so the dropout between layers
    is an F.dropout call (nn.LSTM's internal dropout runs inside C++)."""

    def __init__(self, vocab: int = 10000, emb: int = 1500, hidden: int = 1500, layers: int = 2,
                 dropout: float = 0.65) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, emb)
        self.drop = nn.Dropout(dropout)
        self.rnns = nn.ModuleList(nn.LSTM(emb if i == 0 else hidden, hidden) for i in range(layers))
        self.decoder = nn.Linear(hidden, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:  # tokens: (seq, batch)
        h = self.drop(self.embed(tokens))
        # PyTorch's portable LSTM (per-step addmm / sigmoid / tanh / mul, each saving its tensors
        # for autograd) rather than oneDNN's fused kernel: the latter saves an opaque workspace
        # whose size its fake kernel gets wrong (0 bytes), that is not exactly linear in the batch,
        # and that has no bfloat16 kernel on CPUs without AVX512-BF16.
        enabled = torch._C._get_mkldnn_enabled()
        torch._C._set_mkldnn_enabled(False)
        try:
            for rnn in self.rnns:
                h, _ = rnn(h)  # zero initial state every step
                h = self.drop(h)
        finally:
            torch._C._set_mkldnn_enabled(enabled)
        return self.decoder(h)


def hf_config(arch: str, attn: str | None) -> Any:
    tf = transformers()
    kw: dict[str, Any] = {}
    if attn:
        kw["attn_implementation"] = attn
    if arch == "gpt2":
        return tf.GPT2Config(**kw)
    if arch == "gpt2-medium":
        return tf.GPT2Config(n_embd=1024, n_layer=24, n_head=16, **kw)
    if arch == "bert-base":
        return tf.BertConfig(**kw)
    if arch == "bert-large":
        return tf.BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                             intermediate_size=4096, **kw)
    if arch == "t5-base":
        return tf.T5Config(d_model=768, d_ff=3072, d_kv=64, num_layers=12, num_decoder_layers=12,
                           num_heads=12, vocab_size=32128, feed_forward_proj="relu",
                           tie_word_embeddings=True, dropout_rate=0.1, decoder_start_token_id=0,
                           pad_token_id=0, eos_token_id=1, **kw)
    if arch == "llama-small":
        return tf.LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                              num_attention_heads=16, num_key_value_heads=4, vocab_size=32000,
                              max_position_embeddings=2048, tie_word_embeddings=False, **kw)
    if arch == "llama-2-7b":
        return tf.LlamaConfig(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                              num_attention_heads=32, num_key_value_heads=32, vocab_size=32000,
                              max_position_embeddings=4096, tie_word_embeddings=False, **kw)
    if arch == "mistral-7b":
        return tf.MistralConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                num_attention_heads=32, num_key_value_heads=8, vocab_size=32000,
                                max_position_embeddings=32768, sliding_window=4096,
                                tie_word_embeddings=False, **kw)
    raise KeyError(arch)


def hf_model(arch: str, attn: str | None) -> nn.Module:
    tf = transformers()
    cfg = hf_config(arch, attn)
    if arch.startswith("gpt2") or arch.startswith("llama") or arch.startswith("mistral"):
        cls = {"gpt2": tf.GPT2LMHeadModel, "lla": tf.LlamaForCausalLM, "mis": tf.MistralForCausalLM}
        return cls["gpt2" if arch.startswith("gpt2") else arch[:3]](cfg)
    if arch.startswith("bert"):
        return tf.BertForMaskedLM(cfg)
    if arch == "t5-base":
        return tf.T5ForConditionalGeneration(cfg)
    raise KeyError(arch)


# ---------------------------------------------------------------------------------------------
# cases
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Case:
    id: str
    family: str  # cnn | lstm | hf
    arch: str  # zoo id of a CNN / "lstm" / hf arch key
    mode: str = "train"
    batch: int = 1
    image_size: int | None = None
    seq_len: int | None = None
    target_len: int | None = None  # t5 decoder length
    precision: str = "fp32"  # fp32 | mixed | bf16
    optimizer: str | None = "adamw"
    checkpointing: bool = False
    attn: str | None = None  # eager | sdpa
    model: str | None = None  # zoo id
    shape: dict[str, Any] | None = None
    decode_tokens: int = 16
    notes: str = ""

    @property
    def flash(self) -> bool:
        return self.attn == "sdpa"


def _cnn(zid: str, batch: int, precision: str, optimizer: str, **kw: Any) -> Case:
    size = CNN_TV[zid][2]
    prec = {"fp32": "fp32", "mixed": "mixed"}[precision]
    return Case(id=f"{zid}-b{batch}-{size}-{prec}-{optimizer}", family="cnn", arch=zid,
                batch=batch, image_size=size, precision=precision, optimizer=optimizer, model=zid, **kw)


def _gpt2(arch: str, batch: int, seq: int, precision: str, attn: str, ckpt: bool = False,
          optimizer: str = "adamw") -> Case:
    suffix = "-ckpt" if ckpt else ""
    return Case(id=f"{arch}-b{batch}-s{seq}-{precision}-{attn}-{optimizer}{suffix}", family="hf",
                arch=arch, batch=batch, seq_len=seq, precision=precision, optimizer=optimizer,
                checkpointing=ckpt, attn=attn, model=arch)


LLAMA_SMALL_SHAPE = {"kind": "decoder", "params": None, "layers": 8, "hidden": 1024, "heads": 16,
                     "kv_heads": 4, "ffn": 2816, "vocab": 32000, "mlp": "swiglu", "norm": "rmsnorm",
                     "tied_embeddings": False, "dropout": False}


def all_cases() -> list[Case]:
    c: list[Case] = [
        _cnn("resnet50", 32, "fp32", "momentum"),
        _cnn("resnet50", 64, "fp32", "momentum"),
        _cnn("resnet50", 64, "mixed", "momentum"),
        _cnn("vgg16", 16, "fp32", "momentum"),
        _cnn("mobilenet-v2", 64, "mixed", "adam"),
        _cnn("densenet121", 32, "fp32", "momentum"),
        _cnn("efficientnet-b0", 32, "fp32", "adamw"),
        _cnn("alexnet", 128, "fp32", "momentum"),
        _cnn("inception-v3", 32, "fp32", "momentum"),
        _cnn("resnet152", 32, "mixed", "momentum"),
        Case(id="lstm-zaremba-large-b20-s35-fp32-sgd", family="lstm", arch="lstm", batch=20,
             seq_len=35, optimizer="sgd", model=LSTM_ID),
        Case(id="lstm-zaremba-large-b64-s35-fp32-sgd", family="lstm", arch="lstm", batch=64,
             seq_len=35, optimizer="sgd", model=LSTM_ID),
        Case(id="lstm-zaremba-large-b64-s35-mixed-sgd", family="lstm", arch="lstm", batch=64,
             seq_len=35, precision="mixed", optimizer="sgd", model=LSTM_ID),
    ]
    for b, s in ((4, 512), (8, 1024)):
        for prec in ("fp32", "mixed"):
            for attn in ("eager", "sdpa"):
                c.append(_gpt2("gpt2", b, s, prec, attn))
    c += [
        _gpt2("gpt2", 8, 1024, "fp32", "eager", ckpt=True),
        _gpt2("gpt2", 8, 1024, "mixed", "sdpa", ckpt=True),
        _gpt2("gpt2", 8, 1024, "bf16", "sdpa"),
        _gpt2("gpt2-medium", 4, 1024, "mixed", "sdpa"),
        _gpt2("gpt2-medium", 4, 1024, "bf16", "sdpa", ckpt=True),
    ]
    for b, s, prec, attn in ((16, 128, "fp32", "eager"), (16, 128, "mixed", "sdpa"),
                             (32, 512, "fp32", "eager"), (32, 512, "mixed", "sdpa")):
        c.append(Case(id=f"bert-base-mlm-b{b}-s{s}-{prec}-{attn}-adamw", family="hf", arch="bert-base",
                      batch=b, seq_len=s, precision=prec, attn=attn, model="bert-base",
                      notes="BertForMaskedLM, MLM logits over every position."))
    c.append(Case(id="bert-large-mlm-b8-s512-mixed-sdpa-adamw", family="hf", arch="bert-large",
                  batch=8, seq_len=512, precision="mixed", attn="sdpa", model="bert-large",
                  notes="BertForMaskedLM, MLM logits over every position."))
    for prec in ("fp32", "mixed"):
        c.append(Case(id=f"t5-base-b8-s512-t128-{prec}-eager-adamw", family="hf", arch="t5-base",
                      batch=8, seq_len=512, target_len=128, precision=prec, attn="eager",
                      model="t5-base",
                      notes="Encoder length 512 (seq_len), decoder/target length 128."))
    for prec, attn in (("fp32", "eager"), ("mixed", "sdpa"), ("bf16", "sdpa")):
        c.append(Case(id=f"llama-small-gqa-b4-s1024-{prec}-{attn}-adamw", family="hf",
                      arch="llama-small", batch=4, seq_len=1024, precision=prec, attn=attn,
                      shape=dict(LLAMA_SMALL_SHAPE)))
    for arch, b, s, attn in (("llama-2-7b", 1, 4096, "sdpa"), ("llama-2-7b", 8, 2048, "sdpa"),
                             ("llama-2-7b", 1, 4096, "eager"), ("mistral-7b", 4, 4096, "sdpa")):
        c.append(Case(id=f"{arch}-infer-b{b}-s{s}-bf16-{attn}", family="hf", arch=arch,
                      mode="inference", batch=b, seq_len=s, precision="bf16", optimizer=None,
                      attn=attn, model=arch))
    c.append(Case(id="llama-small-gqa-infer-b8-s2048-bf16-sdpa", family="hf", arch="llama-small",
                  mode="inference", batch=8, seq_len=2048, precision="bf16", optimizer=None,
                  attn="sdpa", shape=dict(LLAMA_SMALL_SHAPE)))
    return c


# ---------------------------------------------------------------------------------------------
# building one case
# ---------------------------------------------------------------------------------------------


def build_model(family: str, arch: str, attn: str | None = None,
                dtype: torch.dtype | None = None) -> nn.Module:
    """Build with float32 parameters, or with ``dtype`` ones (``model.to(dtype)`` cannot swap
    FakeTensor parameters, so the model is built under that default dtype instead)."""
    if dtype is None:
        return _build_model(family, arch, attn)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        model = _build_model(family, arch, attn)
    finally:
        torch.set_default_dtype(previous)
    bad = {str(p.dtype) for p in model.parameters() if p.dtype != dtype}
    if bad:
        raise RuntimeError(f"parameters not in {dtype}: {bad}")
    return model


def _build_model(family: str, arch: str, attn: str | None = None) -> nn.Module:
    if family == "cnn":
        tv = import_torchvision()
        name, kw, _ = CNN_TV[arch]
        return getattr(tv.models, name)(weights=None, **kw)
    if family == "lstm":
        return ZarembaLM()
    return hf_model(arch, attn)


def make_batch(case: Case) -> dict[str, torch.Tensor]:
    if case.family == "cnn":
        s = case.image_size
        return {"x": torch.randn(case.batch, 3, s, s), "y": torch.randint(0, 1000, (case.batch,))}
    if case.family == "lstm":
        tok = torch.randint(0, 10000, (case.seq_len, case.batch))
        return {"x": tok, "y": torch.randint(0, 10000, (case.seq_len, case.batch))}
    vocab = hf_config(case.arch, None).vocab_size
    if case.mode == "inference":
        return {"input_ids": torch.randint(0, vocab, (case.batch, case.seq_len - case.decode_tokens))}
    ids = torch.randint(0, vocab, (case.batch, case.seq_len))
    if case.arch == "t5-base":
        return {"input_ids": ids, "labels": torch.randint(0, vocab, (case.batch, case.target_len))}
    return {"input_ids": ids, "labels": ids}


def loss_fn(case: Case) -> Callable[[nn.Module, dict[str, torch.Tensor]], torch.Tensor]:
    if case.family == "cnn":
        return lambda m, b: F.cross_entropy(m(b["x"]), b["y"])
    if case.family == "lstm":
        return lambda m, b: F.cross_entropy(m(b["x"]).view(-1, 10000), b["y"].view(-1))

    def hf(m: nn.Module, b: dict[str, torch.Tensor]) -> torch.Tensor:
        return m(**b, use_cache=False).loss  # the output (logits) is dropped on return

    return hf


def make_optimizer(name: str, params: list[nn.Parameter]) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(params, lr=1.0, foreach=True)
    if name == "momentum":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=True)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-3, foreach=True)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, foreach=True)
    raise KeyError(name)


def autocast_ctx(precision: str) -> contextlib.AbstractContextManager[Any]:
    if precision == "mixed":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


@dataclasses.dataclass
class Options:
    fake: bool = True
    gpu_like: bool = True


def _fake_ctx(opts: Options) -> contextlib.AbstractContextManager[Any]:
    if opts.fake:
        from torch._subclasses.fake_tensor import FakeTensorMode

        return FakeTensorMode(allow_non_fake_inputs=False)
    return contextlib.nullcontext()


def _gpu_ctx(opts: Options) -> contextlib.AbstractContextManager[Any]:
    return GpuLike() if opts.gpu_like else contextlib.nullcontext()


def run_training(case: Case, opts: Options) -> dict[str, Any]:
    torch.manual_seed(0)
    t0 = time.time()
    with _fake_ctx(opts):
        model = build_model(case.family, case.arch, case.attn,
                            torch.bfloat16 if case.precision == "bf16" else None)
        model.train()
        if case.checkpointing:
            model.gradient_checkpointing_enable()
        batch = make_batch(case)
        params = [p for p in model.parameters() if p.requires_grad]
        opt = make_optimizer(case.optimizer, params)
        fn = loss_fn(case)
        tracker = LiveTensorTracker()
        tracker.register_model(model, batch)
        n_params = sum(p.numel() for p in model.parameters())
        gpu = _gpu_ctx(opts)
        fwd_infos: list[Info] = []
        saved: dict[str, int] = {}
        with gpu, tracker:
            for step in (1, 2):
                gc.collect()
                if step == 2:
                    tracker.phase = "step2-start"
                    tracker.reset_peak()
                opt.zero_grad(set_to_none=True)
                tracker.phase = "forward"
                with autocast_ctx(case.precision):
                    loss = fn(model, batch)
                if step == 2:
                    fwd_infos = tracker.snapshot()
                    if not case.checkpointing:
                        saved = saved_tensor_bytes(loss, tracker)
                tracker.phase = "backward"
                run_backward(loss)
                del loss
                tracker.phase = "optimizer"
                opt.step()
                tracker.phase = "idle"
        # classify what is alive now (after step 2)
        for p in model.parameters():
            tracker.classify(p, "weight")
            if p.grad is not None:
                tracker.classify(p.grad, "grad")
        for b in model.buffers():
            tracker.classify(b, "buffer")
        for state in opt.state.values():
            for v in state.values():
                tracker.classify(v, "optimizer")
        weights = tensor_bytes(model.parameters()) + tensor_bytes(model.buffers())
        grads = tensor_bytes(p.grad for p in model.parameters() if p.grad is not None)
        optim = tensor_bytes(v for s in opt.state.values() for v in s.values())
        fwd = by_kind(fwd_infos)
        peak = by_kind(tracker.peak_infos)
        weight_copies = sum(i.nbytes for i in fwd_infos if i.weight_copy)
        res = {
            "case": case.id,
            "fake": opts.fake,
            "gpu_like": opts.gpu_like,
            "params": n_params,
            "peak_bytes": tracker.peak,
            "peak_phase": tracker.peak_phase,
            "phase_peaks": dict(tracker.phase_peaks),
            "peak_breakdown": {
                "weights": peak.get("weight", 0) + peak.get("buffer", 0),
                "gradients": peak.get("grad", 0),
                "optimizer": peak.get("optimizer", 0),
                "activations_and_temporaries": peak.get("other", 0) + peak.get("input", 0),
            },
            "weights_bytes": weights,
            "gradients_bytes": grads,
            "optimizer_bytes": optim,
            "activations_bytes": fwd.get("other", 0) + fwd.get("input", 0),
            "input_bytes": fwd.get("input", 0),
            "autocast_weight_copy_bytes": weight_copies,
            "saved": saved,
            "gpu_like_counts": dict(gpu.counts) if isinstance(gpu, GpuLike) else {},
            "seconds": round(time.time() - t0, 1),
        }
    del model, opt, batch, tracker
    gc.collect()
    return res


def run_inference(case: Case, opts: Options) -> dict[str, Any]:
    tf = transformers()
    torch.manual_seed(0)
    t0 = time.time()
    with _fake_ctx(opts):
        model = build_model(case.family, case.arch, case.attn, torch.bfloat16).eval()
        batch = make_batch(case)
        tracker = LiveTensorTracker()
        tracker.register_model(model, batch)
        n_params = sum(p.numel() for p in model.parameters())
        weights = tensor_bytes(model.parameters()) + tensor_bytes(model.buffers())
        gpu = _gpu_ctx(opts)
        after_prefill: dict[str, int] = {}
        def classify_cache() -> list[torch.Tensor]:
            # `cache` and `tracker` are bound before this runs (the `del` below confuses linters)
            kv = [t for layer in cache.layers for t in (layer.keys, layer.values)  # noqa: F821
                  if isinstance(t, torch.Tensor)]
            for t in kv:
                tracker.classify(t, "kv_cache")  # noqa: F821
            return kv

        with gpu, tracker, torch.no_grad():
            tracker.phase = "prefill"
            tracker.reset_peak()
            cache = tf.DynamicCache(config=model.config)
            out = model(input_ids=batch["input_ids"], past_key_values=cache, use_cache=True,
                        logits_to_keep=1)
            classify_cache()  # the Info objects are shared with the peak snapshot
            nxt = out.logits[:, -1, :].to(dtype=torch.float32).argmax(-1, keepdim=True)
            del out
            after_prefill = {"live": tracker.current}
            tracker.phase = "decode"
            for _ in range(case.decode_tokens):
                out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
                nxt = out.logits[:, -1, :].to(dtype=torch.float32).argmax(-1, keepdim=True)
                del out
                classify_cache()
            tracker.phase = "idle"
            kv_bytes = tensor_bytes(classify_cache())
            cache_len = cache.get_seq_length()
            end_live = tracker.current
        peak = by_kind(tracker.peak_infos)
        res = {
            "case": case.id,
            "fake": opts.fake,
            "gpu_like": opts.gpu_like,
            "params": n_params,
            "peak_bytes": tracker.peak,
            "peak_phase": tracker.peak_phase,
            "phase_peaks": dict(tracker.phase_peaks),
            "peak_breakdown": {
                "weights": peak.get("weight", 0) + peak.get("buffer", 0),
                "kv_cache": peak.get("kv_cache", 0),
                "other": peak.get("other", 0) + peak.get("input", 0),
            },
            "weights_bytes": weights,
            "kv_cache_bytes_end": kv_bytes,
            "kv_cache_len_end": int(cache_len),
            "live_after_prefill": after_prefill["live"],
            "live_at_end": end_live,
            "seconds": round(time.time() - t0, 1),
        }
        del cache, nxt, model, tracker
    gc.collect()
    return res


def run_case(case: Case, opts: Options) -> dict[str, Any]:
    return run_inference(case, opts) if case.mode == "inference" else run_training(case, opts)


# ---------------------------------------------------------------------------------------------
# (a) per-sample activations
# ---------------------------------------------------------------------------------------------

ACT_BATCHES = (1, 2, 8)


def forward_activations(model: nn.Module, case: Case, opts: Options) -> dict[str, int]:
    """Bytes live at the end of a training-mode forward (+ loss), less weights and buffers."""
    batch = make_batch(case)
    fn = loss_fn(case)
    tracker = LiveTensorTracker()
    tracker.register_model(model, batch)
    gpu = _gpu_ctx(opts)
    with gpu, tracker:
        tracker.phase = "forward"
        with autocast_ctx(case.precision):
            loss = fn(model, batch)
        infos = tracker.snapshot()
        saved = saved_tensor_bytes(loss, tracker)
        del loss
    kinds = by_kind(infos)
    res = {
        "live": kinds.get("other", 0) + kinds.get("input", 0),
        "input": kinds.get("input", 0),
        "weight_copies": sum(i.nbytes for i in infos if i.weight_copy),
        "saved_activations": saved["saved_activations"],
        "saved_weight_copies": saved["saved_weight_copies"],
        "peak_forward": tracker.peak - sum(v for k, v in kinds.items() if k in ("weight", "buffer")),
    }
    by_dtype: dict[str, int] = defaultdict(int)
    for i in infos:
        if i.kind in ("other", "input"):
            by_dtype[str(i.dtype).replace("torch.", "")] += i.nbytes
    res["by_dtype"] = dict(by_dtype)
    del tracker, batch
    gc.collect()
    return res


def slope(xs: tuple[int, ...], ys: list[int]) -> tuple[float, float, float]:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    a = my - b * mx
    resid = max(abs(y - (a + b * x)) for x, y in zip(xs, ys, strict=True))
    return b, a, resid


def activation_ids() -> list[str]:
    return [*CNN_TV, LSTM_ID]


def measure_activations(zid: str, opts: Options) -> dict[str, Any]:
    t0 = time.time()
    family = "lstm" if zid == LSTM_ID else "cnn"
    out: dict[str, Any] = {"id": zid, "fake": opts.fake, "gpu_like": opts.gpu_like}
    torch.manual_seed(0)
    with _fake_ctx(opts):
        model = build_model(family, zid).train()
        out["params"] = sum(p.numel() for p in model.parameters())
        for prec in ("fp32", "mixed"):
            rows = []
            for b in ACT_BATCHES:
                case = Case(id=zid, family=family, arch=zid, batch=b, precision=prec,
                            image_size=CNN_TV[zid][2] if family == "cnn" else None,
                            seq_len=35 if family == "lstm" else None)
                rows.append(forward_activations(model, case, opts))
            lives = [r["live"] for r in rows]
            b, a, resid = slope(ACT_BATCHES, lives)
            sb, sa, sresid = slope(ACT_BATCHES, [r["saved_activations"] + r["saved_weight_copies"]
                                                 for r in rows])
            out[prec] = {
                "live_bytes": dict(zip(ACT_BATCHES, lives, strict=True)),
                "slope": b,
                "intercept": a,
                "max_residual": resid,
                "saved_slope": sb,
                "saved_intercept": sa,
                "weight_copies": rows[0]["weight_copies"],
                "input_per_sample": rows[0]["input"],
                "by_dtype_b8": rows[-1]["by_dtype"],
            }
        del model
    gc.collect()
    out["seconds"] = round(time.time() - t0, 1)
    return out


# ---------------------------------------------------------------------------------------------
# output
# ---------------------------------------------------------------------------------------------


def command_line() -> str:
    return "benchmarks/torch_memory.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def env_detail(opts: Options) -> str:
    mode = "FakeTensorMode (shapes only)" if opts.fake else "real CPU tensors"
    gpu = "GPU-like emulation on (bool dropout mask, fused-SDPA dropout, CUDA autocast fp32 ops, foreach optimizers)" if opts.gpu_like else "CPU-native behaviour (no GPU emulation)"
    return (f"torch {torch.__version__} on CPU ({platform.machine()}), live-tensor storage tracker "
            f"(TorchDispatchMode + weakref finalizers), {mode}, {gpu}; "
            f"python {command_line()}")


def mib(n: float) -> str:
    return f"{n / 2**20:,.1f}"


def ref_entry(case: Case, r: dict[str, Any], opts: Options) -> dict[str, Any]:
    shape = None
    if case.shape is not None:
        shape = dict(case.shape)
        shape["params"] = r["params"]
    optimizer = case.optimizer
    if case.mode == "train":
        comps = {"weights_bytes": r["weights_bytes"], "gradients_bytes": r["gradients_bytes"],
                 "optimizer_bytes": r["optimizer_bytes"], "activations_bytes": r["activations_bytes"]}
        pb = r["peak_breakdown"]
        note = (f"{r['params']:,} parameters. Peak in {r['peak_phase']} of step 2; at the peak: "
                f"weights {pb['weights']}, gradients {pb['gradients']}, optimizer {pb['optimizer']}, "
                f"activations+temporaries {pb['activations_and_temporaries']} bytes. "
                f"Phase peaks: " + ", ".join(f"{k} {v}" for k, v in r["phase_peaks"].items()
                                             if k in ("forward", "backward", "optimizer")) + ". ")
        if r["autocast_weight_copy_bytes"]:
            note += (f"activations_bytes includes {r['autocast_weight_copy_bytes']} bytes of 16-bit "
                     f"weight copies made by autocast. ")
        if r["input_bytes"]:
            note += f"It includes the input batch ({r['input_bytes']} bytes). "
        if r["saved"]:
            note += (f"Autograd graph saved {r['saved']['saved_activations'] + r['saved']['saved_weight_copies']} "
                     f"bytes of non-parameter tensors. ")
        note += ("Optimizer foreach=True" + (", weight_decay 0.01" if optimizer == "adamw" else ", weight_decay 0")
                 + ". ")
        if case.precision == "mixed":
            note += "mixed = torch.autocast bfloat16, fp32 weights/grads/optimizer state. "
        if case.precision == "bf16":
            note += "bf16 = model.to(torch.bfloat16); AdamW state in bf16; HF loss upcasts logits to fp32. "
    else:
        comps = {"weights_bytes": r["weights_bytes"], "gradients_bytes": None, "optimizer_bytes": None,
                 "activations_bytes": None}
        pb = r["peak_breakdown"]
        note = (f"{r['params']:,} parameters. Prefill {case.seq_len - case.decode_tokens} tokens "
                f"(logits_to_keep=1) then greedy decode {case.decode_tokens} tokens with "
                f"transformers DynamicCache; KV cache at the end {r['kv_cache_bytes_end']} bytes "
                f"({r['kv_cache_len_end']} positions). Peak in {r['peak_phase']}: weights "
                f"{pb['weights']}, KV cache {pb['kv_cache']}, other {pb['other']} bytes. "
                f"torch.no_grad(). ")
    if r.get("gpu_like_counts"):
        note += "GPU emulation calls: " + ", ".join(f"{k} x{v}" for k, v in sorted(r["gpu_like_counts"].items())) + ". "
    if case.family == "hf" and case.attn:
        note += f"attn_implementation={case.attn}. "
    if case.checkpointing:
        note += "model.gradient_checkpointing_enable() (non-reentrant). "
    if case.notes:
        note += case.notes
    entry: dict[str, Any] = {
        "id": case.id,
        "model": case.model if case.shape is None else None,
        "shape": shape,
        "mode": case.mode,
        "batch": case.batch,
        "image_size": case.image_size,
        "seq_len": case.seq_len,
        **({"target_len": case.target_len} if case.target_len else {}),
        "precision": case.precision,
        "optimizer": optimizer,
        "checkpointing": case.checkpointing,
        "flash_attention": case.flash,
        "measured_peak_bytes": int(r["peak_bytes"]),
        "measures": "tensor",
        "components": comps,
        "source": {"title": SOURCE_TITLE, "url": None, "detail": env_detail(opts)},
        "notes": note.strip(),
    }
    return entry


REFS_HEADER = """\
# Reference peak tensor memory measured with PyTorch (CPU) by benchmarks/torch_memory.py.
# Format: docs/memory-refs-format.md. measures: tensor = peak bytes of live tensor storages
# (what torch.cuda.max_memory_allocated() would report, without the 512-byte block rounding and
# without library workspaces). Regenerate with:
#   /tmp/torchenv/bin/python benchmarks/torch_memory.py --refs --write
"""

ACT_HEADER = """\
# Per-sample activation bytes (live at the end of a train-mode forward incl. the loss, weights and
# buffers excluded; slope over batches 1, 2, 8) measured by benchmarks/torch_memory.py.
# fp32: float32; mixed: torch.autocast("cpu", bfloat16) with CUDA-autocast emulation. Dropout
# keeps a 1-byte mask as CUDA's fused kernel does (see the script's docstring, "GPU emulation").
# Regenerate with: /tmp/torchenv/bin/python benchmarks/torch_memory.py --activations --write
"""


def write_yaml(path: Path, header: str, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=100, allow_unicode=True)
    path.write_text(header + text)


def merge_refs(path: Path, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    old: list[dict[str, Any]] = []
    if path.exists():
        old = (yaml.safe_load(path.read_text()) or {}).get("cases", []) or []
    new_ids = {e["id"] for e in entries}
    order = {c.id: i for i, c in enumerate(all_cases())}
    merged = [e for e in old if e["id"] not in new_ids] + entries
    merged.sort(key=lambda e: order.get(e["id"], 10**6))
    return merged


def act_entry(m: dict[str, Any], opts: Options) -> dict[str, Any]:
    zid = m["id"]
    fp, mx = m["fp32"], m["mixed"]
    lstm = zid == LSTM_ID
    key = "seq_len" if lstm else "image_size"
    val = 35 if lstm else CNN_TV[zid][2]
    notes = (
        f"{m['params']:,} parameters; torchvision {CNN_TV[zid][0]} (weights=None"
        + (", aux_logits=False" if zid == "inception-v3" else "") + "), train mode. "
        if not lstm else
        f"{m['params']:,} parameters; 2-layer LSTM 1500, embedding 1500, vocab 10000, dropout 0.65 "
        "(embedding output, between layers, before decoder), untied decoder, seq 35, train mode, "
        "PyTorch's portable (non-oneDNN) LSTM kernel. "
    )
    notes += (
        f"Live bytes at end of forward, fp32 at b=1,2,8: {list(fp['live_bytes'].values())} "
        f"(slope {fp['slope']:.1f}, intercept {fp['intercept']:.0f}, max residual {fp['max_residual']:.0f}); "
        f"mixed: {list(mx['live_bytes'].values())} (slope {mx['slope']:.1f}, intercept "
        f"{mx['intercept']:.0f}, of which bf16 weight copies made by autocast {mx['weight_copies']} bytes). "
        "The batch-independent intercept is the loss scalar, BatchNorm's saved per-channel mean and "
        "inverse std (fp32) and, under autocast, the weight copies. "
        f"Includes the input ({fp['input_per_sample']} bytes/sample fp32). "
        f"Autograd-graph saved-tensor slope: fp32 {fp['saved_slope']:.1f}, mixed {mx['saved_slope']:.1f}."
    )
    return {
        key: val,
        "activation_bytes_per_sample_fp32": int(round(fp["slope"])),
        "activation_bytes_per_sample_mixed": int(round(mx["slope"])),
        "batches_measured": list(ACT_BATCHES),
        "notes": notes,
    }


# ---------------------------------------------------------------------------------------------
# validation: fake == real on small cases
# ---------------------------------------------------------------------------------------------


def validate() -> int:
    small = [
        Case(id="v-resnet50-b8-sgd", family="cnn", arch="resnet50", batch=8, image_size=224, optimizer="sgd"),
        Case(id="v-resnet50-b2-mixed-sgd", family="cnn", arch="resnet50", batch=2, image_size=224,
             precision="mixed", optimizer="sgd"),
        Case(id="v-densenet121-b4-sgd", family="cnn", arch="densenet121", batch=4, image_size=224,
             optimizer="sgd"),
        Case(id="v-gpt2-b2-s256-eager-sgd", family="hf", arch="gpt2", batch=2, seq_len=256, attn="eager",
             optimizer="sgd"),
        Case(id="v-gpt2-b1-s128-sdpa-mixed-sgd", family="hf", arch="gpt2", batch=1, seq_len=128, attn="sdpa",
             precision="mixed", optimizer="sgd"),
        Case(id="v-gpt2-b2-s256-sdpa-ckpt-sgd", family="hf", arch="gpt2", batch=2, seq_len=256, attn="sdpa",
             checkpointing=True, optimizer="sgd"),
        Case(id="v-llama-small-b1-s128-bf16", family="hf", arch="llama-small", batch=1, seq_len=128,
             attn="sdpa", precision="bf16"),
        Case(id="v-t5-b1-s64-t16-sgd", family="hf", arch="t5-base", batch=1, seq_len=64, target_len=16,
             attn="eager", optimizer="sgd"),
        Case(id="v-llama-small-infer-b1-s256", family="hf", arch="llama-small", mode="inference", batch=1,
             seq_len=256, precision="bf16", optimizer=None, attn="sdpa", decode_tokens=4),
    ]
    # Known difference: under autocast the fake (meta) kernel of native_batch_norm returns bf16
    # save_mean/save_invstd where the CPU kernel returns fp32 (2 bytes x channels less per BN).
    bad = 0
    keys = ["peak_bytes", "weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
            "kv_cache_bytes_end"]
    for case in small:
        r_real = run_case(case, Options(fake=False))
        r_fake = run_case(case, Options(fake=True))
        same = all(r_real.get(k) == r_fake.get(k) for k in keys)
        bad += not same
        print(f"{case.id:24s} real peak {r_real['peak_bytes']:>13,} fake peak {r_fake['peak_bytes']:>13,} "
              f"acts {r_real.get('activations_bytes')} / {r_fake.get('activations_bytes')} "
              f"{'OK' if same else 'DIFFER'} ({r_real['seconds']}s / {r_fake['seconds']}s) "
              f"peak in {r_real['peak_phase']}", flush=True)
    return bad


# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------


def select(patterns: list[str], ids: list[str]) -> list[str]:
    if not patterns:
        return ids
    out = [i for i in ids if any(fnmatch.fnmatch(i, p) or p == i for p in patterns)]
    if not out:
        raise SystemExit(f"no case matches {patterns}; use --list")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--list", action="store_true", help="list case ids and exit")
    ap.add_argument("--activations", nargs="*", metavar="ID", default=None,
                    help="measure per-sample activations (all models, or the ids/globs given)")
    ap.add_argument("--refs", nargs="*", metavar="CASE", default=None,
                    help="measure reference peak cases (all, or the ids/globs given)")
    ap.add_argument("--real", action="store_true", help="real tensors instead of FakeTensorMode")
    ap.add_argument("--cpu-native", action="store_true", help="no GPU emulation (see docstring)")
    ap.add_argument("--validate", action="store_true", help="check fake == real on small cases")
    ap.add_argument("--write", action="store_true", help="write/merge the YAML outputs")
    ap.add_argument("--json", type=Path, help="also dump raw measurements to this JSON file")
    ap.add_argument("--act-out", type=Path, default=ACT_OUT)
    ap.add_argument("--refs-out", type=Path, default=REFS_OUT)
    args = ap.parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    opts = Options(fake=not args.real, gpu_like=not args.cpu_native)

    if args.list:
        print("activation models:", " ".join(activation_ids()))
        for c in all_cases():
            print(c.id)
        return 0
    if args.validate:
        return 1 if validate() else 0
    raw: dict[str, Any] = {"activations": [], "refs": []}

    if args.activations is not None:
        results = []
        for zid in select(args.activations, activation_ids()):
            m = measure_activations(zid, opts)
            results.append(m)
            raw["activations"].append(m)
            print(f"{zid:20s} fp32 {m['fp32']['slope']:>14,.1f} B/sample (resid {m['fp32']['max_residual']:.0f}) "
                  f"mixed {m['mixed']['slope']:>14,.1f} B/sample (intercept {m['mixed']['intercept']:,.0f}) "
                  f"[{m['seconds']}s]", flush=True)
        if args.write:
            doc: dict[str, Any] = {}
            if args.act_out.exists():
                doc = yaml.safe_load(args.act_out.read_text()) or {}
            for m in results:
                doc[m["id"]] = act_entry(m, opts)
            doc = {k: doc[k] for k in [*activation_ids(), *sorted(set(doc) - set(activation_ids()))] if k in doc}
            write_yaml(args.act_out, ACT_HEADER, doc)
            print(f"wrote {args.act_out}")

    if args.refs is not None:
        cases = {c.id: c for c in all_cases()}
        entries = []
        print(f"{'case':48s} {'peak MiB':>10s} {'weights':>9s} {'grads':>9s} {'optim':>9s} {'acts':>9s}  peak phase")
        for cid in select(args.refs, list(cases)):
            r = run_case(cases[cid], opts)
            raw["refs"].append(r)
            entries.append(ref_entry(cases[cid], r, opts))
            g = r.get("gradients_bytes") or 0
            o = r.get("optimizer_bytes") or 0
            a = r.get("activations_bytes") or r.get("kv_cache_bytes_end") or 0
            print(f"{cid:48s} {mib(r['peak_bytes']):>10s} {mib(r['weights_bytes']):>9s} {mib(g):>9s} "
                  f"{mib(o):>9s} {mib(a):>9s}  {r['peak_phase']} [{r['seconds']}s]", flush=True)
        if args.write:
            merged = merge_refs(args.refs_out, entries)
            write_yaml(args.refs_out, REFS_HEADER, {"cases": merged})
            print(f"wrote {args.refs_out} ({len(merged)} cases)")

    if args.json:
        args.json.write_text(json.dumps(raw, indent=1, default=str))
    if args.activations is None and args.refs is None:
        ap.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
