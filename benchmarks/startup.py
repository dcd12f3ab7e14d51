"""Start-up time of each gpusizer command against importing its libraries.

Runs a cheap real invocation of every command and the baseline
``python -c 'import typer, rich, pydantic, yaml'`` alternately (so background
load hits all alike), and prints the median wall time of each and its ratio to
the baseline. The targets (issue 20): ``catalog list`` at most 1.3x, every other
command at most 1.5x.

A floor line measures what the fixed stack costs: the same libraries doing the
work any ``catalog list`` must do with them, and nothing of gpusizer's: typer
parses options into pydantic-validated values (typer 0.29 builds a pydantic
TypeAdapter per option), a frozen pydantic model is defined and built, and rich
lays out a 14-column table with one row per catalog GPU. A second, the typer floor, is a
typer app of three options parsing one and nothing else: the least any command line built
with typer costs. A third, the pydantic floor, defines one pydantic model of one field and
validates one value: the least any process that validates with a pydantic model costs.

``--breakdown`` splits ``catalog list`` in one process into: the command line
(gpusizer.cli and the command's options), the engine's imports (gpusizer.api and
the pydantic models it defines), loading (reading and validating the catalog,
from the parsed-YAML cache) and rendering (laying out the plain columns and
writing them to a 200-column buffer), so the owner of each part knows its share.

    python benchmarks/startup.py [--runs 15] [--only catalog-list] [--breakdown] [--cold] [--launcher CMD]
                                 [--before DIR]

The YAML cache and the bytecode are warmed first (as they are after the first run on any
machine); ``--cold`` turns the cache off instead, to show the cost of parsing the YAML.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: name -> (arguments, target ratio to the import baseline)
COMMANDS: dict[str, tuple[list[str], float]] = {
    "catalog-list": (["catalog", "list"], 1.3),
    "compare": (["compare", "h100", "a100"], 1.5),
    "systems-list": (["systems", "list"], 1.5),
    "models": (["models"], 1.5),
    "fit-model": (["fit-model", "--params", "60M", "--gpu", "h100"], 1.5),
    "estimate": (["estimate", "--model", "resnet50", "--gpu", "a100"], 1.5),
    "serve": (["serve", "--model", "llama-2-7b", "--gpu", "h100"], 1.5),
    "recommend": (["recommend", "--workload", "cnn"], 1.5),
    "help": (["--help"], 1.5),
}


#: Where every timed command runs (main sets it to an empty folder): not the source tree, whose
#: gpusizer ``python -m`` and ``python -c`` import ahead of ``--before``'s PYTHONPATH.
_CWD: dict[str, str] = {}


def _time(cmd: list[str], env: dict[str, str], ok: tuple[int, ...] = (0, 4)) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, cwd=_CWD.get("dir"))
    elapsed = time.perf_counter() - start
    if proc.returncode not in ok:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}")
    return elapsed


#: The least any command line built with typer costs: a typer app of three options parsing one
#: and printing it, nothing else (typer 0.26+ imports its pydantic adapters to parse any option).
TYPER_FLOOR = """
import typer

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@app.command()
def main(a: int = 1, b: str = "x", c: bool = False) -> None:
    print(a, b, c)


app(["--a", "2"])
"""

#: The least a process that validates anything with a pydantic model costs: the baseline's
#: imports, one model of one field, one value validated (``import pydantic`` alone is lazy).
PYDANTIC_FLOOR = """
import typer, rich, pydantic, yaml
from pydantic import BaseModel


class One(BaseModel):
    x: int


One(x=1)
"""

FLOOR = """
import io, sys
from typing import Optional
import typer, yaml
from pydantic import BaseModel, ConfigDict, TypeAdapter
from rich.console import Console
from rich.table import Table
from rich.text import Text

for annotation in (Optional[str], Optional[float], Optional[bool], bool):
    TypeAdapter(annotation).validate_python(None if annotation is not bool else False)

class Row(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    value: float

rows = [Row(name=f"gpu-{i}", value=i * 1.5) for i in range(ROWS)]
table = Table()
for c in range(14):
    table.add_column(f"column {c}")
for row in rows:
    table.add_row(*(Text(f"{row.value:.1f}") for _ in range(14)))
Console(file=io.StringIO(), width=200).print(table)
"""

#: catalog list, phase by phase, in one process (the phases of gpusizer.cli.catalog.catalog_list)
BREAKDOWN = """
import contextlib, gc, io, json, time
gc.disable()  # (as gpusizer.cli.main does until the command runs)
t0 = time.perf_counter()
import typer, rich, pydantic, yaml
t1 = time.perf_counter()
from gpusizer.cli.root import load_command
from gpusizer.cli.options import _load_catalog
load_command("catalog").commands["list"]
gc.freeze(); gc.enable()
t2 = time.perf_counter()
from gpusizer import api
api.list_gpus  # (gpusizer.api loads its parts lazily)
import gpusizer.api._browse
t3 = time.perf_counter()
result = api.list_gpus(catalog=_load_catalog(None))
t4 = time.perf_counter()
from gpusizer.render.catalog import catalog_table
from gpusizer.render.common import print_lines
with contextlib.redirect_stdout(io.StringIO()):  # (not a terminal: the plain lines need no rich console)
    assert print_lines(catalog_table(result.results, title="x", provenance=False, width=200))
t5 = time.perf_counter()
print(json.dumps({"libraries": t1 - t0, "command line": t2 - t1, "engine imports": t3 - t2,
                  "loading": t4 - t3, "rendering": t5 - t4}))
"""


def _gpusizer() -> list[str]:
    script = Path(sys.executable).with_name("gpusizer")
    return [str(script)] if script.exists() else [shutil.which("gpusizer") or "gpusizer"]


def _breakdown(env: dict[str, str], runs: int) -> None:
    phases: dict[str, list[float]] = {}
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", BREAKDOWN], env=env, capture_output=True, text=True, check=True,
                             cwd=_CWD.get("dir"))
        for name, seconds in json.loads(out.stdout).items():
            phases.setdefault(name, []).append(seconds)
    print(f"\ncatalog list, phase by phase in one process (median of {runs}):")
    for name, values in phases.items():
        print(f"  {name:<16} {statistics.median(values) * 1000:6.0f} ms")
    print("  (plus the interpreter's own start, about 15 ms, which the baseline includes too)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--only", action="append", choices=sorted(COMMANDS), help="time only these (repeatable)")
    parser.add_argument("--cold", action="store_true", help="disable the parsed-YAML cache")
    parser.add_argument("--breakdown", action="store_true", help="also split catalog list into its phases")
    parser.add_argument("--launcher", help="how to start gpusizer, e.g. 'python -m gpusizer' (default: the "
                                           "console script beside this Python)")
    parser.add_argument("--before", metavar="DIR", help="also time the gpusizer in this source tree (e.g. "
                        "'git archive HEAD~3 | tar -x -C DIR'), alternating with this one, as python -m gpusizer; "
                        "implies --launcher 'python -m gpusizer' for this one too")
    args = parser.parse_args()

    gpusizer = args.launcher.split() if args.launcher else _gpusizer()
    if args.before:
        gpusizer = [sys.executable, "-m", "gpusizer"]
    baseline = [sys.executable, "-c", "import typer, rich, pydantic, yaml"]
    cache = tempfile.mkdtemp(prefix="gpusizer-bench-")
    _CWD["dir"] = tempfile.mkdtemp(dir=cache)
    env = {**os.environ, "GPUSIZER_CACHE_DIR": cache, "COLUMNS": "200"}
    # the warm-up run writes bytecode, as installing a wheel does: without it every run compiles
    # gpusizer's modules again (about 30 ms), which no installed copy pays
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if args.cold:
        env["GPUSIZER_NO_CACHE"] = "1"
    chosen = {name: COMMANDS[name] for name in (args.only or COMMANDS)}
    import yaml

    rows = len(yaml.safe_load((Path(__file__).resolve().parent.parent / "data" / "gpus.yaml").read_text())["gpus"])
    floor = [sys.executable, "-c", f"ROWS = {rows}\n" + FLOOR]
    runs = {"baseline": baseline, "floor": floor, "typer floor": [sys.executable, "-c", TYPER_FLOOR],
            "pydantic floor": [sys.executable, "-c", PYDANTIC_FLOOR],
            **{name: [*gpusizer, *cmd] for name, (cmd, _) in chosen.items()}}
    envs = dict.fromkeys(runs, env)
    if args.before:
        older = {**env, "PYTHONPATH": str(Path(args.before).resolve())}
        for name, (cmd, _) in chosen.items():
            runs[f"{name} (before)"] = [sys.executable, "-m", "gpusizer", *cmd]
            envs[f"{name} (before)"] = older
    for name, cmd in runs.items():
        _time(cmd, envs[name])  # warm the OS file cache and the YAML cache
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.runs):
        for name, cmd in runs.items():
            times[name].append(_time(cmd, envs[name]))
    base = statistics.median(times["baseline"])
    print(f"median of {args.runs} alternating runs{' (no cache)' if args.cold else ''}; "
          f"baseline python -c 'import typer, rich, pydantic, yaml' = {base * 1000:.0f} ms\n")
    before = " before ratio " if args.before else ""
    print(f"{'command':<14} {before}{'median':>8} {'ratio':>6} {'target':>7}  met")
    for name, (_cmd, target) in chosen.items():
        median = statistics.median(times[name])
        ratio = median / base
        old = ""
        if args.before:
            old_median = statistics.median(times[f"{name} (before)"])
            old = f"{old_median * 1000:4.0f} ms {old_median / base:5.2f} "
        print(f"{name:<14} {old}{median * 1000:6.0f} ms {ratio:6.2f} {target:6.1f}x  {'yes' if ratio <= target else 'no'}")
    low = statistics.median(times["floor"])
    print(f"\nfloor (the libraries doing a listing's work, no gpusizer code): {low * 1000:.0f} ms, "
          f"{low / base:.2f}x the baseline")
    bare = statistics.median(times["typer floor"])
    print(f"typer floor (a three-option typer app parsing one, nothing else): {bare * 1000:.0f} ms, "
          f"{bare / base:.2f}x the baseline")
    one = statistics.median(times["pydantic floor"])
    print(f"pydantic floor (one pydantic model of one field validating one value): {one * 1000:.0f} ms, "
          f"{one / base:.2f}x the baseline")
    if args.breakdown:
        _breakdown(env, args.runs)
    shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
