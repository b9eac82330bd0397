"""What the page keeps per environment: one reader of each kind (flow, health), the connectors table, the flow
view's samples (``FlowReader``'s, taken in the background at most every its ``SAMPLE_SECONDS``) and the bundles
view's rows (``deploy.serve.page.bundle_rows``, read in the background at most every its ``FRESH_SECONDS``): the
flow and bundles views wait on them at most their ``WAIT_SECONDS``, never on Kafka or Connect.

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
from deploy.eos_view import flow
from deploy.eos_view.flow import FlowReader, Sample
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
FLOW_WAIT_SECONDS = 1.5  # the longest a flow viewer waits for a sample before it gets the last ones (or none yet)


def flow_unread(exc: Exception) -> IkkaiError:
    """What the flow view says when its samples could not be taken: the reader's error, or any other as one."""
    if isinstance(exc, IkkaiError):
        return exc
    return IkkaiError(f"the flow could not be sampled: {type(exc).__name__}", fix="see `ikkai serve`'s log")


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

        renders: dict[str, tuple[Any, RenderedBundle | IkkaiError]] = {}  # bundle → (files, overrides; its render)

        def bundles() -> dict[str, RenderedBundle | IkkaiError]:
            """Each bundle of the environment rendered, again only when one of its files or its overrides changed."""
            for bundle in environments(plane.bundles_dir).get(env, []):
                files = fingerprint(plane.bundles_dir / bundle), plane.overrides.get((bundle, env), ())
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

    def flow(self, env: str) -> Refreshed[list[Sample] | IkkaiError]:
        """The environment's flow samples, taken in the background when a viewer finds the last older than
        ``flow.SAMPLE_SECONDS`` (the cluster, too, is found there: an unknown one is the reading's error)."""

        def read() -> list[Sample] | IkkaiError:
            return self.of("flow", env, FlowReader).taken()

        with self._lock:
            if ("flow-samples", env) not in self._made:
                self._made["flow-samples", env] = Refreshed(
                    read, flow_unread, fresh=flow.SAMPLE_SECONDS, name=f"flow-samples-{env}"
                )
            samples: Refreshed[list[Sample] | IkkaiError] = self._made["flow-samples", env]
            return samples

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
