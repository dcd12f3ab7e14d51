"""recommend's purchase plan for serving: an inference workload with a decoder counts what a
serving engine delivers. Each replica decodes the sequences its paged KV cache holds (as
``gpusizer serve`` sizes them, at most vLLM's max_num_seqs for the GPU), at the speed ``gpusizer
estimate`` gives at that concurrency, and independent replicas need no fabric between nodes.

Before, the plan summed batch-1 decode over replicas, so buying the most separate replicas always
won: $60,000 for Llama 3.1 70B chose 6 nodes of 8 RTX 4000 Ada at 80 tokens/s in all."""

from __future__ import annotations

import pytest

#: vLLM's largest default max_num_seqs (GPUs of 70 GiB or more but the A100)
MAX_NUM_SEQS = 1024


@pytest.fixture(scope="module")
def cat():
    from gpusizer.api import load_catalog

    return load_catalog()


@pytest.fixture
def plan_70b(cli_json):
    doc = cli_json("recommend", "--workload", "llm-inference", "--model", "llama-3.1-70b", "--budget", "60000",
                   "--top", "5")
    return doc["results"]["plan"]


def test_each_serving_configuration_is_what_serve_and_estimate_say(plan_70b, cli_json):
    """At serve's context (4,096 tokens unless given), as recommend --users sizes it: the purchase
    plan used the workload's 2,048, so it answered another question than serve's default."""
    assert any("the sequences of 4,096 tokens its KV cache holds" in n for n in plan_70b["notes"])
    configs = plan_70b["configurations"]
    assert len(configs) == 5
    for c in configs:
        tp = c["tp"]
        assert c["replicas"] == c["gpus_total"] // tp
        served = cli_json("serve", "--model", "llama-3.1-70b", "--gpu", c["gpu_id"], "--tp", str(tp),
                          "--context", "4096")
        row = served["results"]["rows"][0]
        assert c["concurrency"] == min(row["max_concurrency"], row["capacity"]["max_num_seqs"])
        est = cli_json("estimate", "--model", "llama-3.1-70b", "--gpu", c["gpu_id"], "--gpus", str(c["gpus_per_node"]),
                       "--nodes", str(c["nodes"]), "--strategy", c["strategy"], "--inference",
                       "--batch", str(c["concurrency"]), "--seq-len", "4096")
        serving = est["results"]["serving"]
        assert c["throughput_per_s"] == pytest.approx(serving["aggregate_tokens_s"], rel=1e-9)
        assert c["itl_s"] == pytest.approx(serving["itl_s"], rel=1e-9)


def test_serving_configurations_are_ranked_by_tokens_served(plan_70b):
    configs = plan_70b["configurations"]
    speeds = [c["throughput_per_s"] for c in configs]
    assert speeds == sorted(speeds, reverse=True)
    for c in configs:
        assert 1 <= c["concurrency"] <= MAX_NUM_SEQS
    # a replica that holds many sequences beats many replicas of one: the winner decodes dozens at once
    assert configs[0]["concurrency"] >= 32
    assert plan_70b["goal"] == "the most tokens/s served for $60,000 of GPUs"
    assert any("KV cache holds (at most vLLM's max_num_seqs: 1,024 on 70 GiB GPUs but the A100, else 256)" in n
               for n in plan_70b["notes"])


def test_a_given_batch_is_the_concurrency(cli_json):
    doc = cli_json("recommend", "--workload", "llm-inference", "--model", "llama-3.1-8b", "--budget", "20000",
                   "--batch", "4", "--top", "3")
    configs = doc["results"]["plan"]["configurations"]
    assert configs and all(c["concurrency"] == 4 for c in configs)


def test_replicas_across_nodes_need_no_rdma(cli_json):
    """Serving replicas exchange nothing, so GPUDirect RDMA neither scores nor warns; training still
    scores it across nodes."""
    serve = cli_json("recommend", "--workload", "llm-inference", "--model", "llama-3.1-8b", "--gpus", "8",
                     "--nodes", "2", "--top", "40")
    rows = serve["results"]["ranked"]
    assert rows
    assert not [c for r in rows for c in r["contributions"] if c["field"] == "gpudirect_rdma"]
    assert not [a for r in rows for a in r["advisories"] if "RDMA" in a["message"]]
    train = cli_json("recommend", "--workload", "llm-train", "--model", "llama-3.1-8b", "--gpus", "8",
                     "--nodes", "2", "--top", "3")
    assert all(any(c["field"] == "gpudirect_rdma" for c in r["contributions"]) for r in train["results"]["ranked"])


def test_training_plans_keep_one_box_without_rdma(cli_json):
    doc = cli_json("recommend", "--workload", "cnn", "--budget", "60000", "--top", "20")
    configs = doc["results"]["plan"]["configurations"]
    assert configs and all(c["concurrency"] is None and c["replicas"] is None for c in configs)
    assert all(c["nodes"] == 1 or c["transport"] == "rdma" for c in configs)
    held = doc["results"]["plan"]["held_back"]
    assert held and all(c["nodes"] > 1 and c["transport"] == "tcp" for c in held)
    assert any(n.startswith("held to one node, having no GPUDirect RDMA") for n in doc["results"]["plan"]["notes"])


def test_vllm_sizes_its_scheduler_by_the_gpu(cat):
    """vLLM's API-server defaults (vllm/engine/arg_utils.py, get_batch_defaults): 8,192 batched tokens
    and 1,024 sequences on a GPU of 70 GiB or more that is not an A100, 2,048 and 256 elsewhere.
    A 24 GB card then profiles a 2,048-token chunk, not 8,192, and holds more sequences."""
    from gpusizer.domain.run import RunConfig
    from gpusizer.domain.shape import shape_from_model
    from gpusizer.memory.serving import EngineLimits, engine_limits, serving_capacity
    from gpusizer.models.zoo import load_zoo

    limits = {g: engine_limits(cat.by_id(g).memory_bytes, cat.by_id(g).name)
              for g in ("h100-sxm5-80gb", "h200-sxm-141gb", "a100-sxm4-80gb", "rtx-4090", "l40s")}
    assert limits == {"h100-sxm5-80gb": (8192, 1024), "h200-sxm-141gb": (8192, 1024), "a100-sxm4-80gb": (2048, 256),
                      "rtx-4090": (2048, 256), "l40s": (2048, 256)}
    shape = shape_from_model(load_zoo().resolve("llama-3.1-8b"))
    g = cat.by_id("rtx-4090")
    small = serving_capacity(shape, RunConfig(mode="inference"), g.memory_bytes, 4096, gpu_name=g.name)
    large = serving_capacity(shape, RunConfig(mode="inference"), g.memory_bytes, 4096,
                             limits=EngineLimits(8192, 1024))
    assert (small.max_batched_tokens, small.max_num_seqs) == (2048, 256)
    assert small.activation_bytes < large.activation_bytes and small.kv_tokens > large.kv_tokens


def test_a_baseboard_serves_as_several_smaller_replicas_when_that_serves_more(cli_json):
    """SXM modules come in boards of 8, but a board need not be one TP=8 replica: two TP=4 replicas
    of Llama 3.1 70B on 8 H200s hold more sequences in all and serve more tokens/s, and the plan
    times them as estimate does (--gpus 8 --tp 4: data parallel over two TP=4 groups)."""
    doc = cli_json("recommend", "--workload", "llm-inference", "--model", "llama-3.1-70b", "--budget", "250000",
                   "--top", "20")
    h200 = next(c for c in doc["results"]["plan"]["configurations"] if c["gpu_id"] == "h200-sxm-141gb")
    assert (h200["gpus_total"], h200["replicas"], h200["label"]) == (8, 2, "8 x h200-sxm-141gb (TP=4)")
    est = cli_json("estimate", "--inference", "--model", "llama-3.1-70b", "--gpu", "h200-sxm-141gb", "--gpus", "8",
                   "--tp", "4", "--batch", str(h200["concurrency"]), "--seq-len", "4096")
    assert h200["throughput_per_s"] == pytest.approx(est["results"]["throughput_per_s"], rel=1e-9)
    # one TP=8 replica at all the sequences it runs at once
    cap = cli_json("serve", "--model", "llama-3.1-70b", "--gpu", "h200-sxm-141gb", "--tp", "8",
                   "--context", "4096")["results"]["rows"][0]["capacity"]
    whole = cli_json("estimate", "--inference", "--model", "llama-3.1-70b", "--gpu", "h200-sxm-141gb", "--gpus", "8",
                     "--strategy", "tp", "--seq-len", "4096",
                     "--batch", str(min(cap["max_concurrency"], cap["max_num_seqs"])))["results"]
    assert h200["throughput_per_s"] > whole["throughput_per_s"]
