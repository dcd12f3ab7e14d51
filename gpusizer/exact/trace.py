"""Exact mode's entry point: check the run, find torch, trace. Imports torch only when called."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from gpusizer.domain.run import RunConfig
from gpusizer.errors import MissingExtraError, UsageError
from gpusizer.exact.source import ExactTrace, ModelSource, check_traceable, parse_callable, parse_input_shape

#: install line for the extra
INSTALL = "pip install 'gpusizer[torch]'"


def make_source(*, hf_config: str | Path | None = None, hf_model: str | None = None, torch_model: str | None = None,
                input_shape: str | Sequence[int] | None = None, trust_remote_code: bool = False,
                others: Sequence[str] = ()) -> ModelSource:
    """The one model exact mode builds; ``others`` names model inputs it cannot build from."""
    given = [n for n, v in (("hf_config", hf_config), ("hf_model", hf_model), ("torch_model", torch_model))
             if v is not None]
    if others or len(given) != 1:
        raise UsageError("exact mode builds one model from a Hugging Face config, a Hub repository or a "
                         "Python callable" + (f" (got {', '.join([*others, *given])})" if others or given else ""),
                         hint="e.g. ./config.json, Qwen/Qwen3-8B, or torchvision.models:resnet101",
                         field=(list(others) + given)[-1] if others or given else "hf_config")
    shape: tuple[int, ...] | None = None
    if input_shape is not None:
        if torch_model is None:
            raise UsageError("an input shape is for a model built by a Python callable", field="input_shape")
        shape = parse_input_shape(input_shape) if isinstance(input_shape, str) else tuple(int(d) for d in input_shape)
    if torch_model is not None:
        parse_callable(torch_model)
        return ModelSource(kind="torch-model", ref=torch_model, input_shape=shape)
    if hf_model is not None:
        from gpusizer.models.hub import check_repo_id, hub_config_path

        check_repo_id(hf_model)
        require_torch()  # before going to the Hub
        return ModelSource(kind="hf-model", ref=hf_model, path=str(hub_config_path(hf_model)),
                           trust_remote_code=trust_remote_code)
    return ModelSource(kind="hf-config", ref=str(hf_config), trust_remote_code=trust_remote_code)


def source_label(source: ModelSource) -> str:
    """A short name for reports: the repo id, the config's folder, or the callable's name."""
    if source.kind == "torch-model":
        return source.ref.split(":", 1)[1]
    if source.kind == "hf-model":
        return source.ref
    path = Path(source.ref)
    return path.parent.name if path.name == "config.json" and path.parent.name else path.stem


def require_torch() -> None:
    """Raise MissingExtraError unless torch and transformers can be imported."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise MissingExtraError("exact mode needs PyTorch", hint=INSTALL)


def trace(source: ModelSource, cfg: RunConfig, progress: Callable[[str], None] | None = None) -> ExactTrace:
    """Trace one step of ``cfg`` on ``source`` (see :mod:`gpusizer.exact`)."""
    check_traceable(cfg)
    require_torch()
    from gpusizer.exact._step import trace_memory

    return trace_memory(source, cfg, progress)
