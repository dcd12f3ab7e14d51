"""The docs stay true: the README's set-up commands, the generated command reference,
the exit codes, the README's size and every relative link."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from urllib.parse import unquote

import pytest
import typer.main
from conftest import load_script

from gpusizer.cli import app

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = (ROOT / "README.md").read_text()
README_MAX_BYTES = 12_500


def _code_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```[\w-]*\n(.*?)```", text, flags=re.S)]


def test_readme_opens_with_the_two_setup_commands():
    blocks = _code_blocks(README)
    assert blocks[0] == "pip install . && gpusizer recommend --workload cnn"
    assert blocks[1] == "pip install -e '.[test]' && python -m pytest -q"
    # CI runs exactly the README's test command
    assert blocks[1] in (ROOT / ".ci" / "run").read_text()


# ----- the generated command reference ----------------------------------------------------


def _generator():
    """docs/gen_commands.py, imported by path (docs/ is not a package)."""
    spec = importlib.util.spec_from_file_location("gen_commands", DOCS / "gen_commands.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _commands() -> dict[str, object]:
    """Every command of the app, found here rather than by the generator: 'gpusizer',
    'gpusizer catalog', 'gpusizer catalog list', ..."""
    out = {}

    def visit(path, cmd):
        out[path] = cmd
        for name, sub in getattr(cmd, "commands", {}).items():
            if not getattr(sub, "hidden", False):
                visit(f"{path} {name}", sub)

    visit("gpusizer", typer.main.get_command(app))
    return out


def _section(text: str, path: str) -> str:
    """The part of docs/commands.md under the heading for one command."""
    match = re.search(rf"^## `{re.escape(path)}`\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert match, f"docs/commands.md has no section for '{path}': run python docs/gen_commands.py"
    return match.group(1)


def test_command_reference_is_current():
    current = (DOCS / "commands.md").read_text(encoding="utf-8")
    assert current == _generator().render(), "docs/commands.md is out of date: run python docs/gen_commands.py"


def test_constants_table_is_current():
    """docs/method.md lists every fitted constant with its bounds, value and rows (docs/gen_constants.py)."""
    module = load_script(DOCS / "gen_constants.py", "gen_constants")
    text = module.render()
    assert module.current() == text, "docs/method.md's Constants section is out of date: run python docs/gen_constants.py"
    from gpusizer.performance.calibration import load_calibration

    cal = load_calibration()
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| class")]
    assert len(rows) == sum(len(e.fitted) for e in cal.efficiencies) + 3


def test_every_command_and_option_is_in_the_reference():
    text = (DOCS / "commands.md").read_text(encoding="utf-8")
    commands = _commands()
    assert {"gpusizer recommend", "gpusizer fit-model", "gpusizer estimate", "gpusizer probe",
            "gpusizer catalog list", "gpusizer catalog show"} <= set(commands)
    missing = []
    for path, cmd in commands.items():
        section = _section(text, path)
        for param in cmd.params:
            if getattr(param, "hidden", False):
                continue
            names = list(param.opts) + list(getattr(param, "secondary_opts", []) or [])
            for opt in names:
                if opt.startswith("--") and f"`{opt}`" not in section:
                    missing.append(f"{path} {opt}")
    assert not missing, missing


def test_every_exit_code_is_documented():
    from gpusizer.errors import ExitCode

    text = (DOCS / "exit-codes.md").read_text()
    for code in ExitCode:
        assert re.search(rf"^\| {int(code)} \|", text, flags=re.M), f"docs/exit-codes.md has no row for {code!r}"


# ----- the README's size and the links ---------------------------------------------------


def test_readme_stays_short():
    size = len(README.encode("utf-8"))
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes; move detail into docs/ (limit {README_MAX_BYTES})"


MARKDOWN_FILES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
# [text](target) and [text](target "title")
LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _links(text: str) -> list[str]:
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # links inside code blocks are not links
    text = re.sub(r"`[^`\n]*`", "", text)
    return LINK.findall(text)


def _anchors(md: Path) -> set[str]:
    """GitHub's anchors for the headings of a Markdown file."""
    text = re.sub(r"```.*?```", "", md.read_text(encoding="utf-8"), flags=re.S)
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


@pytest.mark.parametrize("md", MARKDOWN_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(md):
    broken = []
    for target in _links(md.read_text(encoding="utf-8")):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, flags=re.I):
            continue  # http:, https:, mailto:
        path, _, anchor = unquote(target).partition("#")
        dest = (md.parent / path) if path else md
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(target)
    assert not broken, f"{md.relative_to(ROOT)}: links to missing files or headings: {broken}"


# ----- the README's examples are real output -------------------------------------------


def _readme_examples(text: str = README) -> list[tuple[str, list[str]]]:
    """Each ``$ gpusizer ...`` example in the README's code blocks (or ``text``'s): its command
    (backslash continuations joined) and the output lines shown under it, "..." marking a cut."""
    examples = []
    for block in _code_blocks(text):
        lines = block.splitlines()
        i = 0
        while i < len(lines):
            if not lines[i].startswith("$ gpusizer"):
                i += 1
                continue
            command = lines[i][2:]
            while command.endswith("\\"):
                i += 1
                command = command[:-1].rstrip() + " " + lines[i].strip()
            i += 1
            shown = []
            while i < len(lines) and not lines[i].startswith("$ "):
                shown.append(lines[i].rstrip())
                i += 1
            examples.append((command, shown))
    return examples


def test_the_readme_examples_are_found():
    """The example test below runs what it finds: it must find the README's examples, each with
    output lines to check (recommend, fit-model, estimate, and probe without a driver; the run on
    the fake NVML library needs the library built, which tests/test_probe.py does)."""
    examples = _readme_examples()
    assert len(examples) >= 4 and all(any(line != "..." for line in shown) for _, shown in examples)


def _serving_examples() -> list[tuple[str, list[str]]]:
    """docs/usage.md's serving examples: serve, and recommend for an inference workload."""
    usage = (DOCS / "usage.md").read_text()
    return [(c, shown) for c, shown in _readme_examples(usage)
            if c.startswith("gpusizer serve ") or " --users " in c or " llm-inference " in c]


def test_the_serving_examples_in_usage_are_found():
    commands = [c.split()[1] for c, _ in _serving_examples()]
    assert commands.count("serve") >= 2 and "recommend" in commands


@pytest.mark.parametrize("command,shown", _readme_examples() + _serving_examples(),
                         ids=lambda v: v if isinstance(v, str) else "")
def test_readme_example_is_real_output(installed, command, shown):
    """The lines each README example (and usage.md's serving examples) shows appear, in order, in
    the command's output at COLUMNS=80 (the README says so), stdout and stderr together."""
    import shlex

    args = shlex.split(command)[1:]
    done = installed(*args, env={"COLUMNS": "80", "NO_COLOR": "1", "LD_LIBRARY_PATH": "/nonexistent"})
    actual = [line.rstrip() for line in (done.stderr + done.stdout).splitlines()]
    position = 0
    for line in (s for s in shown if s != "..."):
        assert line in actual[position:], f"{command!r}: {line!r} is not in the output (in order)"
        position = actual.index(line, position) + 1
