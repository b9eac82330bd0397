"""The page's background readings (deploy/serve/page/refreshed.py): at most one read per interval however many
look, never waited on longer than a viewer's wait, and read again after an action expires them. Pure."""

from __future__ import annotations

import threading

from deploy.serve.page.refreshed import Refreshed


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def test_one_read_per_interval_and_a_new_one_after_expire() -> None:
    clock, reads = Clock(), []

    def read() -> int:
        reads.append(clock.now)
        return len(reads)

    rows = Refreshed(read, lambda exc: -1, fresh=5.0, name="test", clock=clock)
    assert [r.value for r in (rows.latest(30), rows.latest(30), rows.latest(30))] == [1, 1, 1]  # type: ignore[union-attr]
    rows.expire()  # an apply changed what it read
    assert rows.latest(30).value == 2  # type: ignore[union-attr]
    clock.now += 5.0
    assert rows.latest(30).value == 3 and len(reads) == 3  # type: ignore[union-attr]


def test_a_slow_read_gives_none_then_the_last_reading_marked_stale_never_a_wait() -> None:
    clock, release, calls = Clock(), threading.Event(), []

    def read() -> str:
        calls.append(1)
        if len(calls) > 1:
            release.wait(30)
        return f"read {len(calls)}"

    rows = Refreshed(read, lambda exc: f"failed: {exc}", fresh=5.0, name="test", clock=clock)
    first = rows.latest(30)
    assert first is not None and first.value == "read 1" and not first.stale
    clock.now += 5.0
    stale = rows.latest(0.05)  # the second read hangs: this viewer gets the first reading, marked stale
    assert stale is not None and stale.value == "read 1" and stale.stale
    release.set()
    assert rows.latest(30).value == "read 2"  # type: ignore[union-attr]  # the read under way, not a third


def test_a_read_that_raises_is_kept_as_its_failure() -> None:
    def read() -> str:
        raise RuntimeError("boom")

    rows = Refreshed(read, lambda exc: f"failed: {exc}", fresh=5.0, name="test", clock=Clock())
    assert rows.latest(30).value == "failed: boom"  # type: ignore[union-attr]
