"""Precision: the one place that says what each precision stores and computes on.

Every module asks :func:`precision_spec` instead of keeping its own table:
the memory model reads the storage bytes, the performance model the element
bytes its traffic moves and the Tensor Core rate that applies, ``recommend``
which catalog field scores a GPU, and everything asks :func:`check_mode`
whether a precision can train.

Two kinds of precision appear here:

* **storage precisions** (``StoragePrecision``) are what weights, gradients
  and optimizer state are kept in: the memory model works in these;
* **compute-only precisions** (``tf32``, ``fp8``) say how matmuls run; they
  are stored as another precision (:attr:`Precision.storage_train`,
  :attr:`Precision.storage_inference`).

The table below is data. Each row cites what its bytes come from; the formulas
that use them are in ``docs/method.md``.
"""

from __future__ import annotations

import functools
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from gpusizer.errors import UsageError

#: Every precision a run can name, in the order help texts list them.
PrecisionName = Literal["fp64", "fp32", "tf32", "mixed", "fp16", "bf16", "fp8", "int8", "int4"]
#: The precisions weights are stored in (what the memory model counts).
StoragePrecision = Literal["fp64", "fp32", "fp16", "bf16", "mixed", "int8", "int4"]
#: The catalog fields that hold a Tensor Core rate.
TensorField = Literal[
    "tensor_tf32_tflops", "tensor_fp16_tflops", "tensor_bf16_tflops", "tensor_fp8_tflops", "tensor_int8_tops"
]

ALL_PRECISIONS: tuple[str, ...] = get_args(PrecisionName)
STORAGE_PRECISIONS: tuple[str, ...] = get_args(StoragePrecision)


#: QLoRA's and bitsandbytes' NF4: 4 bits a weight, one absmax per block of 64 weights.
#: Without double quantisation the absmax is fp32 (32/64 = 0.5 bits a weight); with it,
#: the absmax is 8-bit with one fp32 constant per 256 blocks (8/64 + 32/(64 x 256) = 0.127
#: bits). Dettmers et al. 2023, "QLoRA", section 3, "Double Quantization".
NF4_BITS = 4.0
NF4_BLOCK = 64
NF4_DQ_BLOCK = 256


def nf4_constant_bytes_per_weight(*, double_quant: bool) -> float:
    """Bytes per NF4 weight of its quantisation constants (the absmax and, with double
    quantisation, the constants of the absmax)."""
    if double_quant:
        return (8 / NF4_BLOCK + 32 / (NF4_BLOCK * NF4_DQ_BLOCK)) / 8
    return 32 / NF4_BLOCK / 8


def nf4_bytes_per_weight(*, double_quant: bool) -> float:
    """Bytes per NF4 weight, its absmax constants included."""
    return NF4_BITS / 8 + nf4_constant_bytes_per_weight(double_quant=double_quant)


class Storage(BaseModel):
    """What a storage precision keeps per element. Bytes are per element."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    #: bytes per stored weight (0.5 = 4 bits)
    weight_bytes: float = Field(gt=0)
    #: weight-only quantisation: only the layers' linear weights are stored this
    #: way, embeddings and the output head stay 16-bit, and each matrix is
    #: dequantised to 16 bits for its matmul
    quantised: bool = False
    #: extra bytes per quantised weight for its scales
    quant_scale_bytes: float = Field(default=0.0, ge=0)
    #: bytes per gradient element; None: the format cannot train
    grad_bytes: int | None = None
    #: bytes per optimizer-state element (Adam's m and v, momentum); None: cannot train
    optimizer_state_bytes: int | None = None
    #: bytes per saved activation element in the memory model
    activation_bytes: int = Field(gt=0)
    #: PyTorch autocast (AMP): fp32 residual stream, fp32 softmax, and 16-bit
    #: copies of the layer weights saved for backward
    autocast: bool = False
    #: the torch dtype exact mode stores weights in (None: exact mode cannot build it)
    torch_dtype: Literal["float64", "float32", "float16", "bfloat16"] | None = None
    #: bytes per trained parameter of an fp32 master copy kept with the optimizer state (and
    #: sharded as it is): DeepSpeed's 16-bit modes (:func:`deepspeed_storage`); 0: none apart
    master_weight_bytes: int = Field(default=0, ge=0)


class Precision(BaseModel):
    """What one precision stores and computes on. Bytes are per element."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    name: PrecisionName
    #: one line for help texts and reports
    description: str
    #: the same for an inference run, where the description names training state; None: as ``description``
    inference_description: str | None = None
    #: storage precision when training; None: this precision cannot train
    storage_train: StoragePrecision | None
    #: storage precision for inference
    storage_inference: StoragePrecision
    #: how it is stored, for the storage precisions; None for tf32 and fp8
    storage: Storage | None = None
    # -- compute -------------------------------------------------------------
    #: bytes per matmul operand element (the weight stream of the performance model)
    compute_element_bytes: float = Field(gt=0)
    #: bytes per KV-cache element during decode
    kv_element_bytes: int = Field(gt=0)
    #: bytes per activation element in memory-bound layers
    traffic_activation_bytes: int = Field(gt=0)
    #: bytes per gradient element in the data-parallel all-reduce; None = grad_bytes
    #: of the training storage precision
    allreduce_grad_bytes: int | None = None
    #: the catalog's Tensor Core rate that this precision's matmuls run at; None
    #: for fp64 and strict fp32 (CUDA cores)
    tensor_field: TensorField | None
    #: how the catalog labels that rate
    tensor_label: str | None = None
    #: fp32 only: the Tensor Core rate its matmuls run at when TF32 is allowed
    #: (cuDNN convolutions, TensorFlow and NGC containers allow it by default)
    tf32_field: TensorField | None = None
    #: Pascal GP10x (compute capability 6.1) runs it with DP4A at 4x the FP32 rate
    dp4a: bool = False
    #: where its matmuls run without that Tensor Core rate: FP64 or FP32 units,
    #: 16-bit CUDA-core math ("cuda-16bit"), or at the fp16 precision's rate
    without_tensor: Literal["fp64-units", "fp32-units", "cuda-16bit", "fp16-rate"] = "fp32-units"
    #: runs at the same Tensor Core rate as this precision on architectures from
    #: ``same_rate_from`` on (BF16 at the FP16 rate on Ampere and later), so a
    #: missing catalog figure can be read from that one
    same_rate_as: PrecisionName | None = None
    same_rate_from: str | None = None
    #: attention's QK^T and PV take 16-bit inputs even when the weights' matmuls
    #: run at this precision
    attention_at_16bit: bool = False
    #: ``recommend --precision`` accepts it (its rules are written for it)
    rule_precision: bool = True
    #: the eager PyTorch operation table (data/cnn_ops.json) a step at this precision runs: fp32
    #: math, autocast over fp32 weights (mixed), or a .half() model (pure fp16 and bf16);
    #: None for int8/fp8/int4, which run in fused engines that move fewer bytes
    eager_ops: Literal["fp32", "mixed", "half"] | None = None


#: The table. Sources of the bytes:
#: * weights, gradients, optimizer state: PyTorch dtypes; ``mixed`` is PyTorch AMP
#:   with fp32 master weights (Micikevicius et al. 2018, "Mixed Precision Training");
#: * int4: bitsandbytes NF4 stores one fp32 absmax per block of 64 weights
#:   (Dettmers et al. 2023, QLoRA, section 2), 4/64 bytes a weight; int8 with
#:   per-row scales, which are negligible (LLM.int8(), Dettmers et al. 2022);
#: * activations: 16-bit for everything autocast or .half() touches;
#: * KV cache: FP8 engines (TensorRT-LLM use_fp8) keep an FP8 cache; weight-only
#:   int8/int4 (llama.cpp, GPTQ, AWQ) keep a 16-bit one;
#: * fp8 training (Transformer Engine with Megatron) keeps fp32 master weights and
#:   reduces gradients in bf16 (grad_reduce_in_fp32=False).
_SPECS = (
    Precision(name="fp64", description="FP64 units, fp64 storage", storage_train="fp64", storage_inference="fp64",
              storage=Storage(weight_bytes=8, grad_bytes=8, optimizer_state_bytes=8, activation_bytes=8,
                              torch_dtype="float64"),
              compute_element_bytes=8, kv_element_bytes=8, traffic_activation_bytes=8, tensor_field=None, without_tensor="fp64-units"),
    Precision(name="fp32", description="FP32 storage; TF32 Tensor Cores on Ampere+ unless strict",
              storage_train="fp32", storage_inference="fp32",
              storage=Storage(weight_bytes=4, grad_bytes=4, optimizer_state_bytes=4, activation_bytes=4,
                              torch_dtype="float32"),
              compute_element_bytes=4, kv_element_bytes=4, traffic_activation_bytes=4,
              tensor_field=None, tf32_field="tensor_tf32_tflops", eager_ops="fp32"),
    Precision(name="tf32", description="TF32 Tensor Core matmuls, fp32 storage", storage_train="fp32",
              storage_inference="fp32", compute_element_bytes=4, kv_element_bytes=4, traffic_activation_bytes=4,
              tensor_field="tensor_tf32_tflops", tensor_label="tf32 Tensor Core", eager_ops="fp32"),
    Precision(name="mixed", description="AMP: FP16 Tensor Cores, fp32 master weights", storage_train="mixed",
              storage_inference="mixed",
              storage=Storage(weight_bytes=4, grad_bytes=4, optimizer_state_bytes=4, activation_bytes=2,
                              autocast=True, torch_dtype="float32"),
              compute_element_bytes=2, kv_element_bytes=2, traffic_activation_bytes=2,
              tensor_field="tensor_fp16_tflops", tensor_label="fp16 Tensor Core (fp32 accumulate)", without_tensor="cuda-16bit", eager_ops="mixed"),
    Precision(name="fp16", description="pure FP16: weights, gradients and optimizer state in 16 bits",
              inference_description="FP16 weights and activations",
              storage_train="fp16", storage_inference="fp16",
              storage=Storage(weight_bytes=2, grad_bytes=2, optimizer_state_bytes=2, activation_bytes=2,
                              torch_dtype="float16"),
              compute_element_bytes=2, kv_element_bytes=2, traffic_activation_bytes=2,
              tensor_field="tensor_fp16_tflops", tensor_label="fp16 Tensor Core (fp32 accumulate)", without_tensor="cuda-16bit", eager_ops="half"),
    Precision(name="bf16", description="pure BF16: weights, gradients and optimizer state in 16 bits",
              inference_description="BF16 weights and activations",
              storage_train="bf16", storage_inference="bf16",
              storage=Storage(weight_bytes=2, grad_bytes=2, optimizer_state_bytes=2, activation_bytes=2,
                              torch_dtype="bfloat16"),
              compute_element_bytes=2, kv_element_bytes=2, traffic_activation_bytes=2,
              tensor_field="tensor_bf16_tflops", tensor_label="bf16 Tensor Core", same_rate_as="fp16",
              same_rate_from="ampere", eager_ops="half"),
    Precision(name="fp8", description="FP8 Tensor Cores; trains like mixed, serves with 1-byte weights",
              storage_train="mixed", storage_inference="int8", compute_element_bytes=1, kv_element_bytes=1,
              traffic_activation_bytes=1, allreduce_grad_bytes=2, tensor_field="tensor_fp8_tflops", tensor_label="fp8 Tensor Core", without_tensor="fp16-rate",
              attention_at_16bit=True),
    Precision(name="int8", description="8-bit weight-only quantised inference", storage_train=None,
              storage_inference="int8", storage=Storage(weight_bytes=1, quantised=True, activation_bytes=2),
              compute_element_bytes=1, kv_element_bytes=2, traffic_activation_bytes=1,
              tensor_field="tensor_int8_tops", tensor_label="int8 Tensor Core", dp4a=True, without_tensor="fp16-rate"),
    Precision(name="int4", description="4-bit weight-only quantised inference (NF4 block scales)",
              storage_train=None, storage_inference="int4",
              storage=Storage(weight_bytes=0.5, quantised=True, quant_scale_bytes=nf4_bytes_per_weight(double_quant=False) - NF4_BITS / 8, activation_bytes=2),
              compute_element_bytes=0.5, kv_element_bytes=2, traffic_activation_bytes=2,
              tensor_field="tensor_fp16_tflops", tensor_label="fp16 Tensor Core (fp32 accumulate)", dp4a=True,
              without_tensor="cuda-16bit", attention_at_16bit=True, rule_precision=False),
)
PRECISIONS: dict[str, Precision] = {p.name: p for p in _SPECS}
#: The 16-bit matrix precisions, in the order a 16-bit rate is looked for (attention under fp8
#: or int4 runs at the first one the GPU's catalog entry knows: Gaudi 2 publishes only BF16).
SIXTEEN_BIT_MATRIX: tuple[str, ...] = ("fp16", "bf16")

#: The formats a KV cache is kept in, and bytes per element: 16-bit by default; FP8
#: (vLLM kv_cache_dtype="fp8", TensorRT-LLM use_fp8) and INT8/INT4 caches (TensorRT-LLM
#: int8 KV, KIVI-style 4-bit) halve or quarter it. Scales are per head or per tensor and
#: are negligible here.
KvCache = Literal["auto", "fp16", "bf16", "fp8", "int8", "int4"]
KV_CACHE_BYTES: dict[str, float] = {"fp16": 2, "bf16": 2, "fp8": 1, "int8": 1, "int4": 0.5}


#: What fit-model offers a served model that fits nowhere (memory/fit.py, REMEDIES), in order:
#: a one-byte KV cache, then weight-only int8 and int4 storage.
SMALLER_KV_CACHE: KvCache = "fp8"
SMALLER_SERVING_PRECISIONS: tuple[StoragePrecision, ...] = ("int8", "int4")


def kv_element_bytes(kv_cache: str, activation_bytes: float) -> float:
    """Bytes per KV-cache element: the named format, or the activations' ("auto")."""
    return activation_bytes if kv_cache == "auto" else KV_CACHE_BYTES[kv_cache]


class WeightFormat(BaseModel):
    """A published weight format: its bits per weight, scales included, and what it covers."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    name: str
    #: bits per quantised weight, block scales and zero points included
    bits_per_weight: float = Field(gt=0, le=32)
    #: "linear": the layers' linear weights, embeddings and head stay 16-bit;
    #: "model": an effective figure over every weight of a model file
    scope: Literal["linear", "model"]
    #: the storage precision whose compute path it runs on
    runs_as: StoragePrecision
    source: str


#: Weight formats people serve. GPTQ and AWQ int4 with groups of 128: a 16-bit scale
#: and a 4-bit zero per group (4 + 20/128 bits; AutoGPTQ/AutoAWQ packing). MXFP4: FP4
#: (E2M1) in blocks of 32 with one 8-bit shared scale (OCP Microscaling spec v1.0;
#: gpt-oss ships its experts so). FP8: one byte, per-tensor scales. GGUF: llama.cpp's
#: measured bits per weight of whole Llama 2 7B files (tools/quantize/README.md);
#: Q8_0 is blocks of 32 int8 with an fp16 scale (34 bytes / 32 weights).
WEIGHT_FORMATS: dict[str, WeightFormat] = {f.name: f for f in (
    WeightFormat(name="gptq-int4-g128", bits_per_weight=4 + 20 / 128, scope="linear", runs_as="int4",
                 source="AutoGPTQ packing: int4 weights, fp16 scale and packed int4 zero per group of 128"),
    WeightFormat(name="awq-int4-g128", bits_per_weight=4 + 20 / 128, scope="linear", runs_as="int4",
                 source="AutoAWQ GEMM packing: int4 weights, fp16 scale and packed int4 zero per group of 128"),
    WeightFormat(name="mxfp4", bits_per_weight=4.25, scope="linear", runs_as="int4",
                 source="OCP Microscaling Formats (MX) v1.0: 32 FP4 E2M1 elements share one E8M0 scale"),
    WeightFormat(name="fp8", bits_per_weight=8, scope="linear", runs_as="int8",
                 source="FP8 E4M3 weights with per-tensor scales (vLLM, TensorRT-LLM)"),
    WeightFormat(name="gguf-q4_k_m", bits_per_weight=4.84, scope="model", runs_as="int4",
                 source="llama.cpp tools/quantize/README.md, Llama 2 7B: Q4_K_M 4.84 bits per weight"),
    WeightFormat(name="gguf-q5_k_m", bits_per_weight=5.68, scope="model", runs_as="int4",
                 source="llama.cpp tools/quantize/README.md, Llama 2 7B: Q5_K_M 5.68 bits per weight"),
    WeightFormat(name="gguf-q6_k", bits_per_weight=6.56, scope="model", runs_as="int8",
                 source="llama.cpp tools/quantize/README.md, Llama 2 7B: Q6_K 6.56 bits per weight"),
    WeightFormat(name="gguf-q8_0", bits_per_weight=8.5, scope="model", runs_as="int8",
                 source="ggml block_q8_0: 32 int8 weights and an fp16 scale, 34 bytes"),
)}
WeightFormatName = Literal["gptq-int4-g128", "awq-int4-g128", "mxfp4", "fp8", "gguf-q4_k_m", "gguf-q5_k_m",
                           "gguf-q6_k", "gguf-q8_0"]


class CheckpointQuantization(BaseModel):
    """How a published checkpoint stores its weights (a Hugging Face config.json's
    ``quantization_config``), in this module's terms: one of :data:`WEIGHT_FORMATS`, a
    weight-only storage precision (bitsandbytes has no published format of its own: its NF4
    is the ``int4`` precision, LLM.int8() the ``int8`` one), or neither when gpusizer has no
    term for it (``mapped`` is false: the run is sized at its own precision, and says so)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    #: transformers' name for the method (QuantizationMethod: "fp8", "awq", "gptq", ...)
    quant_method: str
    weight_format: WeightFormatName | None = None
    precision: StoragePrecision | None = None
    #: the config's own description, for notes ("awq, 4-bit, groups of 128")
    detail: str

    @property
    def mapped(self) -> bool:
        return self.weight_format is not None or self.precision is not None

    @property
    def label(self) -> str:
        """What the run is sized as: the weight format, or the precision."""
        return self.weight_format or self.precision or "unmapped"


#: transformers' quant_method names (transformers.utils.quantization_config.QuantizationMethod)
#: whose checkpoints keep every quantised weight in one of WEIGHT_FORMATS whatever the other keys
#: say: DeepSeek-V3's "fp8" (E4M3, 128 x 128 blocks with fp32 scales: 0.002 bits a weight more),
#: FBGEMM's per-channel fp8, and gpt-oss's "mxfp4"
HF_QUANT_METHOD_FORMATS: dict[str, WeightFormatName] = {"fp8": "fp8", "fbgemm_fp8": "fp8", "mxfp4": "mxfp4"}
#: methods that say their bits and group size (AutoGPTQ, AutoAWQ): "<method>-int<bits>-g<group>"
#: names their WEIGHT_FORMATS entry; 8 bits run as the int8 precision
HF_QUANT_METHODS_WITH_BITS: tuple[str, ...] = ("gptq", "awq")


class MalformedQuantizationConfig(ValueError):
    """A ``quantization_config`` key transformers could not read: ``key`` (dotted, from
    ``quantization_config``) is not ``expected`` but ``value``. The config reader names the file."""

    def __init__(self, key: str, expected: str, value: object) -> None:
        super().__init__(f"key '{key}' must be {expected}")
        self.key, self.expected, self.value = key, expected, value


_QC = "quantization_config"


def _typed(config: dict[str, object], key: str, kind: type, expected: str, prefix: str = _QC) -> object:
    """``config[key]`` when absent (None) or a ``kind``; else :class:`MalformedQuantizationConfig`.
    A bool is not an integer here (JSON's true is not a number)."""
    value = config.get(key)
    if value is not None and (not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool)):
        raise MalformedQuantizationConfig(f"{prefix}.{key}", expected, value)
    return value


def _int_key(config: dict[str, object], key: str, prefix: str = _QC) -> int | None:
    value = _typed(config, key, int, "an integer", prefix)
    return value if isinstance(value, int) else None


def _integer_format(method: str, bits: int | None, group: int | None) -> tuple[WeightFormatName | None,
                                                                              StoragePrecision | None]:
    name = f"{method}-int{bits}-g{group}"
    if name in WEIGHT_FORMATS:
        return name, None  # type: ignore[return-value]  # a WeightFormatName: it is a key of WEIGHT_FORMATS
    return None, "int8" if bits == 8 else None


def checkpoint_quantization(config: object) -> CheckpointQuantization | None:
    """A checkpoint's weight storage from its config.json ``quantization_config`` (None when the
    config has none). Unknown methods and settings come back unmapped, never guessed, and are noted
    where the run is sized. A config transformers could not read is refused
    (:class:`MalformedQuantizationConfig`): not an object, a ``quant_method`` that is not a string,
    or a key read here of the wrong type (``bits`` "four"), rather than sized as if unquantised.
    As transformers' AutoQuantizationConfig.from_dict does, a config without ``quant_method`` that
    loads in 4 or 8 bits is bitsandbytes' (older BitsAndBytesConfig files); one without it otherwise
    (MLX's {"bits": 4, "group_size": 64}) is unmapped."""
    if config is None:
        return None
    if not isinstance(config, dict):
        raise MalformedQuantizationConfig(_QC, "an object", config)
    named = _typed(config, "quant_method", str, "a string")
    four, eight = (_typed(config, k, bool, "true or false") for k in ("load_in_4bit", "load_in_8bit"))
    method = named.lower() if isinstance(named, str) and named else (
        "bitsandbytes" if four is True or eight is True else "no quant_method")
    fmt: WeightFormatName | None = HF_QUANT_METHOD_FORMATS.get(method)
    precision: StoragePrecision | None = None
    detail = method
    if method in HF_QUANT_METHODS_WITH_BITS:
        bits, group = _int_key(config, "bits"), _int_key(config, "group_size")
        fmt, precision = _integer_format(method, bits, group)
        detail = f"{method}, {bits}-bit, groups of {group}"
    elif method == "bitsandbytes":
        # transformers' BitsAndBytesConfig: load_in_4bit (NF4 or FP4 blocks of 64) or load_in_8bit (LLM.int8())
        kind = _typed(config, "bnb_4bit_quant_type", str, "a string") or "fp4"
        if four is True:
            precision = "int4"
            detail = f"bitsandbytes 4-bit {kind}"
        elif eight is True:
            precision, detail = "int8", "bitsandbytes 8-bit"
    elif method == "compressed-tensors":
        # llm-compressor: one scheme for every quantised Linear; more than one group is not mapped
        groups = _typed(config, "config_groups", dict, "an object")
        first = next(iter(groups.values())) if isinstance(groups, dict) and len(groups) == 1 else None
        where = f"{_QC}.config_groups.{next(iter(groups))}" if isinstance(groups, dict) and groups else _QC
        if first is not None and not isinstance(first, dict):
            raise MalformedQuantizationConfig(where, "an object", first)
        weights = _typed(first, "weights", dict, "an object", where) if isinstance(first, dict) else None
        if isinstance(weights, dict):
            at = f"{where}.weights"
            bits, group = _int_key(weights, "num_bits", at), _int_key(weights, "group_size", at)
            kind = _typed(weights, "type", str, "a string", at)
            detail = f"compressed-tensors, {bits}-bit {kind}" + (f", groups of {group}" if group else "")
            if kind == "float" and bits == 8:
                fmt = "fp8"
            elif kind == "int":
                # W4A16 packs as GPTQ does (int4, a 16-bit scale per group)
                fmt, precision = _integer_format("gptq", bits, group)
    return CheckpointQuantization(quant_method=method, weight_format=fmt, precision=precision, detail=detail)


#: The dtypes LoRA adapters are kept in, with their gradients and optimizer state:
#: fp32 as peft keeps them (autocast_adapter_dtype=True), bf16 as torchtune and LitGPT do.
AdapterDtype = Literal["fp32", "bf16"]
ADAPTER_DTYPE_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2}


#: The precisions ``recommend --precision`` accepts.
RULE_PRECISIONS: tuple[str, ...] = tuple(n for n, p in PRECISIONS.items() if p.rule_precision)
#: What a run uses when no precision is given: AMP for training (what PyTorch
#: training scripts and the HF Trainer with fp16=True run), fp16 for inference.
DEFAULT_PRECISION: dict[str, StoragePrecision] = {"train": "mixed", "inference": "fp16"}
#: LoRA and QLoRA train adapters on a frozen 16-bit base (peft with Trainer(bf16=True);
#: QLoRA's bnb_4bit_compute_dtype=bfloat16)
ADAPTER_BASE_PRECISION: StoragePrecision = "bf16"


def precision_spec(name: str) -> Precision:
    """The table row for ``name``; a :class:`UsageError` for an unknown one."""
    try:
        return PRECISIONS[name]
    except KeyError:
        raise UsageError(f"unknown precision {name!r}", hint=f"one of {', '.join(ALL_PRECISIONS)}",
                         field="precision") from None


def storage_spec(name: str) -> Storage:
    """How a storage precision keeps weights, gradients and optimizer state."""
    storage = precision_spec(name).storage
    if storage is None:
        raise UsageError(f"precision {name!r} is not a storage format", hint=f"one of {', '.join(STORAGE_PRECISIONS)}")
    return storage


@functools.cache
def deepspeed_storage(storage: Storage) -> Storage:
    """How DeepSpeed ZeRO keeps the model state of a run stored as ``storage``.

    DeepSpeed refuses torch AMP with ZeRO ("Amp and ZeRO are not currently compatible, please
    use (legacy) fp16 mode", deepspeed/runtime/engine.py, _do_optimizer_sanity_check), so a run
    asked for in AMP (fp32 weights, 16-bit math) is DeepSpeed's own 16-bit mode: 16-bit
    weights and gradients on the GPU and no autocast (the module itself is cast to 16 bits).
    Whatever the weights' dtype, ZeRO keeps an fp32 master copy of each partition
    (``.clone().float()``: stage_1_and_2.py, stage3.py) with fp32 optimizer state, sharded as
    the optimizer state is. With Adam that is the ZeRO paper's 2 + 2 + 12 bytes a parameter
    (Rajbhandari et al. 2020, section 3.1, K = 12) in 16 bits, and 4 + 4 + 12 in fp32."""
    update: dict[str, object] = {"master_weight_bytes": 4, "optimizer_state_bytes": 4}
    if storage.autocast:
        half = storage.activation_bytes
        update |= {"weight_bytes": half, "grad_bytes": half, "autocast": False}
    return storage.model_copy(update=update)


def default_precision(mode: str, *, adapters: bool = False) -> StoragePrecision:
    """The precision a run uses when none is given: AMP to train (a frozen 16-bit base
    under adapters), fp16 to serve."""
    if adapters and mode == "train":
        return ADAPTER_BASE_PRECISION
    return DEFAULT_PRECISION[mode]


def check_mode(name: str, mode: str) -> Precision:
    """The row for ``name``, or a :class:`UsageError` if it cannot run in ``mode``."""
    spec = precision_spec(name)
    if mode == "train" and spec.storage_train is None:
        raise UsageError(
            f"precision {name} is weight-only quantisation for inference; train with fp32, mixed, fp16 or bf16",
            hint="run inference, or train in mixed or bf16",
            field="precision",
        )
    return spec


def storage_precision(name: str, mode: str) -> StoragePrecision:
    """The storage precision the memory model counts for ``name`` in ``mode``.

    tf32 keeps fp32 storage; fp8 trains like mixed precision (Transformer
    Engine keeps fp32 master weights and 16-bit activations) and serves with
    one-byte weights, as int8 does.
    """
    spec = check_mode(name, mode)
    stored = spec.storage_train if mode == "train" else spec.storage_inference
    assert stored is not None  # check_mode rejected the None case
    return stored


__all__ = [
    "ALL_PRECISIONS",
    "CheckpointQuantization",
    "MalformedQuantizationConfig",
    "DEFAULT_PRECISION",
    "PRECISIONS",
    "RULE_PRECISIONS",
    "SIXTEEN_BIT_MATRIX",
    "STORAGE_PRECISIONS",
    "Precision",
    "PrecisionName",
    "StoragePrecision",
    "check_mode",
    "checkpoint_quantization",
    "deepspeed_storage",
    "default_precision",
    "precision_spec",
    "storage_spec",
    "Storage",
    "storage_precision",
]
