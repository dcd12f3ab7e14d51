"""The reliability contract (issue 19, SECURITY.md, docs/exit-codes.md), class by class.

Every hostile input below must end with its documented exit code, no traceback,
an ``Error:`` line (and at most a ``Hint:``) that names the input, valid JSON on
stdout under ``--json``, and within bounds: each case runs in a subprocess
limited to :data:`CPU_S` seconds of CPU and :data:`MEMORY_BYTES` of address
space (``resource``), and must finish within :data:`WALL_S` seconds.

The cases run in parallel once per session (``outcomes``), then each is its
own test. Generated arguments (hypothesis) run in-process through CliRunner,
over every command, with the same assertions bar the resource limits.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, gpusizer_command
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

CPU_S = 5
WALL_S = 15  # generous: the cases run side by side; CPU_S is the real bound
MEMORY_BYTES = 500 * 2**20

#: Runs the module under the limits. Limits are set in the child itself (no
#: preexec_fn, which is unsafe with the threads that run cases side by side).
PRELUDE = (
    "import resource, runpy, sys\n"
    f"resource.setrlimit(resource.RLIMIT_AS, ({MEMORY_BYTES}, {MEMORY_BYTES}))\n"
    f"resource.setrlimit(resource.RLIMIT_CPU, ({CPU_S}, {CPU_S + 1}))\n"
    "sys.argv = ['gpusizer', *sys.argv[1:]]\n"
    "runpy.run_module('gpusizer', run_name='__main__')\n"
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="resource limits and FIFOs: Linux")


@dataclass
class Outcome:
    code: int | str
    stdout: str
    stderr: str
    wall_s: float
    cpu_s: float
    rss_bytes: int


def run_limited(args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> Outcome:
    """``python -m gpusizer ARGS`` under the limits; ``code`` is "timeout" past WALL_S."""
    import tempfile

    full_env = {**os.environ, "NO_COLOR": "1", **(env or {})}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-c", PRELUDE, *args], stdin=subprocess.DEVNULL, stdout=out,
                                stderr=err, env=full_env, cwd=cwd)
        code: int | str = "timeout"
        usage = None
        while time.monotonic() - start < WALL_S:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                code = os.waitstatus_to_exitcode(status)
                break
            time.sleep(0.01)
        else:
            proc.kill()
            _, _, usage = os.wait4(proc.pid, 0)
        proc.returncode = code if isinstance(code, int) else -9
        wall = time.monotonic() - start
        out.seek(0)
        err.seek(0)
        return Outcome(code, out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace"), wall,
                       usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024)


def strict_json(text: str) -> Any:
    """json.loads that refuses NaN and Infinity, which are not JSON."""

    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def stderr_entries(stderr: str) -> list[str]:
    """Standard error's entries (Error:, Hint:, Note:), each with its wrapped lines joined: a
    line that starts with a space continues the entry before it."""
    entries: list[str] = []
    for line in stderr.splitlines():
        if line.startswith(" ") and entries:
            entries[-1] += " " + line.strip()
        else:
            entries.append(line)
    return entries


def check_contract(out: Outcome, code: int, names: str | None = None, *, as_json: bool = False) -> None:
    """The assertions every case makes."""
    assert out.code == code, (out.code, out.stderr[-2000:])
    assert "Traceback" not in out.stderr and "Exception ignored" not in out.stderr, out.stderr[-2000:]
    assert out.cpu_s <= CPU_S and out.rss_bytes <= MEMORY_BYTES, (out.cpu_s, out.rss_bytes)
    assert out.wall_s <= WALL_S
    lines = [line for line in stderr_entries(out.stderr) if not line.startswith("Note: ")]
    if code in (2, 3):
        assert 1 <= len(lines) <= 2, lines
        assert lines[0].startswith("Error: ") and len(lines[0]) <= 410, lines
        assert len(lines) == 1 or lines[1].startswith("Hint: "), lines
        if names is not None:
            assert names in lines[0], (names, lines[0])
    if as_json and code in (0, 2, 3, 4, 5):
        doc = strict_json(out.stdout)  # a failure too is one document (docs/json.md)
        assert code in (0, 4) or doc["error"]["exit_code"] == code, doc


# --------------------------------------------------------------------------
# hostile files, made once per session


def _alias_bomb() -> str:
    """Nine levels of nine aliases: 385 bytes that expand to 387 million values."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=False):
        lines.append(f"{name}: &{name} [{','.join(['*' + prev] * 9)}]")
    return "\n".join(lines) + "\n"


def _merge_bomb() -> str:
    lines = ["a: &a {" + ", ".join(f"k{i}: {i}" for i in range(9)) + "}"]
    for prev, name in zip("abcdefgh", "bcdefghi", strict=False):
        lines.append(f"{name}: &{name} {{<<: [{', '.join(['*' + prev] * 9)}]}}")
    return "\n".join(lines) + "\n"


@dataclass
class Files:
    root: Path
    paths: dict[str, Path] = field(default_factory=dict)

    def add(self, name: str, text: str | bytes) -> Path:
        path = self.root / name
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8")
        self.paths[name] = path
        return path

    def __getitem__(self, name: str) -> str:
        return str(self.paths[name])


H100 = "h100-sxm5-80gb"


@pytest.fixture(scope="session")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    f = Files(tmp_path_factory.mktemp("hostile"))
    fifo = f.root / "fifo.yaml"
    os.mkfifo(fifo)
    f.paths["fifo"] = fifo
    f.paths["dir"] = f.root
    f.paths["missing"] = f.root / "missing.yaml"
    big = f.root / "big.yaml"
    with open(big, "wb") as handle:  # sparse: 17 MiB that take no disk
        handle.truncate(17 * 2**20)
    f.paths["big"] = big
    f.add("alias-bomb.yaml", _alias_bomb())
    f.add("merge-bomb.yaml", _merge_bomb())
    f.add("deep.yaml", "gpus: " + "[" * 2000 + "]" * 2000 + "\n")
    f.add("deep-65.yaml", "gpus: " + "[" * 70 + "]" * 70 + "\n")
    f.add("recursive.yaml", "gpus: &a [*a]\n")
    f.add("merge-loop.yaml", "a: &a {<<: *a}\n")
    f.add("dup-key.yaml", f"gpus:\n  - id: {H100}\n    tdp_w: 700\n    tdp_w: 100\n")
    f.add("huge-int.yaml", f"gpus:\n  - id: {H100}\n    tdp_w: {'9' * 5000}\n")
    f.add("latin1.yaml", f"gpus:\n  - id: {H100}\n    notes: caf\xe9\n".encode("latin-1"))
    f.add("mem-str.yaml", f'gpus:\n  - id: {H100}\n    memory_gib: "24"\n')
    f.add("ecc-yes.yaml", f"gpus:\n  - id: {H100}\n    ecc: 'yes'\n")
    f.add("ecc-int.yaml", f"gpus:\n  - id: {H100}\n    ecc: 1\n")
    f.add("schema-2.yaml", "schema_version: 2\ngpus: []\n")
    f.add("schema-banana.yaml", "schema_version: banana\ngpus: []\n")
    f.add("cc-1.yaml", f"gpus:\n  - id: {H100}\n    compute_capability: '1.0'\n")
    f.add("tc-0.yaml", f"gpus:\n  - id: {H100}\n    tensor_cores: 0\n")
    f.add("fast-1080.yaml", "gpus:\n  - id: gtx-1080\n    fp32_tflops: 100000\n")
    f.add("nvlink-10.yaml", f"gpus:\n  - id: {H100}\n    nvlink_generation: 10\n")
    f.add("family-default.yaml", f"gpus:\n  - id: {H100}\n    family: null\n    family_default: true\n")
    f.add("long-value.yaml", f"gpus:\n  - id: {H100}\n    memory_gib: {'x' * 1_000_000}\n")
    f.add("long-key.yaml", "k" * 100_000 + ": 1\n")
    f.add("rules-spec.yaml", "workloads:\n  cnn:\n    advisories:\n      - id: wide\n"
          "        message: 'far too wide {memory_gib:>50000000}'\n")
    f.add("rules-precision.yaml", "workloads:\n  cnn:\n    advisories:\n      - id: long\n"
          "        message: 'too precise {memory_gib:.200000000f}'\n")
    f.add("rules-speed.yaml", "workloads:\n  cnn:\n    speed: {model: no-such-model, batch: 8}\n")
    f.add("rules-bomb.yaml", _alias_bomb())
    f.add("escape.yaml", f"gpus:\n  - id: {H100}\n    name: \"H100 \\e[31mRED\\e]0;pwned\\a \\x9b2J\"\n")
    hf = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 688, "num_attention_heads": 4,
          "num_hidden_layers": 2, "vocab_size": 1000}
    f.add("hf-ok.json", json.dumps({**hf, "_name_or_path": "org/evil\u001b[31mRED\u001b]0;title\u0007"}))
    f.add("hf-deep.json", "[" * 100_000 + "]" * 100_000)
    f.add("hf-deep-70.json", "[" * 70 + "]" * 70)
    f.add("hf-nan.json", json.dumps(hf)[:-1] + ', "rms_norm_eps": NaN}')
    f.add("hf-inf.json", json.dumps(hf)[:-1] + ', "rms_norm_eps": 1e400}')
    f.add("hf-vocab.json", json.dumps({**hf, "vocab_size": 10**30}))
    f.add("hf-hidden.json", json.dumps({**hf, "hidden_size": 2**62, "num_attention_heads": 2**60}))
    return f


# --------------------------------------------------------------------------
# the cases: (args, env, exit code, text the Error line must name)

Case = tuple[Callable[[Files], list[str]], dict[str, str], int, Callable[[Files], str | None]]


def _cat(name: str, code: int = 3, names: str | None = None) -> Case:
    return (lambda f: ["catalog", "list", "--catalog", f[name], "--json"], {}, code,
            lambda f: names if names is not None else f[name])


CASES: dict[str, Case] = {
    # special and oversized files, wherever a data file is named
    "catalog-fifo": _cat("fifo"),
    "catalog-dev-zero": (lambda f: ["catalog", "list", "--catalog", "/dev/zero"], {}, 3, lambda f: "/dev/zero"),
    "catalog-directory": _cat("dir"),
    "catalog-missing": _cat("missing"),
    "catalog-17-mib": _cat("big"),
    "env-catalog-fifo": (lambda f: ["catalog", "list"], {"GPUSIZER_CATALOG": "@fifo"}, 3, lambda f: f["fifo"]),
    "env-catalog-dev-zero": (lambda f: ["catalog", "list"], {"GPUSIZER_CATALOG": "/dev/zero"}, 3,
                             lambda f: "/dev/zero"),
    "rules-fifo": (lambda f: ["recommend", "-w", "cnn", "--rules", f["fifo"]], {}, 3, lambda f: f["fifo"]),
    "rules-dev-zero": (lambda f: ["recommend", "-w", "cnn", "--rules", "/dev/zero"], {}, 3, lambda f: "/dev/zero"),
    "hf-config-fifo": (lambda f: ["fit-model", "--hf-config", f["fifo"]], {}, 3, lambda f: f["fifo"]),
    "hf-config-dev-zero": (lambda f: ["fit-model", "--hf-config", "/dev/zero"], {}, 3, lambda f: "/dev/zero"),
    "hf-config-17-mib": (lambda f: ["fit-model", "--hf-config", f["big"]], {}, 3, lambda f: f["big"]),
    # resource bombs in YAML and JSON
    "yaml-alias-bomb": _cat("alias-bomb.yaml"),
    "yaml-merge-bomb": _cat("merge-bomb.yaml"),
    "yaml-deep-2000": _cat("deep.yaml"),
    "yaml-deep-70": _cat("deep-65.yaml"),
    "yaml-recursive-alias": _cat("recursive.yaml"),
    "yaml-merge-loop": _cat("merge-loop.yaml"),
    "yaml-huge-int": _cat("huge-int.yaml"),
    "yaml-not-utf8": _cat("latin1.yaml"),
    "rules-alias-bomb": (lambda f: ["recommend", "-w", "cnn", "--rules", f["rules-bomb.yaml"]], {}, 3,
                         lambda f: f["rules-bomb.yaml"]),
    "json-deep-100000": (lambda f: ["fit-model", "--hf-config", f["hf-deep.json"]], {}, 3, lambda f: f["hf-deep.json"]),
    "json-deep-70": (lambda f: ["fit-model", "--hf-config", f["hf-deep-70.json"]], {}, 3,
                     lambda f: f["hf-deep-70.json"]),
    "json-nan": (lambda f: ["fit-model", "--hf-config", f["hf-nan.json"]], {}, 3, lambda f: f["hf-nan.json"]),
    "json-1e400": (lambda f: ["fit-model", "--hf-config", f["hf-inf.json"]], {}, 3, lambda f: f["hf-inf.json"]),
    "json-vocab-1e30": (lambda f: ["fit-model", "--hf-config", f["hf-vocab.json"], "--json"], {}, 3,
                        lambda f: f["hf-vocab.json"]),
    "json-hidden-2e62": (lambda f: ["fit-model", "--hf-config", f["hf-hidden.json"], "--json"], {}, 3,
                         lambda f: f["hf-hidden.json"]),
    # rules message format specs
    "rules-spec-width": (lambda f: ["recommend", "-w", "cnn", "--rules", f["rules-spec.yaml"]], {}, 3,
                         lambda f: f["rules-spec.yaml"]),
    "rules-spec-precision": (lambda f: ["recommend", "-w", "cnn", "--rules", f["rules-precision.yaml"]], {}, 3,
                             lambda f: f["rules-precision.yaml"]),
    "rules-speed-model": (lambda f: ["recommend", "-w", "cnn", "--rules", f["rules-speed.yaml"]], {}, 3,
                          lambda f: f["rules-speed.yaml"]),
    # strict types, duplicate keys, schema versions
    "catalog-duplicate-key": _cat("dup-key.yaml"),
    "catalog-memory-as-text": _cat("mem-str.yaml"),
    "catalog-ecc-yes": _cat("ecc-yes.yaml"),
    "catalog-ecc-1": _cat("ecc-int.yaml"),
    "catalog-schema-2": _cat("schema-2.yaml"),
    "catalog-schema-banana": _cat("schema-banana.yaml"),
    # overrides checked on the merged entry
    "override-cc-1.0": _cat("cc-1.yaml"),
    "override-tensor-cores-0": _cat("tc-0.yaml"),
    "override-1080-100000-tflops": _cat("fast-1080.yaml"),
    "override-nvlink-10": _cat("nvlink-10.yaml"),
    "override-family-default": _cat("family-default.yaml"),
    # a long bad value is quoted, not echoed
    "catalog-1-mb-value": _cat("long-value.yaml"),
    "catalog-100-kb-key": _cat("long-key.yaml"),
    # non-finite and absurd numbers: exit 2, valid JSON never broken
    "price-inf": (lambda f: ["estimate", "--model", "resnet50", "--gpu", "a100", "--price-per-hour", "inf", "--json"],
                  {}, 2, lambda f: "--price-per-hour"),
    "price-1e400": (lambda f: ["estimate", "--model", "resnet50", "--gpu", "a100", "--price-per-hour", "1e400",
                               "--json"], {}, 2, lambda f: "--price-per-hour"),
    "price-1e308": (lambda f: ["estimate", "--model", "resnet50", "--gpu", "a100", "--price-per-hour", "1e308",
                               "--epochs", "1", "--dataset-size", "1M", "--json"], {}, 2, lambda f: "--price-per-hour"),
    "price-nan": (lambda f: ["estimate", "--model", "resnet50", "--gpu", "a100", "--price-per-hour", "nan"], {}, 2,
                  lambda f: "--price-per-hour"),
    "epochs-1e300": (lambda f: ["estimate", "--model", "resnet50", "--gpu", "a100", "--epochs", "1e300",
                                "--dataset-size", "1M", "--json"], {}, 2, lambda f: "--epochs"),
    "tokens-1e300": (lambda f: ["estimate", "--params", "7B", "--gpu", "h100", "--tokens", "1e300", "--json"], {}, 2,
                     lambda f: "--tokens"),
    "nodes-10e308": (lambda f: ["estimate", "--model", "resnet50", "--gpu", "a100", "--nodes", str(10**308)], {}, 2,
                     lambda f: "--nodes"),
    "nodes-1000000": (lambda f: ["estimate", "--model", "resnet50", "--gpu", "a100", "--nodes", "1000000"], {}, 2,
                      lambda f: "--nodes"),
    "gpus-x-nodes": (lambda f: ["estimate", "--model", "resnet50", "--gpu", "a100", "--gpus", "1024", "--nodes",
                                "1024"], {}, 2, lambda f: "--nodes"),
    "gpus-per-node-1e9": (lambda f: ["estimate", "--model", "resnet50", "--gpu", "a100", "--gpus", "1000000000"], {},
                          2, lambda f: "--gpus"),
    "nics-1e9": (lambda f: ["estimate", "--model", "resnet50", "--gpu", "a100", "--nics-per-node", "1000000000"], {},
                 2, lambda f: "--nics-per-node"),
    "grad-accumulation-1e9": (lambda f: ["estimate", "--model", "resnet50", "--gpu", "a100", "--grad-accumulation",
                                         "1000000000"], {}, 2, lambda f: "--grad-accumulation"),
    "params-1e308-estimate": (lambda f: ["estimate", "--params", "1e308", "--gpu", "a100"], {}, 2,
                              lambda f: "--params"),
    "params-1e308-fit": (lambda f: ["fit-model", "--params", "1e308", "--json"], {}, 2, lambda f: "--params"),
    "params-1e308-recommend": (lambda f: ["recommend", "-w", "llm-train", "--params", "1e308"], {}, 2,
                               lambda f: "--params"),
    "recommend-nodes-10e30": (lambda f: ["recommend", "-w", "cnn", "--nodes", str(10**30)], {}, 2,
                              lambda f: "--nodes"),
    "overhead-1e30-gib": (lambda f: ["fit-model", "--params", "7B", "--overhead", "1e30GiB"], {}, 2,
                          lambda f: "--overhead"),
    "overhead-1e300-gib": (lambda f: ["fit-model", "--params", "7B", "--overhead", "1e300GiB"], {}, 2,
                           lambda f: "--overhead '1e300GiB' is too large to be a size"),
    "batch-0-usage": (lambda f: ["estimate", "--model", "resnet50", "--gpu", "a100", "--batch", "0"], {}, 2,
                      lambda f: "--batch"),
    "unknown-option": (lambda f: ["estimate", "--no-such-option", "1"], {}, 2, lambda f: "--no-such-option"),
    "huge-gpu-name": (lambda f: ["catalog", "show", "x" * 100_000], {}, 2, lambda f: "unknown GPU"),
}


@pytest.fixture(scope="session")
def outcomes(files: Files, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    """Every case, run side by side once."""
    cache = tmp_path_factory.mktemp("reliability-cache")
    warm = run_limited(["catalog", "list", "--json"], env={"GPUSIZER_CACHE_DIR": str(cache)})
    assert warm.code == 0, warm.stderr

    def one(name: str) -> tuple[str, Outcome]:
        args, env, _, _ = CASES[name]
        env = {k: files[v[1:]] if v.startswith("@") else v for k, v in env.items()}
        return name, run_limited(args(files), env={"GPUSIZER_CACHE_DIR": str(cache), **env})

    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 2)) as pool:
        return dict(pool.map(one, CASES))


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_input(name: str, outcomes: dict[str, Outcome], files: Files) -> None:
    args, _, code, names = CASES[name]
    check_contract(outcomes[name], code, names(files), as_json="--json" in args(files))


def test_a_long_bad_value_is_quoted_in_at_most_80_characters(outcomes: dict[str, Outcome]) -> None:
    for name in ("catalog-1-mb-value", "catalog-100-kb-key", "huge-gpu-name"):
        assert len(outcomes[name].stderr) < 800, (name, outcomes[name].stderr[:1000])


def test_family_default_error_names_its_file(outcomes: dict[str, Outcome], files: Files) -> None:
    assert "family_default: set without a family" in outcomes["override-family-default"].stderr


# --------------------------------------------------------------------------
# terminal control characters never reach a terminal raw


def test_catalog_name_escapes_are_stripped_from_tables_and_kept_in_json(files: Files) -> None:
    human = run_limited(["catalog", "show", H100, "--catalog", files["escape.yaml"]])
    check_contract(human, 0)
    assert "RED" in human.stdout and "\x1b" not in human.stdout and "\x9b" not in human.stdout
    doc = run_limited(["catalog", "show", H100, "--catalog", files["escape.yaml"], "--json"])
    assert strict_json(doc.stdout)["results"]["name"].startswith("H100 \x1b[31mRED")


def test_hf_name_or_path_escapes_are_stripped(files: Files) -> None:
    out = run_limited(["fit-model", "--hf-config", files["hf-ok.json"], "--gpu", "a100"])
    check_contract(out, 0)
    assert "\x1b" not in out.stdout + out.stderr and "\x07" not in out.stdout + out.stderr


def test_escapes_in_an_error_are_shown_escaped() -> None:
    out = run_limited(["catalog", "show", "evil\x1b[2J\x1b]0;title\x07"])
    check_contract(out, 2)
    assert "\x1b" not in out.stderr and "\\x1b[2J" in out.stderr


# --------------------------------------------------------------------------
# output streams: encodings, closed pipes, full disks, Ctrl-C

COMMANDS = {
    "fit-model": ["fit-model", "--model", "llama-2-7b", "--gpu", "a100"],
    "estimate": ["estimate", "--model", "resnet50", "--gpu", "v100"],
    "recommend": ["recommend", "-w", "cnn", "--top", "5"],
    "serve": ["serve", "--model", "llama-2-7b", "--context", "4096", "--gpu", "h100"],
    "catalog list": ["catalog", "list"],
    "catalog show": ["catalog", "show", "h100"],
    "compare": ["compare", "h100", "a100"],
    "models": ["models"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_ascii_only_stream_gets_ascii(command: str) -> None:
    out = run_limited(COMMANDS[command], env={"PYTHONIOENCODING": "ascii"})
    assert out.code in (0, 4), out.stderr
    assert "Traceback" not in out.stderr and "internal error" not in out.stderr
    out.stdout.encode("ascii")


def _installed(args: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen([*gpusizer_command(), *args], stdin=subprocess.DEVNULL, **kwargs)


@pytest.mark.parametrize("args", [["--help"], ["fit-model", "--help"], ["catalog", "list"]])
def test_output_to_a_pipe_already_closed_ends_quietly_with_exit_0(args: list[str]) -> None:
    """The reader is gone before the first write: the help rich draws (which ends a closed pipe
    with exit 1 by itself) and a command's table end with exit 0 and nothing on stderr."""
    import os

    read_end, write_end = os.pipe()
    os.close(read_end)
    proc = _installed(args, stdout=write_end, stderr=subprocess.PIPE)
    os.close(write_end)
    err = proc.communicate(timeout=WALL_S)[1].decode()
    assert proc.returncode == 0 and err == "", err


def test_a_closed_pipe_ends_quietly_with_exit_0() -> None:
    proc = _installed(["recommend", "--workload", "cnn", "--top", "60"], stdout=subprocess.PIPE,
                      stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=WALL_S) == 0, err
    assert "Error" not in err and "Exception" not in err and "Traceback" not in err, err


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("json_out", [False, True])
def test_a_full_disk_is_one_line(json_out: bool) -> None:
    with open("/dev/full", "wb") as full:
        proc = _installed(["fit-model", "--model", "llama-2-7b", *(["--json"] if json_out else [])], stdout=full,
                          stderr=subprocess.PIPE)
        err = proc.communicate(timeout=WALL_S)[1].decode()
    errors = [line for line in err.splitlines() if not line.startswith("Note: ")]
    assert proc.returncode == 1 and errors == ["Error: cannot write the output: No space left on device"], err


@pytest.mark.parametrize("delay_s", [0.1, 0.25, 0.4])
def test_ctrl_c_exits_130_at_once_without_a_traceback(delay_s: float) -> None:
    """While importing, parsing YAML (no cache: about a second) or ranking."""
    proc = _installed(["recommend", "--workload", "llm-train", "--model", "llama-2-70b", "--top", "60"],
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "GPUSIZER_NO_CACHE": "1"})
    time.sleep(delay_s)
    if proc.poll() is not None:
        pytest.skip("the command finished before the interrupt")
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=WALL_S)
    assert time.monotonic() - sent < 1.0
    assert proc.returncode == 130, (proc.returncode, err[-500:])
    assert b"Traceback" not in err and b"KeyboardInterrupt" not in err


# --------------------------------------------------------------------------
# the cache: an optimisation, never a source of truth


def _cached_run(cache: Path, *args: str) -> Outcome:
    return run_limited(list(args), env={"GPUSIZER_CACHE_DIR": str(cache)})


def _h100_memory(cache: Path) -> Any:
    out = _cached_run(cache, "catalog", "show", H100, "--json")
    check_contract(out, 0, as_json=True)
    return strict_json(out.stdout)["results"]["memory_gib"], out


def _rewrite(path: Path, payload: bytes, *, rehash: bool = False, seal: bool = False) -> None:
    """Replace a cache file's payload, keeping its header; ``rehash``: with the payload's
    SHA-256 in place of the tag (someone who knows the format); ``seal``: with the tag
    the folder's own key gives (someone who can act as the folder's owner)."""
    header = path.read_bytes().split(b"\n", 1)[0].split(b" ")
    if rehash:
        header[-1] = hashlib.sha256(payload).hexdigest().encode()
    if seal:
        from gpusizer import datafiles

        datafiles._key_file.cache_clear()
        header = datafiles._seal(path.parent, header[-2].decode(), payload).split(b" ")
    path.write_bytes(b" ".join(header) + b"\n" + payload)


#: One run that reads the catalog, the zoo and the rules (and shows the H100's memory
#: and Llama 2 7B's parameter count): a tampered cache must leave its output unchanged.
PROBE = ["recommend", "-w", "llm-inference", "--model", "llama-2-7b", "--top", "60", "--json"]


@dataclass
class Baseline:
    cache: Path
    stdout: str


@pytest.fixture(scope="session")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Baseline:
    cache = tmp_path_factory.mktemp("baseline") / "cache"
    first = _cached_run(cache, *PROBE)
    check_contract(first, 0, as_json=True)
    doc = strict_json(first.stdout)
    assert doc["input"]["params"] == 6_738_415_616
    assert _h100_memory(cache)[0] == 80.0
    again = _cached_run(cache, *PROBE)
    assert again.stdout == first.stdout
    return Baseline(cache, first.stdout)


@pytest.fixture()
def warm_cache(baseline: Baseline, tmp_path: Path) -> Path:
    """A cache warmed in place (a copy would not verify: entries are bound to their folder)."""
    cache = tmp_path / "cache"
    first = _cached_run(cache, *PROBE)
    assert first.stdout == baseline.stdout
    return cache


def _unchanged(cache: Path, baseline: Baseline) -> None:
    out = _cached_run(cache, *PROBE)
    check_contract(out, 0, as_json=True)
    assert out.stdout == baseline.stdout
    assert "Note" not in out.stderr, out.stderr


def _catalog_dump(cache: Path) -> Path:
    (dump,) = cache.glob("catalog-*.json")
    return dump


def _yaml_cache_of(cache: Path, data_file: str) -> Path:
    from gpusizer import datafiles

    key = datafiles.content_key(datafiles.CACHE_FORMAT, (ROOT / "data" / data_file).read_bytes())
    return cache / f"yaml-{key}.json"


@pytest.mark.parametrize("rehash", [False, True])
def test_a_tampered_catalog_dump_never_changes_a_result(warm_cache: Path, baseline: Baseline, rehash: bool) -> None:
    dump = _catalog_dump(warm_cache)
    entries = json.loads(dump.read_bytes().split(b"\n", 1)[1])
    h100 = next(e for e in entries if e["id"] == H100)
    h100["memory_gib"] = -5.0
    _rewrite(dump, json.dumps(entries).encode(), rehash=rehash)
    assert _h100_memory(warm_cache)[0] == 80.0
    _rewrite(dump, b"[]", rehash=rehash)  # an empty catalog
    _unchanged(warm_cache, baseline)


def test_a_tampered_zoo_or_rules_cache_never_changes_a_result(warm_cache: Path, baseline: Baseline) -> None:
    zoo = _yaml_cache_of(warm_cache, "models.yaml")
    doc = json.loads(zoo.read_bytes().split(b"\n", 1)[1])
    next(m for m in doc["models"] if m["id"] == "llama-2-7b")["params"] = 1000
    _rewrite(zoo, json.dumps(doc).encode(), rehash=False)
    rules = _yaml_cache_of(warm_cache, "rules.yaml")
    doc = json.loads(rules.read_bytes().split(b"\n", 1)[1])
    doc["workloads"]["llm-inference"]["criteria"][0]["weight"] = 1000
    _rewrite(rules, json.dumps(doc).encode(), rehash=False)
    _unchanged(warm_cache, baseline)


def test_a_cache_folder_from_someone_else_never_changes_a_result(warm_cache: Path, baseline: Baseline,
                                                                 tmp_path: Path) -> None:
    """Entries sealed by the folder's owner (here: as if they had built it) do not
    verify once the folder is copied to you: they are re-read from the data files."""
    import shutil

    dump = _catalog_dump(warm_cache)
    entries = json.loads(dump.read_bytes().split(b"\n", 1)[1])
    next(e for e in entries if e["id"] == H100)["memory_gib"] = 40.0  # valid, and wrong
    _rewrite(dump, json.dumps(entries).encode(), seal=True)
    zoo = _yaml_cache_of(warm_cache, "models.yaml")
    doc = json.loads(zoo.read_bytes().split(b"\n", 1)[1])
    next(m for m in doc["models"] if m["id"] == "llama-2-7b")["params"] = 1000
    _rewrite(zoo, json.dumps(doc).encode(), seal=True)
    copy = tmp_path / "copy"
    shutil.copytree(warm_cache, copy)
    _unchanged(copy, baseline)
    assert _h100_memory(copy)[0] == 80.0


CORRUPTIONS: dict[str, Callable[[Path], None]] = {
    "wrong type": lambda p: _rewrite(p, b'"a string"', rehash=True),
    "empty list": lambda p: _rewrite(p, b"[]", rehash=True),
    "deep nesting": lambda p: _rewrite(p, b"[" * 100_000 + b"]" * 100_000, rehash=True),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[:100]),
    "not JSON": lambda p: _rewrite(p, b"\xff\xfe{", rehash=True),
    "fifo": lambda p: (p.unlink(), os.mkfifo(p)),
    "link to /dev/zero": lambda p: (p.unlink(), p.symlink_to("/dev/zero")),
    "directory": lambda p: (p.unlink(), p.mkdir()),
    "17 MiB": lambda p: os.truncate(p, 17 * 2**20),
    "writable by others": lambda p: p.chmod(0o666),
    "another folder's key": lambda p: (p.parent / "key").write_bytes(os.urandom(32)),
    "moved between entries": lambda p: p.write_bytes(next(q for q in p.parent.glob("yaml-*.json") if q != p)
                                                     .read_bytes()),
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_a_corrupt_cache_file_is_a_miss(warm_cache: Path, baseline: Baseline, corruption: str) -> None:
    for target in (_catalog_dump(warm_cache), _yaml_cache_of(warm_cache, "models.yaml"),
                   _yaml_cache_of(warm_cache, "rules.yaml"), _yaml_cache_of(warm_cache, "gpus.yaml")):
        CORRUPTIONS[corruption](target)
    _unchanged(warm_cache, baseline)


def test_a_planted_link_is_replaced_not_followed(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _h100_memory(cache)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    planted = list(cache.glob("*.json"))
    for path in planted:
        path.unlink()
        path.symlink_to(victim)
    _h100_memory(cache)
    assert victim.read_text() == "keep me"
    assert all(not p.is_symlink() for p in planted)  # each was replaced by the file written in its place


def test_the_cache_folder_is_private_and_a_shared_one_is_not_used(tmp_path: Path) -> None:
    private = tmp_path / "new" / "cache"
    _h100_memory(private)
    assert private.stat().st_mode & 0o777 == 0o700
    assert all(p.stat().st_mode & 0o077 == 0 for p in private.iterdir())
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    memory, out = _h100_memory(shared)
    assert memory == 80.0 and list(shared.iterdir()) == []
    assert f"Note: cache folder {shared} is writable by other users, so it is not used" in out.stderr


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to give a folder away")
def test_a_cache_folder_owned_by_someone_else_is_not_used(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)
    memory, out = _h100_memory(theirs)
    assert memory == 80.0 and "is owned by another user, so it is not used" in out.stderr


def test_parallel_cold_cache_runs_agree(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    n = 12

    def one(_: int) -> Outcome:
        return _cached_run(cache, "catalog", "list", "--json")

    with ThreadPoolExecutor(max_workers=n) as pool:
        results = list(pool.map(one, range(n)))
    assert all(r.code == 0 for r in results), [r.stderr for r in results if r.code]
    assert len({r.stdout for r in results}) == 1
    assert not [p for p in cache.iterdir() if p.name.endswith(".tmp")]


# --------------------------------------------------------------------------
# generated arguments over every command


def _commands() -> list[tuple[list[str], Any]]:
    import typer.main

    from gpusizer.cli import app

    found: list[tuple[list[str], Any]] = []

    def walk(cmd: Any, path: list[str]) -> None:
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                walk(sub, [*path, name])
        else:
            found.append((path, cmd))

    walk(typer.main.get_command(app), [])
    return found


COMMAND_TREE = _commands()
HOSTILE_VALUES = [
    "0", "-1", "1", "7", "65537", "1e308", "1e400", "inf", "-inf", "nan", "NaN", "1e-320", str(10**40), "9" * 5000,
    "", " ", "7B", "1.3B", "1e300", "-7B", "0x10", "24GiB", "1e30GiB", "-5GiB", "h100", "a100", "rtx 4090",
    "llama-2-7b", "resnet50", "cnn", "llm-train", "\x1b[31m", "\u202e", "é", "x" * 10_000, "--json", "-",
    "/dev/zero", "/dev/null", "/", str(ROOT / "examples" / "my-gpus.yaml"), str(ROOT / "examples" / "my-rules.yaml"),
    "ecc", "nvlink,rdma", "fp16", "fp8", "tp", "fsdp", "decode", "nvlink", "ib-hdr",
]
REQUIRED = {"estimate": ["--gpu", "a100"], "recommend": ["--workload", "cnn"]}


@st.composite
def argument_lists(draw: Any, index: int) -> list[str]:
    path, cmd = COMMAND_TREE[index]
    args = list(path)
    options = [p for p in cmd.params if p.param_type_name == "option"]
    if draw(st.booleans()):
        args += REQUIRED.get(path[0], [])
    for param in draw(st.lists(st.sampled_from(options), max_size=5)) if options else []:
        flag = draw(st.sampled_from([*param.opts, *param.secondary_opts]))
        if getattr(param, "is_flag", False):
            args.append(flag)
        else:
            value = draw(st.one_of(st.sampled_from(HOSTILE_VALUES), st.text(max_size=12)))
            args += [flag, value]
    args += draw(st.lists(st.sampled_from(HOSTILE_VALUES), max_size=2))  # stray or positional arguments
    if draw(st.booleans()):
        args.append("--json")
    return [a.replace("\x00", "") for a in args]


@pytest.mark.parametrize("index", range(len(COMMAND_TREE)), ids=[" ".join(p) for p, _ in COMMAND_TREE])
@settings(max_examples=int(os.environ.get("GPUSIZER_FUZZ_EXAMPLES", "25")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_generated_arguments_keep_the_contract(index: int, data: Any) -> None:
    from typer.testing import CliRunner

    from gpusizer.cli import app

    args = data.draw(argument_lists(index))
    start = time.monotonic()
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    elapsed = time.monotonic() - start
    assert result.exit_code in (0, 2, 3, 4, 5), (args, result.exit_code, result.stderr[-1500:])
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, (args, result.stderr)
    errors = [line for line in stderr_entries(result.stderr) if not line.startswith("Note: ")]
    if result.exit_code in (2, 3):
        assert errors and errors[0].startswith("Error: ") and len(errors) <= 2, (args, errors)
    if "--json" in args and result.exit_code in (2, 3, 5):
        assert strict_json(result.stdout)["error"]["exit_code"] == result.exit_code, (args, result.stdout[-500:])
    elif "--json" in args and result.exit_code in (0, 4) and result.stdout.lstrip().startswith("{"):
        strict_json(result.stdout)  # (a --json taken as an option's value leaves human output)
    assert elapsed < CPU_S, (args, elapsed)


@pytest.mark.parametrize("option", [["catalog", "list", "--catalog"], ["recommend", "-w", "cnn", "--rules"],
                                    ["fit-model", "--hf-config"]])
def test_an_unreadable_data_file_is_a_data_error_not_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   option: list[str]) -> None:
    """Exit 3 naming the file (docs/exit-codes.md), not the option parser's exit 2.
    (Denied here by hand, so the test holds when it runs as root too.)"""
    from typer.testing import CliRunner

    from gpusizer.cli import app

    secret = tmp_path / "secret.yaml"
    secret.write_text("gpus: []\n")
    secret.chmod(0)
    real_open, real_access = os.open, os.access

    def denied(path: Any, *args: Any, **kwargs: Any) -> Any:
        if str(path) == str(secret):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", denied)
    monkeypatch.setattr(os, "access", lambda path, *a, **k: str(path) != str(secret) and real_access(path, *a, **k))
    result = CliRunner().invoke(app, [*option, str(secret)], catch_exceptions=False)
    assert result.exit_code == 3, result.stderr
    assert result.stderr == f"Error: {secret}: cannot be read: Permission denied\n"
