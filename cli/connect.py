"""``ikkai connect``: any connector of an environment's Connect cluster, bundle or not (kcctl's day-2 verbs).

    ikkai connect list                           connectors with type, state and tasks
    ikkai connect describe NAME                  config (secrets masked), status, tasks, topics
    ikkai connect offsets get NAME               committed offsets (KIP-875), the shape `alter` takes
    ikkai connect offsets reset NAME --yes       stop, delete every offset, bring it back to its state
    ikkai connect offsets alter NAME --file F    stop, write the offsets in F, bring it back to its state
    ikkai connect loggers [NAME]                 log levels of the worker that answers
    ikkai connect loggers NAME --level DEBUG     set a level (--scope cluster: on every worker)

The cluster is the environment's (``--env``, from the clusters file) or ``--connect-url``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from cli.completion import complete_connector
from cli.output import emit, output_option, progress_printer
from deploy import connect_ops, connect_output
from deploy.bundle_ops import connect_client
from deploy.connect_rest import ConnectClient

F = TypeVar("F", bound=Callable[..., Any])


def cluster_options(function: F) -> F:
    options = [
        click.option("--env", "-e", default="dev", show_default=True, help="Environment whose cluster to use."),
        output_option,
        click.option(
            "--connect-url", help="Kafka Connect REST URL (default: the environment's, from the clusters file)."
        ),
        click.option(
            "--clusters", type=click.Path(dir_okay=False, path_type=Path), help="Clusters file [env IKKAI_CLUSTERS]."
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def _client(env: str, connect_url: str | None, clusters: Path | None) -> ConnectClient:
    return connect_client(env, connect_url, clusters)


connector_argument = click.argument("name", shell_complete=complete_connector)


@click.group()
def connect() -> None:
    """Any connector of a Connect cluster: list, describe, offsets, logger levels."""


@connect.command("list")
@cluster_options
def list_(env: str, output: str, connect_url: str | None, clusters: Path | None) -> None:
    """The cluster's connectors with type, state and tasks."""
    emit(connect_ops.list_data(_client(env, connect_url, clusters)), output, connect_output.list_text)


@connect.command()
@connector_argument
@cluster_options
def describe(name: str, env: str, output: str, connect_url: str | None, clusters: Path | None) -> None:
    """Config (secret values masked), state, tasks with their traces, and the topics it used."""
    emit(connect_ops.describe_data(_client(env, connect_url, clusters), name), output, connect_output.describe_text)


@connect.group()
def offsets() -> None:
    """A connector's offsets (KIP-875): get, reset, alter. Changing them stops the connector meanwhile."""


@offsets.command("get")
@connector_argument
@cluster_options
def offsets_get(name: str, env: str, output: str, connect_url: str | None, clusters: Path | None) -> None:
    """The committed offsets; `-o json` prints what `offsets alter --file` takes."""
    emit(connect_ops.offsets_data(_client(env, connect_url, clusters), name), output, connect_output.offsets_text)


def _confirm(yes: bool, what: str) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        raise click.UsageError(f"{what}: pass --yes to confirm (no terminal to ask on)")
    click.confirm(what + "?", abort=True, err=True)


@offsets.command("reset")
@connector_argument
@cluster_options
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def offsets_reset(name: str, env: str, output: str, connect_url: str | None, clusters: Path | None, yes: bool) -> None:
    """Delete every offset: a source reads from its beginning, a sink's consumer group is reset.

    The connector is stopped first (Connect requires it) and then put back in the state it was in.
    """
    client = _client(env, connect_url, clusters)
    connect_ops.require_connector(client, name)
    _confirm(yes, f"reset every offset of {name} on {client.url}")
    data = connect_ops.change_offsets(client, name, None, progress=progress_printer(output) or (lambda _: None))
    emit(data, output, connect_output.offsets_changed_text)


@offsets.command("alter")
@connector_argument
@cluster_options
@click.option(
    "--file", "file_", type=click.Path(dir_okay=False, path_type=Path), required=True,
    help='JSON: {"offsets": [{"partition": {...}, "offset": {...}}]}, as `offsets get -o json` prints it.',
)  # fmt: skip
def offsets_alter(
    name: str, env: str, output: str, connect_url: str | None, clusters: Path | None, file_: Path
) -> None:
    """Write the offsets of a file. The connector is stopped first and then put back in its state."""
    body = connect_ops.read_offsets_file(file_)
    client = _client(env, connect_url, clusters)
    data = connect_ops.change_offsets(client, name, body, progress=progress_printer(output) or (lambda _: None))
    emit(data, output, connect_output.offsets_changed_text)


@connect.command()
@click.argument("logger", required=False)
@cluster_options
@click.option("--level", type=click.Choice(connect_ops.LEVELS, case_sensitive=False), help="Set this level.")
@click.option(
    "--scope", type=click.Choice(connect_ops.SCOPES), default="worker", show_default=True,
    help="worker: the worker that answers; cluster: every worker of the cluster.",
)  # fmt: skip
def loggers(
    logger: str | None,
    env: str,
    output: str,
    connect_url: str | None,
    clusters: Path | None,
    level: str | None,
    scope: str,
) -> None:
    """Log levels: all loggers with a level, one LOGGER's, or set LOGGER's with --level."""
    client = _client(env, connect_url, clusters)
    if level is not None:
        if logger is None:
            raise click.UsageError(
                "--level needs a LOGGER, e.g. ikkai connect loggers org.apache.kafka.connect --level DEBUG"
            )
        emit(connect_ops.set_logger(client, logger, level, scope), output, connect_output.logger_set_text)
        return
    data = connect_ops.loggers_data(client)
    if logger is not None:
        one = client.logger(logger)
        data["loggers"] = [{"logger": logger, "level": one.get("level"), "last_modified": one.get("last_modified")}]
    emit(data, output, connect_output.loggers_text)
