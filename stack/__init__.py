"""The embedded stack: KRaft brokers and a Kafka Connect worker on this machine (or from Docker), its ports,
processes, config files, security material, the local schema registry, and the Maven builds of its jars and
of ikkai's own Connect plugins. It never imports the control plane (``deploy``).

The kit (``stack/kit/``: ``ChaosStack``, which broker leads a partition or coordinates a transaction, waiting
until replicas are back in sync, and the topic reads and writes of the benchmarks and tests) is imported from its
modules by the demo, benchmarks and tests, and deliberately not re-exported here: importing ``stack`` never loads
it."""

from stack.artifacts import JarSet, ensure_jars, resolved_jars
from stack.errors import ArtifactError, NoFreePortError, PortInUseError, StackError
from stack.local_stack import LocalStack
from stack.runtime import ExternalStack, Stack, select_stack
from stack.shape import StackOptions
from stack.status import ComponentStatus, StackStatus, embedded_endpoints

__all__ = [
    "ArtifactError",
    "ComponentStatus",
    "ExternalStack",
    "JarSet",
    "LocalStack",
    "NoFreePortError",
    "PortInUseError",
    "Stack",
    "StackError",
    "StackOptions",
    "StackStatus",
    "embedded_endpoints",
    "ensure_jars",
    "resolved_jars",
    "select_stack",
]
