"""Getting ikkai running: the embedded stack and its runtimes, the Connect REST client, the CLI."""

from deploy.artifacts import JarSet, ensure_jars, resolved_jars
from deploy.connect_rest import ConnectClient, ConnectRestError
from deploy.errors import ArtifactError, NoFreePortError, PortInUseError, StackError
from deploy.local_stack import LocalStack, StackStatus
from deploy.runtime import ExternalStack, Stack, select_stack
from ikkai.settings import Endpoints, external_endpoints, ikkai_home, jars_dir

__all__ = [
    "ArtifactError",
    "ConnectClient",
    "ConnectRestError",
    "Endpoints",
    "ExternalStack",
    "JarSet",
    "LocalStack",
    "NoFreePortError",
    "PortInUseError",
    "Stack",
    "StackError",
    "StackStatus",
    "ensure_jars",
    "external_endpoints",
    "ikkai_home",
    "jars_dir",
    "resolved_jars",
    "select_stack",
]
