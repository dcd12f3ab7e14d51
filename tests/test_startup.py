"""Start-up (issue 20), as facts rather than times: what a command loads, parses and builds.

``benchmarks/startup.py`` measures the times; these tests keep the structure that gives them.
Each runs the console script's entry point (``gpusizer.cli.main``) in a fresh interpreter, so
nothing a test process already imported hides a cost.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main

from gpusizer.cli import root
from gpusizer.cli.root import _CoerceWhenGiven, app

#: Runs ``gpusizer ARGS`` through the console script's entry point, stdout to a buffer, and
#: as the process ends (the console script ends it itself once the command is done: an
#: ``atexit`` function still runs) prints a JSON object of facts about it to the real stdout.
_PROBE = """
import atexit, contextlib, functools, gc, io, json, sys
import gpusizer.datafiles as datafiles
parsed = []
_parse = datafiles._load_yaml_text.__wrapped__
def counted(text, origin):
    parsed.append(origin)
    return _parse(text, origin)
datafiles._load_yaml_text = functools.cache(counted)
sys.argv = ["gpusizer", *ARGS]
out = io.StringIO()
def facts():
    sys.__stdout__.write(json.dumps({"modules": sorted(sys.modules), "parsed": parsed, "gc": gc.isenabled(),
                                     "frozen": gc.get_freeze_count(), "stdout": out.getvalue()}) + "\\n")
atexit.register(facts)
from gpusizer.cli import main
with contextlib.redirect_stdout(out):
    main()
"""


def _probe(tmp_path: Path, *args: str) -> dict:
    env = {**os.environ, "GPUSIZER_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "80"}
    env.pop("GPUSIZER_NO_CACHE", None)
    code = _PROBE.replace("ARGS", repr(list(args)))
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    return {**json.loads(run.stdout.splitlines()[-1]), "exit": run.returncode}


def test_catalog_list_loads_no_engine_and_no_rich_console(tmp_path: Path) -> None:
    facts = _probe(tmp_path, "catalog", "list")
    assert facts["exit"] == 0 and facts["stdout"].split("\n")[0].endswith(" GPUs")
    loaded = set(facts["modules"])
    for heavy in ("gpusizer.performance", "gpusizer.memory", "gpusizer.ranking", "gpusizer.domain",
                  "gpusizer.hardware.nvml", "rich.console", "rich.table", "rich.text"):
        assert heavy not in loaded, heavy
    # the other commands' modules are not imported either (the root group loads commands lazily)
    assert not loaded & {"gpusizer.cli.recommend", "gpusizer.cli.fit", "gpusizer.cli.estimate", "gpusizer.cli.serve"}


@pytest.mark.parametrize("args", [
    ("catalog", "show", "h100"),
    ("compare", "h100", "a100", "--workload", "cnn"),
    ("estimate", "--model", "resnet50", "--gpu", "a100"),
    ("recommend", "--workload", "cnn"),
])
def test_a_warm_cache_means_no_yaml_is_parsed(tmp_path: Path, args: tuple[str, ...]) -> None:
    first = _probe(tmp_path, *args)
    assert first["exit"] == 0 and first["parsed"]  # (the first run fills the cache)
    again = _probe(tmp_path, *args)
    assert again["exit"] == 0 and again["parsed"] == []
    assert again["stdout"] == first["stdout"]


def test_the_garbage_collector_is_paused_for_start_up_only(tmp_path: Path) -> None:
    facts = _probe(tmp_path, "catalog", "list", "--json")
    assert facts["exit"] == 0 and json.loads(facts["stdout"])["command"] == "catalog list"
    # on again once the command ran, with what start-up made frozen out of its way
    assert facts["gc"] is True and facts["frozen"] > 10_000


def test_options_left_out_build_no_coercion(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(root, "_BUILT", {})  # (a command built afresh: other tests gave it other options)
    result = cli("catalog", "list", "--vendor", "amd", "--json")
    assert result.exit_code == 0, result.output
    assert {g["vendor"] for g in json.loads(result.stdout)["results"]} == {"amd"}
    command = typer.main.get_command(app).commands["catalog"].commands["list"]  # (the one just run)
    params = {p.name: p for p in command.params}
    # typer's own coercion for the option given; the stand-in still for those left out
    assert not isinstance(params["vendor"]._runtime_param, _CoerceWhenGiven)
    assert isinstance(params["arch"]._runtime_param, _CoerceWhenGiven)
    # and a bad value given is still typer's usage error (exit 2)
    bad = cli("catalog", "list", "--min-memory", "-1")
    assert bad.exit_code == 2 and "--min-memory" in bad.stderr


@pytest.mark.parametrize(("width", "fits"), [(40, False), (59, False), (80, True), (200, True)])
def test_catalog_list_writes_what_rich_prints(cli, width: int, fits: bool) -> None:
    """The plain lines catalog list writes without rich (where every line fits the width; else
    rich prints them, folding the lines too wide) are the bytes rich's console prints of them."""
    import io

    from rich.console import Console

    from gpusizer import api
    from gpusizer.render.catalog import catalog_table

    result = cli("catalog", "list", "--show-provenance", env={"COLUMNS": str(width)})
    assert result.exit_code == 0
    found = api.list_gpus()
    lines = catalog_table(found.results, title=f"{len(found.results)} of {found.catalog_size} GPUs",
                          provenance=True, width=width)
    buffer = io.StringIO()
    Console(file=buffer, width=width, highlight=False, markup=False, emoji=False).print(lines.rich_text())
    assert result.stdout == buffer.getvalue()
    from rich.cells import cell_len

    assert (max(map(cell_len, lines.plain.splitlines())) <= width) == fits  # (which path it took)


@pytest.mark.parametrize(("args", "code"), [
    (("catalog", "list", "--json"), 0),
    (("catalog", "show", "no-such-gpu", "--json"), 2),
    (("recommend", "--workload", "cnn", "--top", "60", "--json"), 0),
])
def test_the_console_script_ends_with_its_exit_code_and_all_its_output(tmp_path: Path, args: tuple[str, ...],
                                                                       code: int) -> None:
    """The console script ends its process itself once the command is done (no interpreter
    teardown): the exit code is the command's and every byte written reaches the pipe."""
    env = {**os.environ, "GPUSIZER_CACHE_DIR": str(tmp_path / "cache")}
    run = subprocess.run([sys.executable, "-m", "gpusizer", *args], capture_output=True, text=True, env=env,
                         cwd=tmp_path, check=False)
    assert run.returncode == code, run.stderr
    doc = json.loads(run.stdout)  # (whole: a cut document does not parse)
    if code == 0:
        assert len(doc["results"] if args[0] == "catalog" else doc["results"]["ranked"]) > 50
    else:
        assert doc["error"]["exit_code"] == 2 and run.stderr.startswith("Error: unknown GPU 'no-such-gpu'")
