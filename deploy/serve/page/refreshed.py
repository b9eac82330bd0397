"""A value the page reads in the background: at most once per ``fresh`` seconds however many look, and never
waited on longer than a viewer's ``wait``.

``Refreshed.latest(wait)`` returns the last reading while it is younger than ``fresh``; else it starts a read on
a thread of its own (one at a time) and waits for it at most ``wait`` seconds. A read that takes longer (Connect
or Kafka slow, a worker restarting) goes on and serves the next viewer; this one gets the last reading marked
``stale``, or None before the first. ``expire()`` (an apply from the page) makes the next viewer start a read
however young the last reading is. A read that raises is kept like a value (``failed`` turns the exception
into one), so a cluster that is down is asked once per interval, not once per viewer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Reading(Generic[T]):
    at: float  # the clock when the read started
    value: T
    stale: bool = False  # a viewer got it because a newer one was not ready within its wait


class Refreshed(Generic[T]):
    """``read`` in the background at most every ``fresh`` seconds; thread-safe."""

    def __init__(
        self,
        read: Callable[[], T],
        failed: Callable[[Exception], T],
        *,
        fresh: float,
        name: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.read = read
        self.failed = failed
        self.fresh = fresh
        self.name = name  # the reading thread's name
        self.clock = clock
        self.last: Reading[T] | None = None
        self._expired = False  # the last reading is known to be out of date (``expire``)
        self._expired_at = 0.0
        self._lock = threading.Lock()
        self._reading: threading.Event | None = None  # set when the read under way is done

    def latest(self, wait: float) -> Reading[T] | None:
        """The last reading if fresh; else the one a read started now (or under way) gives within ``wait``
        seconds; else the last one marked ``stale``; None before the first."""
        with self._lock:
            last = self.last
            if last is not None and not self._expired and self.clock() - last.at < self.fresh:
                return last
            if self._reading is None:
                self._reading = threading.Event()
                reader = threading.Thread(target=self._refresh, args=(self._reading,), name=self.name, daemon=True)
                reader.start()
            reading = self._reading
        if reading.wait(wait):
            return self.last
        return None if self.last is None else replace(self.last, stale=True)

    def _refresh(self, done: threading.Event) -> None:
        at = self.clock()
        try:
            value = self.read()
        except Exception as exc:  # noqa: BLE001 - a bug in one read must not stop the readings for good
            value = self.failed(exc)
        with self._lock:
            self.last, self._reading = Reading(at, value), None
            self._expired = self._expired and self._expired_at > at  # expired again while this read ran
        done.set()

    def expire(self) -> None:
        """The last reading is out of date (an action changed what it read): the next viewer starts a read."""
        with self._lock:
            self._expired, self._expired_at = True, self.clock()
