"""The public Python API: typed results that equal the command line's JSON.

Each case runs the same question through ``gpusizer.<function>(...)`` and
through the CLI with ``--json`` and compares the whole documents, so the CLI
cannot grow an answer the API lacks. The API's errors are in domain words.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import gpusizer
from gpusizer import api
from gpusizer.errors import ExitCode, NothingFitsError, UsageError


@pytest.mark.parametrize(
    ("call", "args", "code"),
    [
        (lambda: gpusizer.fit_model("resnet50", gpu="v100-sxm2-16gb", batch=64),
         ["fit-model", "--model", "resnet50", "--gpu", "v100-sxm2-16gb", "--batch", "64"], 0),
        (lambda: gpusizer.fit_model(params="7B", gpu=["rtx-4090", "a100-sxm4-80gb"], mode="inference"),
         ["fit-model", "--params", "7B", "--gpu", "rtx-4090", "--gpu", "a100-sxm4-80gb", "--inference"], 0),
        (lambda: gpusizer.fit_model("llama-2-70b", gpu="rtx-3090", gpus=4, strategy="fsdp", precision="bf16"),
         ["fit-model", "--model", "llama-2-70b", "--gpu", "rtx-3090", "--gpus", "4", "--strategy", "fsdp",
          "--precision", "bf16"], ExitCode.NOTHING_FITS),
    ],
    ids=["resnet50-v100", "params-7b-inference", "llama-70b-fsdp-nothing-fits"],
)
def test_fit_model_equals_cli_json(cli_json, call, args, code):
    assert call().document() == cli_json(*args, code=code)


@pytest.mark.parametrize(
    ("kwargs", "args", "code"),
    [
        ({"model": "resnet50", "gpu": "a100-sxm4-80gb", "batch": 256},
         ["--model", "resnet50", "--gpu", "a100-sxm4-80gb", "--batch", "256"], 0),
        ({"model": "resnet50", "gpu": "v100-sxm2-16gb", "gpus": 8, "nodes": 4, "epochs": 90,
          "dataset_size": "1.28M", "price_per_hour": 2.5},
         ["--model", "resnet50", "--gpu", "v100-sxm2-16gb", "--gpus", "8", "--nodes", "4", "--epochs", "90",
          "--dataset-size", "1.28M", "--price-per-hour", "2.5"], 0),
        ({"model": "llama-2-7b", "gpu": "rtx-4090", "mode": "inference", "precision": "int4", "batch": 1},
         ["--model", "llama-2-7b", "--gpu", "rtx-4090", "--inference", "--precision", "int4", "--batch", "1"], 0),
        ({"model": "llama-2-70b", "gpu": "rtx-3090"}, ["--model", "llama-2-70b", "--gpu", "rtx-3090"],
         ExitCode.NOTHING_FITS),
    ],
    ids=["resnet50-a100", "resnet50-cluster-cost", "llama-int4-decode", "nothing-fits"],
)
def test_estimate_equals_cli_json(cli_json, kwargs, args, code):
    assert gpusizer.estimate(**kwargs).document() == cli_json("estimate", *args, code=code)


@pytest.mark.parametrize(
    ("kwargs", "args"),
    [
        ({"workload": "cnn"}, ["--workload", "cnn"]),
        ({"workload": "llm-train", "model": "llama-2-7b", "gpus": 8, "strategy": "fsdp", "budget": 400_000},
         ["--workload", "llm-train", "--model", "llama-2-7b", "--gpus", "8", "--strategy", "fsdp",
          "--budget", "400000"]),
    ],
    ids=["cnn", "llm-train-budget"],
)
def test_recommend_equals_cli_json(cli_json, kwargs, args):
    result = gpusizer.recommend(**kwargs)
    doc = cli_json("recommend", *args, code=0 if result.fits else ExitCode.NOTHING_FITS)
    assert result.document() == doc


@pytest.mark.parametrize(
    ("call", "args"),
    [
        (lambda: gpusizer.api.list_gpus(segment="datacenter", arch="hopper", sort="memory_gib"),
         ["catalog", "list", "--segment", "datacenter", "--arch", "hopper", "--sort", "memory_gib"]),
        (lambda: gpusizer.api.show_gpu("RTX 3090"), ["catalog", "show", "RTX 3090"]),
        (lambda: gpusizer.api.compare(["1080ti", "p100"]), ["compare", "1080ti", "p100"]),
        (lambda: gpusizer.api.models(), ["models"]),
    ],
    ids=["catalog-list", "catalog-show", "compare", "models"],
)
def test_browsing_equals_cli_json(cli_json, call, args):
    assert call().document() == cli_json(*args)


def test_every_command_goes_through_the_api():
    """No command builds its JSON itself: each calls a function of gpusizer.api."""
    import ast
    from pathlib import Path

    cli_dir = Path(gpusizer.__file__).parent / "cli"
    for name in ("catalog", "estimate", "fit", "probe", "recommend", "serve", "systems"):
        tree = ast.parse((cli_dir / f"{name}.py").read_text())
        calls = {n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                 and isinstance(n.func.value, ast.Name) and n.func.value.id == "api"}
        assert calls, f"cli/{name}.py calls no api function"
        # the JSON is the result's document(), printed directly or through options._show
        named = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        assert "_show" in named or "document" in {n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call)
                                                  and isinstance(n.func, ast.Attribute)}, name
    show = ast.parse((cli_dir / "options.py").read_text())
    assert "document" in {n.func.attr for n in ast.walk(show) if isinstance(n, ast.Call)
                          and isinstance(n.func, ast.Attribute)}


def test_results_are_typed_models():
    fit = gpusizer.fit_model("resnet50", gpu="v100-sxm2-16gb", batch=64)
    assert isinstance(fit, api.FitModelResult) and fit.fits
    assert fit.results.fits_on == ("v100-sxm2-16gb",)
    assert fit.results.breakdown.total_bytes == fit.report.breakdown.total_bytes > 0
    est = gpusizer.estimate("resnet50", gpu="a100-sxm4-80gb", batch=256)
    assert isinstance(est, api.EstimateResult)
    assert est.results.estimate is not None and est.results.throughput_unit == "images/s"
    assert est.results.throughput_per_s == est.results.estimate.throughput_per_s > 0
    with pytest.raises(Exception, match="frozen"):
        est.results.gpu = "other"  # type: ignore[misc]


def test_a_run_config_and_settings_combine():
    base = gpusizer.RunConfig(mode="inference", precision="fp16", batch=4)
    one = gpusizer.fit_model("llama-2-7b", gpu="a100-sxm4-80gb", run=base)
    two = gpusizer.fit_model("llama-2-7b", gpu="a100-sxm4-80gb", mode="inference", precision="fp16", batch=4)
    assert one.document() == two.document()
    eight = gpusizer.fit_model("llama-2-7b", gpu="a100-sxm4-80gb", run=base, batch=8)
    assert eight.input["batch"] == 8
    assert eight.results.breakdown.kv_cache_bytes == 2 * one.results.breakdown.kv_cache_bytes


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: gpusizer.estimate("resnet50", gpu="a100-sxm4-80gb", batch=8, grad_accumulation=0),
         "grad_accumulation"),
        (lambda: gpusizer.estimate("resnet50", gpu="a100-sxm4-80gb", epochs=3), "epochs"),
        (lambda: gpusizer.fit_model("llama-2-7b", precision="int4"), "precision"),
        (lambda: gpusizer.fit_model(), "model"),
        (lambda: gpusizer.recommend("cnn", batch=8), "batch"),
    ],
    ids=["grad-accumulation", "epochs-alone", "int4-training", "no-model", "batch-without-model"],
)
def test_api_errors_speak_domain_words(call, field):
    with pytest.raises(UsageError) as info:
        call()
    assert "--" not in info.value.message and "--" not in (info.value.hint or "")
    assert info.value.field == field
    assert info.value.exit_code == ExitCode.USAGE


def test_nothing_fits_is_a_result_not_an_exception_for_estimate():
    est = gpusizer.estimate("llama-2-70b", gpu="rtx-3090")
    assert not est.fits and est.results.reason and est.results.throughput_per_s is None
    with pytest.raises(NothingFitsError):
        # the engine below the API still raises it
        from gpusizer.performance.planning import default_batch

        default_batch(gpusizer.resolve_model("llama-2-70b"), gpusizer.RunConfig(), 24 * 2**30)


def test_import_gpusizer_stays_light():
    code = ("import sys, gpusizer; heavy = [m for m in ('gpusizer.api', 'pydantic', 'rich', 'yaml') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        gpusizer.nope  # noqa: B018


def test_catalog_questions_load_no_engine():
    """The API loads per question: listing the catalog never imports the memory or
    performance models (start-up of 'catalog list')."""
    code = ("import sys, gpusizer; gpusizer.api.list_gpus(); "
            "print(sorted(m for m in ('gpusizer.performance', 'gpusizer.memory', 'gpusizer.ranking') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
