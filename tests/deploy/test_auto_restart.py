"""Capped exponential backoff of automatic restarts (pure)."""

from __future__ import annotations

from deploy.auto_restart import RestartBackoff


def test_first_restart_is_immediate_then_backoff_doubles_up_to_the_cap() -> None:
    backoff = RestartBackoff(base=2, cap=10, reset_after=100)
    now = 0.0
    waits = []
    for _ in range(6):
        assert backoff.due("c", now)
        waits.append(backoff.delay("c"))
        backoff.restarted("c", now)
        assert not backoff.due("c", now + backoff.delay("c") - 0.01)
        now += backoff.delay("c")
    assert waits == [0, 2, 4, 8, 10, 10]


def test_a_connector_healthy_long_enough_starts_from_zero() -> None:
    backoff = RestartBackoff(base=2, cap=10, reset_after=30)
    backoff.restarted("c", 0)
    backoff.restarted("c", 2)
    backoff.healthy("c", 10)
    assert backoff.restarts("c") == 2
    backoff.healthy("c", 40)
    assert backoff.restarts("c") == 0 and backoff.due("c", 40)
    assert backoff.restarts("other") == 0
