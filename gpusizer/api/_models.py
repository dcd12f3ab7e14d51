"""The model zoo, as an API result."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from gpusizer.api._envelope import Result
from gpusizer.models.zoo import Model


class ModelsResult(Result):
    command: Literal["models"] = "models"
    results: tuple[Model, ...]


def models(*, cache_dir: Path | None = None) -> ModelsResult:
    """The model zoo: every model with its shape and sources."""
    from gpusizer.models.zoo import load_zoo

    return ModelsResult(input={}, results=load_zoo(cache_dir=cache_dir).models)
