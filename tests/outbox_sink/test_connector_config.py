"""The connector config the bundle and the tests deploy: the settings docs/architecture.md's rules ask of a sink."""

from __future__ import annotations

import pytest

from ikkai.errors import ConfigError
from outbox_sink import TargetAlias, outbox_sink_config


def test_the_config_reads_committed_and_parks_failures_in_the_dlq() -> None:
    config = outbox_sink_config(
        receipts_bootstrap_servers="127.0.0.1:9092",
        targets=[
            TargetAlias("payments-api", "http://payments/v1", auth_header="Authorization", auth_secret="${file:/s:t}"),  # noqa: S106
            TargetAlias("notifications-api", "http://notify", method="PUT"),
        ],
    )
    assert config["consumer.override.isolation.level"] == "read_committed"
    assert config["errors.tolerance"] == "all"
    assert config["errors.deadletterqueue.topic.name"] == "dlq.outbox"
    assert config["value.converter"].endswith("ByteArrayConverter")
    assert config["outbox.targets"] == "payments-api,notifications-api"
    assert config["outbox.target.payments-api.auth.secret"] == "${file:/s:t}"
    assert config["outbox.target.notifications-api.method"] == "PUT"
    assert "outbox.target.notifications-api.auth.header" not in config


def test_a_literal_secret_is_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        TargetAlias("payments-api", "http://payments", auth_header="Authorization", auth_secret="Bearer s3cret")  # noqa: S106 - the point
    assert caught.value.key == "outbox.target.payments-api.auth.secret"
    assert "s3cret" not in str(caught.value)


def test_no_targets_is_an_error() -> None:
    with pytest.raises(ConfigError):
        outbox_sink_config(receipts_bootstrap_servers="x:1", targets=[])
