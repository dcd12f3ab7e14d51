"""The GPU catalog: the spec model, loading, merging user files and name lookup.

Bundled data lives in ``data/gpus.yaml`` (shipped inside the wheel as
``gpusizer/data/gpus.yaml``). It is read with ``yaml.safe_load`` only, validated
into frozen pydantic models that forbid unknown fields, and cached. Nothing
here runs at import time.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_serializer, field_validator, model_validator

from gpusizer import datafiles
from gpusizer.errors import DataFileError, UsageError
from gpusizer.hardware.vendors import Vendor
from gpusizer.units import GIB

Segment = Literal["datacenter", "workstation", "consumer"]
#: The market segments, in the catalog's order: the one list every filter checks against.
SEGMENTS: tuple[str, ...] = get_args(Segment)
Architecture = Literal[
    "maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell",
    "cdna1", "cdna2", "cdna3", "cdna4", "rdna3", "gaudi2", "gaudi3",
]

#: Architectures in launch order, used for "nothing before Volta has Tensor Cores"
#: and for per-generation calibration.
ARCH_ORDER: tuple[str, ...] = ("maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell")
#: The other vendors' architectures (AMD CDNA/RDNA, Intel Gaudi). They are not in ARCH_ORDER, which
#: is NVIDIA's order only: no AMD or Intel architecture is "Volta or later" (``Gpu.arch_at_least``).
OTHER_ARCHITECTURES: tuple[str, ...] = tuple(a for a in get_args(Architecture) if a not in ARCH_ORDER)

#: ECC memory: ``none``; ``optional``, a driver setting (``nvidia-smi -e``) on GDDR boards, off by
#: default on GeForce and workstation cards, on by default on data-center ones, and with it on about
#: 1/16 of the memory holds check bits; ``always``: HBM parts, whose ECC costs no capacity.
EccMode = Literal["none", "optional", "always"]
ECC_MODES: tuple[str, ...] = get_args(EccMode)
#: Where a value comes from: a cited source, a derivation rule (data/derivations.yaml), or
#: nowhere. ``absent``: the hardware lacks it (a Tensor Core rate before its architecture);
#: ``unknown``: the GPU may have it but the catalog does not know the figure.
Provenance = Literal["sourced", "derived", "absent", "unknown"]

PositiveFloat = Annotated[float, Field(gt=0)]
TFlops = Annotated[float, Field(gt=0, le=100_000)]


# defer_build: a model's validator is built on its first validation, not when the
# class is defined, so a run served from the validated-catalog cache never pays for it.
_CONFIG = ConfigDict(frozen=True, extra="forbid", defer_build=True, allow_inf_nan=False)


class Source(BaseModel):
    """A datasheet, whitepaper or spec page that figures come from."""

    model_config = _CONFIG

    title: str = Field(min_length=3)
    url: str | None = None
    #: Which fields this source supports; empty means "the entry in general".
    fields: tuple[str, ...] = ()


class Price(BaseModel):
    """What one GPU costs to buy, and what kind of figure that is: a dated ``street`` price
    (``when`` is YYYY-MM) or the ``launch`` price (MSRP; ``when`` is its year)."""

    model_config = _CONFIG

    usd: float
    basis: Literal["street", "launch"]
    when: str

    @property
    def label(self) -> str:
        return f"{self.basis} price {self.when}"


class Gpu(BaseModel):
    """One GPU product as sold. Every number carries its unit in its name.

    ``None`` means unknown or not applicable (for throughput: the hardware lacks
    that precision). Tensor figures are dense: never the 2:4-sparsity headline.
    """

    model_config = _CONFIG

    # identity
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*[a-z0-9]$", max_length=64)
    name: str = Field(min_length=2)
    aliases: tuple[str, ...] = ()
    family: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9-]*$")
    family_default: bool = False
    vendor: Vendor = "nvidia"

    # family
    segment: Segment
    architecture: Architecture
    #: the silicon die (GA102, GH100, AD102, ...): cards on one die share their efficiencies, so the
    #: performance model's held-out split keeps a die's cards together (benchmarks/calibrate.py)
    die: str | None = Field(default=None, min_length=2, max_length=40)
    #: CUDA compute capability: required on NVIDIA entries, null on the others (not CUDA devices)
    compute_capability: str | None = Field(default=None, pattern=r"^[0-9]+\.[0-9]+$")
    launch_year: int = Field(ge=2010, le=2035)

    # memory
    memory_gib: float = Field(gt=0, le=4096)
    memory_type: str
    bandwidth_gb_s: float = Field(gt=0, le=100_000)

    # non-tensor throughput
    fp64_tflops: TFlops | None = None
    #: null only on a part whose maker publishes no FP32 rate (Intel Gaudi 2); NVIDIA entries need it
    fp32_tflops: TFlops | None
    fp16_tflops: TFlops | None = None

    # dense Tensor Core throughput
    tensor_tf32_tflops: TFlops | None = None
    tensor_fp16_tflops: TFlops | None = None
    tensor_fp16_fp16acc_tflops: TFlops | None = None
    tensor_bf16_tflops: TFlops | None = None
    tensor_fp8_tflops: TFlops | None = None
    tensor_fp4_tflops: TFlops | None = None
    tensor_int8_tops: TFlops | None = None

    # hardware
    cuda_cores: int | None = Field(default=None, gt=0, le=1_000_000)
    fp64_cores: int | None = Field(default=None, gt=0, le=1_000_000)
    tensor_cores: int | None = Field(default=None, ge=0, le=100_000)
    boost_clock_mhz: int | None = Field(default=None, gt=100, le=5000)
    tdp_w: int | None = Field(default=None, gt=0, le=5000)
    ecc: EccMode
    nvlink_generation: int | None = Field(default=None, ge=1, le=10)
    nvlink_gb_s: float | None = Field(default=None, gt=0, le=100_000)
    pcie_generation: int | None = Field(default=None, ge=1, le=7)
    #: the GPU's link to its host CPU's memory where it is not its PCIe slot (Grace superchips:
    #: NVLink-C2C), a ``host_links`` id of data/interconnects.yaml; null: the PCIe slot
    host_link: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9-]*$")
    gpudirect_rdma: bool
    form_factor: str

    # price and provenance
    launch_price_usd: float | None = Field(default=None, gt=0, le=10_000_000)
    launch_price_year: int | None = Field(default=None, ge=2010, le=2035)
    #: what one GPU sold for on the open market, in the month ``street_price_date`` (YYYY-MM):
    #: a dated reseller listing or press report, cited in ``sources``. Data-center cards are
    #: sold by quote and have no launch price; this is the price people can check.
    street_price_usd: float | None = Field(default=None, gt=0, le=10_000_000)
    street_price_date: str | None = Field(default=None, pattern=r"^20[1-3][0-9]-(0[1-9]|1[0-2])$")
    sources: tuple[Source, ...] = Field(min_length=1)
    #: the values a derivation rule (data/derivations.yaml) gives: field -> rule id, a mapping
    #: in YAML and JSON (kept as pairs, so an entry stays hashable). A field listed here with a
    #: value must equal its rule; with null, loading fills it in. Loading also fills every
    #: other null a rule applies to, and lists it here.
    derived: tuple[tuple[str, str], ...] = ()
    notes: str | None = None

    @field_validator("ecc", mode="before")
    @classmethod
    def _ecc_from_bool(cls, value: Any, info: Any) -> Any:
        """Catalog files written before ECC had three values say true or false: false is
        ``none``; true is ``always`` on HBM and ``optional`` (a driver setting) otherwise."""
        if isinstance(value, bool):
            memory = str((info.data or {}).get("memory_type") or "")
            return ("always" if memory.upper().startswith("HBM") else "optional") if value else "none"
        return value

    @field_validator("derived", mode="before")
    @classmethod
    def _derived_fields(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        for field, rule in value.items():
            if field not in DERIVABLE_FIELDS:
                raise ValueError(f"{field}: not a field a rule derives (one of {', '.join(DERIVABLE_FIELDS)})")
            if not isinstance(rule, str) or not re.fullmatch(r"[a-z0-9][a-z0-9-]*", rule):
                raise ValueError(f"{field}: {rule!r} is not a rule id")
        return tuple((str(field), rule) for field, rule in value.items())

    @field_serializer("derived")
    def _derived_map(self, value: tuple[tuple[str, str], ...]) -> dict[str, str]:
        return dict(value)

    @model_validator(mode="after")
    def _cross_field_checks(self) -> Gpu:
        def bad(field: str, why: str) -> ValueError:
            return ValueError(f"{field}: {why}")

        if self.fp64_tflops is not None and self.fp32_tflops is not None and self.fp64_tflops > self.fp32_tflops * 1.001:
            raise bad("fp64_tflops", f"{self.fp64_tflops} exceeds fp32_tflops {self.fp32_tflops}")
        if self.fp16_tflops is not None and self.tensor_fp16_tflops is not None:
            if self.tensor_fp16_tflops < self.fp16_tflops * 0.999:
                raise bad("tensor_fp16_tflops", f"{self.tensor_fp16_tflops} is below non-tensor fp16_tflops {self.fp16_tflops}")
        if self.tensor_fp16_fp16acc_tflops is not None and self.tensor_fp16_tflops is not None:
            if self.tensor_fp16_fp16acc_tflops < self.tensor_fp16_tflops * 0.999:
                raise bad("tensor_fp16_fp16acc_tflops", "must not be below tensor_fp16_tflops (FP32 accumulate)")
        if (self.nvlink_generation is None) != (self.nvlink_gb_s is None):
            raise bad("nvlink_gb_s", "nvlink_generation and nvlink_gb_s must both be set or both be null")
        if (self.launch_price_year is not None) and self.launch_price_usd is None:
            raise bad("launch_price_year", "given without launch_price_usd")
        if (self.street_price_usd is None) != (self.street_price_date is None):
            raise bad("street_price_date", "street_price_usd and street_price_date must both be set or both be null")
        if self.street_price_date is not None and int(self.street_price_date[:4]) < self.launch_year - 1:
            raise bad("street_price_date", f"{self.street_price_date} is before launch_year {self.launch_year}")
        if self.launch_price_year is not None and self.launch_price_year < self.launch_year - 1:
            raise bad("launch_price_year", f"{self.launch_price_year} is before launch_year {self.launch_year}")
        if (self.vendor == "nvidia") != (self.architecture in ARCH_ORDER):
            raise bad("architecture", f"{self.architecture} is not an architecture of vendor {self.vendor}")
        if self.vendor == "nvidia" and self.compute_capability is None:
            raise bad("compute_capability", "required on NVIDIA entries")
        if self.vendor == "nvidia" and self.fp32_tflops is None:
            raise bad("fp32_tflops", "required on NVIDIA entries")
        if self.vendor == "nvidia" and ARCH_ORDER.index(self.architecture) < ARCH_ORDER.index("volta"):
            for field in TENSOR_FIELDS:
                if getattr(self, field) is not None:
                    raise bad(field, f"{self.architecture} has no Tensor Cores; use null")
        return self

    # derived values -----------------------------------------------------

    @property
    def memory_bytes(self) -> int:
        return int(round(self.memory_gib * GIB))

    @property
    def bandwidth_bytes_s(self) -> float:
        return self.bandwidth_gb_s * 1e9

    @property
    def has_tensor_cores(self) -> bool | None:
        """Tensor Core (matrix unit) hardware: a count above 0, a rate, or an NVIDIA
        architecture from Volta on; None for another vendor's entry that gives neither count
        nor rate. An unknown rate is never read as "no Tensor Cores"."""
        if self.tensor_cores is not None:
            return self.tensor_cores > 0
        if any(getattr(self, f) is not None for f in TENSOR_FIELDS):
            return True
        if self.vendor != "nvidia":
            return None
        return ARCH_ORDER.index(self.architecture) >= ARCH_ORDER.index("volta")

    def arch_at_least(self, architecture: str) -> bool:
        """An NVIDIA GPU of ``architecture`` or a later one (ARCH_ORDER). Always False for
        another vendor, so an NVIDIA-only fact ("BF16 at the FP16 rate from Ampere on") never
        applies to an AMD or Intel part by accident."""
        return self.vendor == "nvidia" and ARCH_ORDER.index(self.architecture) >= ARCH_ORDER.index(architecture)

    @property
    def derived_by(self) -> dict[str, str]:
        """The derived fields, each with the id of the rule that gives it."""
        return dict(self.derived)

    @property
    def price(self) -> Price | None:
        """What one GPU costs to buy: the dated street price where the catalog has one (what
        people pay now), else the launch price (MSRP at launch); None where neither is known."""
        if self.street_price_usd is not None and self.street_price_date is not None:
            return Price(usd=self.street_price_usd, basis="street", when=self.street_price_date)
        if self.launch_price_usd is not None:
            when = str(self.launch_price_year or self.launch_year)
            return Price(usd=self.launch_price_usd, basis="launch", when=when)
        return None

    @property
    def ecc_capable(self) -> bool:
        """ECC can be on: always, or as a driver setting (``optional``)."""
        return self.ecc != "none"

    def provenance(self, field: str) -> Provenance:
        """Where ``field``'s value comes from; for a null, whether the hardware lacks it
        (a Tensor Core rate on an architecture without that precision, or no Tensor Cores
        at all) or the catalog does not know it."""
        if getattr(self, field) is not None:
            return "derived" if field in self.derived_by else "sourced"
        since = TENSOR_SINCE.get(field)
        if since is None:
            return "unknown"
        if self.has_tensor_cores is False:
            return "absent"
        if self.vendor == "nvidia" and ARCH_ORDER.index(self.architecture) < ARCH_ORDER.index(since):
            return "absent"
        return "unknown"

    @property
    def nvlink(self) -> bool:
        return self.nvlink_gb_s is not None

    @property
    def is_sxm(self) -> bool:
        """An SXM module: it sits on an HGX/DGX board with the other GPUs (NVLink, NVSwitch from A100 on)."""
        return self.form_factor.upper().startswith("SXM")

    @property
    def is_superchip(self) -> bool:
        """One GPU of a Grace superchip (GH200, GB200, GB300): a module or board, not an SXM socket."""
        return "superchip" in self.form_factor.lower()

    @property
    def nvlink_switched(self) -> bool:
        """Its GPUs reach each other through NVLink switches: an SXM module on an HGX board, or a
        Grace superchip whose NVLink the catalog gives (GH200 in NVL32 racks and the DGX GH200's
        NVLink Switch System; GB200 and GB300 in NVL72 racks)."""
        return self.is_sxm or (bool(self.nvlink) and self.is_superchip)

    @property
    def on_baseboard(self) -> bool:
        """A module sold on a baseboard of eight: SXM (HGX) or OAM (the OCP Universal Baseboard of
        AMD Instinct and Intel Gaudi platforms)."""
        return self.is_sxm or self.form_factor.upper().startswith("OAM")


TENSOR_FIELDS: tuple[str, ...] = (
    "tensor_tf32_tflops",
    "tensor_fp16_tflops",
    "tensor_fp16_fp16acc_tflops",
    "tensor_bf16_tflops",
    "tensor_fp8_tflops",
    "tensor_fp4_tflops",
    "tensor_int8_tops",
)
#: The first NVIDIA architecture whose Tensor Cores run each rate (the Volta, Turing, A100,
#: Ada and Blackwell whitepapers): FP16 from Volta, INT8 from Turing, TF32 and BF16 from
#: Ampere, FP8 from Ada (and Hopper), FP4 from Blackwell.
TENSOR_SINCE: dict[str, str] = {
    "tensor_fp16_tflops": "volta",
    "tensor_fp16_fp16acc_tflops": "volta",
    "tensor_int8_tops": "turing",
    "tensor_tf32_tflops": "ampere",
    "tensor_bf16_tflops": "ampere",
    "tensor_fp8_tflops": "ada",
    "tensor_fp4_tflops": "blackwell",
}
#: The throughput fields a derivation rule may fill.
DERIVABLE_FIELDS: tuple[str, ...] = ("fp64_tflops", "fp32_tflops", "fp16_tflops", *TENSOR_FIELDS)

class Catalog(BaseModel):
    """A validated, merged catalog. ``gpus`` keeps file order."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    gpus: tuple[Gpu, ...]
    files: tuple[str, ...] = ()

    def by_id(self, gpu_id: str) -> Gpu:
        for gpu in self.gpus:
            if gpu.id == gpu_id:
                return gpu
        raise KeyError(gpu_id)

    def resolve(self, name: str) -> Resolution:
        return resolve_name(self.gpus, name)

    def resolve_device(self, name: str, memory_bytes: int | None = None) -> Resolution:
        """An NVML name, told apart from memory variants by the memory NVML reports."""
        return resolve_device(self.gpus, name, memory_bytes)

    def resolve_many(self, names: Iterable[str]) -> tuple[Resolution, ...]:
        """Each name resolved; a GPU two names reach ("h100" and "h100-sxm5-80gb") once, where first named."""
        seen: dict[str, Resolution] = {}
        for name in names:
            res = self.resolve(name)
            seen.setdefault(res.gpu.id, res)
        return tuple(seen.values())


# --------------------------------------------------------------------------
# name matching


class Resolution(BaseModel):
    """How a user-given name was matched. ``note`` says when a default was picked."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    query: str
    gpu: Gpu
    matched_by: Literal["id", "alias", "name", "family"]
    note: str | None = None


def normalise(name: str) -> str:
    """Lower-case and drop everything that is not a letter or digit.

    "Tesla V100-SXM2-16GB", "tesla v100 sxm2 16gb" and "teslav100sxm216gb"
    all normalise to the same key.
    """
    return re.sub(r"[^a-z0-9]", "", name.lower())


#: Words that vendors put in front of product names and users leave out: name matching
#: ignores them and starter entries (``probe.slug``) drop them. Not "Quadro": it tells the
#: Turing Quadro RTX 4000/5000/6000 from the RTX 4000/5000/6000 Ada cards.
VENDOR_WORDS = frozenset({"nvidia", "tesla", "geforce"})
#: Product-line words that users often leave out too ("1080 Ti", "3090").
_LINE_WORDS = frozenset({"gtx", "rtx"})
#: Words that make a different card, not a variant of the same one: a partial name
#: without them never matches a name with them ("RTX 4070" is not the 4070 Ti).
_TIER_WORDS = frozenset({"ti", "super"})


def name_tokens(name: str, *, drop_line_words: bool = False) -> tuple[str, ...]:
    """Split a name into sorted word tokens, letters and digits apart.

    "A100 80GB SXM4" and "NVIDIA A100-SXM4-80GB" both give
    ('100', '4', '80', 'a', 'gb', 'sxm'), so word order does not matter.
    """
    tokens = re.findall(r"[a-z]+|[0-9]+", name.lower())
    drop = VENDOR_WORDS | (_LINE_WORDS if drop_line_words else frozenset())
    return tuple(sorted(t for t in tokens if t not in drop))


def _names_of(gpu: Gpu) -> tuple[str, ...]:
    return (gpu.id, gpu.name, *gpu.aliases)


def resolve_name(gpus: Sequence[Gpu], name: str) -> Resolution:
    """Resolve a forgiving GPU name to one catalog entry.

    1. the exact id;
    2. an id, name or alias equal up to case, spaces, hyphens, word order
       and vendor words ("Tesla", "NVIDIA", "GeForce"), then also ignoring
       "GTX"/"RTX";
    3. a partial name whose words all appear in some entries' names
       ("v100", "a100 80gb"), where the name adds no tier word ("Ti",
       "Super": "RTX 4070" is not the 4070 Ti): one candidate wins; several candidates are
       settled by their family default, and the result says which one was
       picked; otherwise the name is ambiguous and the candidates are listed.
    An unknown name raises a UsageError suggesting close matches.
    """
    query = name.strip()
    for gpu in gpus:
        if gpu.id == query:
            return Resolution(query=name, gpu=gpu, matched_by="id")
    if not normalise(query):
        raise UsageError("empty GPU name", hint="run 'gpusizer catalog list' to see the ids")

    for drop_line in (False, True):
        key = name_tokens(query, drop_line_words=drop_line)
        hits: dict[str, Gpu] = {}
        for gpu in gpus:
            if any(name_tokens(n, drop_line_words=drop_line) == key for n in _names_of(gpu)):
                hits[gpu.id] = gpu
        if len(hits) == 1:
            gpu = next(iter(hits.values()))
            return Resolution(query=name, gpu=gpu, matched_by="alias")
        if len(hits) > 1:
            raise UsageError(
                f"GPU name {name!r} is ambiguous: it matches {', '.join(hits)}", hint="use one of those ids"
            )

    words = set(name_tokens(query, drop_line_words=True))
    # per entry, the words each of its names adds to the query, for the names holding all of it
    added = {
        gpu.id: [tokens - words for tokens in (set(name_tokens(n, drop_line_words=True)) for n in _names_of(gpu))
                 if words <= tokens]
        for gpu in gpus
    }
    candidates = [gpu for gpu in gpus if any(not extra & _TIER_WORDS for extra in added[gpu.id])]
    if len(candidates) == 1:
        return Resolution(query=name, gpu=candidates[0], matched_by="name")
    if candidates:
        families = {g.family for g in candidates}
        defaults = [g for g in candidates if g.family_default]
        if len(families) == 1 and None not in families and len(defaults) == 1:
            chosen = defaults[0]
            others = ", ".join(g.id for g in candidates if g.id != chosen.id)
            note = f"{name!r} names several variants; using {chosen.id} (others: {others})"
            return Resolution(query=name, gpu=chosen, matched_by="family", note=note)
        raise UsageError(
            f"GPU name {name!r} is ambiguous: it matches {', '.join(g.id for g in candidates)}",
            hint="use one of those ids",
        )

    vocabulary: dict[str, str] = {}
    for gpu in gpus:
        for n in _names_of(gpu):
            vocabulary.setdefault(normalise(n), gpu.id)
    close = difflib.get_close_matches(normalise(query), list(vocabulary), n=8, cutoff=0.6)
    # entries the name would match but for a tier word ("RTX 4060" -> the 4060 Ti) come first
    tiers = [gpu_id for gpu_id, extras in added.items() if extras]
    suggestions = list(dict.fromkeys([*tiers, *(vocabulary[c] for c in close)]))[:4]
    hint = f"did you mean {', '.join(suggestions)}?" if suggestions else "run 'gpusizer catalog list' to see the ids"
    raise UsageError(f"unknown GPU {name!r}", hint=hint)


# --------------------------------------------------------------------------
# memory variants


def resolve_device(gpus: Sequence[Gpu], name: str, memory_bytes: int | None = None) -> Resolution:
    """Resolve a device's NVML name, told apart from its memory variants by the memory it reports.

    Memory variants of one product (the 12 and 24 GB Tesla M40, the 8 and 16 GB RTX 4060 Ti)
    can share an NVML name; the catalog lists it as an alias of the family default. When
    ``memory_bytes`` (what NVML reports: a little under the datasheet figure) does not fit the
    entry the name resolves to, the family member whose memory fits is taken, with a note.
    """
    res = resolve_name(gpus, name)
    if memory_bytes is None or memory_bytes <= 0 or _memory_fits(res.gpu, memory_bytes) or not res.gpu.family:
        return res
    shape = _shape(res.gpu)
    variants = [g for g in gpus if g.family == res.gpu.family and g.id != res.gpu.id and _shape(g) == shape
                and _memory_fits(g, memory_bytes)]
    if not variants:
        return res
    chosen = min(variants, key=lambda g: abs(g.memory_bytes - memory_bytes))
    note = (f"{name!r} is the NVML name of several memory variants; {memory_bytes / GIB:.1f} GiB reported, "
            f"so {chosen.id} ({chosen.memory_gib:g} GiB), not {res.gpu.id} ({res.gpu.memory_gib:g} GiB)")
    return Resolution(query=name, gpu=chosen, matched_by=res.matched_by, note=note)


def _shape(gpu: Gpu) -> frozenset[str]:
    """The words of a name but its numbers: memory variants share it ("Tesla M40 12 GB" and
    "Tesla M40 24 GB"), form factors do not ("V100 SXM2 16 GB" and "V100 PCIe 32 GB")."""
    return frozenset(t for t in name_tokens(gpu.name) if not t.isdigit())


def _memory_fits(gpu: Gpu, memory_bytes: int) -> bool:
    """NVML's total is a little under the datasheet figure (ECC, driver reservations)."""
    return 0.90 <= memory_bytes / gpu.memory_bytes <= 1.02


# --------------------------------------------------------------------------
# derivation rules (data/derivations.yaml)


class RuleScope(BaseModel):
    """Which entries a rule applies to; an empty list matches every value."""

    model_config = _CONFIG

    vendors: tuple[Vendor, ...] = ("nvidia",)
    architectures: tuple[Architecture, ...] = ()
    compute_capabilities: tuple[str, ...] = ()
    segments: tuple[Segment, ...] = ()


#: The counts a per-clock rule multiplies.
UnitField = Literal["cuda_cores", "fp64_cores", "tensor_cores"]
DerivableField = Literal[
    "fp64_tflops", "fp32_tflops", "fp16_tflops", "tensor_tf32_tflops", "tensor_fp16_tflops",
    "tensor_fp16_fp16acc_tflops", "tensor_bf16_tflops", "tensor_fp8_tflops", "tensor_fp4_tflops", "tensor_int8_tops",
]


class DerivationRule(BaseModel):
    """One way to compute a throughput field from others.

    ``ratio_of``: ``field = factor x ratio_of``. ``per_clock_of``: ``field = factor x
    per_clock_of x boost_clock_mhz / 10^6`` in TFLOPS, ``factor`` being FLOPs (or ops)
    per unit per clock. A rule only fills a null; a sourced value is checked against it
    by the consistency tests, within ``tolerance``.
    """

    model_config = _CONFIG

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$", max_length=64)
    field: DerivableField
    ratio_of: DerivableField | None = None
    per_clock_of: UnitField | None = None
    factor: float = Field(gt=0, le=100_000)
    when: RuleScope = Field(default_factory=RuleScope)  # (not RuleScope(): that builds its validator on import)
    #: entries the rule does not apply to, each with the reason
    exceptions: dict[str, str] = Field(default_factory=dict)
    #: how far (relative) a sourced value may be from the rule: datasheets round
    tolerance: float = Field(default=0.02, gt=0, le=0.2)
    why: str = Field(min_length=10)
    sources: tuple[Source, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _one_input(self) -> DerivationRule:
        if (self.ratio_of is None) == (self.per_clock_of is None):
            raise ValueError("give exactly one of ratio_of and per_clock_of")
        if self.ratio_of == self.field:
            raise ValueError("ratio_of: a rule cannot derive a field from itself")
        return self

    @property
    def formula(self) -> str:
        if self.per_clock_of is not None:
            return f"{self.field} = {self.factor:g} x {self.per_clock_of} x boost_clock_mhz / 1e6"
        return f"{self.field} = {self.factor:g} x {self.ratio_of}"

    def applies(self, gpu: Gpu) -> bool:
        """The entry is in scope and not an exception (whether or not the inputs are known)."""
        scope = self.when
        return (gpu.id not in self.exceptions and gpu.vendor in scope.vendors
                and (not scope.architectures or gpu.architecture in scope.architectures)
                and (not scope.compute_capabilities or gpu.compute_capability in scope.compute_capabilities)
                and (not scope.segments or gpu.segment in scope.segments))

    def compute(self, values: dict[str, Any]) -> float | None:
        """The rule's value from ``values`` (field -> value); None when an input is unknown."""
        if self.ratio_of is not None:
            base = values.get(self.ratio_of)
            return None if base is None else float(f"{self.factor * base:.4g}")
        units, clock = values.get(self.per_clock_of or ""), values.get("boost_clock_mhz")
        if not units or not clock:
            return None
        return float(f"{self.factor * units * clock / 1e6:.4g}")


class Derivations(BaseModel):
    """data/derivations.yaml: the rules, in the order they are tried."""

    model_config = _CONFIG

    schema_version: Literal[1] = 1
    rules: tuple[DerivationRule, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> Derivations:
        ids = [r.id for r in self.rules]
        twice = sorted({i for i in ids if ids.count(i) > 1})
        if twice:
            raise ValueError(f"rules: duplicate id {', '.join(twice)}")
        return self

    def by_id(self, rule_id: str) -> DerivationRule | None:
        return next((r for r in self.rules if r.id == rule_id), None)


@functools.cache
def load_derivations(cache_dir: Path | None = None) -> Derivations:
    """The bundled derivation rules, validated."""
    path = datafiles.bundled_path("derivations.yaml")
    doc = datafiles.load_yaml(path, cache_dir)
    try:
        return Derivations.model_validate(doc)
    except ValidationError as exc:
        raise DataFileError(datafiles.describe_validation_error(exc, str(path))) from None


def _inputs(gpu: Gpu) -> dict[str, Any]:
    return {f: getattr(gpu, f) for f in (*DERIVABLE_FIELDS, *get_args(UnitField), "boost_clock_mhz")}


def _declared(gpu: Gpu, rules: Derivations, values: dict[str, Any]) -> None:
    """Check (or fill) the values an entry declares derived, each by its rule."""
    for field, rule_id in gpu.derived:
        rule = rules.by_id(rule_id)
        where = f"entry {gpu.id!r}: derived: {field}"
        if rule is None:
            raise DataFileError(f"{where}: no rule {rule_id!r} in derivations.yaml")
        if rule.field != field or not rule.applies(gpu):
            raise DataFileError(f"{where}: rule {rule_id!r} does not derive {field} for this GPU")
        value = rule.compute(values)
        if value is None:
            raise DataFileError(f"{where}: rule {rule_id!r} needs {rule.ratio_of or rule.per_clock_of} "
                                "and the boost clock, which are unknown")
        given = values[field]
        if given is not None and abs(given / value - 1) > rule.tolerance:
            raise DataFileError(f"{where}: {given:g} is not what {rule_id!r} gives ({rule.formula} = {value:g})")
        values[field] = value if given is None else given


def derive(gpu: Gpu, rules: Derivations) -> Gpu:
    """``gpu`` with every null its rules can compute filled in and listed in ``derived``.

    Rules are tried in file order until nothing changes, so one derived value can feed the
    next (FP16-accumulate rate -> INT8). A value is never overwritten: sourced figures win.
    """
    values = _inputs(gpu)
    _declared(gpu, rules, values)
    derived = gpu.derived_by
    changed = True
    while changed:
        changed = False
        for rule in rules.rules:
            if values[rule.field] is None and rule.applies(gpu):
                value = rule.compute(values)
                if value is not None:
                    values[rule.field], derived[rule.field] = value, rule.id
                    changed = True
    update = {f: values[f] for f in DERIVABLE_FIELDS if values[f] != getattr(gpu, f)}
    if not update and derived == gpu.derived_by:
        return gpu
    return gpu.model_copy(update={**update, "derived": tuple(derived.items())})


#: derive_catalog's results, by the identity of the catalog they came from (kept alive with it)
_DERIVED: dict[int, tuple[Catalog, Catalog]] = {}


def derive_catalog(catalog: Catalog, cache_dir: Path | None = None) -> Catalog:
    """The catalog with the derivation rules applied to every entry (see :func:`derive`)."""
    hit = _DERIVED.get(id(catalog))
    if hit is not None and hit[0] is catalog:
        return hit[1]
    rules = load_derivations(cache_dir)
    result = Catalog.model_construct(gpus=tuple(derive(g, rules) for g in catalog.gpus), files=catalog.files)
    _DERIVED[id(catalog)] = (catalog, result)
    return result


# --------------------------------------------------------------------------
# loading


def bundled_catalog_path() -> Path:
    return datafiles.bundled_path("gpus.yaml")


def _entries_from_document(doc: Any, origin: str) -> list[dict[str, Any]]:
    """Accept either a list of entries or a mapping with a ``gpus`` list (and
    ``schema_version: 1``)."""
    if isinstance(doc, dict):
        unknown = set(doc) - {"gpus", "schema_version"}
        if unknown:
            raise DataFileError(
                f"{origin}: unknown top-level key(s) {', '.join(sorted(datafiles.quote(str(k)) for k in unknown))}",
                hint="a catalog file holds 'gpus:' followed by a list of entries",
            )
        version = doc.get("schema_version", 1)
        if type(version) is not int or version != 1:
            raise DataFileError(f"{origin}: schema_version: {datafiles.quote(version)} is not supported "
                                "(this gpusizer reads 1)")
        doc = doc.get("gpus")
    if not isinstance(doc, list):
        raise DataFileError(f"{origin}: expected a list of GPU entries under 'gpus:'", hint="see examples/my-gpus.yaml")
    for i, entry in enumerate(doc):
        if not isinstance(entry, dict):
            raise DataFileError(f"{origin}: entry #{i + 1} is not a mapping")
        if not isinstance(entry.get("id"), str):
            raise DataFileError(f"{origin}: entry #{i + 1}: id: missing or not a string")
    return doc



def _validate_entry(raw: dict[str, Any], origin: str) -> Gpu:
    """One entry, validated strictly: ``memory_gib: "24"`` or ``ecc: 1`` is a wrong
    type, not a number or a boolean; then the plausibility checks."""
    try:
        gpu = Gpu.model_validate(datafiles.strict_input(raw), strict=True)
    except ValidationError as exc:
        raise DataFileError(datafiles.describe_validation_error(exc, origin, raw.get("id"))) from None
    problem = _implausible(gpu)
    if problem is not None:
        raise DataFileError(f"{origin}: entry {datafiles.quote(gpu.id)}: {problem}",
                            hint="check the figure against the datasheet")
    return gpu


#: Compute-capability majors of each architecture (CUDA C++ Programming Guide, "Compute Capabilities").
_CC_MAJORS: dict[str, tuple[int, ...]] = {
    "maxwell": (5,), "pascal": (6,), "volta": (7,), "turing": (7,), "ampere": (8,), "ada": (8,), "hopper": (9,),
    "blackwell": (10, 11, 12),
}
#: The newest NVLink generation of each architecture: 0 = none (Maxwell; Ada dropped it).
_NVLINK_NEWEST: dict[str, int] = {
    "maxwell": 0, "pascal": 1, "volta": 2, "turing": 2, "ampere": 3, "ada": 0, "hopper": 4, "blackwell": 5,
}
#: Dense Tensor Core throughput stays under this multiple of FP32 (B200 FP4 is 120x; H100 FP8 is 30x).
_TENSOR_OVER_FP32 = 256


def _implausible(gpu: Gpu) -> str | None:
    """The first figure that cannot be right for the entry's architecture, as
    ``field: why``; None when all are plausible. Runs on every entry after
    merging, so an override is checked against the fields it does not change."""
    tensor = [(f, getattr(gpu, f)) for f in TENSOR_FIELDS if getattr(gpu, f) is not None]
    if tensor and gpu.tensor_cores == 0:
        return f"tensor_cores: 0, but {tensor[0][0]} is given"
    fp32: float | None = gpu.fp32_tflops  # (null where a derivation rule fills it in later)
    for field, value in tensor:
        if fp32 is not None and value > fp32 * _TENSOR_OVER_FP32:
            return f"{field}: {value:g} is more than {_TENSOR_OVER_FP32}x fp32_tflops {fp32:g}"
    if getattr(gpu, "vendor", "nvidia") != "nvidia" or gpu.architecture not in _CC_MAJORS \
            or gpu.compute_capability is None:
        return None  # the facts below are NVIDIA's
    arch = gpu.architecture
    major = int(gpu.compute_capability.split(".")[0])
    # cards older than Maxwell (Kepler's 3.x) are filed under the oldest architecture listed
    if major not in _CC_MAJORS[arch] and not (arch == ARCH_ORDER[0] and major < _CC_MAJORS[arch][0]):
        return f"compute_capability: {gpu.compute_capability} is not a {arch} compute capability " \
               f"({' or '.join(f'{m}.x' for m in _CC_MAJORS[arch])})"
    if gpu.nvlink_generation is not None and gpu.nvlink_generation > _NVLINK_NEWEST[arch]:
        newest = _NVLINK_NEWEST[arch]
        return f"nvlink_generation: {gpu.nvlink_generation} is " + (
            f"newer than {arch}'s NVLink {newest}" if newest else f"given, but {arch} GPUs have no NVLink")
    if gpu.tensor_cores and ARCH_ORDER.index(arch) < ARCH_ORDER.index("volta"):
        return f"tensor_cores: {arch} has no Tensor Cores; use null"
    if gpu.cuda_cores is not None and gpu.boost_clock_mhz is not None:
        peak = gpu.cuda_cores * gpu.boost_clock_mhz * 2 / 1e6
        if fp32 is not None and fp32 > peak * 1.1:
            return f"fp32_tflops: {fp32:g} exceeds cuda_cores x boost clock x 2 FLOPs = {peak:.1f}"
    return None


def merge_entries(
    documents: Sequence[tuple[str, list[dict[str, Any]]]],
    rules: Derivations | None = None,
) -> tuple[Gpu, ...]:
    """Merge catalog documents in order.

    The first document is the base. In later documents, an entry whose id
    exists overrides the given fields of the existing entry; a new id adds an
    entry. A duplicate id within one file is an error. Every merged entry is
    validated whole (types, ranges, cross-field and plausibility checks), and
    an error names the file that last changed it. With ``rules``, the values an
    entry declares derived are checked against their rules here, so that error
    names its file too.
    """
    merged: dict[str, tuple[dict[str, Any], str]] = {}
    for origin, entries in documents:
        seen: set[str] = set()
        for raw in entries:
            gpu_id = raw["id"]
            if gpu_id in seen:
                raise DataFileError(f"{origin}: entry {datafiles.quote(gpu_id)}: id: duplicate id in the same file")
            seen.add(gpu_id)
            if gpu_id in merged:
                base, _ = merged[gpu_id]
                merged[gpu_id] = ({**base, **raw}, origin)
            else:
                merged[gpu_id] = (dict(raw), origin)
    gpus = tuple(_validate_entry(raw, origin) for raw, origin in merged.values())
    origins = {gpu.id: origin for gpu, (_, origin) in zip(gpus, merged.values(), strict=True)}
    _check_catalog(gpus, origins)
    for gpu in gpus:
        if rules is None:
            break
        try:
            _declared(gpu, rules, _inputs(gpu))
        except DataFileError as exc:
            raise DataFileError(f"{origins[gpu.id]}: {exc}") from None
    return gpus


def _check_catalog(gpus: Sequence[Gpu], origins: dict[str, str] | None = None) -> None:
    """Checks across entries: aliases are unique, one default per family.
    ``origins`` maps an id to the file that last changed it, for the message."""
    def where(gpu: Gpu) -> str:
        return f"{(origins or {}).get(gpu.id, 'catalog')}: entry {datafiles.quote(gpu.id)}"

    owners: dict[str, str] = {}
    for gpu in gpus:
        for alias in (gpu.id, *gpu.aliases):
            key = normalise(alias)
            other = owners.get(key)
            if other is not None and other != gpu.id:
                raise DataFileError(f"{where(gpu)}: aliases: {datafiles.quote(alias)} is also used by '{other}'")
            owners[key] = gpu.id
    defaults: dict[str, str] = {}
    for gpu in gpus:
        if gpu.family_default:
            if not gpu.family:
                raise DataFileError(f"{where(gpu)}: family_default: set without a family")
            if gpu.family in defaults:
                raise DataFileError(
                    f"{where(gpu)}: family_default: family '{gpu.family}' already defaults to '{defaults[gpu.family]}'"
                )
            defaults[gpu.family] = gpu.id


@functools.cache
def _load_cached(paths: tuple[str, ...], cache_dir: Path | None) -> Catalog:
    """The catalog of these files with the derivation rules applied: from the validated-catalog
    cache, which holds it derived (so a run that finds it there reads no rules), else read,
    validated and derived, and then cached."""
    folder = datafiles.usable_cache_dir(cache_dir)
    cached = _validated_cache_path(paths, folder)
    if cached is not None:
        gpus = _construct_gpu(datafiles.read_cache(cached, cached.stem.removeprefix("catalog-")), str(cached))
        if gpus is not None:
            return Catalog.model_construct(gpus=gpus, files=paths)
    catalog = derive_catalog(datafiles.read_retrying_uncached(_read_files, paths, folder), folder)
    if cached is not None and _validated_cache_path(paths, folder) == cached:
        # (the files did not change while they were being read and validated)
        datafiles.write_cache(cached, cached.stem.removeprefix("catalog-"),
                              [gpu.model_dump(mode="json") for gpu in catalog.gpus])
    return catalog


def _read_files(paths: tuple[str, ...], cache_dir: Path | None, refresh: bool = False) -> Catalog:
    documents = []
    for path in paths:
        doc = datafiles.load_yaml(Path(path), cache_dir, refresh=refresh)
        documents.append((path, _entries_from_document(doc, path)))
    return Catalog(gpus=merge_entries(documents, load_derivations(cache_dir)), files=paths)


def _validated_cache_path(paths: Sequence[str], cache_dir: Path | None) -> Path | None:
    """Where the validated, derived catalog for exactly these files is cached.

    The key covers the bytes of every file in order, the derivation rules
    (``derivations.yaml``), this module's own source (so a changed schema,
    validator or rule logic never meets an old dump), and the versions of
    gpusizer and pydantic. A dump is written only after full validation, and
    validated again when it is read (:func:`_construct_gpu`).
    """
    if cache_dir is None:
        return None
    from pydantic import VERSION as PYDANTIC_VERSION

    from gpusizer import __version__

    rules = datafiles.read_bytes_or_none(datafiles.bundled_path("derivations.yaml"))
    if rules is None:
        return None  # (as for a catalog file: the normal path reports it)
    parts = [datafiles.CACHE_FORMAT, __version__.encode(), PYDANTIC_VERSION.encode(),
             datafiles.read_bytes_or_none(Path(__file__)) or b"", rules]
    for path in paths:
        data = datafiles.read_bytes_or_none(Path(path))
        if data is None:
            return None  # let the normal path report the missing or unreadable file
        parts.append(data)
    return cache_dir / f"catalog-{datafiles.content_key(*parts)}.json"


def _construct_gpu(dump: Any, origin: str) -> tuple[Gpu, ...] | None:
    """The GPUs of a cached dump, validated again exactly as the YAML entries are
    (strict types, ranges, cross-field, plausibility and catalog-wide checks);
    None when the dump is anything else, so the files are read instead. A cache
    file can make a run slower, never change its result."""
    if not isinstance(dump, list) or not dump or not all(isinstance(d, dict) for d in dump):
        return None
    try:
        gpus = tuple(_validate_entry(d, origin) for d in dump)
        _check_catalog(gpus)
    except DataFileError:
        return None
    return gpus


def load_catalog(extra: Sequence[str | Path] = (), cache_dir: Path | None = None) -> Catalog:
    """Load the bundled catalog, then overlay each user file in order.

    ``cache_dir`` (optional) keeps parsed YAML and the validated catalog as JSON;
    see ``datafiles`` for what makes a cache file usable.
    """
    paths = (str(bundled_catalog_path()), *(str(Path(p)) for p in extra))
    return _load_cached(paths, cache_dir)
