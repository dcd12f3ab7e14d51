"""The command line: one module per command, the shared options in ``options``.

Importing this package registers every command on ``app``. No formula lives
here: commands parse options, call the engine, and hand results to
``gpusizer.render``.
"""

from __future__ import annotations

# each command module registers itself on `app` when imported
from gpusizer.cli import catalog as _catalog  # noqa: F401
from gpusizer.cli import estimate as _estimate  # noqa: F401
from gpusizer.cli import fit as _fit  # noqa: F401
from gpusizer.cli import probe as _probe  # noqa: F401
from gpusizer.cli import recommend as _recommend  # noqa: F401
from gpusizer.cli import serve as _serve  # noqa: F401
from gpusizer.cli.root import app, main

__all__ = ["app", "main"]
