"""Start-up time of ``gpusizer catalog list`` against importing its libraries.

Runs each command alternately (so background load hits all alike) and prints
the median wall times and their ratio. The target is a ratio of at most 1.3.

A third command measures the floor the fixed stack sets: the same libraries
doing the work any `catalog list` must do with them, and nothing of gpusizer's.
typer parses options into pydantic-validated values (typer 0.29 builds a
pydantic TypeAdapter per option), a frozen pydantic model is defined and built,
and rich lays out a 14-column table with one row per catalog GPU, as `catalog list` does. The ratio of `catalog list` to
this floor is gpusizer's own share.

    python benchmarks/startup.py [--runs 30]

The YAML cache is warmed first (as it is after the first run on any machine);
``--cold`` turns the cache off instead, to show the cost of parsing the YAML.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _time(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--cold", action="store_true", help="disable the parsed-YAML cache")
    args = parser.parse_args()

    script = Path(sys.executable).with_name("gpusizer")
    gpusizer = [str(script)] if script.exists() else [shutil.which("gpusizer") or "gpusizer"]
    baseline = [sys.executable, "-c", "import typer, rich, pydantic, yaml"]
    cache = tempfile.mkdtemp(prefix="gpusizer-bench-")
    env = {**os.environ, "GPUSIZER_CACHE_DIR": cache}
    if args.cold:
        env["GPUSIZER_NO_CACHE"] = "1"
    listing = [*gpusizer, "catalog", "list"]
    _time(listing, env)  # warm the OS file cache and the YAML cache
    _time(baseline, env)
    import yaml

    rows = len(yaml.safe_load((Path(__file__).resolve().parent.parent / "data" / "gpus.yaml").read_text())["gpus"])
    floor = [sys.executable, "-c", f"ROWS = {rows}\n" + FLOOR]
    base_times, list_times, floor_times = [], [], []
    for _ in range(args.runs):
        base_times.append(_time(baseline, env))
        list_times.append(_time(listing, env))
        floor_times.append(_time(floor, env))
    base, lst = statistics.median(base_times), statistics.median(list_times)
    low = statistics.median(floor_times)
    print(f"python -c 'import typer, rich, pydantic, yaml': median {base * 1000:.0f} ms over {args.runs} runs")
    print(f"gpusizer catalog list{' (no cache)' if args.cold else ''}: median {lst * 1000:.0f} ms")
    print(f"ratio: {lst / base:.2f} (target <= 1.30)")
    print(f"floor (the libraries doing a listing's work, no gpusizer code): median {low * 1000:.0f} ms,"
          f" {low / base:.2f}x the import baseline")
    print(f"catalog list / floor: {lst / low:.2f}")
    shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
