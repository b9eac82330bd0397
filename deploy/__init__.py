"""The control plane: the Connect REST client, clusters, plan/apply/reconcile, auto-restart, ``ikkai serve``
and the cluster exports (Strimzi, Spark on Kubernetes). The embedded stack it may talk to is ``stack``."""

from deploy.connect_rest import ConnectClient, ConnectRestError, ConnectUnreachable
from deploy.errors import ConnectorNotFound, ConnectorStateError

__all__ = [
    "ConnectClient",
    "ConnectRestError",
    "ConnectUnreachable",
    "ConnectorNotFound",
    "ConnectorStateError",
]
