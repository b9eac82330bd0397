"""The local schema registry: Apicurio Registry, in memory, on a loopback port, built from Maven Central.

Clients speak to it through its Confluent-compatible API (``<url>/apis/ccompat/v7``): the same
REST calls Confluent's Schema Registry answers, so confluent-kafka's ``SchemaRegistryClient``,
the Connect converters, kafka-ui and ksqlDB-style tools work against it unchanged.

Central carries Apicurio's application only as a plain jar, so ``ensure_registry_build`` runs
Quarkus's build over it once per content of ``stack/registry/pom.xml`` (about a minute; the
first run also downloads ~130 MB): the result lands in ``<jars_dir>/schema-registry/<fingerprint>/``
and a ``.complete`` marker makes every later call return at once. ``LocalSchemaRegistry`` then
starts, finds and stops the JVM like the stack's others (stack/processes.py: identified by
``-Dikkai.stack=<home>`` and ``-Dikkai.component=schema-registry``), so stopping the stack of the
same home stops it too. Its data lives in the JVM's memory only: a restart starts empty, and
writers register their schemas again (the catalog is the source of truth, the registry a mirror).

    <home>/schema-registry.json    the port (kept across down/up: a stable URL)
    <home>/logs/schema-registry.log
"""

from __future__ import annotations

import json
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import requests

from ikkai.errors import IkkaiError
from stack import maven_build, processes
from stack.errors import ArtifactError, PortInUseError, StackError
from stack.maven_build import COMPLETE, build_once
from stack.ports import ephemeral_range, free_port, port_is_free, reserved_ports
from stack.prerequisites import check_java
from stack.stack_config import HOST
from stack.stack_security import private_dir

REGISTRY = "schema-registry"
POM = Path(__file__).parent / "registry" / "pom.xml"
CONVERTER_POM = Path(__file__).parent / "registry" / "converter" / "pom.xml"
CONVERTER_PLUGIN = "apicurio-converter"
AVRO_CONVERTER = "io.apicurio.registry.utils.converter.AvroConverter"
NATIVE_API_PATH = "/apis/registry/v2"  # what Apicurio's own clients (the converter) are given
CCOMPAT_PATH = "/apis/ccompat/v7"
STATE_FILE = f"{REGISTRY}.json"
RUNNER_SUFFIX = "-runner.jar"

READY_TIMEOUT = 180.0
STOP_GRACE = 15.0


@dataclass(frozen=True)
class RegistryBuild:
    """One built registry: ``<name>-runner.jar`` (its manifest names ``lib/*.jar``) and ``lib/``."""

    root: Path

    @property
    def runner(self) -> Path:
        runners = sorted(self.root.glob(f"*{RUNNER_SUFFIX}"))
        if len(runners) != 1:
            raise StackError(REGISTRY, f"expected one *{RUNNER_SUFFIX} in {self.root}, found {len(runners)}",
                             fix=f"delete {self.root} and start the registry again to rebuild it")  # fmt: skip
        return runners[0]

    def main_class(self) -> str:
        with zipfile.ZipFile(self.runner) as jar:
            manifest = jar.read("META-INF/MANIFEST.MF").decode()
        for line in manifest.splitlines():
            if line.startswith("Main-Class:"):
                return line.split(":", 1)[1].strip()
        raise StackError(REGISTRY, f"{self.runner} names no Main-Class", fix=f"delete {self.root} to rebuild it")


def fingerprint(pom: Path = POM) -> str:
    """``maven_build.fingerprint`` of the one pom a registry build is made from."""
    return maven_build.fingerprint([(pom.name, pom)])


def built_registry(jars_dir: Path) -> RegistryBuild | None:
    """The registry built from the current pom, if complete; never starts Maven."""
    root = jars_dir / REGISTRY / fingerprint()
    return RegistryBuild(root) if (root / COMPLETE).exists() else None


def ensure_registry_build(jars_dir: Path, *, progress: TextIO = sys.stderr) -> RegistryBuild:
    """The registry built from the current pom, building it with Maven first if needed."""
    built = built_registry(jars_dir)
    if built is not None:
        return built
    root = _maven_once(POM, jars_dir / REGISTRY, ["package", "-DskipTests"], "ikkai.registry.dir", ".", progress,
                       what="the schema registry (first run downloads ~130 MB)")  # fmt: skip
    return RegistryBuild(root)


def ensure_registry_converter(jars_dir: Path, *, progress: TextIO = sys.stderr) -> Path:
    """A ``plugin.path`` entry holding one plugin, ``apicurio-converter/``: the registry-aware Avro converter.

    Resolved from ``stack/registry/converter/pom.xml`` once per content of that file (~6 MB).
    """
    parent = jars_dir / CONVERTER_PLUGIN
    root = parent / fingerprint(CONVERTER_POM)
    if (root / COMPLETE).exists():
        return root
    return _maven_once(CONVERTER_POM, parent, ["dependency:copy-dependencies"], "ikkai.converter.dir",
                       CONVERTER_PLUGIN, progress, what="the registry's Connect converter")  # fmt: skip


def _maven_once(
    pom: Path, parent: Path, goals: list[str], dir_property: str, subdir: str, progress: TextIO, *, what: str
) -> Path:
    """Run Maven on ``pom`` into ``<parent>/<fingerprint>/<subdir>``: staged, then renamed, then marked complete."""
    target = parent / fingerprint(pom)
    return build_once(
        target,
        lambda staging: ["-f", str(pom), *goals, f"-D{dir_property}={staging / subdir}"],
        cwd=pom.parent,
        failure=lambda problem, log: ArtifactError(pom, problem, log=log),
        progress=progress,
        announce=f"building {what} with Maven into {target}",
    )


def ccompat_url(port: int) -> str:
    """The Confluent-compatible API of a registry on ``port``: what ``schema.registry.url`` names."""
    return f"http://{HOST}:{port}{CCOMPAT_PATH}"


def native_url(ccompat: str) -> str:
    """Apicurio's own API beside a ccompat URL: what its clients, the Connect converter among them, are given."""
    if not ccompat.endswith(CCOMPAT_PATH):
        raise StackError(REGISTRY, f"{ccompat} does not end in {CCOMPAT_PATH}", fix="pass the registry's ccompat URL")
    return ccompat[: -len(CCOMPAT_PATH)] + NATIVE_API_PATH


def avro_converter_config(ccompat: str, *, prefix: str = "value.converter") -> dict[str, str]:
    """Connector settings for Apicurio's AvroConverter in Confluent mode against the registry at ``ccompat``.

    It then reads and writes what Confluent's serializers and ``RegistryCodec`` do: magic 0, the
    4-byte id the ccompat API hands out (Apicurio's contentId), the Avro body, no id headers.
    """
    return {
        prefix: AVRO_CONVERTER,
        f"{prefix}.apicurio.registry.url": native_url(ccompat),
        f"{prefix}.apicurio.registry.as-confluent": "true",
        f"{prefix}.apicurio.registry.use-id": "contentId",
        f"{prefix}.apicurio.registry.headers.enabled": "false",
    }


def registry_answers(url: str, timeout: float = 2.0) -> bool:
    """True when the registry at ``url`` (its ccompat base) serves ``GET /subjects``."""
    try:
        return requests.get(f"{url}/subjects", timeout=timeout).status_code == 200
    except requests.RequestException:
        return False


@dataclass(frozen=True)
class RegistryStatus:
    url: str | None
    pids: list[int]
    healthy: bool
    log: Path

    def as_dict(self) -> dict[str, object]:
        return {"name": REGISTRY, "url": self.url, "pids": self.pids, "healthy": self.healthy, "log": str(self.log)}


def recorded_url(home: Path) -> str | None:
    """The ccompat base URL the registry of ``home`` listens (or last listened) on; None if it never started there."""
    port = _saved_port(home.resolve())
    return ccompat_url(port) if port is not None else None


def _saved_port(home: Path) -> int | None:
    try:
        port = json.loads((home / STATE_FILE).read_text()).get("port")
    except (OSError, ValueError, AttributeError):
        return None
    return port if isinstance(port, int) else None


class LocalSchemaRegistry:
    """Start, inspect and stop the schema registry of the stack home ``home``."""

    def __init__(
        self,
        home: Path,
        jars_dir: Path,
        *,
        port: int | None = None,
        heap: str = "256m",
        progress: TextIO = sys.stderr,
    ) -> None:
        self.home = home.resolve()
        self.jars_dir = jars_dir
        self.requested_port = port
        self.heap = heap
        self.progress = progress

    @property
    def state_file(self) -> Path:
        return self.home / STATE_FILE

    @property
    def log_file(self) -> Path:
        return self.home / "logs" / f"{REGISTRY}.log"

    def url(self) -> str | None:
        """The ccompat base URL it listens (or last listened) on; None if it never started here."""
        return recorded_url(self.home)

    def status(self) -> RegistryStatus:
        pids = sorted(processes.stack_processes(self.home).get(REGISTRY, []))
        url = self.url()
        return RegistryStatus(url, pids, bool(pids) and url is not None and registry_answers(url), self.log_file)

    def up(self) -> str:
        """Bring the registry to running and return its ccompat URL; a no-op when it already answers."""
        current = self.status()
        if current.healthy and len(current.pids) == 1 and current.url:
            return current.url
        if current.pids:
            self.progress.write(f"{REGISTRY} in {self.home} is not answering; stopping it\n")
            self.down()
        port = self._choose_port()
        java = check_java()
        build = ensure_registry_build(self.jars_dir, progress=self.progress)
        private_dir(self.home)  # its log may quote a schema or a request
        self.state_file.write_text(json.dumps({"port": port}) + "\n")
        process = processes.start_java(
            java.executable,
            home=self.home,
            component=REGISTRY,
            main_class=build.main_class(),
            classpath=str(build.runner),
            args=[],
            jvm_options=[
                f"-Xmx{self.heap}",
                f"-Dquarkus.http.host={HOST}",
                f"-Dquarkus.http.port={port}",
                # Never registry.ccompat.use-canonical-hash=true: 2.4.2 then serves an Avro schema by id with
                # its fields sorted by name, a different binary layout (readers would decode garbage).
            ],
            output=self.log_file,
        )
        url = ccompat_url(port)
        deadline = time.monotonic() + READY_TIMEOUT
        while not registry_answers(url):
            if process.poll() is not None:
                raise self._startup_failure(f"exited with code {process.returncode} during start-up")
            if time.monotonic() > deadline:
                processes.stop(process.pid, self.home, REGISTRY, grace_seconds=5)
                raise self._startup_failure(f"not ready after {READY_TIMEOUT:.0f}s")
            time.sleep(0.25)
        return url

    def down(self, *, purge: bool = False) -> list[int]:
        """Stop it (its schemas go with it: storage is in memory); with ``purge`` forget its port and log."""
        pids = processes.stack_processes(self.home).get(REGISTRY, [])
        for pid in pids:
            processes.stop(pid, self.home, REGISTRY, grace_seconds=STOP_GRACE)
        if purge:
            self.state_file.unlink(missing_ok=True)
            self.log_file.unlink(missing_ok=True)
        return pids

    def _saved_port(self) -> int | None:
        return _saved_port(self.home)

    def _choose_port(self) -> int:
        """The requested port (it must be free), else the last one if free and safe, else a new free one."""
        if self.requested_port is not None:
            if not port_is_free(self.requested_port):
                raise PortInUseError(
                    HOST,
                    self.requested_port,
                    REGISTRY,
                    fix="free it or pick another, or omit the port to use a free one",
                )
            return self.requested_port
        saved = self._saved_port()
        ephemeral = ephemeral_range()
        if saved is not None and saved not in ephemeral and saved not in reserved_ports() and port_is_free(saved):
            return saved
        return free_port(ephemeral=ephemeral)

    def _startup_failure(self, problem: str) -> IkkaiError:
        text = self.log_file.read_text(errors="replace") if self.log_file.exists() else ""
        if "Address already in use" in text or "Port already bound" in text:
            port = self._saved_port() or 0
            return PortInUseError(HOST, port, REGISTRY, fix="another process took it; start the registry again")
        errors = [line for line in text.splitlines() if " ERROR " in line or "Exception" in line]
        detail = f"; last error: {errors[-1].strip()[:300]}" if errors else ""
        return StackError(REGISTRY, problem + detail, log=self.log_file)
