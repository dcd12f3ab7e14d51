"""How long exact mode takes, and how much memory it needs (needs gpusizer[torch]).

    python benchmarks/exact_speed.py

Runs ``gpusizer fit-model --exact`` in a fresh process for a Llama-2-7B training step
(mixed precision, AdamW, batch 1, 4,096 tokens: two traced steps at batch 1 and two at
batch 2 for the largest batch) and a Llama-2-7B inference pass, and prints the wall time
and the process's peak resident memory (ru_maxrss of the child). The issue's bar: a
7B training step traced in under 60 s with peak RSS under 4 GiB on a 2-core machine.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LLAMA_2_7B = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
              "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
              "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096,
              "tie_word_embeddings": False, "torch_dtype": "float16"}
RUNS = (("training step, mixed, AdamW, 1 x 4096", ["--batch", "1", "--seq-len", "4096"]),
        ("inference, fp16, 1 x 4096", ["--inference", "--batch", "1", "--seq-len", "4096"]))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "llama-2-7b" / "config.json"
        config.parent.mkdir()
        config.write_text(json.dumps(LLAMA_2_7B))
        print(f"{os.cpu_count()} CPUs; python {sys.version.split()[0]}")
        for label, args in RUNS:
            started = time.perf_counter()
            before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
            out = subprocess.run([sys.executable, "-m", "gpusizer", "fit-model", "--exact", "--hf-config", str(config),
                                  "--gpu", "H100 SXM5 80GB", "--json", *args], capture_output=True, text=True,
                                 check=False)
            seconds = time.perf_counter() - started
            rss = max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 2**20
            doc = json.loads(out.stdout)
            res = doc["results"]
            trace = res["trace"]
            print(f"{label}: {seconds:.1f} s wall for two traces ({trace['seconds']:.1f} s the first, "
                  f"{trace['ops']:,} ops), peak RSS {rss:.2f} GiB; peak {res['breakdown']['total_bytes'] / 2**30:.2f} "
                  f"GiB, largest batch on H100 {res['gpus'][0]['max_batch']}")


if __name__ == "__main__":
    main()
