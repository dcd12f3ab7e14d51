"""The command line: one module per command, the shared options in ``options``.

Importing this package is cheap: ``app`` (``gpusizer.cli.root``) is imported
when first asked for, or by :func:`main`. That lets the console script take over
Ctrl-C before it imports anything heavy, so an interrupt at any moment exits 130
at once, never with a traceback. The commands themselves load lazily: the root
group (``root.LazyGroup``) imports a command's module and builds its options only
when a command line names it. No formula lives here: commands parse options,
call the engine, and hand results to ``gpusizer.render``.
"""

from __future__ import annotations

import os
import signal

TYPE_CHECKING = False  # (typing is not imported at run time: Ctrl-C is taken over sooner)
if TYPE_CHECKING:
    from typing import Any

def _interrupted(signum: int, frame: Any) -> None:
    """Ctrl-C: exit 130 now (imports included), leaving no cache temporary file behind."""
    try:
        from gpusizer.datafiles import discard_temporary_files

        discard_temporary_files()
    finally:
        os._exit(130)


def __getattr__(name: str) -> Any:
    if name == "app":
        from gpusizer.cli.root import app

        return app
    raise AttributeError(f"module 'gpusizer.cli' has no attribute {name!r}")


def main() -> None:
    """Console-script entry point."""
    try:
        signal.signal(signal.SIGINT, _interrupted)
    except ValueError:
        pass  # not the main thread: keep Python's default
    import gc

    gc.disable()  # for start-up only: root.guarded turns it back on (root.resume_gc)
    # pydantic looks for plugins (importlib.metadata's scan of every installed package's entry
    # points: 2.6 ms with 42 packages installed, more with more) when it builds its first
    # validator, unless this says not to. Nothing a command prints depends on a pydantic plugin.
    # Set here, by the console script only, before any model is built: an application that
    # imports gpusizer keeps its own plugins, and the engine reads no environment.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    from gpusizer.cli.root import main as run

    run()


__all__ = ["app", "main"]
