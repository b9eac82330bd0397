"""What the page keeps per environment: one reader of each kind (flow, health), the connectors table and the
bundles view's rows (``deploy.serve.page.bundle_rows``, read in the background at most every its
``FRESH_SECONDS``).

Each is made on first use, for the environment's Kafka cluster or Connect cluster (``deploy.clusters``), and kept
for the life of the server, so that however many look, each environment is sampled at most once per the reader's
own interval (``deploy.eos_view``) and Connect is asked once per ``FRESH_SECONDS``
(``deploy.serve.page.connector_table``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

from connectors.render import RenderedBundle
from deploy import bundle_ops
from deploy.clusters import kafka_cluster
from deploy.eos_view.health import SAMPLE_SECONDS, HealthReader
from deploy.reconcile import LiveConnector, Reconciler
from deploy.serve.page import bundle_rows
from deploy.serve.page.connector_table import ConnectorTable, fingerprint
from deploy.serve.page.refreshed import Refreshed
from deploy.serve.page.views import connector_rows, environments
from deploy.serve.service import ControlPlane
from ikkai.contract.kafka import KafkaContext
from ikkai.errors import IkkaiError

R = TypeVar("R")


class EnvironmentReaders:
    """The readers and connectors tables of ``plane``'s environments, one of each kind per environment."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self._made: dict[tuple[str, str], Any] = {}  # (kind, environment) → its reader
        self._lock = threading.Lock()

    def kafka(self, env: str) -> KafkaContext:
        """The environment's Kafka cluster."""
        return kafka_cluster(bundle_ops.cluster_target(env, self.plane.connect_url, self.plane.clusters))

    def of(self, kind: str, env: str, make: Callable[[KafkaContext], R]) -> R:
        """The environment's reader of ``kind`` (each samples at most every few seconds), made on first use."""
        with self._lock:
            if (kind, env) not in self._made:
                self._made[kind, env] = make(self.kafka(env))
            return cast(R, self._made[kind, env])

    def health(self, env: str) -> HealthReader:
        """The environment's health reader: sampled every ``health_seconds`` by the plane's sampler, if it runs."""
        every = self.plane.health_seconds or SAMPLE_SECONDS
        return self.of("health", env, lambda kafka: HealthReader(kafka, sample_seconds=every))

    def connectors(self, env: str) -> ConnectorTable:
        """The environment's connectors table (one expanded Connect call per ``FRESH_SECONDS``), made on first use."""
        plane = self.plane

        def live() -> Mapping[str, LiveConnector]:
            return Reconciler(bundle_ops.connect_client(env, plane.connect_url, plane.clusters)).live()

        renders: dict[str, tuple[Any, RenderedBundle | IkkaiError]] = {}  # bundle → (its files, its render)

        def bundles() -> dict[str, RenderedBundle | IkkaiError]:
            """Each bundle of the environment rendered, again only when one of its files changed."""
            for bundle in environments(plane.bundles_dir).get(env, []):
                files = fingerprint(plane.bundles_dir / bundle)
                if bundle not in renders or renders[bundle][0] != files:
                    try:
                        renders[bundle] = files, bundle_ops.rendered(plane.request(bundle, env))
                    except IkkaiError as exc:
                        renders[bundle] = files, exc
            return {b: renders[b][1] for b in environments(plane.bundles_dir).get(env, [])}

        def shape(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
            return connector_rows({"connectors": rows}, plane.metrics.restart_counts())

        with self._lock:
            if ("connectors", env) not in self._made:
                self._made["connectors", env] = ConnectorTable(live, bundles, shape)
            table: ConnectorTable = self._made["connectors", env]
            return table

    def bundles(self, env: str) -> Refreshed[list[dict[str, Any]]]:
        """The environment's bundles view rows, read in the background (``deploy.serve.page.bundle_rows``)."""

        def read() -> list[dict[str, Any]]:
            return bundle_rows.bundle_rows(self.plane, lambda: self.kafka(env), env)

        with self._lock:
            if ("bundles", env) not in self._made:
                self._made["bundles", env] = Refreshed(
                    read, bundle_rows.unread_rows, fresh=bundle_rows.FRESH_SECONDS, name=f"bundle-rows-{env}"
                )
            rows: Refreshed[list[dict[str, Any]]] = self._made["bundles", env]
            return rows
