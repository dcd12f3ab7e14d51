"""Package attributes loaded when first asked for: a package says which of its modules holds
each public name, and that module is imported on the name's first use, so importing the
package (the command line does, at every start) imports none of them."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def lazy_names(package: str, homes: Mapping[str, str]) -> Callable[[str], object]:
    """A module ``__getattr__`` for ``package``, whose ``homes`` maps each name to the
    submodule that defines it."""

    def __getattr__(name: str) -> object:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{home}"), name)

    return __getattr__


def lazy_dir(module_globals: Mapping[str, object], homes: Mapping[str, str]) -> Callable[[], list[str]]:
    """A module ``__dir__`` that lists the lazily loaded names with those already defined."""

    def __dir__() -> list[str]:
        return sorted({*module_globals, *homes})

    return __dir__
