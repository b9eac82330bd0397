"""A hostile schema registry for the outbox sink: the one read the sink makes, scripted per schema id.

The sink reads a Confluent-framed request's writer schema with ``GET <registry>/schemas/ids/<id>``
(``SchemaRegistryClient``). ``HostileRegistry`` answers it as the test scripts each id: with the
schema (``ok``), ``404``/40403 (an id the registry does not hold), or one of the hostile server's
body behaviours after a 2xx status line and headers: ``stall-body`` (not one byte of the body),
``drip`` (one byte every quarter second), ``huge`` (a body of ``huge_bytes``, as fast as it is
read). It records each answer it holds open (stalled, dripping or streaming) with when it began and
when the client left, so a test can see that no read of the registry outlived its deadline.

Every other path is the hostile server's own (``HostileServer``): one server is the sink's target
and its registry.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass

from tests.outbox_sink.hostile_behaviours import Behaviour
from tests.outbox_sink.hostile_server import HOST, HostileServer, _Request

REGISTRY: str = "/registry"
SCHEMA_PATH: str = REGISTRY + "/schemas/ids/"
HOLDING = frozenset({Behaviour.STALL_BODY, Behaviour.DRIP, Behaviour.HUGE})


@dataclass(frozen=True)
class Hold:
    """One registry answer the server held open: from its headers until the client went away (None: not yet)."""

    schema_id: int
    behaviour: Behaviour
    began: float  # time.monotonic()
    ended: float | None

    def seconds(self, now: float) -> float:
        return (self.ended if self.ended is not None else now) - self.began


class HostileRegistry(HostileServer):
    """The hostile server, and at ``registry_url`` a schema registry scripted per id (see the module docstring)."""

    def __init__(self, *, huge_bytes: int = 8 * 1024 * 1024, lifetime_s: float = 1800.0) -> None:
        super().__init__(huge_bytes=huge_bytes, lifetime_s=lifetime_s)
        self._registry_lock = threading.Lock()
        self._scripts: dict[int, tuple[Behaviour, str]] = {}
        self._asked: Counter[int] = Counter()
        self._holds: dict[int, Hold] = {}  # by a serial number of the hold

    @property
    def registry_url(self) -> str:
        """The value of the sink's ``schema.registry.url``."""
        return f"http://{HOST}:{self.port}{REGISTRY}"

    def script(self, schema_id: int, behaviour: Behaviour, schema: str = "") -> None:
        """From now on, ``GET /schemas/ids/<schema_id>`` gets ``behaviour``; ``ok`` answers with ``schema``."""
        if behaviour not in HOLDING | {Behaviour.OK, Behaviour.NOT_FOUND}:
            raise ValueError(f"a registry answer is ok, not-found or {sorted(b.value for b in HOLDING)}: {behaviour}")
        with self._registry_lock:
            self._scripts[schema_id] = (behaviour, schema)

    def asked(self, schema_id: int) -> int:
        """How many times the schema of ``schema_id`` was asked for."""
        with self._registry_lock:
            return self._asked[schema_id]

    def holds(self) -> list[Hold]:
        with self._registry_lock:
            return list(self._holds.values())

    async def _answer(self, request: _Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        path = request.target.split("?", 1)[0]
        if not path.startswith(REGISTRY + "/"):
            return await super()._answer(request, reader, writer)
        if request.method != "GET" or not path.startswith(SCHEMA_PATH) or not path[len(SCHEMA_PATH) :].isdigit():
            await self._send(writer, 404, b'{"error_code": 404, "message": "not a path of this registry"}', close=True)
            return False
        schema_id = int(path[len(SCHEMA_PATH) :])
        with self._registry_lock:
            behaviour, schema = self._scripts.get(schema_id, (Behaviour.NOT_FOUND, ""))
            self._asked[schema_id] += 1
        if behaviour is Behaviour.OK:
            await self._send(writer, 200, json.dumps({"schema": schema}).encode())
            return True
        if behaviour is Behaviour.NOT_FOUND:
            await self._send(writer, 404, b'{"error_code": 40403, "message": "Schema not found"}')
            return True
        with self._registry_lock:
            serial = len(self._holds)
            self._holds[serial] = Hold(schema_id, behaviour, time.monotonic(), None)
        try:
            return await self._misbehave(behaviour, reader, writer)
        finally:
            with self._registry_lock:
                self._holds[serial] = Hold(schema_id, behaviour, self._holds[serial].began, time.monotonic())
