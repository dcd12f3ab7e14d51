"""The analytic memory model against exact mode on random configurations (needs gpusizer[torch]).

A fixed-seed sample (seed 5, never used to correct the model) of the cases
benchmarks/analytic_vs_exact.py draws; docs/method.md (2.12) has the full tables. The bounds
are the targets: median error at most 3%, 95th percentile at most 10% (at this commit the
sample, redrawn when DeepSeek-V3 joined the families, gives 0.2% and 4.6%, worst 12.9%: a
Phi-3 fp32 eager inference pass).
"""

from __future__ import annotations

import importlib.util
import statistics

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None,
    reason="needs gpusizer[torch] (CI runs it in its own virtualenv)")

SEED, CASES = 5, 24


@pytest.fixture(scope="module")
def rows(tmp_path_factory):  # type: ignore[no-untyped-def]
    from random_configs import compare, draw

    workdir = tmp_path_factory.mktemp("configs")
    return [compare(case, workdir) for case in draw(SEED, CASES)]


def test_every_sampled_case_is_traced_and_counts_the_same_parameters(rows):
    assert len(rows) == CASES
    for r in rows:
        assert r["params_analytic"] == r["params_exact"], r["id"]


def test_median_error_meets_the_3_percent_target(rows):
    errors = sorted(abs(r["error"]) for r in rows)
    assert statistics.median(errors) <= 0.03, [(r["id"], round(r["error"], 3)) for r in rows]


def test_95th_percentile_error_meets_the_10_percent_target(rows):
    errors = sorted(abs(r["error"]) for r in rows)
    p95 = errors[-(-95 * len(errors) // 100) - 1]
    assert p95 <= 0.10, [(r["id"], round(r["error"], 3)) for r in rows]
