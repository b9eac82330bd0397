"""The ``ikkai demo`` command: options, the report on stdout, exit code 1 when an invariant failed.

``--html FILE`` writes the same report as one self-contained HTML page as well (demo/report_html.py):
the invariants, the phases on a timeline, the records and records per second of each stage and a
histogram of the latencies, drawn as inline SVG. It opens from the file with no network; the text
(or ``-o json``) report still goes to stdout.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from cli.output import emit, output_option, say
from demo.chaos import CLUSTER_KINDS, KILL_BROKER, KINDS, parse_kills
from demo.report import report_text
from demo.report_html import report_html
from demo.run import DemoOptions, run_demo

DEFAULTS = DemoOptions()


@click.command()
@click.option(
    "--size",
    type=click.IntRange(min=100),
    default=DEFAULTS.size,
    show_default=True,
    help="Payments in the generated day (the raw stream adds duplicates, updates, late and bad lines). The model "
    "asks for a side effect for about 1 payment in 80 (with seed 7 the default asks for 12): a soak that wants "
    "outbox requests in flight at its kills needs more, e.g. --size 32000 (413).",
)
@click.option("--seed", type=int, default=DEFAULTS.seed, show_default=True, help="Seed of the generated day.")
@click.option("--no-chaos", is_flag=True, help="Do not kill the infer job or restart the Connect worker midway.")
@click.option("--keep", is_flag=True, help="Leave the stack, the receiver and the jobs running afterwards.")
@click.option(
    "--partitions",
    type=click.IntRange(min=1),
    default=DEFAULTS.partitions,
    show_default=True,
    help="Partitions of every pipeline topic.",
)
@click.option(
    "--home",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="IKKAI_HOME",
    help="The demo runs its own stack in <home>/demo. [env IKKAI_HOME; default ~/.ikkai]",
)
@click.option(
    "--brokers",
    type=click.IntRange(min=1),
    default=DEFAULTS.brokers,
    show_default=True,
    help="KRaft nodes of the demo's stack (3: replication factor 3, min.insync.replicas 2).",
)
@click.option(
    "--spark-workers",
    type=click.IntRange(min=0),
    default=DEFAULTS.spark_workers,
    show_default=True,
    help="A Spark standalone master and this many workers in the demo's stack; the live enrich and infer jobs run "
    "on it through spark-submit, their checkpoints in the folder the cluster shares (0: Spark local[2]).",
)
@click.option(
    "--connect-workers",
    type=click.IntRange(min=1),
    default=DEFAULTS.connect_workers,
    show_default=True,
    help="Kafka Connect workers in the demo's stack, one distributed group.",
)
@click.option(
    "--kills",
    metavar="KIND=N,...",
    default="",
    help="A soak instead of the two default chaos actions: how many times to kill each of "
    + ", ".join(KINDS)
    + " (e.g. infer=30,enrich=10,broker=5,worker=5), spread over the run; broker kills need --brokers 3, "
    "executor (one executor JVM of a live job) and spark-worker (a Spark worker with its executors, then started "
    "again) kills need --spark-workers 2.",
)
@click.option(
    "--html",
    "html_file",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Also write the report as one self-contained HTML page (timeline, stage rates, latency histogram) to "
    "this file; its directory must exist. The report on stdout stays as it is.",
)
@output_option
def demo(
    size: int,
    seed: int,
    no_chaos: bool,
    keep: bool,
    partitions: int,
    home: Path | None,
    brokers: int,
    spark_workers: int,
    connect_workers: int,
    kills: str,
    html_file: Path | None,
    output: str,
) -> None:
    """Run the whole platform end to end on a fresh embedded stack, break it midway, report and replay.

    Ingest (Connect) → enrich → infer (Spark, exactly once) → outbox sink (Connect) → receiver.
    Progress goes to stderr; stdout carries only the report. Exit code 1 when any invariant failed.
    With --html FILE the report is also written as an HTML page with pictures, which opens with no network.
    """  # fmt: skip
    if html_file is not None and not html_file.resolve().parent.is_dir():
        raise click.BadParameter(
            f"{html_file}: directory {html_file.resolve().parent} does not exist (create it first)", param_hint="--html"
        )
    try:
        planned = parse_kills(kills)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--kills") from exc
    if planned.get(KILL_BROKER) and brokers < 3:
        raise click.BadParameter(
            "broker kills need --brokers 3 (with one broker, a killed broker stops everything)", param_hint="--kills"
        )
    on_cluster = sorted(name for name, kind in KINDS.items() if planned.get(kind) and kind in CLUSTER_KINDS)
    if on_cluster and spark_workers < 2:
        raise click.BadParameter(
            f"{' and '.join(on_cluster)} kills need --spark-workers 2 or more (the live jobs then run on a Spark "
            f"cluster whose executors and workers can die; this run has {spark_workers})", param_hint="--kills"
        )  # fmt: skip
    if planned and no_chaos:
        raise click.BadParameter("--kills asks for chaos, --no-chaos for none: pick one", param_hint="--kills")
    options = DemoOptions(
        size=size, seed=seed, chaos=not no_chaos, keep=keep, partitions=partitions, home=home, brokers=brokers,
        kills=tuple(planned.items()), spark_workers=spark_workers, connect_workers=connect_workers,
    )  # fmt: skip
    report = run_demo(options)
    emit(report, output, report_text)
    if html_file is not None:
        html_file.write_text(report_html(report), encoding="utf-8")
        say(f"ikkai demo: the report as a page: {html_file}")
    if not report["passed"]:
        say("ikkai demo: invariant(s) failed: " + ", ".join(report["failed"]))
        sys.exit(1)
