"""gpusizer.models.hfconfig: zoo models from Hugging Face config.json files.

The configs below are the real config.json contents of the named Hugging Face
repositories, written inline (no network). Each expected parameter count is the
exact ``sum(p.numel() for p in model.parameters())`` of the transformers class
named in gpusizer.models.hfconfig's docstring; the comment beside each count says where
that exact figure is published. Most configs come from published copies of the
hub files; t5-v1_1-base's agrees with the T5Config that transformers prints
when loading it (which adds derived keys such as is_gated_act).
"""

from __future__ import annotations

import json

import pytest

from gpusizer.errors import DataFileError, ExitCode
from gpusizer.models import hfconfig
from gpusizer.models.hfconfig import HF_CLASS, SUPPORTED_MODEL_TYPES, model_from_hf_config
from gpusizer.models.zoo import Zoo, load_zoo

# ----------------------------------------------------------------------------- configs

LLAMA_2_7B = json.loads("""{
  "_name_or_path": "meta-llama/Llama-2-7b-hf",
  "architectures": ["LlamaForCausalLM"],
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 11008,
  "max_position_embeddings": 4096,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 32,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "tie_word_embeddings": false,
  "torch_dtype": "float16",
  "transformers_version": "4.31.0.dev0",
  "use_cache": true,
  "vocab_size": 32000
}""")

LLAMA_2_13B = json.loads("""{
  "_name_or_path": "meta-llama/Llama-2-13b-hf",
  "architectures": ["LlamaForCausalLM"],
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 5120,
  "initializer_range": 0.02,
  "intermediate_size": 13824,
  "max_position_embeddings": 4096,
  "model_type": "llama",
  "num_attention_heads": 40,
  "num_hidden_layers": 40,
  "num_key_value_heads": 40,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "tie_word_embeddings": false,
  "torch_dtype": "float16",
  "transformers_version": "4.32.0.dev0",
  "use_cache": true,
  "vocab_size": 32000
}""")

LLAMA_2_70B = json.loads("""{
  "_name_or_path": "meta-llama/Llama-2-70b-hf",
  "architectures": ["LlamaForCausalLM"],
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 8192,
  "initializer_range": 0.02,
  "intermediate_size": 28672,
  "max_position_embeddings": 4096,
  "model_type": "llama",
  "num_attention_heads": 64,
  "num_hidden_layers": 80,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "tie_word_embeddings": false,
  "torch_dtype": "float16",
  "transformers_version": "4.32.0.dev0",
  "use_cache": true,
  "vocab_size": 32000
}""")

LLAMA_3_8B = json.loads("""{
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 8192,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.40.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
}""")

MISTRAL_7B = json.loads("""{
  "architectures": ["MistralForCausalLM"],
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 32768,
  "model_type": "mistral",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05,
  "rope_theta": 10000.0,
  "sliding_window": 4096,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.34.0.dev0",
  "use_cache": true,
  "vocab_size": 32000
}""")

MIXTRAL_8X7B = json.loads("""{
  "architectures": ["MixtralForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 32768,
  "model_type": "mixtral",
  "num_attention_heads": 32,
  "num_experts_per_tok": 2,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "num_local_experts": 8,
  "output_router_logits": false,
  "rms_norm_eps": 1e-05,
  "rope_theta": 1000000.0,
  "router_aux_loss_coef": 0.02,
  "sliding_window": null,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.36.0.dev0",
  "use_cache": true,
  "vocab_size": 32000
}""")

QWEN2_7B = json.loads("""{
  "architectures": ["Qwen2ForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151643,
  "hidden_act": "silu",
  "hidden_size": 3584,
  "initializer_range": 0.02,
  "intermediate_size": 18944,
  "max_position_embeddings": 131072,
  "max_window_layers": 28,
  "model_type": "qwen2",
  "num_attention_heads": 28,
  "num_hidden_layers": 28,
  "num_key_value_heads": 4,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "sliding_window": 131072,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.37.2",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 152064
}""")

GPT2 = json.loads("""{
  "activation_function": "gelu_new",
  "architectures": ["GPT2LMHeadModel"],
  "attn_pdrop": 0.1,
  "bos_token_id": 50256,
  "embd_pdrop": 0.1,
  "eos_token_id": 50256,
  "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05,
  "model_type": "gpt2",
  "n_ctx": 1024,
  "n_embd": 768,
  "n_head": 12,
  "n_layer": 12,
  "n_positions": 1024,
  "resid_pdrop": 0.1,
  "summary_activation": null,
  "summary_first_dropout": 0.1,
  "summary_proj_to_labels": true,
  "summary_type": "cls_index",
  "summary_use_proj": true,
  "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}},
  "vocab_size": 50257
}""")

GPT2_XL = json.loads("""{
  "activation_function": "gelu_new",
  "architectures": ["GPT2LMHeadModel"],
  "attn_pdrop": 0.1,
  "bos_token_id": 50256,
  "embd_pdrop": 0.1,
  "eos_token_id": 50256,
  "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05,
  "model_type": "gpt2",
  "n_ctx": 1024,
  "n_embd": 1600,
  "n_head": 25,
  "n_layer": 48,
  "n_positions": 1024,
  "output_past": true,
  "resid_pdrop": 0.1,
  "summary_activation": null,
  "summary_first_dropout": 0.1,
  "summary_proj_to_labels": true,
  "summary_type": "cls_index",
  "summary_use_proj": true,
  "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}},
  "vocab_size": 50257
}""")

PYTHIA_1B = json.loads("""{
  "architectures": ["GPTNeoXForCausalLM"],
  "bos_token_id": 0,
  "eos_token_id": 0,
  "hidden_act": "gelu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 8192,
  "layer_norm_eps": 1e-05,
  "max_position_embeddings": 2048,
  "model_type": "gpt_neox",
  "num_attention_heads": 8,
  "num_hidden_layers": 16,
  "rotary_emb_base": 10000,
  "rotary_pct": 0.25,
  "tie_word_embeddings": false,
  "torch_dtype": "float16",
  "transformers_version": "4.24.0",
  "use_cache": true,
  "use_parallel_residual": true,
  "vocab_size": 50304
}""")

BERT_BASE_UNCASED = json.loads("""{
  "architectures": ["BertForMaskedLM"],
  "attention_probs_dropout_prob": 0.1,
  "gradient_checkpointing": false,
  "hidden_act": "gelu",
  "hidden_dropout_prob": 0.1,
  "hidden_size": 768,
  "initializer_range": 0.02,
  "intermediate_size": 3072,
  "layer_norm_eps": 1e-12,
  "max_position_embeddings": 512,
  "model_type": "bert",
  "num_attention_heads": 12,
  "num_hidden_layers": 12,
  "pad_token_id": 0,
  "position_embedding_type": "absolute",
  "transformers_version": "4.6.0.dev0",
  "type_vocab_size": 2,
  "use_cache": true,
  "vocab_size": 30522
}""")

BERT_LARGE_UNCASED = json.loads("""{
  "architectures": ["BertForMaskedLM"],
  "attention_probs_dropout_prob": 0.1,
  "gradient_checkpointing": false,
  "hidden_act": "gelu",
  "hidden_dropout_prob": 0.1,
  "hidden_size": 1024,
  "initializer_range": 0.02,
  "intermediate_size": 4096,
  "layer_norm_eps": 1e-12,
  "max_position_embeddings": 512,
  "model_type": "bert",
  "num_attention_heads": 16,
  "num_hidden_layers": 24,
  "pad_token_id": 0,
  "position_embedding_type": "absolute",
  "transformers_version": "4.6.0.dev0",
  "type_vocab_size": 2,
  "use_cache": true,
  "vocab_size": 30522
}""")

ROBERTA_BASE = json.loads("""{
  "architectures": ["RobertaForMaskedLM"],
  "attention_probs_dropout_prob": 0.1,
  "bos_token_id": 0,
  "eos_token_id": 2,
  "hidden_act": "gelu",
  "hidden_dropout_prob": 0.1,
  "hidden_size": 768,
  "initializer_range": 0.02,
  "intermediate_size": 3072,
  "layer_norm_eps": 1e-05,
  "max_position_embeddings": 514,
  "model_type": "roberta",
  "num_attention_heads": 12,
  "num_hidden_layers": 12,
  "pad_token_id": 1,
  "type_vocab_size": 1,
  "vocab_size": 50265
}""")

_T5_TASKS = """{
    "summarization": {
      "early_stopping": true, "length_penalty": 2.0, "max_length": 200, "min_length": 30,
      "no_repeat_ngram_size": 3, "num_beams": 4, "prefix": "summarize: "
    },
    "translation_en_to_de": {
      "early_stopping": true, "max_length": 300, "num_beams": 4, "prefix": "translate English to German: "
    },
    "translation_en_to_fr": {
      "early_stopping": true, "max_length": 300, "num_beams": 4, "prefix": "translate English to French: "
    },
    "translation_en_to_ro": {
      "early_stopping": true, "max_length": 300, "num_beams": 4, "prefix": "translate English to Romanian: "
    }
  }"""

T5_BASE = json.loads("""{
  "architectures": ["T5ForConditionalGeneration"],
  "d_ff": 3072,
  "d_kv": 64,
  "d_model": 768,
  "decoder_start_token_id": 0,
  "dropout_rate": 0.1,
  "eos_token_id": 1,
  "initializer_factor": 1.0,
  "is_encoder_decoder": true,
  "layer_norm_epsilon": 1e-06,
  "model_type": "t5",
  "n_positions": 512,
  "num_heads": 12,
  "num_layers": 12,
  "output_past": true,
  "pad_token_id": 0,
  "relative_attention_num_buckets": 32,
  "task_specific_params": @TASKS@,
  "vocab_size": 32128
}""".replace("@TASKS@", _T5_TASKS))

T5_V1_1_BASE = json.loads("""{
  "architectures": ["T5ForConditionalGeneration"],
  "d_ff": 2048,
  "d_kv": 64,
  "d_model": 768,
  "decoder_start_token_id": 0,
  "dropout_rate": 0.1,
  "eos_token_id": 1,
  "feed_forward_proj": "gated-gelu",
  "initializer_factor": 1.0,
  "is_encoder_decoder": true,
  "layer_norm_epsilon": 1e-06,
  "model_type": "t5",
  "num_decoder_layers": 12,
  "num_heads": 12,
  "num_layers": 12,
  "output_past": true,
  "pad_token_id": 0,
  "relative_attention_num_buckets": 32,
  "tie_word_embeddings": false,
  "vocab_size": 32128
}""")

MT5_SMALL = json.loads("""{
  "_name_or_path": "google/mt5-small",
  "architectures": ["MT5ForConditionalGeneration"],
  "d_ff": 1024,
  "d_kv": 64,
  "d_model": 512,
  "decoder_start_token_id": 0,
  "dropout_rate": 0.1,
  "eos_token_id": 1,
  "feed_forward_proj": "gated-gelu",
  "initializer_factor": 1.0,
  "is_encoder_decoder": true,
  "layer_norm_epsilon": 1e-06,
  "model_type": "mt5",
  "num_decoder_layers": 8,
  "num_heads": 6,
  "num_layers": 8,
  "pad_token_id": 0,
  "relative_attention_num_buckets": 32,
  "tie_word_embeddings": false,
  "tokenizer_class": "T5Tokenizer",
  "transformers_version": "4.5.0",
  "use_cache": true,
  "vocab_size": 250112
}""")

# (Hugging Face repository, config, exact parameter count). Every count was also
# reproduced by building the transformers 4.46.3 class on the meta device. Where
# the count is published:
CASES = [
    # KerasHub Llama preset metadata "params": 6738415616; PEFT's print_trainable_parameters
    # shows "all params: 6738415616" for huggyllama/llama-7b (same shape).
    ("meta-llama/Llama-2-7b-hf", LLAMA_2_7B, 6_738_415_616),
    # AutoModelForCausalLM(...).num_parameters() lists 13015864320; the hub's safetensors
    # total, 13,015,866,880, also counts 40 x 64 rotary inv_freq buffers (not parameters).
    ("meta-llama/Llama-2-13b-hf", LLAMA_2_13B, 13_015_864_320),
    # Fine-tuning parameter table: "togethercomputer/llama-2-70b": 68976648192; the hub's
    # safetensors total, 68,976,653,312, also counts 80 x 64 inv_freq buffers.
    ("meta-llama/Llama-2-70b-hf", LLAMA_2_70B, 68_976_648_192),
    # Ollama `show` for llama3 8B: general.parameter_count 8030261248 ("8.0B"); the hub's
    # safetensors total for meta-llama/Llama-3.1-8B (same shape) is 8030261248.
    ("meta-llama/Meta-Llama-3-8B", LLAMA_3_8B, 8_030_261_248),
    # Ollama `show` for mistral 7B: general.parameter_count 7241732096 (Mistral's "7.3B").
    ("mistralai/Mistral-7B-v0.1", MISTRAL_7B, 7_241_732_096),
    # KerasHub Mixtral preset metadata "params": 46702792704; an FSDP training log prints
    # "Created model with total parameters: 46702792704 (46.70 B)".
    ("mistralai/Mixtral-8x7B-v0.1", MIXTRAL_8X7B, 46_702_792_704),
    # Ollama `show` for qwen2 7B (context_length 131072): general.parameter_count
    # 7615616512; the Qwen2.5-7B model card (same shape) gives 7.61B, 6.53B non-embedding.
    ("Qwen/Qwen2-7B", QWEN2_7B, 7_615_616_512),
    # hiq's print_model of GPT2LMHeadModel: "<all params:124439808>".
    ("openai-community/gpt2", GPT2, 124_439_808),
    # KerasHub gpt2_extra_large_en "params": 1557611200; a public notebook prints
    # format(get_params(AutoModel.from_pretrained('gpt2-xl'))) as 1,557,611,200.
    ("openai-community/gpt2-xl", GPT2_XL, 1_557_611_200),
    # Printed for the Pythia suite: "With GPTNeoXForCausalLM, with_embed_size_to_params =
    # {..., '1b': 1011781632, ...}".
    ("EleutherAI/pythia-1b", PYTHIA_1B, 1_011_781_632),
    # "AutoModelForMaskedLM.from_pretrained('bert-base-uncased') | Architectures:
    # BertForMaskedLM | trainable_params: 109514298".
    ("google-bert/bert-base-uncased", BERT_BASE_UNCASED, 109_514_298),
    # BertModel with pooler is 335,141,888 (KerasHub bert_large_en_uncased "params"; a test
    # asserting BertModel.from_pretrained("bert-large-uncased") has 335141888);
    # BertForMaskedLM = that - pooler 1,049,600 + transform 1,049,600 + LayerNorm 2,048
    # + decoder bias 30,522.
    ("google-bert/bert-large-uncased", BERT_LARGE_UNCASED, 335_174_458),
    # The hub's safetensors metadata for roberta-base, {F32: 124697433, I64: 514} (the I64
    # tensor is the position_ids buffer), in huggingface.js's tests.
    ("FacebookAI/roberta-base", ROBERTA_BASE, 124_697_433),
    # KerasHub t5_base preset "params": 222903552; adapter code uses
    # orig_param_size = 222903552 for "t5-base".
    ("google-t5/t5-base", T5_BASE, 222_903_552),
    # KerasHub t5_1.1_base preset "params": 247577856; flan-t5-base (same shape) prints
    # "all model parameters: 247577856"; nanoT5's README lists base 247577856. (transformers
    # 5.x forces T5 to tie lm_head and would count 222,903,552; the checkpoint holds its own
    # lm_head.)
    ("google/t5-v1_1-base", T5_V1_1_BASE, 247_577_856),
    # lm-vocab-trimmer's tables: mt5-small {"embedding": 256114688, "full": 300176768}.
    ("google/mt5-small", MT5_SMALL, 300_176_768),
]


def _derive(repo: str, doc: dict):
    return model_from_hf_config(doc, f"{repo}/config.json")


@pytest.mark.parametrize(("repo", "doc", "params"), CASES, ids=[c[0] for c in CASES])
def test_params_match_the_published_exact_count(repo, doc, params):
    assert _derive(repo, doc).params == params


def test_mixtral_total_and_active_parameters():
    m = _derive("mistralai/Mixtral-8x7B-v0.1", MIXTRAL_8X7B)
    # total: KerasHub mixtral_8_7b_en "params": 46702792704; active: 2 of 8 experts per
    # layer, 46,702,792,704 - 32 x 6 x 176,160,768 = 12,879,925,248 (Mistral: "12.9B").
    assert (m.params, m.active_params) == (46_702_792_704, 12_879_925_248)
    assert (m.experts, m.experts_per_token, m.ffn) == (8, 2, 14336)


def test_dense_models_have_no_active_params_or_experts():
    for repo, doc, _ in CASES:
        if doc["model_type"] != "mixtral":
            m = _derive(repo, doc)
            assert (m.active_params, m.experts, m.experts_per_token) == (None, None, None), repo


# ----------------------------------------------------------------------------- against the zoo

ZOO_IDS = {
    "meta-llama/Llama-2-7b-hf": "llama-2-7b",
    "meta-llama/Llama-2-13b-hf": "llama-2-13b",
    "meta-llama/Llama-2-70b-hf": "llama-2-70b",
    "meta-llama/Meta-Llama-3-8B": "llama-3-8b",
    "mistralai/Mistral-7B-v0.1": "mistral-7b",
    "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b",
    "openai-community/gpt2": "gpt2",
    "openai-community/gpt2-xl": "gpt2-xl",
    "google-bert/bert-base-uncased": "bert-base",
    "google-bert/bert-large-uncased": "bert-large",
    "google-t5/t5-base": "t5-base",
}
SHAPE_FIELDS = (
    "kind", "layers", "decoder_layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab",
    "max_seq_len", "mlp", "experts", "experts_per_token", "tied_embeddings", "dropout", "softmax_fp32",
    "active_params", "sliding_layers", "sliding_window",
)
ZOO_CASES = [c for c in CASES if c[0] in ZOO_IDS]


@pytest.mark.parametrize(("repo", "doc", "params"), ZOO_CASES, ids=[c[0] for c in ZOO_CASES])
def test_derived_model_matches_the_zoo_entry(repo, doc, params):
    zoo = load_zoo().resolve(ZOO_IDS[repo])
    derived = _derive(repo, doc)
    assert {f: getattr(derived, f) for f in SHAPE_FIELDS} == {f: getattr(zoo, f) for f in SHAPE_FIELDS}
    if doc["model_type"] == "bert":
        # The zoo counts BertModel with its pooler; BertForMaskedLM drops the pooler
        # (h x h + h) and adds a transform of the same size, its LayerNorm (2h) and
        # the decoder bias (vocab), so the two differ by exactly 2h + vocab.
        assert derived.params - zoo.params == 2 * zoo.hidden + zoo.vocab
    else:
        assert derived.params == zoo.params


def test_zoo_bert_counts_are_bertmodel_with_pooler():
    # BertModel (pooler included): KerasHub bert_large_en_uncased "params": 335141888;
    # bert-base 109,482,240 is the same formula.
    zoo = load_zoo()
    assert zoo.resolve("bert-base").params == 109_482_240
    assert zoo.resolve("bert-large").params == 335_141_888


# ----------------------------------------------------------------------------- fields


def test_llama_2_7b_fields():
    m = _derive("meta-llama/Llama-2-7b-hf", LLAMA_2_7B)
    assert (m.id, m.name, m.kind) == ("llama-2-7b-hf", "meta-llama/Llama-2-7b-hf", "decoder")
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn) == (32, 4096, 32, 32, None, 11008)
    assert (m.vocab, m.max_seq_len, m.mlp) == (32000, 4096, "swiglu")
    assert (m.tied_embeddings, m.dropout, m.softmax_fp32) == (False, False, True)
    assert [s.title for s in m.sources] == ["Hugging Face config.json: meta-llama/Llama-2-7b-hf/config.json"]


def test_llama_2_70b_grouped_query_attention():
    m = _derive("meta-llama/Llama-2-70b-hf", LLAMA_2_70B)
    assert (m.heads, m.kv_heads, m.head_dim, m.attention_head_dim) == (64, 8, None, 128)


def test_qwen2_is_llama_with_qkv_biases():
    m = _derive("Qwen/Qwen2-7B", QWEN2_7B)
    as_llama = model_from_hf_config({**QWEN2_7B, "model_type": "llama"}, "q.json")
    # q (28 x 128), k and v (4 x 128 each) biases in each of 28 layers
    assert m.params - as_llama.params == 28 * (3584 + 2 * 512)
    assert (m.kv_heads, m.mlp, m.softmax_fp32, m.max_seq_len) == (4, "swiglu", True, 131072)


def test_gpt2_fields():
    m = _derive("openai-community/gpt2", GPT2)
    assert (m.kind, m.ffn, m.max_seq_len, m.mlp, m.tied_embeddings) == ("decoder", 3072, 1024, "gelu_new", True)
    assert (m.dropout, m.softmax_fp32, m.kv_heads) == (True, False, 12)


def test_gpt2_xl_head_dim_is_implied():
    m = _derive("openai-community/gpt2-xl", GPT2_XL)
    assert (m.heads, m.head_dim, m.attention_head_dim, m.ffn) == (25, None, 64, 6400)


def test_gpt2_untied_head_and_n_inner():
    untied = model_from_hf_config({**GPT2, "tie_word_embeddings": False}, "g.json")
    assert untied.params == 124_439_808 + 50257 * 768
    assert untied.tied_embeddings is False
    inner = model_from_hf_config({**GPT2, "n_inner": 1024}, "g.json")
    assert inner.ffn == 1024
    assert inner.params == 124_439_808 - 12 * 2 * 768 * 2048 - 12 * 2048


def test_gpt_neox_fields():
    m = _derive("EleutherAI/pythia-1b", PYTHIA_1B)
    assert (m.kind, m.layers, m.hidden, m.heads, m.kv_heads, m.ffn) == ("decoder", 16, 2048, 8, 8, 8192)
    assert (m.vocab, m.max_seq_len, m.mlp, m.tied_embeddings) == (50304, 2048, "gelu", False)
    assert (m.dropout, m.softmax_fp32) == (False, True)
    no_bias = model_from_hf_config({**PYTHIA_1B, "attention_bias": False}, "p.json")
    assert m.params - no_bias.params == 16 * 4 * 2048


def test_bert_fields():
    m = _derive("google-bert/bert-base-uncased", BERT_BASE_UNCASED)
    assert (m.kind, m.max_seq_len, m.mlp, m.tied_embeddings, m.dropout, m.softmax_fp32) == (
        "encoder", 512, "gelu", True, True, False,
    )
    untied = model_from_hf_config({**BERT_BASE_UNCASED, "tie_word_embeddings": False}, "b.json")
    assert untied.params - m.params == 30522 * 768


def test_roberta_fields():
    m = _derive("FacebookAI/roberta-base", ROBERTA_BASE)
    # 514 position rows, numbered from padding_idx + 1 = 2: 512 usable positions
    assert (m.kind, m.vocab, m.max_seq_len, m.softmax_fp32, m.dropout) == ("encoder", 50265, 512, False, True)


def test_t5_fields():
    m = _derive("google-t5/t5-base", T5_BASE)
    assert (m.kind, m.layers, m.decoder_layers, m.hidden, m.heads, m.ffn) == ("encoder-decoder", 12, 12, 768, 12, 3072)
    # transformers 5's T5 softmaxes the scores in their own dtype
    assert (m.mlp, m.tied_embeddings, m.dropout, m.softmax_fp32, m.max_seq_len) == ("relu", True, True, False, 512)


def test_t5_v1_1_gated_gelu_untied():
    m = _derive("google/t5-v1_1-base", T5_V1_1_BASE)
    # gated-gelu is T5Config's legacy name for gelu_new (the tanh formula, op by op) on the gate
    assert (m.mlp, m.tied_embeddings, m.ffn, m.max_seq_len, m.head_dim) == ("geglu_new", False, 2048, None, None)


def test_mt5_head_dim_differs_from_width_over_heads():
    m = _derive("google/mt5-small", MT5_SMALL)
    assert (m.hidden, m.heads, m.head_dim, m.mlp, m.tied_embeddings) == (512, 6, 64, "geglu_new", False)
    assert (m.layers, m.decoder_layers, m.id, m.name) == (8, 8, "mt5-small", "google/mt5-small")


def test_t5_decoder_layers_default_to_encoder_layers():
    m = model_from_hf_config({**T5_BASE, "num_layers": 6}, "t.json")
    assert (m.layers, m.decoder_layers) == (6, 6)
    m = model_from_hf_config({**T5_BASE, "num_layers": 6, "num_decoder_layers": 2}, "t.json")
    assert (m.layers, m.decoder_layers) == (6, 2)


def test_llama_biases_tied_head_and_explicit_head_dim():
    base = model_from_hf_config(LLAMA_2_7B, "l.json")
    biased = model_from_hf_config({**LLAMA_2_7B, "attention_bias": True, "mlp_bias": True}, "l.json")
    assert biased.params - base.params == 32 * (4 * 4096 + 2 * 11008 + 4096)
    tied = model_from_hf_config({**LLAMA_2_7B, "tie_word_embeddings": True}, "l.json")
    assert (base.params - tied.params, tied.tied_embeddings) == (32000 * 4096, True)
    # Mistral-Nemo style: head_dim 128 with hidden 5120 / 32 heads = 160
    nemo = model_from_hf_config({**MISTRAL_7B, "hidden_size": 5120, "head_dim": 128}, "n.json")
    assert (nemo.head_dim, nemo.attention_head_dim) == (128, 128)
    same = model_from_hf_config({**MISTRAL_7B, "head_dim": 128}, "m.json")
    assert same.head_dim is None


def test_dropout_follows_the_probabilities():
    assert model_from_hf_config({**LLAMA_2_7B, "attention_dropout": 0.1}, "l.json").dropout is True
    quiet = {**GPT2, "attn_pdrop": 0.0, "resid_pdrop": 0.0, "embd_pdrop": 0.0}
    assert model_from_hf_config(quiet, "g.json").dropout is False
    assert model_from_hf_config({**T5_BASE, "dropout_rate": 0.0}, "t.json").dropout is False
    assert model_from_hf_config({**PYTHIA_1B, "hidden_dropout": 0.1}, "p.json").dropout is True


def test_every_supported_model_type_is_covered_here():
    covered = {doc["model_type"] for _, doc, _ in CASES} | {d["model_type"] for d in NEW_FAMILY_CONFIGS.values()}
    assert set(SUPPORTED_MODEL_TYPES) == covered


def test_every_supported_model_type_is_documented_with_its_class():
    doc = hfconfig.__doc__ or ""
    for model_type, hf_class in HF_CLASS.items():
        assert model_type in doc and hf_class in doc, model_type


def test_notes_name_the_class_whose_count_is_reproduced():
    for _, doc, _ in CASES:
        m = model_from_hf_config(doc, "c.json")
        assert m.notes is not None and HF_CLASS[doc["model_type"]] in m.notes


def test_derived_models_can_join_a_zoo():
    zoo = Zoo(models=tuple(_derive(repo, doc) for repo, doc, _ in CASES))
    assert zoo.resolve("meta-llama/Llama-2-70b-hf").kv_heads == 8


# ----------------------------------------------------------------------------- ids


@pytest.mark.parametrize(
    ("doc", "origin", "expected_id"),
    [
        (LLAMA_3_8B, "/models/Meta-Llama-3-8B/config.json", "meta-llama-3-8b"),
        (MISTRAL_7B, "mistral 7B v0.1.json", "mistral-7b-v0.1"),
        (
            MIXTRAL_8X7B,
            "/root/.cache/huggingface/hub/models--mistralai--Mixtral-8x7B-v0.1/snapshots/abc123/config.json",
            "mixtral-8x7b-v0.1",
        ),
        (MIXTRAL_8X7B, "config.json", "mixtral"),
        ({**QWEN2_7B, "_name_or_path": "/home/me/ckpt/Qwen2-7B/"}, "x/config.json", "qwen2-7b"),
        (LLAMA_2_7B, "C:\\models\\other\\config.json", "llama-2-7b-hf"),
    ],
)
def test_id_from_name_or_path_or_origin(doc, origin, expected_id):
    assert model_from_hf_config(doc, origin).id == expected_id


# ----------------------------------------------------------------------------- errors


def _error(doc, origin="cfg/config.json") -> DataFileError:
    with pytest.raises(DataFileError) as info:
        model_from_hf_config(doc, origin)
    err = info.value
    assert err.exit_code == ExitCode.DATA == 3
    assert "\n" not in err.message
    assert err.message.startswith(f"{origin}: ")
    return err


def test_unknown_model_type():
    err = _error({**LLAMA_2_7B, "model_type": "falcon"})
    assert err.message == (
        "cfg/config.json: model_type 'falcon' is not supported; "
        "supported: bert, deepseek_v3, gemma, gemma2, gemma3_text, gpt2, gpt_neox, kimi_k2, llama, mistral, mixtral, "
        "mt5, phi3, qwen2, "
        "qwen3, qwen3_moe, roberta, t5"
    )


@pytest.mark.parametrize(
    ("doc", "key"),
    [
        (LLAMA_2_7B, "hidden_size"),
        (LLAMA_2_7B, "model_type"),
        (MIXTRAL_8X7B, "num_local_experts"),
        (GPT2, "n_embd"),
        (BERT_BASE_UNCASED, "vocab_size"),
        (T5_BASE, "d_ff"),
        (PYTHIA_1B, "intermediate_size"),
    ],
)
def test_missing_key(doc, key):
    broken = {k: v for k, v in doc.items() if k != key}
    assert _error(broken).message == f"cfg/config.json: missing key '{key}'"


def test_null_required_key_is_missing():
    assert _error({**LLAMA_2_7B, "hidden_size": None}).message == "cfg/config.json: missing key 'hidden_size'"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("hidden_size", "4096"),
        ("hidden_size", 4096.0),
        ("num_hidden_layers", True),
        ("num_key_value_heads", [8]),
        ("tie_word_embeddings", "false"),
        ("attention_dropout", "0.1"),
        ("hidden_act", 3),
        ("model_type", ["llama"]),
    ],
)
def test_wrong_types_name_the_key(key, value):
    assert f"'{key}'" in _error({**LLAMA_2_7B, key: value}).message


@pytest.mark.parametrize(
    ("doc", "fragment"),
    [
        ({**LLAMA_2_7B, "num_hidden_layers": 0}, "'num_hidden_layers' must be at least 1"),
        ({**LLAMA_2_7B, "attention_dropout": 1.5}, "'attention_dropout' must be between 0 and 1"),
        ({**LLAMA_2_7B, "num_key_value_heads": 5}, "kv_heads: 5 does not divide heads 32"),
        ({**GPT2, "n_head": 7}, "'n_embd' (768) is not a multiple of 'n_head' (7)"),
        ({**MIXTRAL_8X7B, "num_experts_per_tok": 9}, "'num_experts_per_tok' (9) exceeds 'num_local_experts' (8)"),
        ({**T5_BASE, "feed_forward_proj": "gelu-gated"}, "'feed_forward_proj' 'gelu-gated' is not valid"),
        ({**BERT_BASE_UNCASED, "position_embedding_type": "relative_key"}, "'relative_key' is not supported"),
    ],
)
def test_bad_values(doc, fragment):
    assert fragment in _error(doc).message


@pytest.mark.parametrize("doc", [[], "llama", None, 3])
def test_not_a_mapping(doc):
    assert "expected a JSON object" in _error(doc).message


# ----- 2026 families: Qwen3 (dense and MoE), Phi-3/4, Gemma 2 and 3


NEW_FAMILY_CONFIGS = {
    # published config.json values, as the zoo entries of the same models cite them
    "qwen3-0.6b": {"model_type": "qwen3", "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
                   "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
                   "max_position_embeddings": 40960, "tie_word_embeddings": True, "hidden_act": "silu"},
    "qwen3-30b-a3b": {"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144,
                      "moe_intermediate_size": 768, "num_hidden_layers": 48, "num_attention_heads": 32,
                      "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8,
                      "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 151936,
                      "max_position_embeddings": 40960, "tie_word_embeddings": False},
    "phi-4": {"model_type": "phi3", "hidden_size": 5120, "intermediate_size": 17920, "num_hidden_layers": 40,
              "num_attention_heads": 40, "num_key_value_heads": 10, "vocab_size": 100352,
              "max_position_embeddings": 16384, "tie_word_embeddings": False},
    # google/gemma-2b config.json; 2,506,172,416 parameters (its safetensors total)
    "gemma-2b": {"model_type": "gemma", "hidden_size": 2048, "intermediate_size": 16384, "num_hidden_layers": 18,
                 "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 256000,
                 "hidden_act": "gelu", "hidden_activation": None, "max_position_embeddings": 8192},
    "gemma-2-2b": {"model_type": "gemma2", "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
                   "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 256000,
                   "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 8192},
    "gemma-3-1b": {"model_type": "gemma3_text", "hidden_size": 1152, "intermediate_size": 6912,
                   "num_hidden_layers": 26, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
                   "vocab_size": 262144, "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 32768},
    "deepseek-v3": {"model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
                    "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
                    "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256,
                    "num_experts_per_tok": 8, "first_k_dense_replace": 3, "kv_lora_rank": 512, "q_lora_rank": 1536,
                    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280,
                    "max_position_embeddings": 163840, "tie_word_embeddings": False, "num_nextn_predict_layers": 1},
    # moonshotai/Kimi-K2-Instruct config.json: its own model_type, DeepSeek-V3's architecture
    "kimi-k2": {"model_type": "kimi_k2", "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168,
                "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
                "num_attention_heads": 64, "num_key_value_heads": 64, "n_shared_experts": 1, "n_routed_experts": 384,
                "num_experts_per_tok": 8, "first_k_dense_replace": 1, "kv_lora_rank": 512, "q_lora_rank": 1536,
                "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 163840,
                "max_position_embeddings": 131072, "tie_word_embeddings": False},
}


@pytest.mark.parametrize("zoo_id", sorted(NEW_FAMILY_CONFIGS))
def test_2026_families_count_the_published_parameters(zoo_id):
    """Each count equals the zoo entry's, which cites the model card's or safetensors' total
    (Qwen3-0.6B 596,049,920; Qwen3-30B-A3B 30,532,122,624 with 3,353,032,704 active; Phi-4
    14,659,507,200; Gemma-2-2B 2,614,341,888; Gemma-3-1B 999,885,952; DeepSeek-V3 671,026,404,352
    with 37,552,282,624 active)."""
    from gpusizer.models.zoo import load_zoo

    derived = model_from_hf_config(NEW_FAMILY_CONFIGS[zoo_id], f"{zoo_id}/config.json")
    if zoo_id == "gemma-2b":  # not in the zoo
        assert derived.params == 2_506_172_416 and derived.mlp == "geglu" and derived.tied_embeddings
        return
    zoo = load_zoo().resolve(zoo_id)
    assert derived.params == zoo.params
    assert derived.active_params == zoo.active_params
    assert (derived.layers, derived.hidden, derived.heads, derived.kv_heads, derived.ffn, derived.vocab) == (
        zoo.layers, zoo.hidden, zoo.heads, zoo.kv_heads, zoo.ffn, zoo.vocab)


def test_deepseek_v3_has_the_published_671b_total_and_36_6b_activated():
    """DeepSeek-V3's README_WEIGHTS.md: 671B main-model parameters, 36.6B activated including
    the 0.9B output head; the count here also holds the 0.93B input embedding as active."""
    m = model_from_hf_config(NEW_FAMILY_CONFIGS["deepseek-v3"], "deepseek-v3/config.json")
    assert round(m.params / 1e9) == 671
    assert m.active_params is not None
    embedding = m.vocab * m.hidden  # type: ignore[operator]
    assert round((m.active_params - embedding) / 1e9, 1) == 36.6
    assert (m.kv_lora_rank, m.q_lora_rank, m.qk_rope_head_dim, m.v_head_dim, m.head_dim) == (512, 1536, 64, 128, 128)
    assert (m.experts, m.experts_per_token, m.shared_ffn, m.dense_layers, m.dense_ffn) == (256, 8, 2048, 3, 18432)


def test_deepseek_v2_lite_layout_without_a_query_latent_has_its_published_15_7b():
    """``q_lora_rank: null`` is one plain query projection, not the default 1536-wide latent.
    DeepSeek-V2-Lite has that layout (deepseek-ai/DeepSeek-V2-Lite config.json: 27 layers,
    hidden 2048, 16 heads, kv_lora_rank 512, q_lora_rank null, 64 routed experts of 1408, 2
    shared, 6 per token, the first layer dense at 10944, vocabulary 102400); its model card
    gives 15.7B total and 2.4B activated parameters (the input embedding not among them)."""
    doc = {"model_type": "deepseek_v3", "hidden_size": 2048, "num_hidden_layers": 27, "num_attention_heads": 16,
           "num_key_value_heads": 16, "kv_lora_rank": 512, "q_lora_rank": None, "qk_nope_head_dim": 128,
           "qk_rope_head_dim": 64, "v_head_dim": 128, "intermediate_size": 10944, "moe_intermediate_size": 1408,
           "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6, "first_k_dense_replace": 1,
           "vocab_size": 102400}
    m = model_from_hf_config(doc, "deepseek-v2-lite/config.json")
    assert m.q_lora_rank is None
    assert round(m.params / 1e9, 1) == 15.7
    assert m.active_params is not None
    assert 2.4e9 <= m.active_params - 102400 * 2048 < 2.5e9  # 2,451,435,008: "2.4B" to the figure it gives


@pytest.mark.parametrize(("key", "value", "message"), [
    ("first_k_dense_replace", 61, "key 'first_k_dense_replace' (61) leaves no expert layer of 61"),
    ("num_experts_per_tok", 300, "key 'num_experts_per_tok' (300) exceeds 'n_routed_experts' (256)"),
    ("kv_lora_rank", 0, "key 'kv_lora_rank' must be at least 1, got 0"),
])
def test_deepseek_config_errors_name_the_key(key, value, message):
    err = _error({**NEW_FAMILY_CONFIGS["deepseek-v3"], key: value})
    assert err.message == f"cfg/config.json: {message}"


def test_kimi_k2_has_the_published_1t_total_and_32b_activated():
    """Kimi K2's model card: 1 trillion total and 32 billion activated parameters."""
    m = model_from_hf_config(NEW_FAMILY_CONFIGS["kimi-k2"], "kimi-k2/config.json")
    assert round(m.params / 1e12, 2) == 1.03 and round(m.active_params / 1e9) == 33  # type: ignore[operator]
    assert (m.experts, m.dense_layers, m.heads) == (384, 1, 64)


def test_matrix_params_counts_each_layer_as_what_it_is():
    """Dense leading layers count their one MLP, expert layers their experts and shared
    experts, even when the dense MLP is wider than all the experts together."""
    from gpusizer.domain.shape import shape_from_model
    from gpusizer.memory.estimate import attention_params, layer_params, matrix_params

    doc = {"model_type": "deepseek_v3", "hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 4,
           "vocab_size": 1000, "intermediate_size": 4096, "moe_intermediate_size": 256, "n_routed_experts": 4,
           "num_experts_per_tok": 2, "n_shared_experts": 1, "first_k_dense_replace": 1, "kv_lora_rank": 64,
           "q_lora_rank": None, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32}
    m = shape_from_model(model_from_hf_config(doc, "d/config.json")).transformer
    assert m is not None
    attention = attention_params(m)
    dense, moe = 3 * 512 * 4096, 4 * 3 * 512 * 256 + 3 * 512 * 256
    assert matrix_params(m) == 4 * attention + dense + 3 * moe
    assert layer_params(m) == attention + max(dense, moe)


# ----------------------------------------------------------------------------- sliding-window layers


def test_sliding_window_layers_follow_the_config_classes_layouts():
    """config.json's sliding_window with layer_types, or without it the config class's default:
    google/gemma-2-2b config.json (sliding_window 4096; Gemma2Config alternates from layer 0: 13 of
    26), google/gemma-3-1b-it config.json (sliding_window 512, sliding_window_pattern 6: 22 of 26),
    both as the zoo has them; Mistral-7B-v0.1 (sliding_window 4096 on every layer)."""
    zoo = load_zoo()
    gemma2 = {**NEW_FAMILY_CONFIGS["gemma-2-2b"], "sliding_window": 4096}
    gemma3 = {**NEW_FAMILY_CONFIGS["gemma-3-1b"], "sliding_window": 512, "sliding_window_pattern": 6}
    for doc, zoo_id in ((gemma2, "gemma-2-2b"), (gemma3, "gemma-3-1b"), (MISTRAL_7B, "mistral-7b")):
        m, want = model_from_hf_config(doc, "config.json"), zoo.resolve(zoo_id)
        assert (m.sliding_layers, m.sliding_window) == (want.sliding_layers, want.sliding_window), zoo_id
    listed = {**gemma3, "layer_types": ["full_attention"] * 20 + ["sliding_attention"] * 6}
    assert model_from_hf_config(listed, "config.json").sliding_layers == 6


def test_windows_that_do_not_bind_are_left_out():
    # Qwen2-7B: sliding_window 131072 but use_sliding_window false; Mixtral v0.1: sliding_window null
    assert model_from_hf_config(QWEN2_7B, "config.json").sliding_layers is None
    assert model_from_hf_config(MIXTRAL_8X7B, "config.json").sliding_layers is None
    qwen = {**QWEN2_7B, "use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 21}
    assert model_from_hf_config(qwen, "config.json").sliding_layers == 7
    wide = {**MISTRAL_7B, "sliding_window": 32768}  # the whole context: no window in effect
    assert model_from_hf_config(wide, "config.json").sliding_layers is None
