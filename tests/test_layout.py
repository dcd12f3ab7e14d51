"""The human output fits the terminal: at 80 columns no line is longer, and no number is cut.

Each command runs as people run it: piped with COLUMNS=80, and in a pseudo-terminal 80 columns
wide (rich then reads the width from the terminal, not from COLUMNS). The figures the JSON
document gives must appear whole in the 80-column text: a column that cannot fit is left out
(and the caption says so), bars shrink, text wraps, but a number is never cut.
"""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys

import pytest
from conftest import gpusizer_command

from gpusizer.render.common import fmt

#: One case per command the acceptance names (and the other tables), as people type them.
CASES = {
    "recommend": ["recommend", "--workload", "cnn", "--top", "5"],
    "recommend-llm": ["recommend", "--workload", "llm-train", "--model", "llama-3.1-8b", "--top", "3"],
    "recommend-budget": ["recommend", "--workload", "cnn", "--budget", "10000", "--top", "3"],
    "recommend-none": ["recommend", "--workload", "llm-inference", "--model", "llama-3.1-405b"],
    "catalog-list": ["catalog", "list"],
    "catalog-show": ["catalog", "show", "h100"],
    "fit-model": ["fit-model", "--model", "llama-3.1-8b", "--lora", "16", "--gpu", "rtx-4090", "--gpu", "a100"],
    "fit-model-params": ["fit-model", "--params", "60M"],
    "estimate": ["estimate", "--model", "resnet50", "--gpu", "v100-sxm2-16gb", "--gpus", "8", "--nodes", "4"],
    "estimate-train": ["estimate", "--model", "bert-base", "--gpu", "a100", "--gpus", "8", "--tokens", "1B",
                       "--price-per-hour", "2"],
    "compare": ["compare", "h100", "a100", "l40s", "rtx-4090"],
    "compare-six": ["compare", "h100", "a100", "l40s", "rtx-4090", "h200", "mi300x", "--workload", "cnn"],
    "fit-model-long-ids": ["fit-model", "--model", "llama-3-8b", "--gpu", "rtx-pro-6000-blackwell-max-q", "--gpu",
                           "h100-sxm5-80gb", "--gpus", "8", "--strategy", "zero3", "--batch", "64"],
    "models": ["models"],
    "systems": ["systems", "list"],
    "serve": ["serve", "--model", "llama-3.1-70b", "--gpu", "h100", "--gpu", "l40s", "--users", "32"],
}

#: a digit next to an ellipsis: a number rich (or we) cut
CUT_NUMBER = re.compile(r"\d…|…\d")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR")}
    env.update({"NO_COLOR": "1"}, **extra)
    return env


def _piped(args: list[str], width: int) -> str:
    done = subprocess.run([*gpusizer_command(), *args], capture_output=True, text=True, env=_env(COLUMNS=str(width)),
                          timeout=60)
    assert done.returncode in (0, 4), done.stderr
    return done.stdout + done.stderr


def _in_terminal(args: list[str], width: int) -> str:
    """The command's output in a pseudo-terminal ``width`` columns wide (stdout and stderr both)."""
    import fcntl
    import pty
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, width, 0, 0))
    proc = subprocess.Popen([*gpusizer_command(), *args], stdin=slave, stdout=slave, stderr=slave, env=_env(), close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=60) in (0, 4)
    return b"".join(chunks).decode("utf-8").replace("\r\n", "\n")


def _check(text: str, width: int) -> None:
    long = [line for line in text.splitlines() if len(line.rstrip()) > width]
    assert not long, f"{len(long)} lines over {width} columns, e.g. {long[0]!r}"
    cut = [line for line in text.splitlines() if CUT_NUMBER.search(line)]
    assert not cut, f"a number is cut: {cut[0]!r}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_80_columns_piped(name):
    _check(_piped(CASES[name], 80), 80)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pseudo-terminal test written for Linux")
@pytest.mark.parametrize("name", ["recommend", "catalog-list", "fit-model", "estimate", "compare", "models"])
def test_80_columns_in_a_terminal(name):
    text = _in_terminal(CASES[name], 80)
    # NO_COLOR leaves bold and italic, which take no columns
    assert not re.search(r"\x1b\[[0-9;]*(3[0-9]|9[0-7])m", text), "colour despite NO_COLOR"
    _check(re.sub(r"\x1b\[[0-9;]*m", "", text), 80)


def _json(args: list[str]) -> dict:
    done = subprocess.run([*gpusizer_command(), *args, "--json"], capture_output=True, text=True, env=_env(), timeout=60)
    return json.loads(done.stdout)


def test_catalog_list_keeps_every_number_whole_at_80_columns():
    text = _piped(["catalog", "list"], 80)
    rows = {line.split()[0]: line for line in text.splitlines() if line.strip()}
    for gpu in _json(["catalog", "list"])["results"]:
        row = rows[gpu["id"]]
        for field in ("memory_gib", "bandwidth_gb_s", "fp32_tflops"):
            assert f" {fmt(gpu[field])}" in row, (gpu["id"], field, row)
    assert "Left out at 80 columns:" in text and "street $" in text.split("Left out")[1]  # what does not fit is named


def test_catalog_list_keeps_the_sort_column():
    text = _piped(["catalog", "list", "--sort", "fp64_tflops"], 80)
    assert "FP64" in text.splitlines()[2] and "FP64" not in text.split("Left out")[1]


def test_fit_model_keeps_exact_bytes_at_80_columns():
    args = CASES["fit-model"]
    text = _piped(args, 80)
    breakdown = _json(args)["results"]["breakdown"]
    for key in ("weights_bytes", "activations_bytes", "total_bytes"):
        assert f"{breakdown[key]:,}" in text, key


def test_estimate_keeps_every_scaling_figure_at_80_columns():
    args = CASES["estimate"]
    text = _piped(args, 80)
    for point in _json(args)["results"]["scaling_curve"]:
        assert f"{point['throughput_per_s']:,.0f}" in text
        assert f"{point['speedup_vs_1gpu']:.2f}x" in text


def test_wider_terminal_shows_more_columns():
    narrow, wide = _piped(["catalog", "list"], 80), _piped(["catalog", "list"], 200)
    assert "street $" in wide.splitlines()[2] and "Left out" not in wide
    assert "street $" not in narrow.splitlines()[2]


def test_bars_shrink_before_data():
    """The memory bars are 30 cells wide when there is room, and narrower at 80 columns."""
    def longest_bar(text: str) -> int:
        return max(len(m) for m in re.findall(r"[█▏▎▍▌▋▊▉]+", text))

    args = ["fit-model", "--model", "resnet50", "--batch", "64", "--gpu", "a100"]
    assert longest_bar(_piped(args, 200)) > longest_bar(_piped(args, 80))


# --------------------------------------------------------------------------
# the defaults a run used are shown, in the JSON input and to people


@pytest.mark.parametrize("args", [
    ["fit-model", "--model", "llama-3.1-8b", "--gpu", "h100"],
    ["estimate", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "8", "--strategy", "fsdp"],
    ["recommend", "--workload", "llm-train", "--model", "llama-3.1-8b", "--top", "1"],
])
def test_default_sequence_length_is_resolved_in_the_json_input(args):
    doc = _json(args)
    assert doc["input"]["seq_len"] == 2048  # Llama 3.1's 131,072-token context, capped at 2,048
    if args[0] != "recommend":
        assert any("sequence length 2,048 tokens (default: the model's context (131,072)" in n for n in doc["notes"])


def test_given_sequence_length_is_not_called_a_default():
    doc = _json(["fit-model", "--model", "llama-3.1-8b", "--gpu", "h100", "--seq-len", "4096"])
    assert doc["input"]["seq_len"] == 4096
    assert not any("sequence length" in n for n in doc["notes"])


def test_cnn_echoes_its_image_size_and_no_sequence():
    doc = _json(["fit-model", "--model", "resnet50", "--gpu", "a100"])
    assert (doc["input"]["image_size"], doc["input"]["seq_len"]) == (224, None)


def test_fit_model_header_says_how_the_run_was_read():
    text = _piped(["fit-model", "--model", "llama-3.1-70b", "--inference", "--gpus", "4", "--strategy", "tp",
                   "--gpu", "h100"], 200)
    assert "Run: inference, fp16 precision, batch 1, 2,048 tokens, fused attention, 4 GPUs (TP=4)" in text
    assert "ddp" not in text.lower()
    assert "needs 35.37 GiB per GPU on 4 GPUs (TP=4)" in text


def test_no_table_is_squeezed_at_80_columns():
    """Where columns cannot all fit, they are left out by name, never squeezed: six GPUs side by
    side go on to a second table, every id whole, and fit-model keeps its fits column."""
    text = _piped(CASES["compare-six"], 80)
    assert "part 1 of 2" in text and "part 2 of 2" in text and "Too narrow" not in text
    for gpu in ("h100-sxm5-80gb", "a100-sxm4-80gb", "l40s", "rtx-4090", "h200-sxm-141gb", "mi300x"):
        assert re.search(rf"\b{gpu}\b", text), gpu
    fit = _piped(CASES["fit-model-long-ids"], 80)
    assert "rtx-pro-6000-blackwell-max-q" in fit and " fits " in fit and "Too narrow" not in fit
