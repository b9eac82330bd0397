"""The ``ikkai`` command line.

stdout carries results only (tables, or JSON with ``-o json``); progress goes to stderr.
Every ``IkkaiError`` is turned into one line on stderr and exit code 1 here, in one place; with
``-o json`` into one JSON object on stderr instead (cli/output.py), with the same exit code.
Exit codes: 0 ok, 1 error, 2 usage error, 3 ``stack status`` found the stack not running,
130 interrupted.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback

import click

from cli.bundle import bundle as bundle_group
from cli.bundle import serve as serve_command
from cli.connect import connect as connect_group
from cli.demo import demo as demo_command
from cli.jobs import jobs
from cli.output import chosen_output, show_error
from cli.plugins import plugins as plugins_group
from cli.stack import setup, smoke, stack
from cli.transforms import transforms as transforms_group
from ikkai.errors import IkkaiError
from ikkai.redaction import RedactingFormatter


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ikkai")
def cli() -> None:
    """ikkai: exactly-once ML inference on Kafka, Kafka Connect and Spark."""


for command in (
    setup, stack, smoke, bundle_group, connect_group, serve_command, jobs, demo_command, transforms_group,
    plugins_group,
):  # fmt: skip
    cli.add_command(command)


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
            exc.show()
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
