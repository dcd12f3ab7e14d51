"""Under --json every failure is one JSON document on stdout (docs/json.md), with
the exit code it has without --json, and the Error: line still on stderr."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpusizer.errors import ExitCode

CASES = {
    # name: (arguments, exit code, command, words in the message)
    "engine-usage": (["fit-model", "--params", "bad"], 2, "fit-model", "--params: parameter count 'bad' is not a count"),
    "unknown-gpu": (["catalog", "show", "no-such-gpu"], 2, "catalog show", "unknown GPU 'no-such-gpu'"),
    "option-parser": (["estimate", "--model", "resnet50", "--gpu", "a100", "--batch", "0"], 2, "estimate",
                      "Invalid value for '--batch'"),
    "unknown-option": (["recommend", "--workload", "cnn", "--no-such-option"], 2, "recommend", "--no-such-option"),
    "unknown-command": (["no-such-command"], 2, None, "No such command 'no-such-command'"),
}


def _document(stdout: str) -> dict[str, Any]:
    doc = json.loads(stdout)  # exactly one document: trailing text would fail here
    assert set(doc) == {"schema_version", "command", "input", "error"}
    assert set(doc["error"]) == {"code", "exit_code", "message", "hint"}
    return doc


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_failure_under_json_is_a_json_document(cli, name: str) -> None:
    args, code, command, words = CASES[name]
    result = cli(*args, "--json")
    assert result.exit_code == code, result.stderr
    doc = _document(result.stdout)
    assert doc["command"] == command
    assert doc["error"]["exit_code"] == code and doc["error"]["code"] == ExitCode(code).name.lower()
    assert words in doc["error"]["message"]
    assert doc["input"]["arguments"] == [*args, "--json"]
    assert result.stderr.startswith("Error: ") and words in result.stderr


def test_without_json_a_failure_writes_nothing_on_stdout(cli) -> None:
    result = cli("fit-model", "--params", "bad")
    assert result.exit_code == 2 and result.stdout == ""


def test_a_bad_data_file_is_code_data(cli, tmp_path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("gpus:\n  - id: t4\n    memory_gib: lots\n")
    result = cli("catalog", "list", "--catalog", str(path), "--json")
    doc = _document(result.stdout)
    assert result.exit_code == 3 and doc["error"] == {
        "code": "data", "exit_code": 3, "hint": None,
        "message": f"{path}: entry 't4': memory_gib: Input should be a valid number, not 'lots'",
    }


def test_an_internal_error_is_code_internal(cli, monkeypatch) -> None:
    import gpusizer.api

    def broken(**_: Any) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(gpusizer.api, "list_gpus", broken)
    result = cli("catalog", "list", "--json")
    doc = _document(result.stdout)
    assert result.exit_code == 1 and doc["error"]["code"] == "internal"
    assert doc["error"]["message"] == "internal error: RuntimeError: a bug"


def test_nothing_fits_keeps_the_commands_own_document(cli) -> None:
    """estimate answers "nothing fits" with its result (fits false) and exit 4: one document, not two."""
    result = cli("estimate", "--params", "2T", "--gpu", "rtx-3060", "--json")
    doc = json.loads(result.stdout)
    assert result.exit_code == 4 and "error" not in doc and doc["results"]["fits"] is False


def test_echoed_arguments_are_bounded(cli) -> None:
    result = cli("catalog", "show", "x" * 100_000, "--json")
    doc = _document(result.stdout)
    assert result.exit_code == 2
    assert [len(a) for a in doc["input"]["arguments"]] == [7, 4, 200, 6]
    assert len(doc["error"]["message"]) <= 400


def test_probe_without_a_driver_is_json_and_exit_5(installed, tmp_path) -> None:
    """`gpusizer probe --json | python -m json.tool` works on a machine without a GPU."""
    result = installed("probe", "--json", env={"LD_LIBRARY_PATH": str(tmp_path)})
    if result.returncode == 0:
        pytest.skip("this machine has an NVIDIA driver")
    doc = _document(result.stdout)
    assert result.returncode == 5 and doc["command"] == "probe"
    assert doc["error"]["code"] == "no_device" and doc["error"]["hint"]


def test_an_argument_that_is_not_utf8_is_echoed_as_valid_unicode(installed) -> None:
    import os
    import subprocess

    from conftest import gpusizer_command

    proc = subprocess.run([*map(os.fsencode, gpusizer_command()), b"fit-model", b"--model", b"res\xffnet", b"--json"],
                          capture_output=True, timeout=120)
    text = proc.stdout.decode("utf-8")  # strict: a lone surrogate would not encode as UTF-8 JSON text
    assert proc.returncode == 2 and "res\\udcffnet" in json.loads(text)["input"]["arguments"]
    json.loads(text)["input"]["arguments"][2].encode("utf-8")
