"""Help that teaches (issue 20): every command's --help shows examples that run, its
options sit in the shared panels with human metavars, no Python type leaks into it,
the commands are listed in the order a user needs them, and shell completion offers
GPU and model names without loading the engine."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from gpusizer.cli import app
from gpusizer.cli.options import PANELS
from gpusizer.cli.root import COMMANDS


def _tree() -> list[tuple[list[str], Any]]:
    """(path, click command) for the root and every command and sub-command."""
    found: list[tuple[list[str], Any]] = []

    def walk(cmd: Any, path: list[str]) -> None:
        found.append((path, cmd))
        for name in getattr(cmd, "commands", {}):
            walk(cmd.commands[name], [*path, name])

    walk(typer.main.get_command(app), [])
    return found


TREE = _tree()
IDS = [" ".join(path) or "gpusizer" for path, _ in TREE]


def _help(path: list[str]) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "250", "TERMINAL_WIDTH": "250"},
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def _examples(cmd: Any) -> list[str]:
    return [line.strip()[2:] for line in (cmd.epilog or "").splitlines() if line.strip().startswith("$ ")]


# --------------------------------------------------------------------------
# examples


@pytest.mark.parametrize(("path", "cmd"), TREE, ids=IDS)
def test_every_help_shows_two_or_three_examples(path: list[str], cmd: Any) -> None:
    examples = _examples(cmd)
    assert 2 <= len(examples) <= 3, (path, examples)
    shown = _help(path)
    for example in examples:
        assert example.split("#")[0].strip() in shown, (path, example)
        assert example.startswith("gpusizer " + " ".join(path)), (path, example)


EXAMPLES = [(example, cmd) for _, cmd in TREE for example in _examples(cmd)]


@pytest.mark.parametrize("example", sorted({e for e, _ in EXAMPLES}))
def test_every_example_runs(example: str) -> None:
    """Each example exits 0, or with the code its comment documents ('# exit 4: ...');
    'exit N without an NVIDIA driver' also accepts 0 (a machine that has one)."""
    line, _, comment = example.partition("#")
    expected = {0}
    match = re.match(r"\s*exit (\d+)", comment)
    if match:
        expected = {int(match.group(1))} | ({0} if "without" in comment else set())
    args = shlex.split(line)[1:]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code in expected, (example, result.exit_code, result.stderr[-800:])
    assert "Traceback" not in result.stderr


# --------------------------------------------------------------------------
# panels, metavars, no Python types

#: What typer or click print for a Python type when no metavar is given.
LEAKS = [
    r"<[a-z][\w\[\], |]*>",  # typer: <int>, <str>, <bool>, <list[str]>, <int range>, <path>
    r"\b(INTEGER|TEXT|FLOAT|BOOLEAN|FILENAME|DIRECTORY)\b",  # click
    r"\b(INTEGER|FLOAT) RANGE\b",
    r"\{[a-z_]+\}",  # argparse-style {choices}
    r"list\[|dict\[|Optional\[|NoneType|Literal\[",
    r"\bPath\b|PosixPath",
]


@pytest.mark.parametrize(("path", "cmd"), TREE, ids=IDS)
def test_no_python_type_leaks_into_help(path: list[str], cmd: Any) -> None:
    shown = _help(path)
    for pattern in LEAKS:
        found = re.findall(pattern, shown)
        assert not found, (path, pattern, found)


@pytest.mark.parametrize(("path", "cmd"), TREE, ids=IDS)
def test_every_option_sits_in_a_panel_with_a_human_metavar(path: list[str], cmd: Any) -> None:
    for param in cmd.params:
        if param.hidden:
            continue
        if param.param_type_name == "argument":
            assert param.metavar, (path, param.name)
            continue
        assert param.rich_help_panel in PANELS, (path, param.name, param.rich_help_panel)
        if param.is_flag:
            continue
        assert param.metavar and re.fullmatch(r"[A-Z][A-Z0-9_./:,]*(\.\.\.)?", param.metavar), (path, param.name,
                                                                                                  param.metavar)


@pytest.mark.parametrize(("path", "cmd"), TREE, ids=IDS)
def test_help_at_80_columns_lists_every_option_whole(path: list[str], cmd: Any) -> None:
    """At 80 columns each option's help sits beside or under it (cli/helpfmt.py), so no line passes
    80 characters, no option name or word is cut to an ellipsis, every option appears whole with
    its metavar, and the help text keeps a column of at least 40 characters."""
    # a process of its own: typer reads the terminal width once, when it is first imported
    env = {k: v for k, v in os.environ.items() if k not in ("TERMINAL_WIDTH", "LINES")} | {"COLUMNS": "80"}
    result = subprocess.run([sys.executable, "-m", "gpusizer", *path, "--help"], capture_output=True, text=True,
                            env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    assert "…" not in result.stdout
    for example in _examples(cmd):  # each example on one line, to copy whole
        assert any(f"$ {example}" in line for line in lines), example
    body = "\n".join(lines)
    for param in cmd.params:
        if param.hidden or param.param_type_name == "argument":
            continue
        for name in [*param.opts, *param.secondary_opts]:
            assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", body), (path, name)
        if not param.is_flag and param.metavar:
            long = [o for o in param.opts if o.startswith("--")][-1]
            assert f"{long} {param.metavar}" in body, (path, param.opts, param.metavar)
    # the help column: text beside an option starts at most 2 + 26 + 2 characters in
    starts = [len(m.group(1)) for m in re.finditer(r"^(│ [*-]\S*(?: \S+)*?  +)[^\s│]", body, re.M)]
    assert not starts or max(starts) <= 2 + 26 + 2, (path, max(starts))


def test_help_at_120_columns_keeps_typers_table() -> None:
    """From 100 columns on, typer's own table is kept: the type sits in a column of its own."""
    env = {k: v for k, v in os.environ.items() if k not in ("TERMINAL_WIDTH", "LINES")} | {"COLUMNS": "120"}
    result = subprocess.run([sys.executable, "-m", "gpusizer", "estimate", "--help"], capture_output=True,
                            text=True, env=env, timeout=60)
    assert re.search(r"│ --batch +N +", result.stdout), result.stdout


def test_panels_are_one_list_in_panel_order() -> None:
    """Every command's panels appear in the order of options.PANELS."""
    for path, _cmd in TREE:
        shown = _help(path)
        seen = [p for p in PANELS if f"─ {p} ─" in shown]
        positions = [shown.index(f"─ {p} ─") for p in seen]
        assert positions == sorted(positions), (path, seen)


def test_root_help_lists_the_commands_in_the_order_a_user_needs_them() -> None:
    shown = _help([])
    positions = [shown.index(f"│ {name} ") for name in COMMANDS]
    assert positions == sorted(positions), list(COMMANDS)
    assert list(COMMANDS)[:4] == ["recommend", "fit-model", "estimate", "serve"]


# --------------------------------------------------------------------------
# shell completion, through the environment-variable protocol the shells use


def _complete(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "_GPUSIZER_COMPLETE": "", **env}
    return subprocess.run([sys.executable, "-m", "gpusizer"], env=full, capture_output=True, text=True, timeout=60)


def test_bash_completes_gpu_ids_for_gpu_options() -> None:
    proc = _complete({"_GPUSIZER_COMPLETE": "complete_bash", "COMP_WORDS": "gpusizer fit-model --gpu h10",
                      "COMP_CWORD": "3"})
    assert proc.returncode == 0, proc.stderr
    ids = proc.stdout.split()
    assert "h100-sxm5-80gb" in ids and all(i.startswith("h10") for i in ids), ids


def test_bash_completes_command_names() -> None:
    proc = _complete({"_GPUSIZER_COMPLETE": "complete_bash", "COMP_WORDS": "gpusizer fi", "COMP_CWORD": "1"})
    assert proc.stdout.split() == ["fit-model"], proc.stdout


def test_zsh_completes_model_names_with_their_titles() -> None:
    proc = _complete({"_GPUSIZER_COMPLETE": "complete_zsh", "_TYPER_COMPLETE_ARGS": "gpusizer estimate --model llama-2-"})
    assert proc.returncode == 0, proc.stderr
    assert '"llama-2-7b":"Llama 2 7B"' in proc.stdout, proc.stdout


def test_fish_completes_gpu_names_for_compare() -> None:
    proc = _complete({"_GPUSIZER_COMPLETE": "complete_fish", "_TYPER_COMPLETE_FISH_ACTION": "get-args",
                      "_TYPER_COMPLETE_ARGS": "gpusizer compare rtx-409"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].startswith("rtx-4090\t"), proc.stdout


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts_print(shell: str) -> None:
    proc = _complete({"_GPUSIZER_COMPLETE": f"source_{shell}"})
    assert proc.returncode == 0 and "_GPUSIZER_COMPLETE" in proc.stdout, proc.stderr


def test_gpu_completion_loads_no_engine() -> None:
    """Completing a GPU name for a browsing command reads the raw YAML: neither pydantic's
    models nor the engine are imported."""
    code = (
        "import os, sys\n"
        "os.environ.update(_GPUSIZER_COMPLETE='complete_bash', COMP_WORDS='gpusizer compare a10', COMP_CWORD='2')\n"
        "sys.argv = ['gpusizer']\n"
        "import atexit\n"
        "def facts():\n"  # (at exit: the console script ends its process once the command is done)
        "    heavy = [m for m in sys.modules if m.startswith(('gpusizer.domain', 'gpusizer.memory',"
        " 'gpusizer.performance', 'gpusizer.ranking', 'gpusizer.api', 'gpusizer.hardware'))]\n"
        "    print('HEAVY', heavy, file=sys.stderr)\n"
        "atexit.register(facts)\n"
        "from gpusizer.cli import main\n"
        "main()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "a100-sxm4-80gb" in proc.stdout.split(), proc.stdout
    assert "HEAVY []" in proc.stderr, proc.stderr
