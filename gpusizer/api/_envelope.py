"""The envelope every API result comes in, and the catalog loader.

Kept apart from ``_common`` (model resolution, run settings, input bounds), which
imports the domain model: the browsing answers (catalog list, catalog show,
compare) need only this, so ``gpusizer catalog list`` loads no domain model.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from gpusizer.hardware.catalog import Catalog

#: The JSON schema's version; a change that breaks readers bumps it.
SCHEMA_VERSION = 1

# defer_build: a result model is built on its first validation, so a command builds only the
# results it returns (e.g. catalog list never builds compare's)
_FROZEN = ConfigDict(frozen=True, extra="forbid", defer_build=True)

class Result(BaseModel):
    """The envelope every answer comes in: what was asked, the results, and notes."""

    model_config = _FROZEN

    schema_version: int = SCHEMA_VERSION
    command: str
    #: the resolved inputs: every default that was applied, as used
    input: dict[str, Any]
    results: Any
    notes: tuple[str, ...] = ()

    def document(self) -> dict[str, Any]:
        """The JSON document the command prints under ``--json``."""
        return self.model_dump(mode="json")

def load_catalog(files: Sequence[str | Path] = (), *, cache_dir: Path | None = None) -> Catalog:
    """The bundled GPU catalog, with ``files`` merged over it (added GPUs, overridden fields).

    >>> cat = load_catalog()
    >>> cat.resolve("H100 SXM").gpu.memory_gib
    80.0
    """
    from gpusizer.hardware.catalog import load_catalog as _load

    return _load(files, cache_dir=cache_dir)
