"""The architecture holds: layers import one way, each domain concept lives once.

These tests read the source (``ast``), so they fail on the line that breaks a
rule, not on a behaviour far away:

* no import cycle among gpusizer's modules, and imports run from the CLI to
  rendering to the API to the engine to the domain and data, never back;
* precision names are compared, listed or tabled only in
  ``gpusizer/domain/precision.py``, and strategy names only in
  ``gpusizer/domain/parallelism.py`` (elsewhere code asks those modules);
* "which precisions can train" is decided by one function, ``check_mode``;
* no function is longer than 80 lines;
* the engine (everything below the CLI) names no command-line flag in its
  messages, and imports neither NVML nor typer.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gpusizer.domain.parallelism import STRATEGIES
from gpusizer.domain.precision import ALL_PRECISIONS

PKG = Path(__file__).resolve().parent.parent / "gpusizer"

#: Each package's layer; a module may import only from its own layer or lower ones.
LAYERS: dict[str, int] = {
    "errors": 0, "units": 0, "choices": 0, "datafiles": 0, "_lazy": 0,
    "domain": 1,
    "hardware": 2, "models": 2,
    "memory": 3,
    "performance": 4, "exact": 4,
    "ranking": 5,
    "api": 6,
    "render": 7,
    "cli": 8, "__main__": 8,
}
#: modules that talk to the outside world (the probe's NVML reader) sit at the edge
EDGE = {"gpusizer.hardware.nvml"}


def _modules() -> dict[str, ast.Module]:
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG.parent).with_suffix("")
        name = ".".join(rel.parts).removesuffix(".__init__")
        out[name] = ast.parse(path.read_text(), filename=str(path))
    return out


MODULES = _modules()


def _imports(name: str, tree: ast.Module) -> set[str]:
    """gpusizer modules ``name`` imports, at module level or inside functions
    (imports under ``if TYPE_CHECKING:`` are for annotations only and skipped)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("gpusizer"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gpusizer"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in MODULES else node.module)
    found.discard(name)
    return {m for m in found if m in MODULES and m != "gpusizer"}


GRAPH = {name: _imports(name, tree) for name, tree in MODULES.items()}


def _layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.get(parts[1]) if len(parts) > 1 else None


#: the optional extras' packages, and the only modules that may import them
HEAVY = ("torch", "torchvision", "transformers", "peft", "huggingface_hub", "matplotlib")
HEAVY_HOMES = {"gpusizer.exact._tracker", "gpusizer.exact._build", "gpusizer.exact._step", "gpusizer.exact.trace",
               "gpusizer.models.hub", "gpusizer.render.report"}


def test_heavy_extras_are_imported_only_by_their_modules():
    """torch, transformers, huggingface_hub and matplotlib stay out of the default install's code
    paths: only exact mode's private modules, the Hub reader and the report writer import them
    (inside functions, except the private modules, which only exact mode loads)."""
    wrong = []
    for name, tree in MODULES.items():
        for node in ast.walk(tree):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(m.split(".")[0] in HEAVY for m in mods) and name not in HEAVY_HOMES:
                wrong.append(f"{name}:{node.lineno} imports {mods[0]}")
    assert not wrong, wrong
    public_users = {m for m, deps in GRAPH.items() if m not in HEAVY_HOMES and not m.startswith("gpusizer.exact")
                    and deps & {"gpusizer.exact._tracker", "gpusizer.exact._build", "gpusizer.exact._step"}}
    assert not public_users, f"only gpusizer.exact may load its torch modules: {public_users}"


def test_no_import_cycles():
    """Depth-first search for a back edge; a package's __init__ re-exporting its
    own submodules is part of the package, not a cycle."""
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(GRAPH[node]):
            if node.startswith(dep + ".") or dep.startswith(node + "."):
                continue  # a package and its own submodules
            if state.get(dep) == 1:
                cycles.append([*path[path.index(dep):], dep] if dep in path else [*path, dep])
            elif dep not in state:
                visit(dep, [*path, dep])
        state[node] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module, [module])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_imports_run_down_the_layers():
    wrong = []
    for module, deps in GRAPH.items():
        mine = _layer(module)
        if mine is None:
            continue
        for dep in deps:
            theirs = _layer(dep)
            if theirs is not None and theirs > mine:
                wrong.append(f"{module} (layer {mine}) imports {dep} (layer {theirs})")
    assert not wrong, wrong


def test_every_module_has_a_layer():
    missing = [m for m in MODULES if m != "gpusizer" and _layer(m) is None]
    assert not missing, f"add these to LAYERS: {missing}"


def test_the_engine_imports_neither_nvml_nor_typer():
    for module, tree in MODULES.items():
        layer = _layer(module)
        if layer is None or layer > LAYERS["api"] or module in EDGE:
            continue
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert not name.startswith(("pynvml", "typer", "rich")), f"{module} imports {name}"


# --------------------------------------------------------------------------
# each concept once


def _string_uses(tree: ast.Module, names: set[str]) -> list[tuple[int, str]]:
    """Lines where a string constant in ``names`` is compared with, or listed in a
    literal collection or a Literal[...] type: the ways code redefines a set or a rule."""
    hits: list[tuple[int, str]] = []

    def consts(node: ast.AST) -> list[str]:
        return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and n.value in names]

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for value in consts(node):
                hits.append((node.lineno, f"compares with {value!r}"))
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            found = [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in names]
            if len(found) >= 2:
                hits.append((node.lineno, f"lists {found}"))
        elif isinstance(node, ast.Dict):
            found = [k.value for k in node.keys if isinstance(k, ast.Constant) and k.value in names]
            if len(found) >= 2:
                hits.append((node.lineno, f"tables {found}"))
        elif isinstance(node, ast.IfExp):
            for branch in (node.body, node.orelse):
                if isinstance(branch, ast.Constant) and branch.value in names:
                    hits.append((node.lineno, f"chooses {branch.value!r}"))
    return hits


def _offenders(names: set[str], home: str, allowed: set[str] = frozenset()) -> list[str]:
    out = []
    for module, tree in MODULES.items():
        if module == home or module in allowed:
            continue
        out += [f"{module}:{line}: {what}" for line, what in _string_uses(tree, names)]
    return out


def test_precisions_are_defined_only_in_the_precision_table():
    assert not _offenders(set(ALL_PRECISIONS), "gpusizer.domain.precision")


def test_strategies_are_defined_only_in_parallelism():
    # "tp" also names a JSON key and a parallel degree; it is checked like the rest
    assert not _offenders(set(STRATEGIES), "gpusizer.domain.parallelism")


def test_which_precisions_train_is_one_function():
    """Only check_mode reads storage_train to decide whether a precision trains."""
    readers = []
    for module, tree in MODULES.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "storage_train":
                readers.append(module)
    assert set(readers) == {"gpusizer.domain.precision"}, readers


def test_one_sharding_rule():
    """Shard divisors are computed in domain.parallelism.sharding alone: no other
    module divides by a GPU count chosen by strategy name (checked above) or
    reads zero_stage."""
    readers = {m for m, tree in MODULES.items() for node in ast.walk(tree)
               if isinstance(node, ast.Attribute) and node.attr == "zero_stage"}
    assert readers <= {"gpusizer.domain.parallelism"}, readers


# --------------------------------------------------------------------------
# size and wording


@pytest.mark.parametrize("module", sorted(MODULES))
def test_functions_are_at_most_80_lines(module):
    long = [f"{n.name}: {n.end_lineno - n.lineno + 1} lines" for n in ast.walk(MODULES[module])
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > 80]
    assert not long, long


def test_engine_messages_name_no_command_line_flags():
    """Strings passed to errors and notes below the CLI use domain words; the CLI
    maps an error's field to its option."""
    flagged = []
    for module, tree in MODULES.items():
        layer = _layer(module)
        if layer is None or layer > LAYERS["api"]:
            continue
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute))):
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
            if not name.endswith(("Error", "append")):
                continue
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                text = "".join(n.value for n in ast.walk(arg) if isinstance(n, ast.Constant) and isinstance(n.value, str))
                if " --" in f" {text}" and "benchmarks/" not in text:
                    flagged.append(f"{module}:{node.lineno}: {text[:70]!r}")
    assert not flagged, flagged
