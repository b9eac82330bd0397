"""The ``ikkai`` command line.

stdout carries results only (tables, or JSON with ``-o json``); progress goes to stderr.
Every ``IkkaiError`` is turned into one line on stderr and exit code 1 here, in one place; with
``-o json`` into one JSON object on stderr instead (cli/output.py), with the same exit code.
Exit codes: 0 ok, 1 error, 2 usage error, 3 ``stack status`` found the stack not running,
130 interrupted.

Each command's module is imported when that command runs, not before: ``ikkai jobs run`` (which every job
start goes through, then execs the job) would otherwise import the demo, the page's server, the stack and the
bundle tools first, about a second of a job's start for nothing (``benchmarks.cli_start``).
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import traceback

import click

from cli.output import chosen_output, show_error, show_usage_error
from ikkai.errors import IkkaiError
from ikkai.redaction import RedactingFormatter

# Each command: the module and the name it is defined under, in the order `ikkai --help` lists them.
COMMANDS = {
    "setup": ("cli.stack", "setup"),
    "stack": ("cli.stack", "stack"),
    "smoke": ("cli.stack", "smoke"),
    "bundle": ("cli.bundle", "bundle"),
    "connect": ("cli.connect", "connect"),
    "serve": ("cli.bundle", "serve"),
    "jobs": ("cli.jobs", "jobs"),
    "demo": ("cli.demo", "demo"),
    "transforms": ("cli.transforms", "transforms"),
    "plugins": ("cli.plugins", "plugins"),
}


class LazyGroup(click.Group):
    """A group whose commands are imported by name when asked for (click's documented lazy-loading pattern)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, name = COMMANDS[cmd_name]
        command = getattr(importlib.import_module(module), name)
        if not isinstance(command, click.Command):
            raise TypeError(f"{module}.{name} is not a click command")
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ikkai")
def cli() -> None:
    """ikkai: exactly-once ML inference on Kafka, Kafka Connect and Spark."""


def log_redacted() -> None:
    """Log lines go to stderr as logging's last resort prints them (warnings and worse, the message alone, then
    any traceback), with URL credentials redacted: ``ikkai serve``'s reconcile loop logs Connect's errors."""
    handler = logging.StreamHandler()
    handler.setLevel(logging.WARNING)
    handler.setFormatter(RedactingFormatter())
    logging.getLogger().addHandler(handler)


def main() -> None:
    log_redacted()
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("ikkai: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        if chosen_output() == "json":
            show_error(exc, "", fix="see --help")
        else:
            show_usage_error(exc)
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except IkkaiError as exc:
        show_error(exc, f"ikkai: error: {exc}")
        sys.exit(1)
    except KeyboardInterrupt as exc:
        show_error(exc, "ikkai: interrupted")
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - the last line of defence prints one line, not a trace
        if os.environ.get("IKKAI_DEBUG"):
            traceback.print_exc()
        show_error(
            exc,
            f"ikkai: internal error: {type(exc).__name__}: {exc} (set IKKAI_DEBUG=1 for the traceback)",
            fix="set IKKAI_DEBUG=1 for the traceback",
        )
        sys.exit(1)
