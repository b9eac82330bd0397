"""Capped exponential backoff of automatic restarts, the maximum number of restarts, and the state file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deploy.auto_restart import RestartBackoff, RestartStateFile
from ikkai.errors import ConfigError


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


def test_max_restarts_stops_restarting_until_the_connector_was_healthy_long_enough() -> None:
    backoff = RestartBackoff(base=2, cap=10, reset_after=30, max_restarts=2)
    backoff.restarted("c", 0)
    assert backoff.due("c", 2) and backoff.next_restart_at("c") == 2
    backoff.restarted("c", 2)
    assert backoff.exhausted("c")
    assert not backoff.due("c", 10_000) and backoff.next_restart_at("c") is None
    backoff.healthy("c", 100)  # a person restarted it by hand; it must stay healthy reset_after seconds
    assert backoff.exhausted("c")
    backoff.healthy("c", 130)
    assert not backoff.exhausted("c") and backoff.due("c", 130)


def test_the_state_survives_a_new_process_through_the_state_file(tmp_path: Path) -> None:
    file = RestartStateFile(tmp_path / "home" / "auto-restart.json")
    first = file.load_into(RestartBackoff(base=2, cap=10, max_restarts=3))  # no file yet: empty state
    first.restarted("dev/c", 1000.0)
    first.restarted("dev/c", 1002.0)
    file.save(first)

    state = json.loads(file.path.read_text())["connectors"]["dev/c"]
    assert state["restarts"] == 2 and state["last_restart"] == 1002.0
    assert state["next_backoff_seconds"] == 4 and state["next_restart_at"] == 1006.0 and not state["exhausted"]

    second = file.load_into(RestartBackoff(base=2, cap=10, max_restarts=3))
    assert second.restarts("dev/c") == 2
    assert not second.due("dev/c", 1005.0) and second.due("dev/c", 1006.0)
    second.restarted("dev/c", 1006.0)
    assert second.exhausted("dev/c") and not second.due("dev/c", 99_999.0)


def test_a_state_file_that_is_not_ours_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "auto-restart.json"
    path.write_text('{"connectors": []}')
    with pytest.raises(ConfigError) as caught:
        RestartStateFile(path).load_into(RestartBackoff())
    assert caught.value.source == str(path) and caught.value.fix == "delete the file"


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ('{"restarts": 1e400}', "restarts"),  # JSON's way to write infinity: int() of it raised OverflowError
        ('{"restarts": -1}', "restarts"),
        ('{"restarts": 2.5}', "restarts"),
        ('{"restarts": 1, "last_restart": NaN}', "last_restart"),
        ('{"restarts": 1, "healthy_since": "yesterday"}', "healthy_since"),
    ],
)
def test_a_state_file_with_an_impossible_number_is_an_error_naming_the_file_and_field(
    tmp_path: Path, entry: str, field: str
) -> None:
    path = tmp_path / "auto-restart.json"
    path.write_text('{"version": 1, "connectors": {"dev/c": ' + entry + "}}")
    with pytest.raises(ConfigError) as caught:
        RestartStateFile(path).load_into(RestartBackoff())
    assert (caught.value.source, caught.value.key) == (str(path), f"connectors.dev/c.{field}")
    assert "of 0 or more" in str(caught.value)
    assert caught.value.fix is not None and "delete the file" in caught.value.fix


@pytest.mark.parametrize("count", [1_025, 5_000])
def test_the_backoff_is_finite_and_capped_at_any_count(count: int) -> None:
    backoff = RestartBackoff(base=2.0, cap=300.0)  # floats, as `ikkai serve --backoff-base` gives them
    backoff.restore({"version": 1, "connectors": {"dev/c": {"restarts": count, "last_restart": 1000.0}}})
    assert backoff.delay("dev/c") == 300
    assert backoff.next_restart_at("dev/c") == 1300.0 and backoff.due("dev/c", 1300.0)
    assert backoff.state()["connectors"]["dev/c"]["next_backoff_seconds"] == 300


def test_a_saved_state_with_huge_counts_loads_and_saves_again(tmp_path: Path) -> None:
    file = RestartStateFile(tmp_path / "auto-restart.json")
    state = {"version": 1, "connectors": {"dev/c": {"restarts": 5_000, "last_restart": 1000.0}}}
    file.path.write_text(json.dumps(state))
    backoff = file.load_into(RestartBackoff(base=2.0, cap=300.0))
    backoff.restarted("dev/c", 2000.0)
    file.save(backoff)
    assert json.loads(file.path.read_text())["connectors"]["dev/c"]["restarts"] == 5_001


def test_a_link_planted_at_the_partial_path_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    file = RestartStateFile(tmp_path / "home" / "auto-restart.json")
    file.path.parent.mkdir()
    file.path.with_name("auto-restart.json.partial").symlink_to(victim)
    backoff = RestartBackoff()
    backoff.restarted("dev/c", 1000.0)
    file.save(backoff)
    assert victim.read_text() == "precious\n"
    assert not file.path.is_symlink() and json.loads(file.path.read_text())["connectors"]["dev/c"]["restarts"] == 1
    assert file.path.stat().st_mode & 0o777 == 0o600
