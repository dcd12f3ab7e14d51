"""A Hugging Face config's ``quantization_config`` sets an inference run's weight storage.

Each ``quantization_config`` below is the one its checkpoint publishes in config.json on the
Hugging Face Hub (the repository is named with it); the rest of each config is the
architecture's own config from tests/test_hfconfig.py (the quantised checkpoints keep it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import gpusizer
from gpusizer.domain.precision import WEIGHT_FORMATS, checkpoint_quantization
from gpusizer.domain.run import RunConfig
from gpusizer.errors import ExitCode
from gpusizer.memory.estimate import estimate_memory
from gpusizer.models.hfconfig import model_from_hf_config
from tests.test_hfconfig import LLAMA_3_8B, NEW_FAMILY_CONFIGS, QWEN2_7B

#: deepseek-ai/DeepSeek-V3 config.json (and README_WEIGHTS.md, "FP8 Configuration")
DEEPSEEK_V3_FP8 = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                   "weight_block_size": [128, 128]}
#: Qwen/Qwen2.5-7B-Instruct-AWQ config.json (Qwen2.5-7B has Qwen2-7B's shape)
QWEN25_7B_AWQ = {"bits": 4, "group_size": 128, "modules_to_not_convert": None, "quant_method": "awq",
                 "version": "gemm", "zero_point": True}
#: hugging-quants/Meta-Llama-3.1-8B-Instruct-GPTQ-INT4 config.json
LLAMA31_8B_GPTQ = {"bits": 4, "damp_percent": 0.01, "desc_act": True, "group_size": 128,
                   "model_file_base_name": None, "model_name_or_path": None, "quant_method": "gptq",
                   "static_groups": False, "sym": True, "true_sequential": True}
#: unsloth/llama-3-8b-bnb-4bit config.json (transformers' BitsAndBytesConfig, serialised)
LLAMA3_8B_BNB_4BIT = {"_load_in_4bit": True, "_load_in_8bit": False, "bnb_4bit_compute_dtype": "bfloat16",
                      "bnb_4bit_quant_storage": "uint8", "bnb_4bit_quant_type": "nf4",
                      "bnb_4bit_use_double_quant": True, "llm_int8_enable_fp32_cpu_offload": False,
                      "llm_int8_has_fp16_weight": False, "llm_int8_skip_modules": None,
                      "llm_int8_threshold": 6.0, "load_in_4bit": True, "load_in_8bit": False,
                      "quant_method": "bitsandbytes"}
#: openai/gpt-oss-20b config.json (its experts are MXFP4; gpt_oss is not a model_type the reader takes)
GPT_OSS_MXFP4 = {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                            "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"}


def _write(tmp_path: Path, name: str, config: dict[str, object], quant: dict[str, object]) -> Path:
    path = tmp_path / name / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps({**config, "quantization_config": quant}))
    return path


@pytest.mark.parametrize(("quant", "weight_format", "precision"), [
    (DEEPSEEK_V3_FP8, "fp8", None),
    (QWEN25_7B_AWQ, "awq-int4-g128", None),
    (LLAMA31_8B_GPTQ, "gptq-int4-g128", None),
    (LLAMA3_8B_BNB_4BIT, None, "int4"),
    (GPT_OSS_MXFP4, "mxfp4", None),
    ({**LLAMA3_8B_BNB_4BIT, "load_in_4bit": False, "load_in_8bit": True}, None, "int8"),
], ids=["deepseek-v3-fp8", "qwen2.5-awq", "llama3.1-gptq", "llama3-bnb-4bit", "gpt-oss-mxfp4", "bnb-8bit"])
def test_published_quantization_configs_map_to_the_weight_formats(quant, weight_format, precision):
    q = checkpoint_quantization(quant)
    assert q is not None and q.mapped
    assert (q.weight_format, q.precision) == (weight_format, precision)
    assert q.weight_format is None or q.weight_format in WEIGHT_FORMATS


@pytest.mark.parametrize("quant", [
    {"quant_method": "hqq", "nbits": 4},  # no weight format for it here
    {**QWEN25_7B_AWQ, "group_size": 64},  # a group size WEIGHT_FORMATS has no entry for
    {"quant_method": "bitsandbytes"},  # neither 4 nor 8 bits said
])
def test_configs_without_a_weight_format_are_left_unmapped(quant):
    q = checkpoint_quantization(quant)
    assert q is not None and not q.mapped and q.label == "unmapped"


def test_deepseek_v3_fp8_is_sized_as_its_fp8_checkpoint(tmp_path, cli_json):
    """The published DeepSeek-V3 checkpoint is FP8 (about 671 GB of weights, not fp16's 1,342 GB),
    and DeepSeek's reference deployment is one 8 x H200 node (audit finding 8)."""
    path = _write(tmp_path, "DeepSeek-V3", NEW_FAMILY_CONFIGS["deepseek-v3"], DEEPSEEK_V3_FP8)
    doc = cli_json("fit-model", "--hf-config", str(path), "--inference", "--seq-len", "4096", "--memory", "2000GB")
    assert doc["input"]["weight_format"] == "fp8"
    assert any(n.startswith("weight format fp8 (default: the checkpoint's quantization_config") for n in doc["notes"])
    shape = gpusizer.resolve_model(hf_config=path)
    as_fp8 = estimate_memory(shape, RunConfig(mode="inference", seq_len=4096, weight_format="fp8"))
    as_fp16 = estimate_memory(shape, RunConfig(mode="inference", seq_len=4096))
    weights = doc["results"]["breakdown"]["weights_bytes"]
    assert weights == as_fp8.weights_bytes and 0.49 < weights / as_fp16.weights_bytes < 0.51
    assert 6.7e11 < weights < 6.8e11  # 671B parameters at a byte, embeddings and head at two
    served = cli_json("serve", "--hf-config", str(path), "--gpu", "h200", "--users", "8", "--context", "4096")
    assert served["input"]["weight_format"] == "fp8" and served["results"]["rows"][0]["gpus"] == 8


def test_an_explicit_precision_or_weight_format_wins(tmp_path, cli_json):
    path = _write(tmp_path, "Qwen2.5-7B-Instruct-AWQ", QWEN2_7B, QWEN25_7B_AWQ)
    default = cli_json("estimate", "--hf-config", str(path), "--gpu", "l4", "--inference", "--seq-len", "1024",
                       "--batch", "1")
    assert default["input"]["weight_format"] == "awq-int4-g128"
    given = cli_json("fit-model", "--hf-config", str(path), "--inference", "--precision", "fp16", "--gpu", "l4")
    assert given["input"]["precision"] == "fp16" and given["input"]["weight_format"] is None
    assert any("is not applied: the precision or weight format given is used" in n for n in given["notes"])
    weights = cli_json("serve", "--hf-config", str(path), "--gpu", "l4", "--context", "1024", "--weights", "fp8")
    assert weights["input"]["weight_format"] == "fp8"


def test_bitsandbytes_4bit_serves_as_the_int4_precision(tmp_path, cli_json):
    path = _write(tmp_path, "llama-3-8b-bnb-4bit", LLAMA_3_8B, LLAMA3_8B_BNB_4BIT)
    doc = cli_json("fit-model", "--hf-config", str(path), "--inference", "--gpu", "l4")
    assert doc["input"]["precision"] == "int4" and doc["input"]["weight_format"] is None


def test_unmapped_and_training_runs_say_so(tmp_path, cli_json):
    path = _write(tmp_path, "hqq", LLAMA_3_8B, {"quant_method": "hqq", "nbits": 4})
    doc = cli_json("fit-model", "--hf-config", str(path), "--inference", "--gpu", "h100")
    assert doc["input"]["precision"] == "fp16"
    assert any("quantization_config (hqq) has no weight format in gpusizer" in n for n in doc["notes"])
    awq = _write(tmp_path, "awq", QWEN2_7B, QWEN25_7B_AWQ)
    train = cli_json("fit-model", "--hf-config", str(awq), "--gpu", "h100", "--seq-len", "512", code=4)
    assert train["input"]["weight_format"] is None
    assert any("is for inference: training counts the weights" in n for n in train["notes"])


def test_zoo_models_carry_no_checkpoint_quantization():
    assert gpusizer.resolve_model("llama-3.1-8b").checkpoint is None
    assert model_from_hf_config(QWEN2_7B, "config.json").checkpoint_quantization is None


def test_recommend_ranks_the_checkpoints_weights(tmp_path, cli_json):
    awq = _write(tmp_path, "awq", QWEN2_7B, QWEN25_7B_AWQ)
    doc = cli_json("recommend", "--workload", "llm-inference", "--hf-config", str(awq), "--top", "1")
    assert doc["input"]["weight_format"] == "awq-int4-g128"
    bnb = _write(tmp_path, "bnb", LLAMA_3_8B, LLAMA3_8B_BNB_4BIT)
    doc = cli_json("recommend", "--workload", "llm-inference", "--hf-config", str(bnb), "--top", "1")
    assert doc["input"]["precision"] != "int4"
    assert any("the checkpoint's weights are int4" in n and "does not rank" in n for n in doc["notes"])


@pytest.mark.parametrize(("quant", "key", "expected"), [
    ({**LLAMA31_8B_GPTQ, "bits": "four"}, "quantization_config.bits", "an integer, got str 'four'"),
    ({**LLAMA31_8B_GPTQ, "bits": True}, "quantization_config.bits", "an integer, got bool True"),
    ({**QWEN25_7B_AWQ, "group_size": "128"}, "quantization_config.group_size", "an integer, got str '128'"),
    ({"quant_method": 5}, "quantization_config.quant_method", "a string, got int 5"),
    ([], "quantization_config", "an object, got list []"),
    ({**LLAMA3_8B_BNB_4BIT, "load_in_4bit": "yes"}, "quantization_config.load_in_4bit", "true or false, got str 'yes'"),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {"weights": {"num_bits": "8"}}}},
     "quantization_config.config_groups.group_0.weights.num_bits", "an integer, got str '8'"),
], ids=["bits-word", "bits-bool", "group-string", "method-number", "list", "bnb-flag", "compressed-bits"])
def test_a_malformed_quantization_config_is_a_data_error_naming_the_file_and_key(tmp_path, cli, quant, key,
                                                                                  expected):
    """A quantization_config transformers could not read is refused (exit 3, one line naming the
    file and the key), as the config's other keys are, instead of being sized as fp16 weights."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA_3_8B, "quantization_config": quant}))
    result = cli("fit-model", "--hf-config", str(path), "--inference", "--gpu", "l4", "--json")
    assert result.exit_code == ExitCode.DATA
    message = json.loads(result.stdout)["error"]["message"]
    assert message == f"{path}: key '{key}' must be {expected}"


def test_a_config_without_quant_method_is_bitsandbytes_when_it_loads_in_4_bits_else_unmapped(tmp_path, cli_json):
    """transformers' AutoQuantizationConfig.from_dict takes a config with load_in_4bit or
    load_in_8bit and no quant_method as bitsandbytes' (older BitsAndBytesConfig files); MLX's
    {"bits": 4, "group_size": 64} has no weight format here and the run says so."""
    legacy = {k: v for k, v in LLAMA3_8B_BNB_4BIT.items() if k != "quant_method"}
    q = checkpoint_quantization(legacy)
    assert q is not None and (q.quant_method, q.precision) == ("bitsandbytes", "int4")
    mlx = _write(tmp_path, "mlx-4bit", LLAMA_3_8B, {"bits": 4, "group_size": 64})
    doc = cli_json("fit-model", "--hf-config", str(mlx), "--inference", "--gpu", "l4")
    assert doc["input"]["precision"] == "fp16" and doc["input"]["weight_format"] is None
    assert any("quantization_config (no quant_method) has no weight format in gpusizer" in n for n in doc["notes"])
