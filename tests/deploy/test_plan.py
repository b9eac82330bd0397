"""The pure diff behind ``plan``: normalization, redaction, actions, state changes, prune candidates."""

from __future__ import annotations

from deploy.plan import ConnectorPlan, Plan, connector_plan, diff_config, normalize, owned_leftovers

DESIRED = {"connector.class": "X", "tasks.max": "1", "file": "${file:/s/p.properties:path}", "name": "b.one"}


def test_server_added_name_and_value_types_do_not_count_as_changes() -> None:
    live = {"connector.class": "X", "tasks.max": 1, "file": "${file:/s/p.properties:path}", "name": "b.one"}
    assert normalize(live) == {"connector.class": "X", "tasks.max": "1", "file": "${file:/s/p.properties:path}"}
    assert diff_config(DESIRED, live) == ()


def test_placeholders_compare_literally() -> None:
    live = {**DESIRED, "file": "${file:/s/other.properties:path}"}
    assert [c.key for c in diff_config(DESIRED, live)] == ["file"]


def test_secret_values_are_redacted_on_both_sides_but_placeholders_shown() -> None:
    desired = {**DESIRED, "database.password": "${env:DB_PW}", "ssl.truststore.password": "new-literal"}
    live = {**DESIRED, "database.password": "old-literal", "ssl.truststore.password": "old"}
    changes = {c.key: (c.live, c.desired) for c in diff_config(desired, live)}
    assert changes == {
        "database.password": ("<redacted>", "${env:DB_PW}"),
        "ssl.truststore.password": ("<redacted>", "<redacted>"),
    }
    typed = diff_config({**DESIRED, "conn": "secret-url"}, DESIRED, password_keys={"conn"})
    assert [(c.key, c.desired) for c in typed] == [("conn", "<redacted>")]


def test_actions_and_state_changes() -> None:
    assert connector_plan("b.one", DESIRED, "running", None, None).action == "create"
    unchanged = connector_plan("b.one", DESIRED, "running", DESIRED, "RUNNING")
    assert unchanged.action == "unchanged" and not unchanged.pending
    changed = connector_plan("b.one", {**DESIRED, "tasks.max": "2"}, "running", DESIRED, "RUNNING")
    assert changed.action == "update" and [(c.key, c.live, c.desired) for c in changed.changes] == [
        ("tasks.max", "1", "2")
    ]
    pause = connector_plan("b.one", DESIRED, "paused", DESIRED, "RUNNING")
    assert pause.action == "unchanged" and pause.state_change and pause.pending
    failed = connector_plan("b.one", DESIRED, "running", DESIRED, "FAILED")
    assert not failed.pending  # a failed task is for restart, not a config write
    assert connector_plan("b.one", DESIRED, "stopped", None, None).state_change


def test_prune_touches_only_the_owner_prefix() -> None:
    live = ["b.one", "b.gone", "bx.other", "foreign", "b"]
    assert owned_leftovers(live, "b.", {"b.one"}) == ["b.gone"]


def test_plan_dict_is_sorted_and_stable() -> None:
    plans = (connector_plan("b.one", DESIRED, "running", None, None),)
    first = Plan("b", "dev", plans).as_dict()
    assert first == Plan("b", "dev", plans).as_dict()
    assert first["summary"] == {"create": 1, "update": 0, "delete": 0, "unchanged": 0}
    assert [c["key"] for c in first["connectors"][0]["changes"]] == sorted(k for k in DESIRED if k != "name")


def test_credentials_inside_urls_are_redacted_in_changes_and_in_connects_validation_messages() -> None:
    """A URL can carry a credential under a key no name rule marks: the plan prints it redacted, both sides."""
    desired = {**DESIRED, "connection.url": "jdbc:postgresql://db/x?user=a&password=hunter2"}
    live = {**DESIRED, "connection.url": "http://svc:oldpass@db/x"}
    changes = {c.key: (c.live, c.desired) for c in diff_config(desired, live)}
    assert changes == {
        "connection.url": ("http://<redacted>@db/x", "jdbc:postgresql://db/x?user=a&password=<redacted>")
    }
    invalid = ConnectorPlan(
        "b.one", "create", "X", "running", None,
        validation_errors=(("connection.url", "Invalid value http://svc:hunter2@db/x for configuration url"),),
    )  # fmt: skip
    printed = str(Plan("b", "dev", (invalid,)).as_dict())
    assert "hunter2" not in printed and "http://<redacted>@db/x" in printed
