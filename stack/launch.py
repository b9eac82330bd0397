"""How the embedded stack's JVMs are launched, and what their logs say when one fails to start.

The lifecycle (stack.local_stack) decides when a component starts and waits for it to answer; this
module names what it runs: each component's main class, its JVM options (heap, GC, log4j2, and the
secured stack's trust and JAAS settings), the KRaft storage format that must precede a broker's
first start, the catalog registered into a freshly started schema registry, and the error a failed
start-up becomes (a port someone else took, else the last ERROR line of its log).
"""

from __future__ import annotations

import json
from pathlib import Path

from stack import processes
from stack.artifacts import JarSet
from stack.errors import PortInUseError, StackError
from stack.schema_registry import REGISTRY
from stack.spark_cluster import SPARK_MASTER, SPARK_WORKER, SPARK_WORKER_NODE, is_extra_connect
from stack.stack_config import BROKER, CONNECT, HOST, NODE
from stack.stack_security import (
    StackSecrets,
    broker_jvm_options,
    connect_jvm_options,
    private_dir,
    scram_credentials,
    write_private,
)
from stack.state import StackHome

BROKER_MAIN = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"
CONNECT_MAIN = "org.apache.kafka.connect.cli.ConnectDistributed"

READY_TIMEOUT = {BROKER: 90.0, CONNECT: 180.0, SPARK_MASTER: 180.0, SPARK_WORKER: 180.0}  # a loaded 2-core machine
STOP_GRACE = {CONNECT: 20.0, BROKER: 30.0, SPARK_MASTER: 10.0, SPARK_WORKER: 15.0}


def component_kind(component: str) -> str:
    """``broker`` for every broker, ``connect`` for every Connect worker, ``spark-worker`` for every Spark
    worker, else the component's own name."""
    if component == BROKER or NODE.fullmatch(component):
        return BROKER
    if is_extra_connect(component):
        return CONNECT
    return SPARK_WORKER if SPARK_WORKER_NODE.fullmatch(component) else component


def connect_config_file(home: StackHome, component: str) -> Path:
    """``connect-distributed.properties`` for the first worker, ``connect-distributed-<i>.properties`` for more."""
    suffix = "" if component == CONNECT else component[len(CONNECT) :]
    return home.config_dir / f"connect-distributed{suffix}.properties"


def main_and_config(home: StackHome, component: str) -> tuple[str, Path]:
    """The main class a broker's or Connect worker's JVM runs and the properties file it is given."""
    if component_kind(component) == CONNECT:
        return CONNECT_MAIN, connect_config_file(home, component)
    return BROKER_MAIN, home.server_properties(component)


def jvm_options(home: StackHome, component: str, secrets: StackSecrets | None, heap: str) -> list[str]:
    """The options of ``component``'s JVM: the secured stack's first, then heap, GC and logging."""
    kind = component_kind(component)
    security = [] if secrets is None or kind in (SPARK_MASTER, SPARK_WORKER) else connect_jvm_options(secrets) \
        if kind == CONNECT else broker_jvm_options(secrets)  # fmt: skip
    return [*security,
        "-Xms128m", f"-Xmx{heap}",
        "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:+ExitOnOutOfMemoryError",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={home.config_dir / f'log4j2-{component}.properties'}",
        f"-Dkafka.logs.dir={home.logs_dir}",
    ]  # fmt: skip


def format_storage(home: StackHome, broker: str, java: Path, jars: JarSet, secrets: StackSecrets | None) -> None:
    """Format ``broker``'s empty log.dirs with the home's cluster id (and the SCRAM users of a secured
    stack, from an argument file that exists only while the tool runs); a no-op once formatted."""
    data_dir = home.node_data_dir(broker)
    # The segments hold every record (card numbers, the SCRAM metadata): only this user may enter, whatever the
    # home's mode (a home `ikkai setup` made is 0755); an existing folder is narrowed too.
    private_dir(data_dir.parent)
    private_dir(data_dir)
    if (data_dir / "meta.properties").exists():
        return
    cluster_id = json.loads(home.state_file.read_text())["cluster_id"]
    args = ["format", "--cluster-id", cluster_id, "--config", str(home.server_properties(broker)), "--ignore-formatted"]
    arguments_file = None
    if secrets is not None:
        # The SCRAM user's password must not be on a command line (every local user reads those): the
        # tool reads arguments from a file named ``@<path>`` (argparse4j's fromFilePrefix), one a line.
        arguments_file = secrets.storage_arguments
        write_private(arguments_file, "".join(f"{arg}\n" for arg in scram_credentials(secrets)))
        args.append(f"@{arguments_file}")
    try:
        result = processes.run_java(
            java,
            classpath=jars.kafka_classpath(),
            main_class=STORAGE_TOOL,
            args=args,
            jvm_options=[f"-Dlog4j2.configurationFile={home.config_dir / f'log4j2-{broker}.properties'}"],
        )
    finally:
        if arguments_file is not None:
            arguments_file.unlink(missing_ok=True)
    if result.returncode != 0:
        raise StackError(
            "storage format" if broker == BROKER else f"{broker} storage format",
            (result.stderr or result.stdout).strip().splitlines()[-1]
            if (result.stderr or result.stdout).strip()
            else f"exit {result.returncode}",
            fix=f"run `ikkai stack down --purge` to start from empty storage in {data_dir}",
        )


def startup_failure(home: StackHome, component: str, problem: str) -> Exception:
    """The error of a component that exited or never answered: a taken port, else ``problem`` and
    the last error its log and JVM output show."""
    log = home.log_file(component)
    text = ""
    for path in (log, home.logs_dir / f"{component}.out"):
        if path.exists():
            text += path.read_text(errors="replace")
    if "Address already in use" in text:
        ports = home.saved_ports()
        port = ports.as_dict().get(component, 0) if ports else 0
        return PortInUseError(
            HOST, port, component,
            fix="another process took it during start-up; run `ikkai stack up` again to pick free ports",
        )  # fmt: skip
    errors = [line for line in text.splitlines() if " ERROR " in line or "Exception" in line]
    detail = f"; last error: {errors[-1].strip()[:300]}" if errors else ""
    return StackError(component, problem + detail, log=log)


def register_catalog(url: str) -> int:
    """Register every schema version of the catalog, in order, into the empty registry at ``url``; how many.

    The registry keeps its schemas in memory and numbers them as they come: registered in one fixed
    order right after each start, the catalog's schemas get the same ids every time, so records kept
    in the stack's topics across ``down``/``up`` still name the schema they were written with.
    """
    try:
        from ikkai.contract.registry import RegistryCodec  # the registry extra
    except ImportError as exc:
        raise StackError(REGISTRY, f"the schema registry client cannot load: {exc}",
                         fix="pip install 'ikkai[registry]'") from exc  # fmt: skip
    from ikkai.contract.codec import default_codec

    codec = RegistryCodec(default_codec().catalog, {"url": url})
    try:
        return sum(len(ids) for ids in codec.register_catalog().values())
    finally:
        codec.close()
