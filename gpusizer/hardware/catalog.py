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

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpusizer import datafiles
from gpusizer.errors import DataFileError, UsageError
from gpusizer.units import GIB

Segment = Literal["datacenter", "workstation", "consumer"]
#: The market segments, in the catalog's order: the one list every filter checks against.
SEGMENTS: tuple[str, ...] = get_args(Segment)
Architecture = Literal["maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell"]

#: Architectures in launch order, used for "nothing before Volta has Tensor Cores"
#: and for per-generation calibration.
ARCH_ORDER: tuple[str, ...] = ("maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell")

PositiveFloat = Annotated[float, Field(gt=0)]
TFlops = Annotated[float, Field(gt=0, le=100_000)]


# defer_build: a model's validator is built on its first validation, not when the
# class is defined, so a run served from the validated-catalog cache never pays for it.
_CONFIG = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class Source(BaseModel):
    """A datasheet, whitepaper or spec page that figures come from."""

    model_config = _CONFIG

    title: str = Field(min_length=3)
    url: str | None = None
    #: Which fields this source supports; empty means "the entry in general".
    fields: tuple[str, ...] = ()


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

    # family
    segment: Segment
    architecture: Architecture
    compute_capability: str = Field(pattern=r"^[0-9]+\.[0-9]+$")
    launch_year: int = Field(ge=2010, le=2035)

    # memory
    memory_gib: float = Field(gt=0, le=4096)
    memory_type: str
    bandwidth_gb_s: float = Field(gt=0, le=100_000)

    # non-tensor throughput
    fp64_tflops: TFlops | None = None
    fp32_tflops: TFlops
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
    ecc: bool
    nvlink_generation: int | None = Field(default=None, ge=1, le=10)
    nvlink_gb_s: float | None = Field(default=None, gt=0, le=100_000)
    pcie_generation: int | None = Field(default=None, ge=1, le=7)
    gpudirect_rdma: bool
    form_factor: str

    # price and provenance
    launch_price_usd: float | None = Field(default=None, gt=0, le=10_000_000)
    launch_price_year: int | None = Field(default=None, ge=2010, le=2035)
    sources: tuple[Source, ...] = Field(min_length=1)
    notes: str | None = None

    @model_validator(mode="after")
    def _cross_field_checks(self) -> Gpu:
        def bad(field: str, why: str) -> ValueError:
            return ValueError(f"{field}: {why}")

        if self.fp64_tflops is not None and self.fp64_tflops > self.fp32_tflops * 1.001:
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
        if self.launch_price_year is not None and self.launch_price_year < self.launch_year - 1:
            raise bad("launch_price_year", f"{self.launch_price_year} is before launch_year {self.launch_year}")
        if ARCH_ORDER.index(self.architecture) < ARCH_ORDER.index("volta"):
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
    def has_tensor_cores(self) -> bool:
        return any(getattr(self, f) is not None for f in TENSOR_FIELDS)

    @property
    def nvlink(self) -> bool:
        return self.nvlink_gb_s is not None


TENSOR_FIELDS: tuple[str, ...] = (
    "tensor_tf32_tflops",
    "tensor_fp16_tflops",
    "tensor_fp16_fp16acc_tflops",
    "tensor_bf16_tflops",
    "tensor_fp8_tflops",
    "tensor_fp4_tflops",
    "tensor_int8_tops",
)

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

    def resolve_many(self, names: Iterable[str]) -> tuple[Resolution, ...]:
        return tuple(self.resolve(n) for n in names)


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
# loading


def bundled_catalog_path() -> Path:
    return datafiles.bundled_path("gpus.yaml")


def _entries_from_document(doc: Any, origin: str) -> list[dict[str, Any]]:
    """Accept either a list of entries or a mapping with a ``gpus`` list."""
    if isinstance(doc, dict):
        unknown = set(doc) - {"gpus", "schema_version"}
        if unknown:
            raise DataFileError(
                f"{origin}: unknown top-level key(s) {', '.join(sorted(map(str, unknown)))}",
                hint="a catalog file holds 'gpus:' followed by a list of entries",
            )
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
    try:
        return Gpu.model_validate(raw)
    except ValidationError as exc:
        raise DataFileError(datafiles.describe_validation_error(exc, origin, raw.get("id"))) from None


def merge_entries(
    documents: Sequence[tuple[str, list[dict[str, Any]]]],
) -> tuple[Gpu, ...]:
    """Merge catalog documents in order.

    The first document is the base. In later documents, an entry whose id
    exists overrides the given fields of the existing entry; a new id adds an
    entry. A duplicate id within one file is an error.
    """
    merged: dict[str, tuple[dict[str, Any], str]] = {}
    for origin, entries in documents:
        seen: set[str] = set()
        for raw in entries:
            gpu_id = raw["id"]
            if gpu_id in seen:
                raise DataFileError(f"{origin}: entry '{gpu_id}': id: duplicate id in the same file")
            seen.add(gpu_id)
            if gpu_id in merged:
                base, _ = merged[gpu_id]
                merged[gpu_id] = ({**base, **raw}, origin)
            else:
                merged[gpu_id] = (dict(raw), origin)
    gpus = tuple(_validate_entry(raw, origin) for raw, origin in merged.values())
    _check_catalog(gpus)
    return gpus


def _check_catalog(gpus: Sequence[Gpu]) -> None:
    owners: dict[str, str] = {}
    for gpu in gpus:
        for alias in (gpu.id, *gpu.aliases):
            key = normalise(alias)
            other = owners.get(key)
            if other is not None and other != gpu.id:
                raise DataFileError(f"entry '{gpu.id}': aliases: {alias!r} is also used by '{other}'")
            owners[key] = gpu.id
    defaults: dict[str, str] = {}
    for gpu in gpus:
        if gpu.family_default:
            if not gpu.family:
                raise DataFileError(f"entry '{gpu.id}': family_default: set without a family")
            if gpu.family in defaults:
                raise DataFileError(
                    f"entry '{gpu.id}': family_default: family '{gpu.family}' already defaults to '{defaults[gpu.family]}'"
                )
            defaults[gpu.family] = gpu.id


@functools.cache
def _load_cached(paths: tuple[str, ...], cache_dir: Path | None) -> Catalog:
    cached = _validated_cache_path(paths, cache_dir)
    if cached is not None:
        hit = datafiles.read_cache(cached)
        if isinstance(hit, list):
            try:
                return Catalog.model_construct(gpus=tuple(_construct_gpu(d) for d in hit), files=paths)
            except (KeyError, TypeError, AttributeError):
                pass  # not a dump this version wrote: validate from the YAML instead
    documents = []
    for path in paths:
        doc = datafiles.load_yaml(Path(path), cache_dir)
        documents.append((path, _entries_from_document(doc, path)))
    catalog = Catalog(gpus=merge_entries(documents), files=paths)
    if cached is not None and _validated_cache_path(paths, cache_dir) == cached:
        # (the files did not change while they were being read and validated)
        datafiles.write_cache(cached, [gpu.model_dump(mode="json") for gpu in catalog.gpus])
    return catalog


def _validated_cache_path(paths: Sequence[str], cache_dir: Path | None) -> Path | None:
    """Where the validated catalog for exactly these files is cached.

    The key covers the bytes of every file in order, this module's own source
    (so a changed schema or validator never trusts an old dump), and the versions
    of gpusizer and pydantic. A dump is only written after full validation, so a
    hit is a catalog that passed validation with the same inputs and rules.
    """
    if cache_dir is None:
        return None
    from pydantic import VERSION as PYDANTIC_VERSION

    from gpusizer import __version__

    parts = [__version__.encode(), PYDANTIC_VERSION.encode(), datafiles.read_bytes_or_none(Path(__file__)) or b""]
    for path in paths:
        data = datafiles.read_bytes_or_none(Path(path))
        if data is None:
            return None  # let the normal path report the missing file
        parts.append(data)
    return cache_dir / f"catalog-{datafiles.content_key(*parts)}.json"


def _construct_gpu(dump: dict[str, Any]) -> Gpu:
    """Rebuild a Gpu from its validated JSON dump without validating it again.

    JSON turns tuples into lists, so tuple fields are turned back; ``sources``
    holds nested models. Unknown keys mean the dump is not ours.
    """
    if set(dump) != set(Gpu.model_fields):
        raise KeyError("fields differ")
    values = dict(dump)
    values["aliases"] = tuple(values["aliases"])
    values["sources"] = tuple(
        Source.model_construct(title=s["title"], url=s["url"], fields=tuple(s["fields"])) for s in values["sources"]
    )
    return Gpu.model_construct(**values)


def load_catalog(extra: Sequence[str | Path] = (), cache_dir: Path | None = None) -> Catalog:
    """Load the bundled catalog, then overlay each user file in order.

    ``cache_dir`` (optional) keeps parsed YAML as JSON; see ``datafiles.load_yaml``.
    """
    paths = (str(bundled_catalog_path()), *(str(Path(p)) for p in extra))
    return _load_cached(paths, cache_dir)
