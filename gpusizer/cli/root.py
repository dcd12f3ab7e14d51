"""The typer app, its root options, and the one error guard every command runs under."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer

from gpusizer import __version__
from gpusizer.errors import ExitCode, GpusizerError

_STATE = {"debug": False}


def guarded(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn GpusizerError (and anything unexpected) into one line and an exit code.

    Every command is wrapped in this, so CliRunner and the console script
    behave the same. Tracebacks only with ``--debug``.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except GpusizerError as exc:
            _print_error(describe(exc), exc.hint)
            raise typer.Exit(int(exc.exit_code)) from None
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except BrokenPipeError:
            # the reader went away (`gpusizer ... | head`): stop quietly
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
            except (OSError, ValueError):
                pass
            raise typer.Exit(0) from None
        except Exception as exc:
            if _STATE["debug"] or type(exc).__module__.startswith("typer"):
                raise
            _print_error(f"internal error: {type(exc).__name__}: {exc}", "rerun with --debug for the traceback")
            raise typer.Exit(int(ExitCode.INTERNAL)) from None

    return wrapper


#: Engine fields whose option is not ``--`` + the field's name with dashes.
FIELD_OPTIONS: dict[str, str] = {
    "budget_usd": "--budget",
    "max_power_w": "--max-power",
    "gpus_per_node": "--gpus",
    "segments": "--segment",
    "require": "--require",
    "price_per_gpu_hour": "--price-per-hour",
    "context_bytes": "--overhead",
    "persistent_grads": "--grad-accumulation",
}


def option_for(field: str) -> str:
    """The command-line option of an engine field, e.g. ``grad_accumulation`` -> ``--grad-accumulation``."""
    return FIELD_OPTIONS.get(field, "--" + field.replace("_", "-"))


def describe(exc: GpusizerError) -> str:
    """An engine error in command-line words: the option it is about, then the message."""
    if exc.field is None:
        return exc.message
    return f"{option_for(exc.field)}: {exc.message}"


def _print_error(message: str, hint: str | None) -> None:
    lines = message.splitlines() or [message]
    for line in lines:
        sys.stderr.write(f"Error: {line}\n")
    if hint:
        sys.stderr.write(f"Hint: {hint}\n")


app = typer.Typer(
    help="Which GPU to use and how much of it, with numbers you can check.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
)
catalog_app = typer.Typer(help="Browse the GPU catalog.", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(catalog_app, name="catalog")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gpusizer {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for internal errors.")] = False,
    no_color: Annotated[bool, typer.Option("--no-color", help="Never use colour (NO_COLOR=1 does the same).")] = False,
) -> None:
    _STATE["debug"] = debug
    ctx.obj = {"debug": debug, "no_color": no_color}


def main() -> None:
    """Console-script entry point."""
    app(prog_name="gpusizer")
