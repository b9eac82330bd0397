"""The ``ikkai`` command line (the group and its commands are in ``cli.app``).

The console script enters here so that an install without the control-plane extra (the light client a
service installs: ``pip install ikkai``) gets one line saying what to install, not a traceback about click.
"""

from __future__ import annotations

import sys

# Our own top-level packages: a missing one of these is a broken install, not a missing extra.
_OWN_PACKAGES = frozenset({"cli", "connectors", "deploy", "demo", "ikkai", "outbox_sink", "spark_jobs", "transforms"})


def missing_extra_message(module: str) -> str:
    """The one line for a command line started without a library its commands need."""
    return (
        f"ikkai: the command line needs the control-plane extra, and {module!r} is not installed: "
        "pip install 'ikkai[control]' (or 'ikkai[all]'); the light client (emitter, receipts, codec) needs no command"
    )


def main() -> None:
    try:
        from cli.app import main as run
    except ModuleNotFoundError as exc:
        top = (exc.name or "").split(".")[0]
        if not top or top in _OWN_PACKAGES:
            raise
        sys.stderr.write(missing_extra_message(top) + "\n")
        sys.exit(1)
    run()


__all__ = ["main", "missing_extra_message"]
