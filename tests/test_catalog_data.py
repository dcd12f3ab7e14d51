"""Consistency tests over the bundled catalog, data/gpus.yaml.

Where a figure from the source documents (shared SEED-FACTS) differs from the
datasheet, the test records the datasheet value and its source instead.
"""

from __future__ import annotations

import pytest

from gpusizer.hardware import catalog as catalog_module
from gpusizer.hardware.catalog import (
    ARCH_ORDER,
    DERIVABLE_FIELDS,
    TENSOR_FIELDS,
    TENSOR_SINCE,
    Gpu,
    bundled_catalog_path,
    load_catalog,
    load_derivations,
    resolve_device,
    resolve_name,
)

CATALOG = load_catalog()
GPUS = {g.id: g for g in CATALOG.gpus}
RULES = load_derivations()
#: The catalog as the YAML gives it, before the rules fill nulls: what the sourced figures are.
RAW = {g.id: g for g in catalog_module._read_files((str(bundled_catalog_path()),), None).gpus}

REQUIRED_IDS = [
    # Maxwell and Pascal
    "gtx-titan-x-maxwell", "tesla-p4", "tesla-p40", "p100-pcie-12gb", "p100-pcie-16gb", "p100-sxm2-16gb",
    "gtx-1080", "gtx-1080-ti", "titan-xp",
    # Volta and Turing
    "v100-pcie-16gb", "v100-pcie-32gb", "v100-sxm2-16gb", "v100-sxm2-32gb", "v100s-pcie-32gb", "titan-v",
    "t4", "rtx-2080", "rtx-2080-ti", "titan-rtx",
    # Ampere
    "rtx-3080", "rtx-3090", "rtx-3090-ti", "rtx-a6000", "a10", "a30", "a40",
    "a100-pcie-40gb", "a100-pcie-80gb", "a100-sxm4-40gb", "a100-sxm4-80gb",
    # Ada
    "l4", "l40s", "rtx-4080", "rtx-4090", "rtx-6000-ada",
    # Hopper and Blackwell
    "h100-pcie-80gb", "h100-sxm5-80gb", "h100-nvl-94gb", "h200-sxm-141gb", "b200-sxm-180gb", "rtx-5090",
]


def test_catalog_has_at_least_40_gpus_maxwell_to_blackwell():
    assert len(CATALOG.gpus) >= 40
    # ARCH_ORDER is NVIDIA's order; the AMD and Intel entries have architectures of their own
    assert {g.architecture for g in CATALOG.gpus if g.vendor == "nvidia"} == set(ARCH_ORDER)
    assert not {g.architecture for g in CATALOG.gpus if g.vendor != "nvidia"} & set(ARCH_ORDER)


@pytest.mark.parametrize("gpu_id", REQUIRED_IDS)
def test_required_gpu_present(gpu_id):
    assert gpu_id in GPUS


@pytest.mark.parametrize(
    ("gpu_id", "nvml_name"),
    [
        ("v100-sxm2-16gb", "Tesla V100-SXM2-16GB"),
        ("v100-sxm2-32gb", "Tesla V100-SXM2-32GB"),
        ("rtx-3090", "NVIDIA GeForce RTX 3090"),
        ("a100-sxm4-80gb", "NVIDIA A100-SXM4-80GB"),
        ("h100-sxm5-80gb", "NVIDIA H100 80GB HBM3"),
        ("t4", "Tesla T4"),
    ],
)
def test_aliases_include_exact_nvml_names(gpu_id, nvml_name):
    assert nvml_name in GPUS[gpu_id].aliases


def test_every_entry_has_a_source_and_every_number_is_covered():
    """Each non-null number is named in some source's `fields` or in `derived` (a rule of
    data/derivations.yaml gives it), unless a source covers the whole entry (no `fields` list).

    Exempt: the PCIe and NVLink generation (fixed by the architecture and the
    link bandwidth that is sourced) and the price year (the year of the cited
    announcement that gives the price)."""
    exempt = {"launch_year", "family_default", "ecc", "gpudirect_rdma", "pcie_generation", "nvlink_generation",
              "launch_price_year", "vendor", "derived"}
    numeric = [
        name for name, info in Gpu.model_fields.items()
        if name not in exempt
        and any(t in str(info.annotation) for t in ("float", "int"))
    ]
    problems = []
    for gpu in CATALOG.gpus:
        assert gpu.sources, gpu.id
        if any(not s.fields for s in gpu.sources):
            continue
        covered = {f for s in gpu.sources for f in s.fields} | set(gpu.derived_by)
        for field in numeric:
            if getattr(gpu, field) is not None and field not in covered:
                problems.append(f"{gpu.id}.{field}")
    assert not problems, problems


# FP64 = FP64 cores x boost clock x 2 (one FMA = 2 FLOPs), SEED-FACTS "Precision and throughput".
#: Entries whose published FP64 differs from the cores x clock product, and why.
FP64_CLOCK_EXCEPTIONS = {
    # NVIDIA quotes 6.9 FP64 / 110 tensor TFLOPS for Titan V, which implies ~1.35 GHz,
    # not the 1455 MHz rated boost (AnandTech Titan V launch table).
    "titan-v": 6.9,
}


def _fp64_checkable():
    return [g for g in CATALOG.gpus if g.fp64_cores and g.boost_clock_mhz and g.fp64_tflops]


def test_fp64_check_covers_the_fp64_parts():
    ids = {g.id for g in _fp64_checkable()}
    assert {"p100-sxm2-16gb", "v100-sxm2-16gb", "a100-sxm4-80gb"} <= ids


@pytest.mark.parametrize("gpu", _fp64_checkable(), ids=lambda g: g.id)
def test_fp64_equals_cores_times_clock_times_two(gpu):
    computed = gpu.fp64_cores * gpu.boost_clock_mhz * 1e6 * 2 / 1e12
    if gpu.id in FP64_CLOCK_EXCEPTIONS:
        assert gpu.fp64_tflops == FP64_CLOCK_EXCEPTIONS[gpu.id]
        assert computed / gpu.fp64_tflops < 1.1
    else:
        assert computed == pytest.approx(gpu.fp64_tflops, rel=0.05)


@pytest.mark.parametrize(
    "gpu_id",
    ["p100-pcie-16gb", "p100-sxm2-16gb", "v100-pcie-16gb", "v100-sxm2-16gb", "v100s-pcie-32gb",
     "a100-pcie-40gb", "a100-sxm4-80gb", "h100-pcie-80gb", "h100-sxm5-80gb"],
)
def test_fp64_is_half_of_fp32_on_hpc_parts(gpu_id):
    gpu = GPUS[gpu_id]
    assert gpu.fp64_tflops / gpu.fp32_tflops == pytest.approx(0.5, rel=0.03)


def _geforce(arch):
    return [g for g in CATALOG.gpus if g.segment == "consumer" and g.architecture == arch and "titan" not in g.id]


@pytest.mark.parametrize(
    ("arch", "ratio"),
    [
        ("pascal", 1 / 32),
        # The issue expected 1:64 for Turing; the Turing whitepaper (TU102/TU104: 2 FP64
        # units per 64 FP32 cores) gives 1:32, and so do the datasheet figures recorded.
        ("turing", 1 / 32),
        ("ampere", 1 / 64),
        ("ada", 1 / 64),
    ],
)
def test_geforce_fp64_ratio(arch, ratio):
    cards = _geforce(arch)
    assert cards, arch
    for gpu in cards:
        assert gpu.fp64_tflops / gpu.fp32_tflops == pytest.approx(ratio, rel=0.1), gpu.id


def test_nothing_before_volta_has_tensor_throughput():
    for gpu in CATALOG.gpus:
        if gpu.vendor != "nvidia":  # Volta is NVIDIA's first Tensor Core architecture; ARCH_ORDER is NVIDIA's
            continue
        if ARCH_ORDER.index(gpu.architecture) < ARCH_ORDER.index("volta"):
            assert not any(getattr(gpu, f) is not None for f in TENSOR_FIELDS), gpu.id
            assert not gpu.tensor_cores, gpu.id
            assert not gpu.has_tensor_cores and gpu.provenance("tensor_fp16_tflops") == "absent"
        elif gpu.tensor_cores != 0:  # TU117 (NVIDIA T400/T600/T1000) is Turing without Tensor Cores
            # unknown (never absent) only where no rule applies and the notes say so (the A10G)
            assert gpu.tensor_fp16_tflops is not None or "tensor_fp16_tflops" in (gpu.notes or ""), gpu.id
            assert gpu.has_tensor_cores, gpu.id


def test_tensor_figures_are_dense_not_sparse():
    """A100 dense FP16 tensor is 312 TFLOPS (624 with sparsity); H100 SXM is 989.4 (1979)."""
    assert GPUS["a100-sxm4-80gb"].tensor_fp16_tflops == pytest.approx(312, rel=0.01)
    assert GPUS["a100-sxm4-80gb"].tensor_tf32_tflops == pytest.approx(156, rel=0.01)
    assert GPUS["h100-sxm5-80gb"].tensor_fp16_tflops == pytest.approx(989.4, rel=0.01)


def test_geforce_fp32_accumulate_rate_is_halved():
    """GA102 whitepaper appendix: RTX 3090 FP16 tensor 142 TFLOPS with FP16 accumulate, 71 with FP32."""
    g = GPUS["rtx-3090"]
    assert g.tensor_fp16_fp16acc_tflops == pytest.approx(2 * g.tensor_fp16_tflops, rel=0.02)
    assert g.tensor_fp16_tflops == pytest.approx(71, rel=0.02)
    # Workstation Ampere is not halved: RTX A6000 154.8 dense FP16 with FP32 accumulate.
    assert GPUS["rtx-a6000"].tensor_fp16_tflops > 1.9 * g.tensor_fp16_tflops * 0.9


# ----- figures from the source documents (SEED-FACTS) ------------------------------------

SEED_FIGURES = [
    # (gpu, field, seed value, recorded value, tolerance, source of the recorded value)
    ("p100-sxm2-16gb", "fp64_tflops", 5.3, 5.3, 0.02, "Tesla P100 datasheet"),
    ("v100-sxm2-16gb", "fp64_tflops", 7.8, 7.8, 0.02, "Tesla V100 datasheet"),
    ("v100-pcie-16gb", "fp64_tflops", 7.0, 7.0, 0.02, "Tesla V100 datasheet"),
    ("gtx-1080-ti", "fp64_tflops", 0.35, 0.35, 0.05, "1/32 of 11.3 TFLOPS FP32 (AnandTech)"),
    ("v100-sxm2-16gb", "fp32_tflops", 15.7, 15.7, 0.02, "Tesla V100 datasheet"),
    ("v100-pcie-16gb", "fp32_tflops", 14.0, 14.0, 0.02, "Tesla V100 datasheet"),
    ("v100-sxm2-16gb", "tensor_fp16_tflops", 125, 125, 0.02, "Tesla V100 datasheet"),
    ("v100-pcie-16gb", "tensor_fp16_tflops", 112, 112, 0.02, "Tesla V100 datasheet"),
    ("v100-sxm2-16gb", "bandwidth_gb_s", 900, 900, 0.01, "Tesla V100 datasheet"),
    ("v100-sxm2-16gb", "nvlink_gb_s", 300, 300, 0.01, "Tesla V100 datasheet: 6 links x 25 GB/s x 2"),
    ("p100-sxm2-16gb", "nvlink_gb_s", 160, 160, 0.01, "Tesla P100 datasheet: 4 links x 20 GB/s x 2"),
    # SEED says ~7 TFLOPS FP32 (NVIDIA's launch claim); AnandTech's table gives 6.6 at the
    # 1075 MHz rated boost, which the catalog records.
    ("gtx-titan-x-maxwell", "fp32_tflops", 7.0, 6.6, 0.02, "AnandTech GTX Titan X review spec table"),
    ("gtx-titan-x-maxwell", "bandwidth_gb_s", 336.5, 336.5, 0.01, "NVIDIA GTX Titan X spec page"),
]


@pytest.mark.parametrize(("gpu_id", "field", "seed", "recorded", "tol", "source"), SEED_FIGURES)
def test_seed_figures_hold_or_datasheet_recorded(gpu_id, field, seed, recorded, tol, source):
    value = getattr(GPUS[gpu_id], field)
    assert value == pytest.approx(recorded, rel=tol), f"{gpu_id}.{field} = {value}; expected {recorded} ({source})"


def test_p100_is_about_16x_the_1080ti_in_fp64():
    ratio = GPUS["p100-sxm2-16gb"].fp64_tflops / GPUS["gtx-1080-ti"].fp64_tflops
    assert 14 <= ratio <= 17


def test_memory_bytes_are_binary():
    assert GPUS["v100-sxm2-16gb"].memory_bytes == 16 * 2**30
    assert GPUS["gtx-1080-ti"].memory_bytes == 11 * 2**30


def test_consumer_cards_have_no_rdma_and_at_most_optional_ecc():
    for gpu in CATALOG.gpus:
        if gpu.segment == "consumer":
            assert not gpu.gpudirect_rdma, gpu.id
            assert gpu.ecc in ("none", "optional"), gpu.id
    # the GeForce cards whose driver can turn ECC on (Notebookcheck); the RTX 5090 cannot
    assert {g.id for g in CATALOG.gpus if g.segment == "consumer" and g.ecc == "optional"} == {"rtx-3090-ti", "rtx-4090"}
    assert GPUS["rtx-5090"].ecc == "none"


def test_ecc_is_always_on_hbm_and_a_setting_on_gddr():
    """`always` only on HBM parts, `optional` only on GDDR ones; data-center and workstation
    GDDR cards with ECC are `optional` (a driver setting, on by default on data-center boards)."""
    for gpu in CATALOG.gpus:
        hbm = gpu.memory_type.upper().startswith("HBM")
        if gpu.ecc == "always":
            assert hbm, gpu.id
        if gpu.ecc == "optional":
            assert not hbm, gpu.id
        if gpu.segment == "datacenter":
            assert gpu.ecc == ("always" if hbm else "optional"), gpu.id
    assert GPUS["titan-v"].ecc == "none"  # HBM2, but ECC is not exposed on the TITAN V
    assert GPUS["quadro-rtx-4000"].ecc == "none"


def test_old_boolean_ecc_reads_as_three_values():
    base = GPUS["rtx-a6000"].model_dump(mode="json")
    for memory, value, expected in (("GDDR6", True, "optional"), ("HBM2e", True, "always"), ("GDDR6", False, "none")):
        gpu = Gpu.model_validate({**base, "memory_type": memory, "ecc": value})
        assert gpu.ecc == expected and gpu.ecc_capable == (expected != "none")


# ----- provenance and derivation rules (data/derivations.yaml) ----------------------------


def _rules_for(gpu, field):
    return [r for r in RULES.rules if r.field == field and r.applies(gpu)]


def _inputs(gpu):
    return catalog_module._inputs(gpu)


def test_rules_have_unique_ids_known_exceptions_and_formulas():
    assert len({r.id for r in RULES.rules}) == len(RULES.rules)
    for rule in RULES.rules:
        assert set(rule.exceptions) <= set(GPUS), (rule.id, rule.exceptions)
        assert all(len(why) > 20 for why in rule.exceptions.values()), rule.id
        assert rule.field in rule.formula and rule.sources, rule.id


@pytest.mark.parametrize("field", DERIVABLE_FIELDS)
def test_at_most_one_rule_per_field_and_gpu(field):
    """Rule scopes for one field do not overlap: a value has one rule, never a choice."""
    for gpu in CATALOG.gpus:
        assert len(_rules_for(gpu, field)) <= 1, (gpu.id, field, [r.id for r in _rules_for(gpu, field)])


@pytest.mark.parametrize("gpu", CATALOG.gpus, ids=lambda g: g.id)
def test_derived_values_equal_their_rule_and_name_one(gpu):
    """Every entry of `derived` names a rule that exists, derives that field for this GPU,
    and gives the recorded value; no value is marked derived without a rule."""
    inputs = _inputs(gpu)
    for field, rule_id in gpu.derived_by.items():
        rule = RULES.by_id(rule_id)
        assert rule is not None, (gpu.id, field, rule_id)
        assert rule.field == field and rule.applies(gpu), (gpu.id, field, rule_id)
        expected = rule.compute(inputs)
        assert expected is not None, (gpu.id, field)
        assert getattr(gpu, field) == pytest.approx(expected, rel=rule.tolerance), (gpu.id, field, rule.formula)
        if field not in RAW[gpu.id].derived_by:  # filled at load time: exactly the rule's value
            assert getattr(gpu, field) == pytest.approx(expected, rel=1e-9) and getattr(RAW[gpu.id], field) is None


@pytest.mark.parametrize("rule", RULES.rules, ids=lambda r: r.id)
def test_sourced_figures_agree_with_every_rule_that_covers_them(rule):
    """The consistency check over every entry: each sourced figure in a rule's scope equals
    the rule within its tolerance (FP32 = 2 x cores x clock; FP64 and FP16 at the family's
    ratio to FP32; one dense FP16 rate per Tensor Core and clock in each family; the
    BF16/TF32/FP8/INT8/FP4 ratios). Exceptions are listed in the rule with the reason."""
    checked = []
    for gpu in RAW.values():
        if not rule.applies(gpu) or rule.field in gpu.derived_by:
            continue
        value, expected = getattr(gpu, rule.field), rule.compute(_inputs(gpu))
        if value is None or expected is None:
            continue
        checked.append(gpu.id)
        assert value == pytest.approx(expected, rel=rule.tolerance), (gpu.id, rule.formula, value, expected)
    if rule.per_clock_of == "tensor_cores":
        # a per-Tensor-Core rate is read off the family's sourced entries, never assumed
        assert checked, f"{rule.id}: no sourced entry backs the rate"


@pytest.mark.parametrize("gpu", [g for g in CATALOG.gpus if g.cuda_cores and g.boost_clock_mhz], ids=lambda g: g.id)
def test_fp32_is_two_flops_per_core_per_clock(gpu):
    rule = RULES.by_id("fp32-cuda-cores")
    computed = 2 * gpu.cuda_cores * gpu.boost_clock_mhz / 1e6
    if gpu.id in rule.exceptions:
        assert gpu.fp32_tflops < computed
    else:
        assert gpu.fp32_tflops == pytest.approx(computed, rel=rule.tolerance)


@pytest.mark.parametrize("gpu", CATALOG.gpus, ids=lambda g: g.id)
def test_fp64_ratio_by_family(gpu):
    """FP64 is 1/2, 1/32 or 1/64 of FP32 by compute capability (one rule per family)."""
    rules = _rules_for(gpu, "fp64_tflops")
    if not rules:  # a cut-down part (H800, H20, Blackwell Ultra): excepted with a reason, or no family rule
        excepted = any(gpu.id in r.exceptions for r in RULES.rules if r.field == "fp64_tflops")
        covered = any(gpu.compute_capability in r.when.compute_capabilities for r in RULES.rules if r.field == "fp64_tflops")
        assert excepted or not covered, gpu.id
        assert gpu.fp64_tflops is None or gpu.provenance("fp64_tflops") == "sourced", gpu.id
        return
    (rule,) = rules
    assert gpu.fp64_tflops / gpu.fp32_tflops == pytest.approx(rule.factor, rel=rule.tolerance)


# NVIDIA entries only: TENSOR_SINCE is the NVIDIA Tensor Core history (ARCH_ORDER); an AMD Matrix
# Core or Intel MME rate no source gives is simply unknown (see test_other_vendors_are_not_nvidia)
@pytest.mark.parametrize("gpu", [g for g in CATALOG.gpus if g.has_tensor_cores and g.vendor == "nvidia"],
                         ids=lambda g: g.id)
def test_no_unknown_tensor_rate_without_a_note(gpu):
    """A GPU with Tensor Cores has every rate its architecture runs, sourced or derived; a
    null is allowed only where no rule can apply, and the entry's notes then name the field."""
    for field, since in TENSOR_SINCE.items():
        if ARCH_ORDER.index(gpu.architecture) < ARCH_ORDER.index(since):
            assert getattr(gpu, field) is None and gpu.provenance(field) == "absent", (gpu.id, field)
        elif getattr(gpu, field) is None:
            assert gpu.provenance(field) == "unknown"
            assert field in (gpu.notes or ""), f"{gpu.id}: {field} is unknown and the notes do not say why"


def test_the_cards_the_issue_named_get_tensor_rates_in_line_with_their_family():
    """RTX 5080 and 4060 Ti 16GB from their Tensor Cores and clock; RTX 3090 Ti BF16 = FP16."""
    g = GPUS["rtx-5080"]
    assert g.tensor_fp16_tflops == pytest.approx(336 * 128 * 2617e-6, rel=1e-3)
    assert g.tensor_fp4_tflops == pytest.approx(4 * g.tensor_fp16_fp16acc_tflops, rel=0.01)  # NVIDIA's 900.5
    assert g.derived_by["tensor_fp16_tflops"] == "tensor-fp16-gb20x-geforce"
    assert GPUS["rtx-4060-ti-16gb"].tensor_fp16_tflops == pytest.approx(44.1, rel=0.01)
    assert GPUS["rtx-3090-ti"].tensor_bf16_tflops == GPUS["rtx-3090-ti"].tensor_fp16_tflops == 80
    assert GPUS["rtx-5090"].tensor_fp16_tflops > GPUS["rtx-4090"].tensor_fp16_tflops
    assert GPUS["rtx-5080"].tensor_fp16_tflops > GPUS["rtx-4080"].tensor_fp16_tflops


def test_fixes_from_the_audit():
    assert GPUS["rtx-4060-ti-16gb"].tdp_w == 165
    assert GPUS["rtx-3090-ti"].nvlink_gb_s == GPUS["rtx-3090"].nvlink_gb_s == 112.5
    assert resolve_name(CATALOG.gpus, "Tesla M40").gpu.id == "tesla-m40-12gb"


# ----- NVML names ---------------------------------------------------------------------------

#: How NVML names start: "NVIDIA ..." since driver 470, "Tesla/Quadro/GeForce/TITAN ..." before.
NVML_PREFIXES = ("NVIDIA ", "Tesla ", "Quadro ", "GeForce ", "TITAN ")


@pytest.mark.parametrize("gpu", CATALOG.gpus, ids=lambda g: g.id)
def test_every_nvml_name_resolves_to_its_own_entry(gpu):
    for alias in gpu.aliases:
        if alias.startswith(NVML_PREFIXES):
            assert resolve_name(CATALOG.gpus, alias).gpu.id == gpu.id, alias
            # with the memory NVML reports (a little under the datasheet figure) it stays put
            assert resolve_device(CATALOG.gpus, alias, int(gpu.memory_bytes * 0.95)).gpu.id == gpu.id, alias


def test_memory_variants_sharing_an_nvml_name_are_told_apart_by_memory():
    """The 24 GB Tesla M40 reported "Tesla M40" (the 12 GB board's name) on early drivers."""
    m40 = resolve_name(CATALOG.gpus, "Tesla M40")
    assert m40.gpu.id == "tesla-m40-12gb" and m40.note is None
    big = resolve_device(CATALOG.gpus, "Tesla M40", int(22.9 * 2**30))
    assert big.gpu.id == "tesla-m40-24gb" and "memory variants" in big.note
    assert resolve_device(CATALOG.gpus, "Tesla M40", 11448 * 2**20).gpu.id == "tesla-m40-12gb"
    # memory picks among variants of one form factor, never another form factor (V100 PCIe 32GB)
    assert resolve_device(CATALOG.gpus, "Tesla V100-SXM2-16GB", 31 * 2**30).gpu.id == "v100-sxm2-32gb"
    for family in {g.family for g in CATALOG.gpus if g.family}:
        members = [g for g in CATALOG.gpus if g.family == family]
        (default,) = [g for g in members if g.family_default]
        for gpu in members:
            if catalog_module._shape(gpu) == catalog_module._shape(default):
                got = resolve_device(CATALOG.gpus, default.name, int(gpu.memory_bytes * 0.95))
                assert got.gpu.memory_gib == gpu.memory_gib, (family, gpu.id, got.gpu.id)


# ----- AMD and Intel ------------------------------------------------------------------------

OTHER_VENDORS = [g for g in CATALOG.gpus if g.vendor != "nvidia"]


def test_the_amd_and_intel_parts_are_present():
    assert {g.id for g in OTHER_VENDORS} >= {"mi100", "mi210", "mi250", "mi250x", "mi300x", "mi325x", "mi355x",
                                             "radeon-pro-w7900", "gaudi2", "gaudi3"}
    assert resolve_name(CATALOG.gpus, "AMD Instinct MI300X").gpu.id == "mi300x"
    assert resolve_name(CATALOG.gpus, "AMD Radeon PRO W7900").gpu.id == "radeon-pro-w7900"
    assert resolve_name(CATALOG.gpus, "Intel Gaudi 2").gpu.id == "gaudi2"


def test_rdna3_matrix_rates_follow_amds_per_cu_rate():
    """GPUOpen: RDNA3 WMMA does 512 FP16, BF16 and INT8 operations per CU per clock, as packed
    FP16 does: the W7900's 96 CUs at 2,495 MHz give 122.6 TFLOPS, derived, not sourced."""
    w7900 = GPUS["radeon-pro-w7900"]
    assert w7900.tensor_fp16_tflops == pytest.approx(96 * 512 * 2495e6 / 1e12, rel=0.002)
    assert w7900.tensor_bf16_tflops == w7900.tensor_int8_tops == w7900.tensor_fp16_tflops
    assert w7900.derived_by["tensor_fp16_tflops"] == "rdna3-wmma-fp16"
    assert RAW["radeon-pro-w7900"].tensor_fp16_tflops is None


def test_an_unpublished_fp32_rate_stays_null_and_only_non_nvidia_parts_may_lack_one():
    """Intel publishes no FP32 rate for Gaudi 2: the entry keeps null, never 0, and NVIDIA
    entries still need theirs."""
    gaudi2 = GPUS["gaudi2"]
    assert gaudi2.fp32_tflops is None and gaudi2.tensor_bf16_tflops == 432 and gaudi2.tensor_fp8_tflops == 865
    base = GPUS["rtx-a6000"].model_dump(mode="json")
    with pytest.raises(ValueError, match="fp32_tflops"):
        Gpu.model_validate({**base, "fp32_tflops": None})


@pytest.mark.parametrize("gpu", OTHER_VENDORS, ids=lambda g: g.id)
def test_other_vendors_are_not_nvidia(gpu):
    """No CUDA compute capability, no CUDA cores, no NVLink; the software-stack caveat in the notes;
    no NVIDIA-only fact applies (no Tensor Core rate read as absent, no NVIDIA derivation rule)."""
    assert gpu.compute_capability is None and gpu.cuda_cores is None and gpu.nvlink_gb_s is None
    assert "not CUDA" in (gpu.notes or "")
    assert not gpu.arch_at_least("maxwell")
    for field in TENSOR_FIELDS:
        assert gpu.provenance(field) in ("sourced", "derived", "unknown"), (gpu.id, field)
    for rule in RULES.rules:
        if rule.applies(gpu):
            assert "nvidia" not in rule.when.vendors, (gpu.id, rule.id)


def test_nvidia_entries_need_a_compute_capability():
    base = GPUS["rtx-a6000"].model_dump(mode="json")
    with pytest.raises(ValueError, match="compute_capability"):
        Gpu.model_validate({**base, "compute_capability": None})
    with pytest.raises(ValueError, match="architecture"):
        Gpu.model_validate({**base, "architecture": "cdna3"})


def test_street_prices_are_dated_cited_and_preferred_to_launch_prices():
    """A street price is a dated market figure: it needs its month, a source that names it,
    and it is what a budget uses; without it the launch price (MSRP) is the price."""
    street = [g for g in CATALOG.gpus if g.street_price_usd is not None]
    assert {"h100-pcie-80gb", "h100-sxm5-80gb", "a100-sxm4-80gb", "b200-sxm-180gb"} <= {g.id for g in street}
    # Intel's 2024 list prices (kit of eight / 8) are launch prices, not market ones
    assert GPUS["gaudi3"].price.label == "launch price 2024" and GPUS["gaudi3"].price.usd == 15625
    assert GPUS["gaudi2"].price.usd == 65000 / 8
    for gpu in street:
        cited = [s for s in gpu.sources if "street_price_usd" in s.fields and "street_price_date" in s.fields]
        assert cited and all(s.url for s in cited), gpu.id
        assert gpu.price is not None and gpu.price.basis == "street" and gpu.price.when == gpu.street_price_date
    assert GPUS["h100-pcie-80gb"].price.label == "street price 2025-03"
    assert GPUS["rtx-4090"].price.label == "launch price 2022" and GPUS["rtx-4090"].price.usd == 1599
    assert GPUS["l40s"].price is None
    base = GPUS["h20"].model_dump(mode="json")
    with pytest.raises(ValueError, match="street_price_date"):
        Gpu.model_validate({**base, "street_price_date": None})
    with pytest.raises(ValueError, match="street_price_date"):
        Gpu.model_validate({**base, "street_price_date": "2025-13"})
    with pytest.raises(ValueError, match="before launch_year"):
        Gpu.model_validate({**base, "street_price_date": "2019-01"})
