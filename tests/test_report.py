"""--report FILE.html/.svg/.md on recommend, fit-model and estimate (gpusizer.render.report).

The checks on the option itself (a bad suffix, the missing extra) run everywhere. The
reports' contents need matplotlib (gpusizer[report]) and are skipped without it; CI
installs the extra in the torch stage's virtualenv and runs this file there. The
browser test renders each HTML report in headless Chromium and looks at the screenshot;
it is skipped where no Chromium is installed.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from html import escape as html_escape
from pathlib import Path
from typing import Any

import pytest

from gpusizer import __version__

HAS_MPL = importlib.util.find_spec("matplotlib") is not None
needs_mpl = pytest.mark.skipif(not HAS_MPL, reason="needs gpusizer[report] (matplotlib); CI runs it in the torch "
                                                   "stage's virtualenv")
SVG_NS = "{http://www.w3.org/2000/svg}"
GIB = 2**30

FIT = ("fit-model", "--model", "llama-2-7b", "--gpu", "rtx-4090", "--gpu", "l4", "--gpu", "h100-sxm5-80gb")
ESTIMATE = ("estimate", "--model", "resnet50", "--gpu", "a100-sxm4-80gb", "--gpus", "8", "--epochs", "90",
            "--dataset-size", "1.28M", "--price-per-hour", "2")
RECOMMEND = ("recommend", "--workload", "cnn", "--top", "5")


def _run(cli, args: tuple[str, ...], report: Path, *more: str) -> tuple[dict[str, Any], Any]:
    """Run a command with --json and --report; the JSON document and the CliRunner result."""
    result = cli(*args, "--report", str(report), "--json", *more)
    assert result.exit_code in (0, 4), (result.exit_code, result.stdout, result.stderr)
    return json.loads(result.stdout), result


def _svgs(html: str) -> dict[str, ET.Element]:
    """The inline SVG of each <figure id="plot-NAME"> in a report, parsed."""
    found = re.findall(r'<figure id="plot-([\w-]+)">(<svg.*?</svg>)\s*</figure>', html, flags=re.S)
    return {name: ET.fromstring(svg) for name, svg in found}


def _by_id(root: ET.Element, gid: str) -> ET.Element:
    found = [e for e in root.iter() if e.get("id") == gid]
    assert len(found) == 1, (gid, len(found))
    return found[0]


def _texts(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter(f"{SVG_NS}text")]


def _width(group: ET.Element) -> float:
    """The width of the rectangle drawn inside a bar's <g>, from its path."""
    path = next(group.iter(f"{SVG_NS}path"))
    xs = [float(x) for x in re.findall(r"[ML]\s*(-?[\d.]+)\s+-?[\d.]+", path.get("d", ""))]
    return max(xs) - min(xs)


# ----------------------------------------------------------------------------- everywhere


@pytest.mark.parametrize("name", ["report.pdf", "report.png", "report", "report.html.txt"])
def test_a_report_suffix_other_than_html_svg_md_is_a_usage_error(cli, tmp_path, name):
    result = cli("fit-model", "--params", "1B", "--report", str(tmp_path / name))
    assert result.exit_code == 2, result.stderr
    line = result.stderr.splitlines()[0]
    assert line.startswith("Error: --report: the report file must end in .html, .svg or .md"), line
    assert result.stdout == "" and "Traceback" not in result.stderr
    assert not list(tmp_path.iterdir())


def test_a_bad_suffix_under_json_is_the_json_error_document(cli, tmp_path):
    result = cli("estimate", "--model", "resnet50", "--gpu", "t4", "--report", str(tmp_path / "r.pdf"), "--json")
    doc = json.loads(result.stdout)
    assert result.exit_code == 2 and doc["error"]["code"] == "usage" and doc["command"] == "estimate"
    assert doc["error"]["message"].startswith("--report: ")


@pytest.fixture()
def no_matplotlib(monkeypatch):
    """As if gpusizer[report] were not installed: matplotlib cannot be found."""
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any, **kwargs: Any) -> Any:
        return None if name.split(".")[0] == "matplotlib" else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


@pytest.mark.parametrize("args", [FIT, ESTIMATE, RECOMMEND], ids=lambda a: a[0])
def test_without_the_extra_report_is_exit_6_with_the_install_line(cli, tmp_path, no_matplotlib, args):
    """The same mechanism as fit-model --exact without gpusizer[torch]: MissingExtraError, exit 6."""
    result = cli(*args, "--report", str(tmp_path / "r.html"))
    assert result.exit_code == 6, result.stderr
    assert result.stderr.splitlines() == ["Error: reports need matplotlib", "Hint: pip install 'gpusizer[report]'"]
    assert result.stdout == "" and not list(tmp_path.iterdir())
    result = cli(*args, "--report", str(tmp_path / "r.html"), "--json")
    doc = json.loads(result.stdout)
    assert result.exit_code == 6 and doc["error"]["code"] == "missing_extra" and doc["error"]["exit_code"] == 6
    assert doc["error"]["hint"] == "pip install 'gpusizer[report]'" and doc["command"] == args[0]


@pytest.mark.skipif(HAS_MPL, reason="checks the default install, where matplotlib is absent")
def test_without_matplotlib_installed_report_is_exit_6(cli, tmp_path):
    result = cli("fit-model", "--params", "1B", "--report", str(tmp_path / "r.svg"), "--json")
    assert result.exit_code == 6 and json.loads(result.stdout)["error"]["code"] == "missing_extra"


def test_commands_without_report_never_import_matplotlib():
    code = ("import sys\nfrom typer.testing import CliRunner\nfrom gpusizer.cli import app\n"
            "r = CliRunner()\n"
            "for args in (['fit-model', '--params', '1B'], ['estimate', '--model', 'resnet50', '--gpu', 't4'],"
            " ['recommend', '--workload', 'cnn']):\n"
            "    assert r.invoke(app, args).exit_code == 0\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# ----------------------------------------------------------------------------- with matplotlib


@needs_mpl
def test_fit_model_html_report(cli, tmp_path):
    path = tmp_path / "fit.html"
    doc, result = _run(cli, FIT, path)
    assert result.stderr.rstrip().endswith(f"Note: report written to {path}")
    html = path.read_text(encoding="utf-8")
    assert f"gpusizer {__version__}" in html
    for fetch in ("<script", "<link", "src=", 'href="http', "url(http", "@import", "<iframe"):
        assert fetch not in html  # self-contained: nothing for a browser to fetch
    for key, value in doc["input"].items():  # every resolved input, with its value
        shown = {str: lambda v: html_escape(v), int: lambda v: f"{v:,}", type(None): lambda v: "n/a",
                 list: lambda v: ", ".join(map(str, v)) or "none"}.get(type(value))
        assert f"<td>{key}</td>" in html
        if shown is not None:
            assert f"<td>{key}</td><td>{shown(value)}</td>" in html, key
    assert "<td>Llama 2 7B</td>" in html and "<td>rtx-4090, l4, h100-sxm5-80gb</td>" in html
    memory = _svgs(html)["memory"]
    texts = _texts(memory)
    b = doc["results"]["breakdown"]
    from gpusizer.render.fit import COMPONENTS

    shown = [(key, label) for key, label in COMPONENTS if b[key]]
    assert len(shown) >= 6
    for key, label in shown:
        assert f"{label} {b[key] / GIB:,.2f} GiB" in texts, (label, texts)
    widths = {key: _width(_by_id(memory, f"segment-{key}")) for key, _ in shown}
    for key, _ in shown:  # each segment's length is its share of the bytes
        assert widths[key] / widths["weights_bytes"] == pytest.approx(b[key] / b["weights_bytes"], rel=0.01)
    assert f"peak {b['total_bytes'] / GIB:,.2f} GiB" in texts
    assert "memory per GPU (GiB)" in texts
    assert any("rtx-4090, l4" == t for t in texts)  # the two 24 GiB cards share one capacity line


@needs_mpl
def test_estimate_html_report_has_one_point_per_gpu_count(cli, tmp_path):
    path = tmp_path / "est.html"
    doc, _ = _run(cli, ESTIMATE, path)
    res = doc["results"]
    html = path.read_text(encoding="utf-8")
    svgs = _svgs(html)
    counts = [p["gpus_total"] for p in res["scaling_curve"]]
    assert counts == [1, 2, 4, 8]
    for gid in ("throughput", "efficiency"):
        markers = list(_by_id(svgs["scaling"], gid).iter(f"{SVG_NS}use"))
        assert len(markers) == len(counts), gid
    texts = _texts(svgs["scaling"])
    assert {"throughput (images/s)", "per-GPU efficiency (%)", "GPUs"} <= set(texts)
    assert [str(n) for n in counts] == [t for t in texts if t in {"1", "2", "4", "8"}][:4]
    step = svgs["step"]
    assert "time per step (ms)" in _texts(step)
    assert 0 < res["comm_exposed_s"] < res["comm_s"]  # 8 GPUs: communication, partly hidden, has two bars
    for key in ("compute_s", "memory_s", "comm_exposed_s", "comm_s", "step_time_s"):
        _by_id(step, f"step-{key}")
        assert f"{res[key] * 1e3:,.2f} ms" in _texts(step)
    ratio = _width(_by_id(step, "step-memory_s")) / _width(_by_id(step, "step-step_time_s"))
    assert ratio == pytest.approx(res["memory_s"] / res["step_time_s"], rel=0.01)
    assert f"<td>{res['throughput_per_s']:,.0f} images/s</td>" in html
    assert f"<td>${res['time_to_train']['cost_usd']:,.2f} at $2.00 per GPU-hour</td>" in html
    assert f"gpusizer {__version__}" in html and "<td>a100-sxm4-80gb</td>" in html


@needs_mpl
def test_recommend_html_report_ranks_with_reasons(cli, tmp_path):
    path = tmp_path / "rec.html"
    doc, _ = _run(cli, RECOMMEND, path)
    html = path.read_text(encoding="utf-8")
    ranked = doc["results"]["ranked"]
    assert len(ranked) == 5
    positions = [html.index(f"<td>{g['gpu_id']}</td>") for g in ranked]
    assert positions == sorted(positions)  # in rank order
    from gpusizer.render.report import reasons

    for g in ranked:
        top = max(g["contributions"], key=lambda c: c["points"])
        assert f"{top['rule']} +{top['points']:.1f}: " in reasons(g)
        assert reasons(g).replace("'", "&#x27;") in html
    svgs = _svgs(html)
    for g in ranked:
        _by_id(svgs["speed"], f"speed-{g['gpu_id']}")
    assert f"{ranked[0]['speed']['throughput_per_s']:,.0f}" in _texts(svgs["speed"])
    rules = {c["rule"] for g in ranked for c in g["contributions"]}
    assert rules <= set(_texts(svgs["score"]))
    assert f"gpusizer {__version__}" in html and "<td>cnn</td>" in html


@needs_mpl
def test_recommend_with_a_budget_plots_the_configurations(cli, tmp_path):
    path = tmp_path / "plan.html"
    doc, _ = _run(cli, ("recommend", "--workload", "cnn", "--budget", "10000", "--top", "3"), path)
    configs = doc["results"]["plan"]["configurations"]
    html = path.read_text(encoding="utf-8")
    plot = _svgs(html)["configurations"]
    widths = [_width(_by_id(plot, f"config-{c['rank']}")) for c in configs]
    for c, w in zip(configs, widths, strict=True):
        assert w / widths[0] == pytest.approx(c["throughput_per_s"] / configs[0]["throughput_per_s"], rel=0.01)
        assert c["label"] in _texts(plot) and f"<td>{c['label']}</td>" in html
    assert f"<td>${configs[0]['price_total_usd']:,.0f}</td>" in html


@needs_mpl
def test_svg_report_is_one_svg_with_every_plot(cli, tmp_path):
    path = tmp_path / "est.svg"
    doc, _ = _run(cli, ESTIMATE, path)
    text = path.read_text(encoding="utf-8")
    _run(cli, ESTIMATE, path)
    assert path.read_text(encoding="utf-8") == text  # the same result, the same bytes (no date, fixed ids)
    assert text.startswith('<?xml version="1.0" encoding="utf-8"')
    root = ET.fromstring(text.encode("utf-8"))
    assert root.tag == f"{SVG_NS}svg"
    ids = {e.get("id") for e in root.iter()}
    assert {"throughput", "efficiency", "step-compute_s", "step-step_time_s"} <= ids
    assert any(f"gpusizer {__version__}" in t for t in _texts(root))
    assert "resolved_id=a100-sxm4-80gb" in ET.tostring(root, encoding="unicode")  # the inputs, in the metadata


@needs_mpl
def test_markdown_report_has_tables_and_sibling_plots(cli, tmp_path):
    path = tmp_path / "fit.md"
    doc, result = _run(cli, FIT, path)
    text = path.read_text(encoding="utf-8")
    assert "![Memory per GPU](fit-memory.svg)" in text
    sibling = ET.fromstring((tmp_path / "fit-memory.svg").read_bytes())
    _by_id(sibling, "segment-weights_bytes")
    b = doc["results"]["breakdown"]
    assert f"| weights | {b['weights_bytes'] / GIB:,.2f} GiB | {b['weights_bytes']:,} |" in text
    assert f"| model | {doc['input']['model']} |" in text and f"gpusizer {__version__}" in text
    assert "fit-memory.svg" in result.stderr


@needs_mpl
def test_estimate_that_does_not_fit_still_reports(cli, tmp_path):
    path = tmp_path / "nofit.html"
    result = cli("estimate", "--params", "2T", "--gpu", "rtx-3060", "--report", str(path))
    assert result.exit_code == 4 and "Traceback" not in result.stderr
    html = path.read_text(encoding="utf-8")
    assert "Does not fit" in html and "<figure" not in html


@needs_mpl
def test_an_unwritable_report_path_is_one_line_exit_1(cli, tmp_path):
    missing = tmp_path / "no-such-folder" / "r.html"
    result = cli("fit-model", "--params", "1B", "--report", str(missing))
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.splitlines()[0] == f"Error: cannot write the report {missing}: {missing.parent} is not a folder"
    folder = tmp_path / "a-folder.html"
    folder.mkdir()
    result = cli("fit-model", "--params", "1B", "--report", str(folder), "--json")
    doc = json.loads(result.stdout)
    assert result.exit_code == 1 and doc["error"]["message"].startswith(f"cannot write the report {folder}: ")
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1


@needs_mpl
def test_normal_output_is_unchanged_by_report(cli, tmp_path):
    plain = cli(*RECOMMEND)
    with_report = cli(*RECOMMEND, "--report", str(tmp_path / "r.svg"))
    assert plain.stdout == with_report.stdout
    assert with_report.stderr == plain.stderr + f"Note: report written to {tmp_path / 'r.svg'}\n"


# ----------------------------------------------------------------------------- in a real browser


def _browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


BROWSER = _browser()


def _screenshot(html: Path, png: Path, profile: Path) -> Any:
    from PIL import Image

    assert BROWSER is not None
    run = subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                          "--hide-scrollbars", f"--user-data-dir={profile}", f"--screenshot={png}",
                          "--window-size=1200,1600", html.as_uri()], capture_output=True, text=True, timeout=120,
                         check=False)
    assert png.exists(), f"the browser wrote no screenshot (exit {run.returncode}): {run.stderr[-2000:]}"
    return Image.open(png).convert("RGB")


def _near(pixels: Any, hex_colour: str, tolerance: int = 12) -> int:
    """How many of ``pixels`` (an N x 3 array) are within ``tolerance`` of a colour."""
    target = [int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)]
    return int((abs(pixels.astype(int) - target) <= tolerance).all(axis=1).sum())


@needs_mpl
@pytest.mark.skipif(BROWSER is None, reason="no headless Chromium installed (apt-get install chromium)")
@pytest.mark.parametrize("args", [FIT, ESTIMATE, RECOMMEND], ids=lambda a: a[0])
def test_html_report_renders_its_plots_in_a_browser(cli, tmp_path, args):
    """The page is not blank, and each plot's colours are drawn where the plots are (the
    top of the page: the plots come before the tables)."""
    import numpy as np

    from gpusizer.render.report import PALETTE

    path = tmp_path / "report.html"
    _run(cli, args, path)
    image = np.asarray(_screenshot(path, tmp_path / "shot.png", tmp_path / "profile"))
    assert image.shape == (1600, 1200, 3)
    white = (image == 255).all(axis=2).mean()
    assert white < 0.95, f"the page is blank ({white:.1%} white)"
    top = image[:900].reshape(-1, 3)  # the plots' region
    coloured = top[(top.max(axis=1).astype(int) - top.min(axis=1)) > 60]
    assert len(coloured) > 20_000, len(coloured)
    below = image[900:].reshape(-1, 3)
    colours = {"fit-model": PALETTE[:4], "estimate": PALETTE[:2], "recommend": PALETTE[:5]}[args[0]]
    for colour in colours:  # the memory segments, the two scaling curves and bars, the rules' bars
        assert _near(coloured, colour) > 300, colour
        assert _near(below, colour) < _near(coloured, colour)  # (the tables below are not coloured)
