"""Finding and reading YAML data files, and turning validation errors into one line.

Only ``yaml.safe_load`` is used. Bundled files are found inside the installed
package (``gpusizer/data``) and, for an editable install or a source checkout,
in the top-level ``data/`` folder beside the package.
"""

from __future__ import annotations

import functools
import json
import os
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpusizer.errors import DataFileError

if TYPE_CHECKING:
    from pydantic import ValidationError


def bundled_path(filename: str) -> Path:
    """Path of a bundled data file, in the wheel or in the source tree."""
    packaged = resources.files("gpusizer") / "data" / filename
    if packaged.is_file():
        return Path(str(packaged))
    source_tree = Path(__file__).resolve().parent.parent / "data" / filename
    if source_tree.is_file():
        return source_tree
    raise DataFileError(
        f"bundled data file {filename!r} is missing from the installation",
        hint="reinstall gpusizer; the wheel must contain gpusizer/data/",
    )


@functools.cache
def _load_yaml_text(text: str, origin: str) -> Any:
    import yaml  # deferred: keeps `import gpusizer` light

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise DataFileError(f"{origin}: malformed YAML{where}: {problem}") from None


def load_yaml(path: Path, cache_dir: Path | None = None) -> Any:
    """Read and parse one YAML file, with file-level errors as DataFileError.

    ``yaml.safe_load`` is pure Python and takes a few milliseconds per catalog
    entry, so with ``cache_dir`` the parsed document is kept as JSON under the
    SHA-256 of the file's bytes. A changed file gets a new key; a document that
    does not survive a JSON round trip unchanged is never cached.
    """
    try:
        data = path.read_bytes()
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise DataFileError(f"{path}: file not found", hint="check the path of the catalog or rules file") from None
    except IsADirectoryError:
        raise DataFileError(f"{path}: is a directory, not a YAML file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataFileError(f"{path}: cannot be read: {exc}") from None
    cached: Path | None = None
    if cache_dir is not None:
        import hashlib

        cached = cache_dir / f"yaml-{hashlib.sha256(data).hexdigest()}.json"
        hit = read_cache(cached)
        if hit is not None:
            return hit
    doc = _load_yaml_text(text, str(path))
    if cached is not None:
        write_cache(cached, doc)
    return doc


def content_key(*parts: bytes) -> str:
    """SHA-256 over length-prefixed parts, for cache file names."""
    import hashlib

    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    return digest.hexdigest()


def read_bytes_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def read_cache(path: Path) -> Any:
    """A cached JSON document, or None when it is missing or unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write_cache(target: Path, doc: object) -> None:
    try:
        encoded = json.dumps(doc)
        if json.loads(encoded) != doc:
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(encoded, encoding="utf-8")
        os.replace(tmp, target)
    except (OSError, TypeError, ValueError):
        pass  # a cache is an optimisation; never fail because of it


def describe_validation_error(exc: ValidationError, origin: str, entry_id: object = None) -> str:
    """One line per problem: ``file: entry 'id': field: message``.

    ``entry_id`` is the entry's id as written (any YAML value), or None for a
    document without entries. Messages from our own model validators already
    start with the field name.
    """
    lines = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "__root__")
        msg = err.get("msg", "invalid")
        if err.get("type") == "extra_forbidden":
            msg = "unknown field"
        elif msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        if not loc and ": " in msg:
            loc, msg = msg.split(": ", 1)
        entry = f"entry '{entry_id}': " if entry_id is not None else ""
        lines.append(f"{origin}: {entry}{loc or '(entry)'}: {msg}")
    return "\n".join(lines)
