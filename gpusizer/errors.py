"""Error types, one per kind of failure, each carrying its documented exit code.

The CLI catches :class:`GpusizerError` at the top and prints ``Error: <message>``
(plus a hint) on stderr, then exits with ``exit_code``. The engine raises these
and never prints.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Exit codes documented in docs/exit-codes.md. Never renumber them."""

    OK = 0
    INTERNAL = 1
    USAGE = 2
    DATA = 3
    NOTHING_FITS = 4
    NO_DEVICE = 5
    MISSING_EXTRA = 6
    TRACE_FAILED = 7
    HUB = 8


class GpusizerError(Exception):
    """Base class: a message for people, an optional hint, and an exit code."""

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(self, message: str, hint: str | None = None, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        #: the input the error is about, in domain words ("precision", "batch");
        #: the CLI names the matching option
        self.field = field


class OutputError(GpusizerError):
    """An output file (a ``--report``) that cannot be written: a missing folder, no permission, a full disk."""

    exit_code = ExitCode.INTERNAL


class UsageError(GpusizerError):
    """A bad option or value, or an unknown GPU or model name."""

    exit_code = ExitCode.USAGE


class DataFileError(GpusizerError):
    """A bad data file: catalog, model zoo, rules or config."""

    exit_code = ExitCode.DATA


class NothingFitsError(GpusizerError):
    """The question was evaluated, but nothing fits or qualifies."""

    exit_code = ExitCode.NOTHING_FITS


class NoDeviceError(GpusizerError):
    """No NVIDIA driver, library or GPU is available (probe and --local)."""

    exit_code = ExitCode.NO_DEVICE


class MissingExtraError(GpusizerError):
    """An optional capability whose packages are not installed (``gpusizer[torch]``, ``gpusizer[hub]``)."""

    exit_code = ExitCode.MISSING_EXTRA


class TraceError(GpusizerError):
    """Exact mode could not build the model or run its step under fake tensors."""

    exit_code = ExitCode.TRACE_FAILED


class HubError(GpusizerError):
    """A model's config could not be had from the Hugging Face Hub: missing, gated, or offline."""

    exit_code = ExitCode.HUB
