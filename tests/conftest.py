"""Shared fixtures. Rich renders the same here and in CI: no colour, fixed width.

The YAML cache goes to a per-session temporary folder so tests never touch the
user's ~/.cache.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

os.environ["NO_COLOR"] = "1"
os.environ["COLUMNS"] = "160"
os.environ.pop("GPUSIZER_CATALOG", None)
os.environ.pop("FORCE_COLOR", None)

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    os.environ["GPUSIZER_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))


@pytest.fixture(autouse=True)
def _no_user_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUSIZER_CATALOG", raising=False)


@pytest.fixture()
def cli():
    """Run the CLI in-process through typer's CliRunner; returns a Result."""
    from typer.testing import CliRunner

    from gpusizer.cli import app

    runner = CliRunner()

    def run(*args: str, env: dict[str, str] | None = None):
        return runner.invoke(app, list(args), env=env, catch_exceptions=False)

    return run


@pytest.fixture()
def cli_json(cli):
    """Run a command with --json; assert it succeeded and return the document."""

    def run(*args: str, code: int = 0):
        result = cli(*args, "--json")
        assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
        return json.loads(result.stdout)

    return run


def load_script(path: Path, name: str):
    """A script outside the package (benchmarks/, docs/), imported by path."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def gpusizer_command() -> list[str]:
    """The installed console script if it is on PATH next to this Python, else -m."""
    script = Path(sys.executable).with_name("gpusizer")
    if script.exists():
        return [str(script)]
    found = shutil.which("gpusizer")
    return [found] if found else [sys.executable, "-m", "gpusizer"]


@pytest.fixture()
def installed():
    """Run the installed ``gpusizer`` command in a subprocess."""

    def run(*args: str, env: dict[str, str] | None = None, cwd: str | None = None) -> subprocess.CompletedProcess:
        full_env = {**os.environ, **(env or {})}
        return subprocess.run(
            [*gpusizer_command(), *args], capture_output=True, text=True, env=full_env, cwd=cwd, timeout=120
        )

    return run
