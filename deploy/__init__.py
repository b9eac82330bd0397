"""The Connect control plane, ``ikkai serve`` on top of it, and the operator page's Kafka readers beside it.

At this level, the control plane: the Connect REST client (``connect_rest``) and the day-2 operations on one
connector (``connect_ops``), the clusters per environment (``clusters``), plan, apply and reconcile (``plan``,
``reconcile``, ``bundle_ops``, the record of applies in ``applies``), auto-restart's backoff (``auto_restart``),
``ikkai smoke`` (``smoke``) and the cluster exports (``strimzi``, ``spark_kubernetes``); ``kafka_windows`` holds the
bounded Kafka reads that the record of applies and the readers share. ``serve/`` is ``ikkai serve``: the HTTP API, the
reconcile loop and the operator page. ``eos_view/`` holds what the page reads from Kafka: the flow and the
exactly-once view. The control plane imports neither, and the readers never import ``serve``
(``[tool.importlinter]`` in pyproject.toml). The embedded stack it may talk to is ``stack``.

Three things are named apart here that could all be called health: a connector's *status* as Connect reports it
(``connector_status``: reached its target, failed, why), the server's *liveness* (``GET /healthz``,
``ControlPlane.health``: ok, or degraded while the reconcile loop's last pass failed), and the *exactly-once health*
of a cluster's queries that the page shows (``eos_view.health``: markers, open transactions, lag, dead letters,
reconciliation).
"""

from deploy.connect_rest import ConnectClient, ConnectRestError, ConnectUnreachable
from deploy.errors import ConnectorNotFound, ConnectorStateError

__all__ = [
    "ConnectClient",
    "ConnectRestError",
    "ConnectUnreachable",
    "ConnectorNotFound",
    "ConnectorStateError",
]
