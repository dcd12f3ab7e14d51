"""The README stays true: its set-up commands, every command and every option."""

from __future__ import annotations

import re
from pathlib import Path

import typer.main

from gpusizer.cli import app

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _code_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```(?:bash)?\n(.*?)```", text, flags=re.S)]


def test_readme_opens_with_the_two_setup_commands():
    blocks = _code_blocks(README)
    assert blocks[0] == "pip install . && gpusizer recommend --workload cnn"
    assert blocks[1] == "pip install -e '.[test]' && python -m pytest -q"
    # CI runs exactly the README's test command
    assert blocks[1] in (ROOT / ".ci" / "run").read_text()


def _commands():
    group = typer.main.get_command(app)
    out = {}
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):
            for sub, subcmd in cmd.commands.items():
                out[f"{name} {sub}"] = subcmd
        else:
            out[name] = cmd
    return out


def test_every_command_is_documented():
    for name in _commands():
        assert f"gpusizer {name}" in README, f"README does not document 'gpusizer {name}'"


def test_every_option_is_documented():
    missing = []
    for name, cmd in _commands().items():
        for param in cmd.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("--") and opt not in README:
                    missing.append(f"{name} {opt}")
    assert not missing, missing


def test_every_exit_code_is_documented():
    from gpusizer.errors import ExitCode

    for code in ExitCode:
        assert re.search(rf"^\| {int(code)} \|", README, flags=re.M), code
