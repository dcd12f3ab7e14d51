"""Finding and reading data files within bounds, the on-disk cache, and one-line errors.

Everything read from outside is bounded (see SECURITY.md):

* a data file (catalog, rules, zoo, Hugging Face config) must be a regular file
  of at most :data:`MAX_FILE_BYTES`; a FIFO, a device such as ``/dev/zero`` or
  a directory is a :class:`DataFileError` naming the file, never a hang;
* YAML is read with a subclass of ``yaml.SafeLoader`` that refuses duplicate
  keys, nesting deeper than :data:`MAX_DEPTH` and documents that expand (through
  aliases and merge keys) to more than :data:`MAX_VALUES` values, so an alias
  bomb is refused before anything walks, validates or serialises it;
* the cache (parsed YAML and the validated catalog, as JSON) is an optimisation,
  never a source of truth: a cache file is used only if it is a regular file
  owned by this user, not writable by others, within the size limit, carries
  the HMAC-SHA256 of its source's key and its payload under the folder's own key
  (bound to the folder and the user, so a copied folder or a moved file does not
  verify), and passes the same bounds; anything else is a miss. Files are written
  atomically (``mkstemp`` in the same folder, then ``os.replace``), never through
  a planted link, and the folder is created with mode 0700. A folder owned by
  someone else, or writable by others, is not used at all (:func:`take_notes`
  says so once per process). What is loaded from the cache is validated again
  by the caller, exactly as the source would be, and a failure there makes the
  caller read the files again (``refresh``). See docs/development.md, "The cache".

Bundled files are found inside the installed package (``gpusizer/data``) and,
for an editable install or a source checkout, in the top-level ``data/``
folder beside the package.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from gpusizer.errors import DataFileError

if TYPE_CHECKING:
    from pydantic import ValidationError

#: The largest data or cache file read, in bytes.
MAX_FILE_BYTES = 16 * 2**20
#: How deeply mappings and lists may nest in a data file.
MAX_DEPTH = 64
#: How many values (mappings, lists and scalars) a document may hold once its
#: aliases are expanded; the bundled catalog holds about 8,000.
MAX_VALUES = 500_000
#: Bumped when the YAML reader or the cache layout changes, so older cache files miss.
CACHE_FORMAT = b"gpusizer-cache 2"
#: Characters of a bad value an error message quotes.
QUOTE_CHARS = 80

_NOTES: list[str] = []
#: cache files being written, for :func:`discard_temporary_files`
_TEMPORARY: set[str] = set()


def quote(value: object, limit: int = QUOTE_CHARS) -> str:
    """``repr(value)``, cut to about ``limit`` characters: error messages quote
    at most that much of a bad value."""
    text = repr(value[: 4 * limit] if isinstance(value, str) else value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def cut(text: str, limit: int = 2 * QUOTE_CHARS) -> str:
    """``text`` cut to about ``limit`` characters (an exception's message in an error line)."""
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def take_notes() -> list[str]:
    """Notes about the cache (a folder that was not used, and why), once each; clears them."""
    notes = list(_NOTES)
    _NOTES.clear()
    return notes


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


# --------------------------------------------------------------------------
# bounded reading


def read_data_file(path: Path) -> bytes:
    """The bytes of a data file: a regular file of at most :data:`MAX_FILE_BYTES`.

    The file is opened without blocking (a FIFO with no writer does not hang)
    and checked with ``fstat`` before anything is read.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise DataFileError(f"{path}: file not found", hint="check the path of the data file") from None
    except IsADirectoryError:
        raise DataFileError(f"{path}: is a directory, not a data file") from None
    except (OSError, ValueError) as exc:
        raise DataFileError(f"{path}: cannot be read: {_reason(exc)}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise DataFileError(f"{path}: is a directory, not a data file")
        if not stat.S_ISREG(info.st_mode):
            raise DataFileError(f"{path}: is not a regular file (a pipe, device or socket)",
                                hint="give the path of a YAML or JSON file")
        if info.st_size > MAX_FILE_BYTES:
            raise _too_big(path)
        data = _read_fd(fd, MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise DataFileError(f"{path}: cannot be read: {_reason(exc)}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:
        raise _too_big(path)
    return data


def _too_big(path: Path) -> DataFileError:
    return DataFileError(f"{path}: larger than {MAX_FILE_BYTES // 2**20} MiB, the limit for a data file")


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or type(exc).__name__


def _read_fd(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = os.read(fd, min(1 << 20, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _decode(data: bytes, path: Path) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataFileError(f"{path}: not UTF-8 text (byte {exc.start + 1})") from None


def check_bounds(doc: Any, origin: str) -> None:
    """Refuse a document nested deeper than :data:`MAX_DEPTH`, holding more than
    :data:`MAX_VALUES` values once shared parts (YAML aliases) are counted each
    time they appear, or referring to itself. Linear in the distinct objects."""
    done: dict[int, tuple[int, int]] = {}  # id -> (values, depth)
    active: set[int] = set()
    stack: list[tuple[Any, bool]] = [(doc, False)] if isinstance(doc, (dict, list)) else []
    while stack:  # (only mappings and lists go on the stack: a scalar is one value, at depth 0)
        obj, finished = stack.pop()
        key = id(obj)
        children = obj.values() if isinstance(obj, dict) else obj
        if finished:
            active.discard(key)
            values, depth = 1 + (len(obj) if isinstance(obj, dict) else 0), 1
            for child in children:
                if isinstance(child, (dict, list)):
                    sub = done.get(id(child), (1, 0))
                    values += sub[0]
                    depth = max(depth, sub[1] + 1)
                else:
                    values += 1
            if depth > MAX_DEPTH:
                raise DataFileError(f"{origin}: nested more than {MAX_DEPTH} levels deep")
            if values > MAX_VALUES:
                raise DataFileError(f"{origin}: holds more than {MAX_VALUES:,} values once its aliases are expanded",
                                    hint="a data file this large is not a catalog, rules or model file")
            done[key] = (values, depth)
        elif key in active:
            raise DataFileError(f"{origin}: an alias refers to the value that contains it")
        elif key not in done:
            active.add(key)
            stack.append((obj, True))
            stack.extend((child, False) for child in children if isinstance(child, (dict, list)))


# --------------------------------------------------------------------------
# YAML


@functools.cache
def _loader() -> Any:
    """A ``yaml.SafeLoader`` that refuses duplicate keys and deep nesting while it
    composes, and runaway merge keys while it constructs."""
    import yaml  # deferred: keeps `import gpusizer` light

    class BoundedSafeLoader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            self.depth += 1
            try:
                if self.depth > MAX_DEPTH:
                    mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                    raise yaml.composer.ComposerError(None, None, f"nested more than {MAX_DEPTH} levels deep", mark)
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def flatten_mapping(self, node: Any) -> None:
            super().flatten_mapping(node)
            if len(node.value) > MAX_VALUES // 10:
                raise yaml.constructor.ConstructorError(
                    None, None, "merge keys (<<) expand to too many keys", node.start_mark)

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, yaml.MappingNode):
                seen: set[Any] = set()
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                        continue
                    key = self.construct_object(key_node, deep=True)
                    try:
                        duplicate = key in seen
                        seen.add(key)
                    except TypeError:
                        continue
                    if duplicate:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"duplicate key {quote(key)}", key_node.start_mark)
            return super().construct_mapping(node, deep=deep)

    return BoundedSafeLoader


@functools.cache
def _load_yaml_text(text: str, origin: str) -> Any:
    import yaml

    try:
        doc = yaml.load(text, Loader=_loader())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise DataFileError(f"{origin}: malformed YAML{where}: {problem}") from None
    except RecursionError:
        raise DataFileError(f"{origin}: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise DataFileError(f"{origin}: malformed YAML: {cut(str(exc))}") from None
    check_bounds(doc, origin)
    return doc


def load_yaml(path: Path, cache_dir: Path | None = None, *, refresh: bool = False) -> Any:
    """Read and parse one YAML file, with file-level errors as DataFileError.

    The YAML parser is pure Python and takes a few milliseconds per catalog
    entry, so with ``cache_dir`` the parsed document is kept as JSON under the
    SHA-256 of the file's bytes. A changed file gets a new key; a document that
    does not survive a JSON round trip unchanged is never cached. A cached
    document passes the same bounds as a parsed one, and the caller validates it
    as it would the file; where that fails, it reads again with ``refresh``,
    which parses the file and rewrites the cache file.
    """
    data = read_data_file(path)
    text = _decode(data, path)
    folder = usable_cache_dir(cache_dir)
    key = content_key(CACHE_FORMAT, data)
    cached = folder / f"yaml-{key}.json" if folder is not None else None
    if cached is not None and not refresh:
        hit = read_cache(cached, key)
        if hit is not None:
            try:
                check_bounds(hit, str(cached))
                return hit
            except DataFileError:
                pass  # not what this version writes: parse the file instead
    doc = _load_yaml_text(text, str(path))
    if cached is not None:
        write_cache(cached, key, doc)
    return doc


# --------------------------------------------------------------------------
# JSON


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"the number {cut(text, 40)} is out of range")
    return value


def load_json(path: Path) -> Any:
    """Read and parse one JSON file within the bounds above (no NaN or Infinity)."""
    text = _decode(read_data_file(path), path)
    try:
        doc = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise DataFileError(f"{path}: nested too deeply") from None
    except ValueError as exc:
        raise DataFileError(f"{path}: not valid JSON: {cut(str(exc))}") from None
    check_bounds(doc, str(path))
    return doc


# --------------------------------------------------------------------------
# the cache


def content_key(*parts: bytes) -> str:
    """SHA-256 over length-prefixed parts, for cache file names."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    return digest.hexdigest()


def read_bytes_or_none(path: Path) -> bytes | None:
    """A data file's bytes within the bounds of :func:`read_data_file`, or None."""
    try:
        return read_data_file(path)
    except DataFileError:
        return None


def strict_input(value: Any) -> Any:
    """YAML and JSON lists as tuples, so strict pydantic validation takes them for tuple fields."""
    if isinstance(value, list):
        return tuple(strict_input(v) for v in value)
    if isinstance(value, dict):
        return {k: strict_input(v) for k, v in value.items()}
    return value


_T = TypeVar("_T")


def read_retrying_uncached(read: Callable[..., _T], paths: tuple[str, ...], cache_dir: Path | None) -> _T:
    """``read(paths, cache_dir)``, and once more bypassing the cache if it fails: a cached
    parse may be what failed (``read`` takes ``refresh=True`` for that)."""
    try:
        return read(paths, cache_dir)
    except DataFileError:
        if cache_dir is None:
            raise
        return read(paths, cache_dir, refresh=True)


def usable_cache_dir(folder: Path | None) -> Path | None:
    """``folder``, created with mode 0700 if missing, or None when it must not be
    used: not a folder, not owned by this user, or writable by others (a note
    says so, once per process). None stays None."""
    if folder is None:
        return None
    return folder if _trusted_folder(str(folder)) else None


@functools.cache
def _trusted_folder(folder: str) -> bool:
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        info = os.stat(folder)
    except OSError:
        return False  # e.g. a read-only home: run without a cache
    why = None
    if not stat.S_ISDIR(info.st_mode):
        why = "is not a folder"
    elif hasattr(os, "geteuid") and info.st_uid != os.geteuid():
        why = "is owned by another user"
    elif info.st_mode & 0o022:
        why = "is writable by other users"
    if why is not None:
        _NOTES.append(f"cache folder {folder} {why}, so it is not used (set GPUSIZER_CACHE_DIR to a private "
                      "folder, or GPUSIZER_NO_CACHE=1)")
        return False
    return True


def _cache_bytes(path: Path) -> bytes | None:
    """A cache file's bytes if it is safe to read: a regular file (no link
    followed), owned by this user, not writable by others, within the size limit."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags | getattr(os, "O_BINARY", 0))
    except (OSError, ValueError):
        return None
    try:
        info = os.fstat(fd)
        if (not stat.S_ISREG(info.st_mode) or info.st_size > MAX_FILE_BYTES or info.st_mode & 0o022
                or (hasattr(os, "geteuid") and info.st_uid != os.geteuid())):
            return None
        data = _read_fd(fd, MAX_FILE_BYTES + 1)
        return data if len(data) <= MAX_FILE_BYTES else None
    except OSError:
        return None
    finally:
        os.close(fd)


def _folder_secret(folder: Path) -> bytes | None:
    """The MAC key of a cache folder: a random key kept in the folder (``key``, mode
    0600, made once), bound to the folder itself (device, inode) and this user. A
    copy of the folder, or an entry moved from another folder, does not verify."""
    try:
        info = os.stat(folder)
    except OSError:
        return None
    secret = _key_file(str(folder))
    if secret is None:
        return None
    uid = os.geteuid() if hasattr(os, "geteuid") else 0
    return hashlib.sha256(secret + f"|{info.st_dev}|{info.st_ino}|{uid}".encode()).digest()


@functools.cache
def _key_file(folder: str) -> bytes | None:
    path = Path(folder) / "key"
    secret = _cache_bytes(path)
    if secret is not None and len(secret) == 32:
        return secret
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=".key.", suffix=".tmp", dir=folder)
        _TEMPORARY.add(tmp)
        with os.fdopen(fd, "wb") as handle:
            handle.write(os.urandom(32))
        if secret is None and not path.is_symlink() and not path.exists():
            try:
                os.link(tmp, path)  # first one wins; the key is whole once it is visible
            except FileExistsError:
                pass
        else:
            os.replace(tmp, path)  # a bad key file: replace it
    except OSError:
        return None
    finally:
        if tmp is not None:
            _TEMPORARY.discard(tmp)
            try:
                os.unlink(tmp)
            except OSError:
                pass
    secret = _cache_bytes(path)
    return secret if secret is not None and len(secret) == 32 else None


def _seal(folder: Path, key: str, payload: bytes) -> bytes | None:
    """The header line that authenticates ``payload`` as the cache entry for ``key``."""
    import hmac

    secret = _folder_secret(folder)
    if secret is None:
        return None
    tag = hmac.new(secret, key.encode() + b"\n" + payload, hashlib.sha256).hexdigest()
    return b" ".join((CACHE_FORMAT, key.encode(), tag.encode()))


def read_cache(path: Path, key: str) -> Any:
    """A cached JSON document written by :func:`write_cache` for ``key``, or None
    when it is missing, unreadable, unsafe (see :func:`_cache_bytes`), for another
    key, or its payload does not carry this folder's HMAC-SHA256."""
    import hmac

    data = _cache_bytes(path)
    if data is None:
        return None
    header, _, payload = data.partition(b"\n")
    expected = _seal(path.parent, key, payload)
    if expected is None or not hmac.compare_digest(header, expected):
        return None
    try:
        return json.loads(payload.decode("utf-8"), parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return None


def write_cache(target: Path, key: str, doc: object) -> None:
    """Write ``doc`` as JSON with its key and HMAC, atomically; never fail."""
    tmp: str | None = None
    try:
        encoded = json.dumps(doc, allow_nan=False)
        if json.loads(encoded) != doc:
            return
        payload = encoded.encode("utf-8")
        header = _seal(target.parent, key, payload)
        if header is None or len(payload) > MAX_FILE_BYTES - 200:
            return
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        _TEMPORARY.add(tmp)
        with os.fdopen(fd, "wb") as handle:
            handle.write(header + b"\n" + payload)
        os.replace(tmp, target)
        _TEMPORARY.discard(tmp)
        tmp = None
    except (OSError, TypeError, ValueError, RecursionError):
        pass  # a cache is an optimisation; never fail because of it
    finally:
        if tmp is not None:
            discard_temporary_files()


def discard_temporary_files() -> None:
    """Remove cache files this process has not finished writing (an interrupt
    calls this before it exits)."""
    for name in list(_TEMPORARY):
        try:
            os.unlink(name)
        except OSError:
            pass
        _TEMPORARY.discard(name)


# --------------------------------------------------------------------------
# validation errors

#: pydantic's words for a wrong type, in the words of a data file.
_TYPE_WORDS = {"a valid tuple": "a list", "a valid dictionary": "a mapping"}


def describe_validation_error(exc: ValidationError, origin: str, entry_id: object = None) -> str:
    """One line: ``file: entry 'id': field: message``, for the first problem, and
    the fields of any others: ``(and 2 more: tdp_w, ecc)``.

    ``entry_id`` is the entry's id as written (any YAML value), or None for a
    document without entries. Messages from our own model validators already
    start with the field name. A wrong-typed value is quoted, cut to about 80
    characters.
    """
    lines: list[str] = []
    fields: list[str] = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "__root__")
        msg = str(err.get("msg", "invalid"))
        if err.get("type") == "extra_forbidden":
            msg = "unknown field"
        elif err.get("type") == "finite_number":  # (NaN or an infinity, under allow_inf_nan=False)
            msg = f"must be a finite number, not {err.get('input')}"
        elif msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        elif (str(err.get("type", "")).endswith(("_type", "_parsing")) or err.get("type") == "literal_error") \
                and "input" in err:
            for word, plain in _TYPE_WORDS.items():
                msg = msg.replace(word, plain)
            msg = f"{msg}, not {quote(err['input'])}"
        if not loc and ": " in msg:
            loc, msg = msg.split(": ", 1)
        entry = f"entry {quote(str(entry_id))}: " if entry_id is not None else ""
        lines.append(f"{origin}: {entry}{loc or '(entry)'}: {msg}")
        fields.append(loc or "(entry)")
    if len(lines) <= 1:
        return "".join(lines)
    others = list(dict.fromkeys(fields[1:]))
    shown = ", ".join(others[:6]) + (", ..." if len(others) > 6 else "")
    return f"{lines[0]} (and {len(lines) - 1} more: {shown})"
