"""The typer app, its root options, and the one error guard every command runs under.

The exit-code contract (docs/exit-codes.md) is kept here for every input:

* a GpusizerError is one ``Error:`` line (and a ``Hint:``, wrapped to the width of standard
  error, never cut) with its exit code;
* a bad option is the same two lines and exit 2, never click's usage block;
* Ctrl-C exits 130 without a traceback (``gpusizer.cli.main`` also makes it
  immediate for the console script, imports included);
* a reader that goes away (``gpusizer ... | head``) ends the command quietly
  with exit 0; an output that cannot be written (a full disk) is one line;
* anything unexpected is one line and exit 1, with the traceback under ``--debug``.

Messages never pass terminal control characters through, and a message (not a
hint) is cut at :data:`MAX_LINE` characters.
"""

from __future__ import annotations

import codecs
import errno
import functools
import os
import sys
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from typing import Annotated, Any, NoReturn

import typer
import typer.core
import typer.main
from typer.core import TyperGroup

from gpusizer import __version__
from gpusizer.cli.helpfmt import with_stacked_help
from gpusizer.cli.options import OUTPUT, PANELS, examples
from gpusizer.errors import ExitCode, GpusizerError

_STATE: dict[str, Any] = {"debug": False, "json": False, "args": (), "command": None, "gc_paused": False,
                          "console": False}
#: The longest error line printed; a longer one (a huge bad value) is cut.
MAX_LINE = 400
#: errno values that mean the output cannot be written (not a bug, not the input's fault)
_WRITE_ERRNOS = frozenset(getattr(errno, name) for name in ("ENOSPC", "EDQUOT", "EIO", "EFBIG") if hasattr(errno, name))


def guarded(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn GpusizerError (and anything unexpected) into one line and an exit code.

    Every command is wrapped in this, so CliRunner and the console script
    behave the same. Tracebacks only with ``--debug``. Standard output is
    flushed before the command returns, so a closed pipe or a full disk is met
    here and not while the interpreter shuts down.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        resume_gc()
        try:
            try:
                return func(*args, **kwargs)
            finally:
                _print_notes()
                sys.stdout.flush()
        except GpusizerError as exc:
            _fail(describe(exc), exc.hint, int(exc.exit_code))
        except (typer.Exit, typer.Abort):
            raise
        except KeyboardInterrupt:
            raise typer.Exit(130) from None
        except BrokenPipeError:
            # the reader went away (`gpusizer ... | head`): stop quietly
            _silence_stdout()
            raise typer.Exit(0) from None
        except OSError as exc:
            if exc.errno not in _WRITE_ERRNOS or _STATE["debug"]:
                return _internal(exc)
            _silence_stdout()
            _print_error(f"cannot write the output: {exc.strerror or exc}", None)  # (no JSON: stdout is gone)
            raise typer.Exit(int(ExitCode.INTERNAL)) from None
        except Exception as exc:
            return _internal(exc)

    return wrapper


def resume_gc() -> None:
    """Turn the cyclic garbage collector back on, if the console script paused it for start-up.

    Start-up (typer, the command's module and options, pydantic's imports) allocates many
    objects, none of them garbage, and the collector kept walking them: about 10 ms of a
    command's start. ``gpusizer.cli.main`` pauses it until the command itself runs; here
    what start-up made is moved out of its reach (``gc.freeze``) and it runs again for the
    command's work, however long that takes. A command's first steps are more of the same
    (the engine's imports and pydantic models, the catalog), so the youngest generation is
    collected every :data:`GC_YOUNG` new objects rather than Python's 700: at most a few
    megabytes of cyclic garbage wait for a collection."""
    if _STATE["gc_paused"]:
        import gc

        _STATE["gc_paused"] = False
        gc.freeze()
        gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])
        gc.enable()


#: How many new container objects trigger a collection of the youngest generation once the
#: command runs (Python's default is 700).
GC_YOUNG = 50_000


def _exit_now(code: int) -> NoReturn:
    """End the console script's process with ``code`` once its output is written, without
    tearing the interpreter down: what the command made (the engine's modules, pydantic's
    models and validators, the catalog) is released by the process ending, where Python's
    own shutdown would first collect and free it object by object (6 to 20 ms). The
    ``atexit`` functions still run, and standard output and error are flushed first (a
    failure there was already reported by :func:`_final_flush`)."""
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(code)


def _internal(exc: Exception) -> NoReturn:
    if _STATE["debug"] or type(exc).__module__.startswith("typer"):
        raise exc
    _fail(f"internal error: {type(exc).__name__}: {exc}", "rerun with --debug for the traceback",
          int(ExitCode.INTERNAL))


def _fail(message: str, hint: str | None, exit_code: int) -> NoReturn:
    """Report a failure (and, under --json, its JSON document) and exit with ``exit_code``."""
    _print_error(message, hint)
    _json_error(message, hint, exit_code)
    raise typer.Exit(exit_code)


#: Bounds on the arguments echoed back in a JSON error document.
_ECHO_ARGS, _ECHO_CHARS = 64, 200


def _command_name(group: Any, args: Sequence[str]) -> str | None:
    """The command the arguments name, as the success documents do ("fit-model",
    "catalog show"); None when they name none."""
    names, command = [], group
    for token in args:
        sub = getattr(command, "commands", {}).get(token)
        if sub is None:
            if token.startswith("-"):
                continue  # (the root options take no value)
            break
        names.append(token)
        command = sub
    return " ".join(names) or None


def _json_error(message: str, hint: str | None, exit_code: int) -> None:
    """Under --json, the failure as one JSON document on stdout (docs/json.md), unless the
    command already wrote its own document (``estimate`` when nothing fits)."""
    from gpusizer.render.common import JSON_WRITTEN, emit_json

    if not _STATE["json"] or JSON_WRITTEN["documents"]:
        return
    code = ExitCode(exit_code).name.lower()  # (failures exit 1-5; Ctrl-C writes no document)
    # (an argument that was not valid UTF-8 holds lone surrogates: shown as \udcff text)
    args = [a.encode("utf-8", "backslashreplace").decode("utf-8") for a in _STATE["args"][:_ECHO_ARGS]]
    args = [a if len(a) <= _ECHO_CHARS else f"{a[: _ECHO_CHARS - 3]}..." for a in args]
    document = {
        "schema_version": 1,
        "command": _STATE["command"],
        "input": {"arguments": args},
        "error": {"code": code, "exit_code": exit_code, "message": _clean_line(message),
                  "hint": _clean_line(hint, cut=False) if hint else None},
    }
    try:
        emit_json(document)
        sys.stdout.flush()
    except OSError:
        _silence_stdout()  # (the reader went away: the exit code still says what happened)


def _silence_stdout() -> None:
    """Point standard output at the null device, so the final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass  # not a real file (CliRunner): nothing is flushed at exit anyway


#: Engine fields whose option is not ``--`` + the field's name with dashes.
FIELD_OPTIONS: dict[str, str] = {
    "budget_usd": "--budget",
    "max_power_w": "--max-power",
    "gpus_per_node": "--gpus",
    "segments": "--segment",
    "require": "--require",
    "price_per_gpu_hour": "--price-per-hour",
    "context_bytes": "--overhead",
    "adapter": "--lora-targets",
    "weight_format": "--weights",
    "persistent_grads": "--grad-accumulation",
    "micro_batches": "--grad-accumulation",
}


def option_for(field: str) -> str:
    """The command-line option of an engine field, e.g. ``grad_accumulation`` -> ``--grad-accumulation``."""
    return FIELD_OPTIONS.get(field, "--" + field.replace("_", "-"))


def describe(exc: GpusizerError) -> str:
    """An engine error in command-line words: the option it is about, then the message."""
    if exc.field is None:
        return exc.message
    return f"{option_for(exc.field)}: {exc.message}"


def _clean_line(line: str, cut: bool = True) -> str:
    """One line: control characters (a newline in a file name included) shown escaped, cut at
    MAX_LINE (a message may echo a huge bad value) unless ``cut`` is False (a hint, our own words)."""
    from gpusizer.render.common import escape_control

    line = escape_control(line.strip("\n").replace("\n", "\\n"))
    return line if not cut or len(line) <= MAX_LINE else f"{line[: MAX_LINE - 3]}..."


def _stderr_lines(lead: str, text: str) -> str:
    """``lead`` + ``text`` wrapped to the width of standard error (a terminal's own, COLUMNS, or
    200 when it is piped), the lines after the first indented under the text: never cut."""
    import shutil

    from gpusizer.render.common import chosen_width, wrap_note

    width = chosen_width(sys.stderr) or shutil.get_terminal_size((80, 24)).columns
    return wrap_note(text, width, lead=lead) + "\n"


def _print_error(message: str, hint: str | None) -> None:
    """``Error: <message>`` on one line (a script can match it whole; a path or a bad value in it
    is not broken), and ``Hint: <hint>`` wrapped to the width of standard error, whatever they hold."""
    try:
        sys.stderr.write(f"Error: {_clean_line(message)}\n")
        if hint:
            sys.stderr.write(_stderr_lines("Hint: ", _clean_line(hint, cut=False)))
        sys.stderr.flush()
    except OSError:
        pass  # stderr is gone too: the exit code is all that is left


def _print_notes() -> None:
    """Notes the data layer left (a cache folder it would not use), on stderr."""
    from gpusizer.datafiles import take_notes

    for note in take_notes():
        try:
            sys.stderr.write(_stderr_lines("Note: ", _clean_line(note)))
        except OSError:
            pass


# --------------------------------------------------------------------------
# the click group: errors in two lines, and the end of the output handled


def _click_exception() -> type[Exception]:
    """click's ClickException, wherever this typer keeps click (vendored or not)."""
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


class GuardedGroup(TyperGroup):
    """The root group. Runs click in non-standalone mode and keeps the exit-code
    contract itself: a usage error is ``Error: <message>`` and ``Hint: see
    '<command> --help'`` (exit 2), Ctrl-C is exit 130, and output that cannot be
    written is handled as in :func:`guarded`."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,  # type: ignore[override]
             complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        given = list(sys.argv[1:] if args is None else args)
        options = given[: given.index("--")] if "--" in given else given
        _STATE.update(json="--json" in options, args=tuple(given), command=_command_name(self, options))
        from gpusizer.render.common import JSON_WRITTEN

        JSON_WRITTEN["documents"] = 0
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            code = rv if isinstance(rv, int) and not isinstance(rv, bool) else 0
        except _click_exception() as exc:
            code = _usage_error(exc)
        except typer.Abort:
            _print_error("aborted", None)
            code = int(ExitCode.INTERNAL)
            _json_error("aborted", None, code)
        except KeyboardInterrupt:
            code = 130
        except SystemExit as exc:
            # rich (typer's help) ends a closed pipe itself: stdout pointed at /dev/null, exit 1;
            # a reader that stopped early is no error for us (as in guarded)
            code = 0 if exc.code == 1 and _stdout_is_devnull() else exc.code if isinstance(exc.code, int) else 1
        code = _final_flush(code)
        if _STATE["console"]:
            _exit_now(code)
        sys.exit(code)


def _stdout_is_devnull() -> bool:
    try:
        out, null = os.fstat(sys.stdout.fileno()), os.stat(os.devnull)
    except (OSError, ValueError, AttributeError):
        return False
    return (out.st_dev, out.st_ino) == (null.st_dev, null.st_ino)


def _usage_error(exc: Any) -> int:
    if type(exc).__name__ == "NoArgsIsHelpError":
        exc.show()  # `gpusizer` alone, or a group without a command: the help
        return int(exc.exit_code)
    ctx = getattr(exc, "ctx", None)
    hint = f"see '{ctx.command_path} --help'" if ctx is not None else None
    _print_error(str(exc.format_message()), hint)
    _json_error(str(exc.format_message()), hint, int(exc.exit_code))
    return int(exc.exit_code)


def _final_flush(code: int) -> int:
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
    except OSError as exc:
        _silence_stdout()
        _print_error(f"cannot write the output: {exc.strerror or exc}", None)
        return int(ExitCode.INTERNAL) if code == 0 else code
    return code


# --------------------------------------------------------------------------
# the commands, loaded lazily: only the one a command line names is imported and built

#: Each command's name and the module attribute (a Typer) that holds it, in the order
#: ``gpusizer --help`` lists them: the order a user needs them. recommend answers the
#: first question (which GPU?), fit-model the next (does my model fit, and where?),
#: estimate then says how fast and what it costs, and serve sizes a deployment. compare,
#: catalog and systems browse the hardware behind those answers, models the zoo the
#: examples use, and probe reads this machine's GPUs (needs a driver, so last).
COMMANDS: dict[str, tuple[str, str]] = {
    "recommend": ("gpusizer.cli.recommend", "recommend_app"),
    "fit-model": ("gpusizer.cli.fit", "fit_app"),
    "estimate": ("gpusizer.cli.estimate", "estimate_app"),
    "serve": ("gpusizer.cli.serve", "serve_app"),
    "compare": ("gpusizer.cli.catalog", "compare_app"),
    "catalog": ("gpusizer.cli.catalog", "catalog_app"),
    "systems": ("gpusizer.cli.systems", "systems_app"),
    "models": ("gpusizer.cli.probe", "models_app"),
    "probe": ("gpusizer.cli.probe", "probe_app"),
}
#: Built commands, kept for the life of the process (CliRunner invokes the app many times).
_BUILT: dict[str, Any] = {}


def command_app(**info: Any) -> typer.Typer:
    """The Typer that holds one command (or one command group) of ``gpusizer``."""
    return typer.Typer(rich_markup_mode="rich", add_completion=False, pretty_exceptions_enable=False, **info)


def load_command(name: str) -> Any:
    """The click command called ``name``, its module imported and its options built on first use."""
    built = _BUILT.get(name)
    if built is None:
        import importlib

        module, attr = COMMANDS[name]
        built = typer.main.get_command(getattr(importlib.import_module(module), attr))
        built.name = name
        _BUILT[name] = humanise(built)
    return built


def _listing(name: str) -> Any:
    """A stand-in for command ``name`` that holds only what a listing shows: its help."""
    if name in _BUILT:
        return _BUILT[name]
    import importlib
    import inspect

    from typer.models import TyperInfo

    module, attr = COMMANDS[name]
    holder = getattr(importlib.import_module(module), attr)
    text: str | None
    if holder.registered_groups or len(holder.registered_commands) != 1:
        text = typer.main.solve_typer_info_help(TyperInfo(holder))
    else:
        info = holder.registered_commands[0]
        text = info.help or inspect.getdoc(info.callback)
    return typer.core.TyperCommand(name=name, help=text)


def _no_type(ctx: Any) -> None:
    return None


def humanise(command: Any) -> Any:
    """Help as people read it, applied to a command and its sub-commands once: no Python
    type (a flag such as ``--json`` shows no value where typer writes ``<bool>``; an
    argument shows its metavar alone, not ``<str>``), and the options in the order of
    their panels (``options.PANELS``: Model, Run, Hardware, Constraints, Output)."""
    help_option = command.get_help_option(typer.Context(command))
    if help_option is not None:
        help_option.rich_help_panel = PANELS[-1]
    for param in [*command.params, *([help_option] if help_option is not None else [])]:
        if getattr(param, "_runtime_param", False) is None:
            param._runtime_param = _CoerceWhenGiven()
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
        if param.param_type_name == "argument":
            param.display_type_rich = _no_type
    order = {panel: i for i, panel in enumerate(PANELS)}
    command.params.sort(key=lambda p: (p.param_type_name != "argument",
                                       order.get(getattr(p, "rich_help_panel", None) or "", len(order))))
    command.format_help = with_stacked_help(command.format_help)
    commands = getattr(command, "commands", {})
    for sub in () if isinstance(commands, LazyCommands) else commands.values():
        humanise(sub)
    return command


class _CoerceWhenGiven:
    """An option's coercion, built only when the option has a value to coerce. typer (0.26 and
    later) builds a pydantic TypeAdapter for every option of the command it runs before it
    looks at the value, though an option left out (None) needs none: a command line that gives
    three of recommend's forty options would build forty. This stands in for typer's runtime
    parameter until the first value that is not None, then puts typer's own in its place."""

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None and not (param.multiple or param.nargs == -1):
            return None  # (what typer's own returns for it)
        from typer._coercion import build_runtime_param

        param._runtime_param = build_runtime_param(param.type_descriptor)
        return param._runtime_param.coerce(value, param=param, ctx=ctx)


class LazyCommands(MutableMapping[str, Any]):
    """The root group's commands: every name known at once, each command built when
    first looked up, so a command line builds only the command it runs (docs/gen_commands.py
    and the tests, which walk every command, build them all; ``gpusizer --help`` and the
    completion of command names build none)."""

    def __init__(self, extra: Mapping[str, Any] | None = None) -> None:
        self._extra: dict[str, Any] = dict(extra or {})

    def __getitem__(self, name: str) -> Any:
        if name in self._extra:
            return self._extra[name]
        if name not in COMMANDS:
            raise KeyError(name)
        return load_command(name)

    def __setitem__(self, name: str, command: Any) -> None:
        self._extra[name] = command

    def __delitem__(self, name: str) -> None:
        del self._extra[name]

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*COMMANDS, *self._extra]))

    def __len__(self) -> int:
        return len(dict.fromkeys([*COMMANDS, *self._extra]))


class LazyGroup(GuardedGroup):
    """The root group, with :class:`LazyCommands` in place of click's dict of commands."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = LazyCommands(self.commands)
        humanise(self)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """``gpusizer --help`` lists every command from its Typer's help, without building
        any command's options (typer's costliest step)."""
        built, self.commands = self.commands, {name: _listing(name) for name in COMMANDS}
        try:
            super().format_help(ctx, formatter)
        finally:
            self.commands = built

    def shell_complete(self, ctx: Any, incomplete: str) -> list[Any]:
        """Command names complete from the table above, without building the commands."""
        try:
            from typer._click.shell_completion import CompletionItem  # typer >= 0.26 vendors click
        except ImportError:  # pragma: no cover
            from click.shell_completion import CompletionItem  # type: ignore[assignment]

        names = [CompletionItem(n) for n in self.commands if n.startswith(incomplete)]
        return names + super(TyperGroup, self).shell_complete(ctx, incomplete)


app = typer.Typer(
    cls=LazyGroup,
    help="Which GPU to use and how much of it, with numbers you can check.",
    epilog=examples(
        "gpusizer recommend --workload llm-inference --model llama-2-7b",
        "gpusizer fit-model --model llama-2-7b --inference --gpu rtx-4090",
        "gpusizer estimate --model resnet50 --gpu a100",
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode="rich",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gpusizer {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, rich_help_panel=OUTPUT,
                           help="Print the version and exit.")
    ] = False,
    debug: Annotated[bool, typer.Option("--debug", rich_help_panel=OUTPUT,
                                        help="Show tracebacks for internal errors.")] = False,
    no_color: Annotated[bool, typer.Option("--no-color", rich_help_panel=OUTPUT,
                                           help="Never use colour (NO_COLOR=1 does the same).")] = False,
) -> None:
    _STATE["debug"] = debug
    ctx.obj = {"debug": debug, "no_color": no_color}


# --------------------------------------------------------------------------
# output streams that cannot encode what is printed

#: ASCII stand-ins for the non-ASCII characters the tables and messages use.
_ASCII = {
    "×": "x", "—": "-", "–": "-", "…": "...", "≈": "~", "≤": "<=", "≥": ">=", "µ": "u", "·": ".", "→": "->",
    "±": "+/-", "’": "'", "‘": "'", "“": '"', "”": '"', "\u00a0": " ", "°": " deg", "²": "^2", "³": "^3",
}


def _ascii_fallback(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    text = exc.object[exc.start : exc.end]
    return "".join(_ASCII.get(c, "#" if "\u2580" <= c <= "\u259f" else "?") for c in text), exc.end


def use_ascii_where_needed() -> None:
    """Standard output and error that cannot encode the tables' characters (e.g.
    PYTHONIOENCODING=ascii, or a C locale) write ASCII stand-ins instead of failing."""
    codecs.register_error("gpusizer-ascii", _ascii_fallback)
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None) or "ascii"
        try:
            "─×…█".encode(encoding)
        except (UnicodeEncodeError, LookupError):
            try:
                stream.reconfigure(errors="gpusizer-ascii")  # type: ignore[union-attr]
            except (AttributeError, ValueError, OSError):
                pass


def main() -> None:
    """Run the app as the console script."""
    import gc

    _STATE["gc_paused"] = not gc.isenabled()  # (gpusizer.cli.main paused it; see resume_gc)
    _STATE["console"] = True  # (GuardedGroup.main ends the process itself: _exit_now)
    use_ascii_where_needed()
    if os.environ.get("_GPUSIZER_COMPLETE"):
        # shell completion (README, 'Shell completion'): typer's completion classes, which
        # add_completion=False leaves unregistered
        from typer._completion_classes import completion_init

        completion_init()
    app(prog_name="gpusizer")
