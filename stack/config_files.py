"""Writing the embedded stack's configuration files into ``<home>/config/``.

The text of each file is stack.stack_config's (pure); this module decides which files a stack of
N brokers, plaintext or secured, gets and writes them. Every file starts with a header that says
it is overwritten on the next ``up``. A secured stack's broker and worker files hold its passwords,
so every file here is written 0600 from its first byte, in a folder only its user may enter (0700).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from stack.stack_config import (
    CONNECT,
    HOST,
    Ports,
    broker_components,
    broker_properties,
    connect_properties,
    log4j2_properties,
    render_properties,
)
from stack.stack_security import (
    StackSecrets,
    broker_security,
    connect_security,
    private_dir,
    with_extra_listeners,
    write_private,
)
from stack.state import LISTENERS_KEY, StackHome

HEADER = "written by ikkai (stack/config_files.py); edits are overwritten on the next `ikkai stack up`"


def write_configs(
    home: StackHome,
    ports: Ports,
    secrets: StackSecrets | None,
    *,
    plugin_path: list[Path] | None,
    scan_plugins: bool = False,
    connect_ports: Mapping[str, int] | None = None,
    log_only: Iterable[str] = (),
) -> None:
    """Every component's files; the brokers' only when ``plugin_path`` is None (a broker restart builds no plugin).
    ``scan_plugins``: plugins from elsewhere may lack ServiceLoader manifests, so the worker scans them too.
    ``connect_ports``: each Connect worker's REST port by name (default: ``connect`` alone, on ``ports.connect``).
    ``log_only``: components that get their log4j2 file only (the Spark master and workers)."""
    private_dir(home.config_dir)  # the secured stack's files hold its passwords
    private_dir(home.logs_dir)  # a log line may quote a record or a connector's config
    brokers = broker_components(len(ports.nodes))
    files = {
        **{
            home.server_properties(broker).name: broker_config(home, ports, broker, node_id, secrets)
            for node_id, broker in enumerate(brokers, start=1)
        },
        **{f"log4j2-{broker}.properties": log4j2_properties(home.log_file(broker)) for broker in brokers},
    }
    if plugin_path is not None:
        workers = connect_ports or {CONNECT: ports.connect}
        for worker, port in workers.items():
            files |= connect_configs(home, ports, secrets, plugin_path, scan_plugins=scan_plugins,
                                     worker=worker, port=port, group_size=len(workers))  # fmt: skip
    files |= {f"log4j2-{name}.properties": log4j2_properties(home.log_file(name)) for name in log_only}
    for name, properties in files.items():
        write_private(home.config_dir / name, render_properties(properties, HEADER))


def broker_config(
    home: StackHome, ports: Ports, broker: str, node_id: int, secrets: StackSecrets | None
) -> dict[str, str]:
    """One broker's server.properties: plaintext, or SASL_SSL (plus the mTLS and OAuth listeners of one broker)."""
    properties = broker_properties(ports, home.node_data_dir(broker), node_id)
    if secrets is not None:
        for key in ("listeners", "advertised.listeners"):
            properties[key] = properties[key].replace("PLAINTEXT://", "SASL_SSL://")
        properties |= broker_security(secrets)
        listeners = home.saved_state().get(LISTENERS_KEY)
        if isinstance(listeners, dict) and len(ports.nodes) == 1:
            properties = with_extra_listeners(properties, secrets, listeners, HOST)
    return properties


def connect_configs(
    home: StackHome, ports: Ports, secrets: StackSecrets | None, plugin_path: list[Path], *, scan_plugins: bool,
    worker: str = CONNECT, port: int | None = None, group_size: int = 1,
) -> dict[str, dict[str, str]]:  # fmt: skip
    """A Connect worker's properties and its log4j2 file: ``connect`` on ``ports.connect``, or another worker of
    the same group (``connect-<i>``) on its own REST ``port``; ``group_size``: the group's workers."""
    port = ports.connect if port is None else port
    properties = connect_properties(ports, plugin_path, group_size=group_size)
    properties |= {"listeners": f"http://{HOST}:{port}", "rest.advertised.port": str(port)}
    if scan_plugins:
        properties["plugin.discovery"] = "hybrid_warn"
    if secrets is not None:
        properties |= connect_security(secrets, port, HOST)
    suffix = "" if worker == CONNECT else worker[len(CONNECT) :]
    return {
        f"connect-distributed{suffix}.properties": properties,
        f"log4j2-{worker}.properties": log4j2_properties(home.log_file(worker)),
    }
