"""The recommend rules file: frozen models, loading, validation and merging.

The bundled file is ``data/rules.yaml`` (``gpusizer/data/rules.yaml`` in the
wheel); its format is documented in ``docs/rules.md``. A user rules file is
merged over it by workload and rule id before validation, so a
partial override (``{id: tensor, weight: 6}``) is enough. Every rule names a
catalog field or a derived field; an unknown name is a :class:`DataFileError`
that suggests the close ones. Nothing here runs at import time.
"""

from __future__ import annotations

import difflib
import functools
import re
import string
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from gpusizer import datafiles
from gpusizer.choices import Mode
from gpusizer.domain.precision import RULE_PRECISIONS, PrecisionName
from gpusizer.errors import DataFileError
from gpusizer.hardware.catalog import ARCH_ORDER, Gpu


def _rule_precision(name: str) -> str:
    if name not in RULE_PRECISIONS:
        raise ValueError(f"{name!r} is not a precision rules are written for ({', '.join(RULE_PRECISIONS)})")
    return name


#: A precision a recommend request may name (the table's ``rule_precision`` rows).
RulePrecision = Annotated[PrecisionName, AfterValidator(_rule_precision)]
Op = Literal["==", "!=", ">", ">=", "<", "<=", "in", "not in"]
FieldKind = Literal["number", "bool", "text", "ordered"]

#: Fields computed from a catalog entry for the working precision (values in
#: ``gpusizer.ranking.search.field_value``).
DERIVED_FIELDS: dict[str, str] = {
    "tensor_tflops": "dense Tensor Core throughput at the working precision (null: none at that precision)",
    "precision_tflops": "best throughput at the working precision: Tensor Cores, else CUDA cores",
    "precision_tflops_per_w": "precision_tflops / tdp_w",
    "fp64_ratio": "fp64_tflops / fp32_tflops (1:2 on P100/V100/A100/H100, 1:32 or 1:64 on GeForce)",
    "fp16_ratio": "fp16_tflops / fp32_tflops (non-tensor FP16 rate)",
    "fp16_speedup": "fastest 16-bit rate / FP32 rate: max(fp16_tflops, tensor_fp16_tflops) / fp32_tflops "
    "(1/64 on Pascal GeForce, 2 on P100 and GeForce Tensor Cores, 8 on V100)",
    "ecc_capable": "true where ECC can be on: ecc always, or optional (a driver setting); false for ecc none",
    "has_tensor_cores": "matrix units of any vendor (NVIDIA Tensor Cores from Volta, AMD Matrix Cores, Intel MMEs): "
    "true where a count, a rate or the NVIDIA architecture says so; unknown where nothing does",
    "has_tensor_precision": "the matrix units run the working precision: true where the rate is known or NVIDIA's "
    "architecture has it (BF16 from Ampere, FP8 from Ada), false where it is absent, unknown otherwise",
    "gpu_fabric": "how a multi-GPU node links its GPUs: nvlink, infinity-fabric (AMD xGMI), roce (Intel Gaudi's "
    "on-die ports) or pcie; unknown for an NVIDIA SXM module or superchip whose NVLink figure is unpublished",
    "vendor_fabric": "the vendor's name for its GPU-to-GPU link (NVLink, Infinity Fabric (xGMI) link, on-die RoCE "
    "scale-up link), for messages",
}
#: Derived fields that are true/false rather than numbers.
DERIVED_BOOLS: frozenset[str] = frozenset({"ecc_capable", "has_tensor_cores", "has_tensor_precision"})
#: Derived fields that are text.
DERIVED_TEXTS: frozenset[str] = frozenset({"gpu_fabric", "vendor_fabric"})
#: Values a message may name besides fields: ``{gpu}``, ``{precision}``, ...
MESSAGE_CONTEXT: tuple[str, ...] = ("gpu", "gpu_id", "value", "precision", "gpus", "nodes", "total_gpus", "workload")
#: Ordered text fields: ``>=`` and friends compare by this order.
ORDERED_VALUES: dict[str, tuple[str, ...]] = {"architecture": ARCH_ORDER}


def _kind_of(annotation: Any) -> FieldKind | None:
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        kinds = {_kind_of(a) for a in args if a is not type(None)}
        return kinds.pop() if len(kinds) == 1 else None
    if origin is typing.Annotated:
        return _kind_of(args[0])
    if origin is Literal:
        return "text"
    if annotation is bool:
        return "bool"
    if annotation in (int, float):
        return "number"
    if annotation is str:
        return "text"
    return None  # tuples (aliases, sources): not usable in a rule


@functools.cache
def field_kinds() -> Mapping[str, FieldKind]:
    """Every field a rule may name, with its kind (built once and read-only: every test,
    criterion and message of the rules file asks for it)."""
    kinds: dict[str, FieldKind] = {}
    for name, info in Gpu.model_fields.items():
        kind = _kind_of(info.annotation)
        if kind is not None:
            kinds[name] = "ordered" if name in ORDERED_VALUES else kind
    for name in DERIVED_FIELDS:
        kinds[name] = "bool" if name in DERIVED_BOOLS else "text" if name in DERIVED_TEXTS else "number"
    return types.MappingProxyType(kinds)


def _unknown_field(name: str) -> ValueError:
    known = list(field_kinds())
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else "; see docs/rules.md for the field list"
    return ValueError(f"unknown field {datafiles.quote(name)}{hint}")


#: The format specs a message placeholder may carry: an alignment, a sign, a
#: width and a precision of at most two digits each, and a presentation type,
#: e.g. ``{fp64_ratio:.3f}`` or ``{gpus:>4}``. Nothing that allocates at will.
_SAFE_SPEC = re.compile(r"(?:[^{}]?[<>^=])?[+\- ]?#?0?(?:[1-9][0-9]?)?[,_]?(?:\.[0-9]{1,2})?[bcdeEfFgGnosxX%]?")
#: Longest message text, in characters.
MAX_MESSAGE = 500


def _check_message(message: str) -> str:
    """Placeholders must name a field or a context value; format specs must be
    simple (:data:`_SAFE_SPEC`), with a conversion of !r, !s or !a at most."""
    if len(message) > MAX_MESSAGE:
        raise ValueError(f"longer than {MAX_MESSAGE} characters")
    allowed = set(field_kinds()) | set(MESSAGE_CONTEXT)
    try:
        parsed = list(string.Formatter().parse(message))
    except ValueError as exc:
        raise ValueError(f"bad placeholder: {exc}") from None
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if name not in allowed:
            close = difflib.get_close_matches(name, sorted(allowed), n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise ValueError(f"unknown placeholder {{{name[:60]}}}{hint}")
        if spec and not _SAFE_SPEC.fullmatch(spec):
            raise ValueError(f"placeholder {{{name}}}: format spec {datafiles.quote(spec)} is not allowed; "
                             "use a width and precision of at most two digits, e.g. {" + name + ":.2f}")
        if conversion not in (None, "r", "s", "a"):
            raise ValueError(f"placeholder {{{name}}}: conversion {datafiles.quote(conversion)} is not allowed")
    return message


# --------------------------------------------------------------------------
# models

_FROZEN = ConfigDict(frozen=True, extra="forbid", defer_build=True, allow_inf_nan=False)
RuleId = typing.Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_-]*$", max_length=64)]


class Test(BaseModel):
    """``field op value``, e.g. ``{field: ecc, op: "==", value: true}``.

    A null field makes every test except ``== null`` / ``!= null`` unknown:
    a constraint then excludes (it cannot be confirmed), an advisory stays quiet.
    """

    model_config = _FROZEN

    field: str
    op: Op
    value: Any = None

    @model_validator(mode="after")
    def _check(self) -> Test:
        kinds = field_kinds()
        if self.field not in kinds:
            raise ValueError(f"field: {_unknown_field(self.field)}")
        kind = kinds[self.field]
        v = self.value
        if self.op in ("in", "not in"):
            if not isinstance(v, (list, tuple)) or not v:
                raise ValueError(f"value: {self.op!r} needs a non-empty list")
            values = list(v)
        else:
            values = [v]
        for item in values:
            if item is None:
                if self.op not in ("==", "!="):
                    raise ValueError(f"value: null only works with == or != (got {self.op!r})")
                continue
            if kind == "bool" and not isinstance(item, bool):
                raise ValueError(f"value: {self.field} is true or false, not {datafiles.quote(item)}")
            if kind == "number" and (isinstance(item, bool) or not isinstance(item, (int, float))):
                raise ValueError(f"value: {self.field} is a number, not {datafiles.quote(item)}")
            if kind in ("text", "ordered") and not isinstance(item, str):
                raise ValueError(f"value: {self.field} is text, not {datafiles.quote(item)}")
            if kind == "ordered" and item not in ORDERED_VALUES[self.field]:
                raise ValueError(f"value: {datafiles.quote(item)} is not one of {', '.join(ORDERED_VALUES[self.field])}")
        if self.op in (">", ">=", "<", "<=") and kind in ("bool", "text"):
            raise ValueError(f"op: {self.op!r} does not apply to {kind} field {self.field}")
        return self

    def describe(self) -> str:
        value = "null" if self.value is None else self.value
        if isinstance(value, bool):
            value = str(value).lower()
        return f"{self.field} {self.op} {value}"


class When(BaseModel):
    """When a rule applies. Every condition given must hold; none given = always."""

    model_config = _FROZEN

    min_gpus_per_node: int | None = Field(default=None, ge=1)
    min_nodes: int | None = Field(default=None, ge=1)
    min_total_gpus: int | None = Field(default=None, ge=1)
    precision: tuple[RulePrecision, ...] | None = None
    mode: Mode | None = None

    def holds(self, *, gpus_per_node: int, nodes: int, precision: str, mode: str) -> bool:
        if self.min_gpus_per_node is not None and gpus_per_node < self.min_gpus_per_node:
            return False
        if self.min_nodes is not None and nodes < self.min_nodes:
            return False
        if self.min_total_gpus is not None and gpus_per_node * nodes < self.min_total_gpus:
            return False
        if self.precision is not None and precision not in self.precision:
            return False
        return self.mode is None or mode == self.mode


class _Rule(BaseModel):
    model_config = _FROZEN

    id: RuleId
    message: str = Field(min_length=3)
    #: the claim in the source documents this rule encodes (null: our judgement)
    source: str | None = None
    when: When = Field(default_factory=When)  # (not When(): that builds its validator on import)
    enabled: bool = True

    @field_validator("message")
    @classmethod
    def _message(cls, value: str) -> str:
        return _check_message(value)


class Criterion(_Rule):
    """A weighted score over one field, normalised to [0, 1] against the best GPU.

    ``linear``: value / best. ``log``: 1 + log10(value / best) / decades, floored
    at 0, so a GPU ``decades`` orders of magnitude below the best scores 0. A bool
    field scores 1 or 0. A null value scores 0 (``missing: zero``: null means the
    GPU lacks it), or is left out of that GPU's score (``missing: skip``: null
    means the catalog does not know).
    """

    kind: Literal["criterion"] = Field(default="criterion", exclude=True)
    field: str
    weight: float = Field(ge=0, le=1000)
    scale: Literal["linear", "log"] = "linear"
    decades: float = Field(default=2.0, gt=0, le=12)
    missing: Literal["zero", "skip"] = "zero"

    @field_validator("field")
    @classmethod
    def _field(cls, value: str) -> str:
        kinds = field_kinds()
        if value not in kinds:
            raise _unknown_field(value)
        if kinds[value] not in ("number", "bool"):
            raise ValueError(f"field: {value} is {kinds[value]}; a criterion needs a number or true/false field")
        return value


class Constraint(_Rule):
    """Hard: a GPU for which ``test`` is not true is excluded, naming this rule."""

    kind: Literal["constraint"] = Field(default="constraint", exclude=True)
    test: Test


class Advisory(_Rule):
    """A warning. With ``warn_if`` it fires per GPU when the test is true;
    without it, it is a note about the workload shown once."""

    kind: Literal["advisory"] = Field(default="advisory", exclude=True)
    warn_if: Test | None = None


class Requirement(BaseModel):
    """What requiring ``NAME`` means (``RecommendRequest.require``)."""

    model_config = _FROZEN

    message: str = Field(min_length=3)
    test: Test
    source: str | None = None

    @field_validator("message")
    @classmethod
    def _message(cls, value: str) -> str:
        return _check_message(value)


class SpeedSpec(BaseModel):
    """Where the speed column comes from when no model is given.

    ``model``: a zoo model run through the performance model at ``batch`` (or
    the largest batch that fits, if smaller). ``proxy``: a catalog field, for
    workloads the performance model does not cover (HPC codes in FP64).
    """

    model_config = _FROZEN

    model: str | None = None
    batch: int | None = Field(default=None, ge=1)
    seq_len: int | None = Field(default=None, ge=1)
    image_size: int | None = Field(default=None, ge=8)
    proxy: str | None = None

    @model_validator(mode="after")
    def _check(self) -> SpeedSpec:
        if (self.model is None) == (self.proxy is None):
            raise ValueError("speed: give exactly one of model (a zoo id) or proxy (a field)")
        if self.proxy is not None:
            kinds = field_kinds()
            if self.proxy not in kinds:
                raise ValueError(f"proxy: {_unknown_field(self.proxy)}")
            if kinds[self.proxy] != "number":
                raise ValueError(f"proxy: {self.proxy} is not a number field")
        return self


class Workload(BaseModel):
    """One workload with the common rules already merged in."""

    model_config = _FROZEN

    name: str
    description: str = Field(min_length=3)
    mode: Mode
    precision: RulePrecision
    speed: SpeedSpec
    criteria: tuple[Criterion, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    advisories: tuple[Advisory, ...] = ()

    @model_validator(mode="after")
    def _check(self) -> Workload:
        for kind in ("criteria", "constraints", "advisories"):
            seen: set[str] = set()
            for rule in getattr(self, kind):
                if rule.id in seen:
                    raise ValueError(f"{kind}: rule id {rule.id!r} appears twice")
                seen.add(rule.id)
        return self


class RuleSet(BaseModel):
    """The merged, validated rules: ``workloads[name]`` and ``requirements[name]``."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    workloads: dict[str, Workload]
    requirements: dict[str, Requirement]
    files: tuple[str, ...] = ()
    #: the file each workload's ``speed`` comes from, for error messages
    speed_files: dict[str, str] = {}

    def workload(self, name: str) -> Workload:
        from gpusizer.errors import UsageError

        if name in self.workloads:
            return self.workloads[name]
        close = difflib.get_close_matches(name, list(self.workloads), n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}?" if close else f"choose one of {', '.join(self.workloads)}"
        raise UsageError(f"unknown workload {name!r}", hint=hint, field="workload")

    def requirement(self, name: str) -> Requirement:
        from gpusizer.errors import UsageError

        if name in self.requirements:
            return self.requirements[name]
        close = difflib.get_close_matches(name, list(self.requirements), n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}?" if close else f"choose from {', '.join(self.requirements)}"
        raise UsageError(f"unknown requirement {name!r}", hint=hint, field="require")


# --------------------------------------------------------------------------
# merging raw documents

RULE_KINDS: tuple[str, ...] = ("criteria", "constraints", "advisories")
_SINGULAR = {"criteria": "criterion", "constraints": "constraint", "advisories": "advisory"}
_TOP_KEYS = {"schema_version", "requirements", "common", "workloads"}
_WORKLOAD_SCALARS = {"description", "mode", "precision", "speed"}


class _Origin:
    """Which file last touched each rule, so errors can name it."""

    def __init__(self) -> None:
        self.of: dict[tuple[str, ...], str] = {}


def _as_mapping(value: Any, origin: str, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise DataFileError(f"{origin}: {where}: expected a mapping, got {type(value).__name__}",
                            hint="see docs/rules.md for the rules file format")
    return value


def _as_rule_list(value: Any, origin: str, where: str) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise DataFileError(f"{origin}: {where}: expected a list of rules, got {type(value).__name__}",
                            hint="each rule is a mapping with an id, e.g. '- id: tensor'")
    seen: set[str] = set()
    for i, rule in enumerate(value):
        if not isinstance(rule, dict):
            raise DataFileError(f"{origin}: {where}: rule #{i + 1} is not a mapping")
        rid = rule.get("id")
        if not isinstance(rid, str):
            raise DataFileError(f"{origin}: {where}: rule #{i + 1}: id: missing or not a string")
        if rid in seen:
            raise DataFileError(f"{origin}: {where}: rule '{rid}': id: duplicate id in the same list")
        seen.add(rid)
    return value


def _merge_rules(base: list[dict[str, Any]], extra: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Same id: the given keys replace the base's; new id: appended."""
    merged = {r["id"]: dict(r) for r in base}
    for rule in extra:
        if rule["id"] in merged:
            merged[rule["id"]] = {**merged[rule["id"]], **rule}
        else:
            merged[rule["id"]] = dict(rule)
    return list(merged.values())


def _check_top(doc: Any, origin: str) -> dict[str, Any]:
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise DataFileError(f"{origin}: expected a mapping with 'workloads:' (and optionally 'common:', 'requirements:')",
                            hint="see docs/rules.md and examples/my-rules.yaml")
    unknown = set(doc) - _TOP_KEYS
    if unknown:
        names = ", ".join(sorted(map(str, unknown)))
        close = difflib.get_close_matches(sorted(map(str, unknown))[0], sorted(_TOP_KEYS), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}?" if close else "top-level keys are schema_version, requirements, common, workloads"
        raise DataFileError(f"{origin}: unknown top-level key(s) {names}", hint=hint)
    version = doc.get("schema_version", 1)
    if type(version) is not int or version != 1:
        raise DataFileError(f"{origin}: schema_version: {datafiles.quote(version)} is not supported (this gpusizer reads 1)")
    return doc


def merge_documents(documents: Sequence[tuple[str, Any]]) -> tuple[dict[str, Any], _Origin]:
    """Merge raw rules documents in order (bundled first). Returns one raw document."""
    origins = _Origin()
    requirements: dict[str, dict[str, Any]] = {}
    common: dict[str, list[dict[str, Any]]] = {k: [] for k in RULE_KINDS}
    workloads: dict[str, dict[str, Any]] = {}
    for origin, doc in documents:
        doc = _check_top(doc, origin)
        for name, req in _as_mapping(doc.get("requirements"), origin, "requirements").items():
            req = _as_mapping(req, origin, f"requirements: {name}")
            requirements[str(name)] = {**requirements.get(str(name), {}), **req}
            origins.of[("requirements", str(name))] = origin
        com = _as_mapping(doc.get("common"), origin, "common")
        unknown = set(com) - set(RULE_KINDS)
        if unknown:
            raise DataFileError(f"{origin}: common: unknown key(s) {', '.join(sorted(map(str, unknown)))}",
                                hint="common holds criteria, constraints and advisories")
        for kind in RULE_KINDS:
            rules = _as_rule_list(com.get(kind), origin, f"common: {kind}")
            common[kind] = _merge_rules(common[kind], rules)
            for r in rules:
                origins.of[("common", kind, r["id"])] = origin
        for name, wl in _as_mapping(doc.get("workloads"), origin, "workloads").items():
            name = str(name)
            wl = _as_mapping(wl, origin, f"workload '{name}'")
            unknown = set(wl) - _WORKLOAD_SCALARS - set(RULE_KINDS)
            if unknown:
                key = sorted(map(str, unknown))[0]
                close = difflib.get_close_matches(key, sorted(_WORKLOAD_SCALARS | set(RULE_KINDS)), n=1, cutoff=0.6)
                raise DataFileError(
                    f"{origin}: workload '{name}': unknown key(s) {', '.join(sorted(map(str, unknown)))}",
                    hint=f"did you mean {close[0]}?" if close else "a workload holds description, mode, precision, "
                    "speed, criteria, constraints, advisories",
                )
            target = workloads.setdefault(name, {k: [] for k in RULE_KINDS})
            for key in _WORKLOAD_SCALARS & set(wl):
                target[key] = wl[key]
                origins.of[("workloads", name, key)] = origin
            for kind in RULE_KINDS:
                rules = _as_rule_list(wl.get(kind), origin, f"workload '{name}': {kind}")
                target[kind] = _merge_rules(target[kind], rules)
                for r in rules:
                    origins.of[("workloads", name, kind, r["id"])] = origin
            origins.of.setdefault(("workloads", name), origin)
    return {"requirements": requirements, "common": common, "workloads": workloads}, origins



def _validate(model: type[BaseModel], raw: Mapping[str, Any], origin: str, where: str) -> Any:
    """Strict: ``weight: "5"`` is a wrong type, not a number."""
    try:
        return model.model_validate(datafiles.strict_input(raw), strict=True)
    except ValidationError as exc:
        lines = datafiles.describe_validation_error(exc, origin).splitlines()
        # "origin: (entry): loc: msg" -> "origin: where: loc: msg"
        out = [line.replace(f"{origin}: ", f"{origin}: {where}: ", 1) for line in lines]
        raise DataFileError("\n".join(out), hint="see docs/rules.md for the rules file format") from None


def build_ruleset(merged: Mapping[str, Any], origins: _Origin, files: Sequence[str] = ()) -> RuleSet:
    """Validate a merged raw document into a RuleSet, naming the file of each bad rule."""
    requirements = {
        name: _validate(Requirement, raw, origins.of.get(("requirements", name), "rules"), f"requirement '{name}'")
        for name, raw in merged["requirements"].items()
    }
    workloads: dict[str, Workload] = {}
    speed_files: dict[str, str] = {}
    rule_models: dict[str, type[_Rule]] = {"criteria": Criterion, "constraints": Constraint, "advisories": Advisory}
    common_rules: dict[str, list[Any]] = {}
    for kind, model in rule_models.items():
        common_rules[kind] = [
            _validate(model, raw, origins.of.get(("common", kind, raw["id"]), "rules"), f"common {_SINGULAR[kind]} '{raw['id']}'")
            for raw in merged["common"][kind]
        ]
    for name, raw in merged["workloads"].items():
        wl_origin = origins.of.get(("workloads", name), "rules")
        missing = [k for k in ("description", "mode", "precision", "speed") if k not in raw]
        if missing:
            raise DataFileError(
                f"{wl_origin}: workload '{name}': {', '.join(missing)}: required for a new workload",
                hint="a new workload needs description, mode, precision and speed; see docs/rules.md",
            )
        own: dict[str, list[Any]] = {}
        for kind, model in rule_models.items():
            own[kind] = []
            for rule in raw[kind]:
                # a workload rule with a common rule's id overrides it key by key
                base = next((r for r in merged["common"][kind] if r["id"] == rule["id"]), None)
                full = {**base, **rule} if base is not None else rule
                origin = origins.of.get(("workloads", name, kind, rule["id"]), wl_origin)
                own[kind].append(_validate(model, full, origin, f"workload '{name}': {_SINGULAR[kind]} '{rule['id']}'"))
        fields: dict[str, Any] = {}
        for kind in rule_models:
            mine = {r.id for r in own[kind]}
            fields[kind] = tuple(r for r in common_rules[kind] if r.id not in mine) + tuple(own[kind])
        scalars = {k: raw[k] for k in ("description", "mode", "precision", "speed")}
        speed_files[name] = origins.of.get(("workloads", name, "speed"), wl_origin)
        scalar_origin = next((origins.of[("workloads", name, k)] for k in scalars if ("workloads", name, k) in origins.of),
                             wl_origin)
        try:
            workloads[name] = Workload.model_validate(datafiles.strict_input({"name": name, **scalars}) | fields, strict=True)
        except ValidationError as exc:
            lines = datafiles.describe_validation_error(exc, scalar_origin).splitlines()
            raise DataFileError(
                "\n".join(line.replace(f"{scalar_origin}: ", f"{scalar_origin}: workload '{name}': ", 1) for line in lines),
                hint="see docs/rules.md for the rules file format",
            ) from None
    if not workloads:
        raise DataFileError("rules: no workloads defined", hint="the bundled data/rules.yaml defines them")
    return RuleSet(workloads=workloads, requirements=requirements, files=tuple(files), speed_files=speed_files)


def bundled_rules_path() -> Path:
    return datafiles.bundled_path("rules.yaml")


def load_rules(extra: Sequence[str | Path] = (), cache_dir: Path | None = None) -> RuleSet:
    """Load the bundled rules and merge each user file over them, in order."""
    paths = (str(bundled_rules_path()), *(str(Path(p)) for p in extra))
    return datafiles.read_retrying_uncached(_read_files, paths, cache_dir)


def _read_files(paths: tuple[str, ...], cache_dir: Path | None, refresh: bool = False) -> RuleSet:
    documents = [(p, datafiles.load_yaml(Path(p), cache_dir, refresh=refresh)) for p in paths]
    merged, origins = merge_documents(documents)
    return build_ruleset(merged, origins, paths)


def rules_from_documents(documents: Sequence[tuple[str, Any]]) -> RuleSet:
    """Build a RuleSet from already-parsed documents (tests, library use)."""
    merged, origins = merge_documents(documents)
    return build_ruleset(merged, origins, [o for o, _ in documents])
