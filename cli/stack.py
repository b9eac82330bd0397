"""``ikkai setup``, ``ikkai stack …`` and ``ikkai smoke``: getting the stack's parts and running it."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from cli.output import emit, output_option, say
from deploy.smoke import run_smoke
from ikkai.errors import IkkaiError
from ikkai.settings import Endpoints, jars_dir
from spark_jobs.class_archive import ensure_class_archive
from stack.artifacts import ensure_jars
from stack.local_plugins import ensure_local_plugins
from stack.local_stack import LocalStack
from stack.prerequisites import check_java, check_maven
from stack.runtime import RUNTIMES, Stack, select_stack
from stack.shape import AS_RECORDED, StackOptions
from stack.status import StackStatus

EXIT_NOT_RUNNING = 3


def endpoints_text(data: dict[str, Any], *more: tuple[str, str]) -> str:
    keys = ("runtime", "bootstrap_servers", "connect_url", "connect_urls", "spark_master_url", "spark_ui_urls",
            "schema_registry_url", "kafka_config", "connect_credentials", "home")  # fmt: skip
    rows = [(k, ",".join(data[k]) if isinstance(data[k], list) else str(data[k])) for k in keys if k in data]
    rows += list(more)
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def status_text(data: dict[str, Any]) -> str:
    lines = [endpoints_text(data, ("state", data["state"])), ""]
    lines.append(f"{'COMPONENT':<15} {'HEALTH':<9} {'PIDS':<16} LOG")
    for c in data["components"]:
        health = "healthy" if c["healthy"] else "down" if not c["pids"] and data["runtime"] == "local" else "unhealthy"
        pids = ",".join(str(p) for p in c["pids"]) or "-"
        lines.append(f"{c['name']:<15} {health:<9} {pids:<16} {c['log']}")
    return "\n".join(lines)


@click.command()
def setup() -> None:
    """Check Java and Maven, resolve the stack's jars, build ikkai's own Connect plugins and the Spark driver's
    class archive (each a no-op when current)."""
    java = check_java()
    check_maven()
    jars = ensure_jars(jars_dir())
    plugins = ensure_local_plugins(jars_dir())
    try:
        archive: Path | str | None = ensure_class_archive(jars_dir())
    except IkkaiError as exc:  # an optimisation only: jobs start without it, slower
        say(f"warning: {exc}")
        archive = "(none: see the warning above)"
    click.echo(f"java   {java.version} ({java.executable})")
    click.echo(f"jars   {jars.root}")
    click.echo(f"spark  class archive {archive or '(none: no pyspark here, or no java the way spark-submit finds it)'}")
    for plugin in plugins:
        click.echo(f"plugin {plugin}")  # an external worker needs these on its plugin.path too


@click.group()
@click.option(
    "--home", type=click.Path(file_okay=False, path_type=Path), envvar="IKKAI_HOME",
    help="Folder holding the embedded stack's state. [env IKKAI_HOME; default ~/.ikkai]",
)  # fmt: skip
@click.option("--runtime", type=click.Choice(RUNTIMES), default="local", show_default=True)
@click.pass_context
def stack(ctx: click.Context, home: Path | None, runtime: str) -> None:
    """Start, inspect and stop the Kafka broker + Kafka Connect worker (and a Spark cluster, if asked).

    With IKKAI_BOOTSTRAP_SERVERS and IKKAI_CONNECT_URL set, the existing cluster they name is
    used and nothing is started or stopped.
    """
    ctx.obj = {"home": home, "runtime": runtime}


def _stack(ctx: click.Context, options: StackOptions = AS_RECORDED) -> Stack:
    return select_stack(ctx.obj["runtime"], home=ctx.obj["home"], options=options)


def _endpoint_data(endpoints: Endpoints, stack_: Stack) -> dict[str, Any]:
    data: dict[str, Any] = endpoints.as_dict()
    spark_master_url = getattr(stack_, "spark_master_url", lambda: None)()  # the embedded stack's Spark cluster
    if spark_master_url:
        data["spark_master_url"] = spark_master_url
        data["spark_ui_urls"] = getattr(stack_, "spark_ui_urls", list)()  # the master's web UI, then each worker's
    connect_urls: list[str] = getattr(stack_, "connect_urls", list)()
    if len(connect_urls) > 1:
        data["connect_urls"] = connect_urls
    home = getattr(stack_, "home", None)
    if home is not None:
        data["home"] = str(home)
    return data


@stack.command()
@click.option("--broker-port", type=int, help="Kafka listener port (default: last run's, else a free one).")
@click.option("--connect-port", type=int, help="Connect REST port (default: last run's, else a free one).")
@click.option(
    "--brokers", type=click.IntRange(min=1),
    help="KRaft nodes (broker+controller each); 3 gives replication factor 3 and min.insync.replicas 2. "
         "[default: the home's count, 1 for a new home]",
)  # fmt: skip
@click.option(
    "--secure/--plaintext", default=None,
    help="SASL_SSL (SCRAM-SHA-512) for Kafka and HTTPS with basic auth for Connect, certificates made at the first "
         "start; `ikkai stack env` prints what clients need. [default: the home's choice, plaintext for a new home]",
)  # fmt: skip
@click.option(
    "--registry/--no-registry", default=None,
    help="Also run a local schema registry (Apicurio, in memory, Confluent-compatible API; built with Maven at the "
         "first start); `ikkai stack env` exports IKKAI_SCHEMA_REGISTRY_URL, which switches ikkai's writers to the "
         "Confluent wire format. [default: the home's choice, none for a new home]",
)  # fmt: skip
@click.option("--registry-port", type=int, help="Schema registry port (default: last run's, else a free one).")
@click.option(
    "--spark-workers", type=click.IntRange(min=0),
    help="Also run a Spark standalone master and this many workers (1 core each; their executors in JVMs of their "
         "own), for `ikkai jobs submit --master <spark_master_url> --execute`; 0 for none. "
         "[default: the home's count, 0 for a new home]",
)  # fmt: skip
@click.option(
    "--connect-workers", type=click.IntRange(min=1),
    help="Kafka Connect distributed workers in the stack's one group. [default: the home's count, 1 for a new home]",
)  # fmt: skip
@output_option
@click.pass_context
def up(ctx: click.Context, /, output: str, **knobs: Any) -> None:
    """Start the stack and wait until it answers; prints the endpoints."""
    started = time.monotonic()
    stack_ = _stack(ctx, StackOptions(**knobs))  # the options above are StackOptions' fields, typed there
    endpoints = stack_.up()
    say(f"stack up in {time.monotonic() - started:.1f}s")
    emit(_endpoint_data(endpoints, stack_), output, endpoints_text)


@stack.command()
@click.option("--purge", is_flag=True, help="Also delete the stack's data and logs (never the jars).")
@click.pass_context
def down(ctx: click.Context, purge: bool) -> None:
    """Stop every process of the stack (TERM, then KILL after a grace period)."""
    stack_ = _stack(ctx)
    stopped = stack_.down(purge=purge)
    if isinstance(stack_, LocalStack):  # docker and external stacks said what they removed, or that none is theirs
        say(f"stopped {len(stopped)} process(es)" + (", data purged" if purge else ""))


@stack.command()
@output_option
@click.pass_context
def status(ctx: click.Context, output: str) -> None:
    """Endpoints, pids and health. Exit code 3 when the stack is not running."""
    current: StackStatus = _stack(ctx).status()
    emit(current.as_dict(), output, status_text)
    if not current.running:
        sys.exit(EXIT_NOT_RUNNING)


@stack.command()
@click.pass_context
def env(ctx: click.Context) -> None:
    """Print shell exports that point clients (and ikkai itself) at the running stack."""
    stack_ = _stack(ctx)
    endpoints = stack_.endpoints()
    if endpoints is None:
        raise IkkaiError("the stack has never been started here", fix="run `ikkai stack up`")
    click.echo(f"export IKKAI_BOOTSTRAP_SERVERS={endpoints.bootstrap_servers}")
    click.echo(f"export IKKAI_CONNECT_URL={endpoints.connect_url}")
    if endpoints.kafka_config:  # file names only: the secrets stay in the files
        click.echo(f"export IKKAI_KAFKA_CONFIG={endpoints.kafka_config}")
    if endpoints.connect_credentials:
        click.echo(f"export IKKAI_CONNECT_CREDENTIALS={endpoints.connect_credentials}")
    listeners: dict[str, str] = getattr(stack_, "secure_listeners", dict)()  # a secured stack's other listeners
    if "mtls" in listeners:
        mtls = Path(endpoints.kafka_config).with_name("client-mtls.properties")
        click.echo(f"# mutual TLS: IKKAI_BOOTSTRAP_SERVERS={listeners['mtls']} IKKAI_KAFKA_CONFIG={mtls}")
    if "oauth" in listeners:
        click.echo(f"# OAUTHBEARER: IKKAI_BOOTSTRAP_SERVERS={listeners['oauth']} (docs/security.md: a token endpoint)")
    if endpoints.schema_registry_url:  # the wire format of every ikkai writer: Confluent's, against this registry
        click.echo(f"export IKKAI_SCHEMA_REGISTRY_URL={endpoints.schema_registry_url}")


@click.command()
@click.option("--keep", is_flag=True, help="Leave the stack running afterwards.")
@output_option
def smoke(keep: bool, output: str) -> None:
    """Start the stack if needed and prove transactions and Kafka Connect work end to end."""
    stack_ = select_stack()
    was_running = stack_.status().running
    started = time.monotonic()
    endpoints = stack_.up()
    say(f"stack ready in {time.monotonic() - started:.1f}s; running smoke checks")
    try:
        report = run_smoke(endpoints)
    finally:
        if not keep and not was_running:
            stack_.down()
    data = {"passed": report.passed, "checks": report.checks, **endpoints.as_dict()}

    def text(d: dict[str, Any]) -> str:
        rows = [f"{'CHECK':<22} {'RESULT':<7} {'SECONDS':>7}  DETAIL"]
        rows += [
            f"{c['check']:<22} {'ok' if c['ok'] else 'FAILED':<7} {c['seconds']:>7}  {c['detail']}" for c in d["checks"]
        ]
        rows.append("smoke: " + ("passed" if d["passed"] else "FAILED"))
        return "\n".join(rows)

    emit(data, output, text)
    if not report.passed:
        sys.exit(1)
