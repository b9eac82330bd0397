"""What the outbox-sink bundle renders: the one definition of the sink's connector config. Pure.

The settings docs/architecture.md's rules ask of a sink, the errors a bad environment gets, and
the retry settings left to the connector: their defaults are written once, in
OutboxSinkConfig.java's ConfigDef, so the bundle renders them only when an environment sets them.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from connectors.errors import BundleError
from connectors.lint import blocking, lint_bundle
from connectors.render import RenderedConnector, load_bundle, render_bundle

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "connectors" / "bundles" / "outbox-sink"
JAVA_SOURCES = REPO / "outbox_sink/connector/src/main/java/dev/ikkai/outbox"
JAVA_CONFIG = JAVA_SOURCES / "OutboxSinkConfig.java"
JAVA_TARGETS = JAVA_SOURCES / "Targets.java"  # owns the key that lists the target aliases; the config names it
DEV_SETS = ["kafka.bootstrap_servers=127.0.0.1:9092"]
ONE_TARGET = ["targets.payments-api.url=http://payments/v1"]
# Bundle values that are left out unless set, and the connector keys they render.
OPTIONAL = {
    "retry.backoff_initial_ms": "outbox.retry.backoff.initial.ms",
    "retry.backoff_max_ms": "outbox.retry.backoff.max.ms",
    "retry.max_duration_ms": "outbox.retry.max.duration.ms",
    "http.request_timeout_ms": "outbox.http.request.timeout.ms",
    "http.max_in_flight_requests": "outbox.max.in.flight.requests",
    "consumer.session_timeout_ms": "consumer.override.session.timeout.ms",
    "consumer.heartbeat_interval_ms": "consumer.override.heartbeat.interval.ms",
    "receipts.format": "outbox.receipts.format",
    "schema_registry.url": "schema.registry.url",
    "schema_registry.basic_auth_user_info": "schema.registry.basic.auth.user.info",
    "schema_registry.ssl_truststore_location": "schema.registry.ssl.truststore.location",
    "schema_registry.ssl_truststore_password": "schema.registry.ssl.truststore.password",
}


def render(env: str, sets: list[str], bundle: Path = BUNDLE) -> RenderedConnector:
    [connector] = render_bundle(load_bundle(bundle), env, sets).connectors
    return connector


@pytest.fixture
def bare_bundle(tmp_path: Path) -> Path:
    """The shipped bundle plus an environment that sets nothing but the broker: only the defaults speak."""
    folder = tmp_path / "outbox-sink"
    shutil.copytree(BUNDLE, folder)
    (folder / "values" / "bare.yaml").write_text("kafka:\n  bootstrap_servers: 127.0.0.1:9092\n")
    return folder


def java_declared_keys() -> set[str]:
    """The config keys OutboxSinkConfig's ConfigDef declares (its String constants passed to ``define``)."""
    source = JAVA_CONFIG.read_text()
    literal = r'static final String (\w+) = "([^"]+)";'
    constants = dict(re.findall(literal, source))
    targets = dict(re.findall(literal, JAVA_TARGETS.read_text()))
    borrowed = re.findall(r"static final String (\w+) = Targets\.(\w+);", source)
    constants |= {name: targets[key] for name, key in borrowed}
    return {constants[name] for name in re.findall(r"\.define\((\w+),", source)}


@pytest.mark.parametrize(("env", "sets"), [("dev", DEV_SETS), ("prod", [])])
def test_the_config_reads_committed_and_parks_failures_in_the_dlq_with_their_context(env: str, sets: list[str]) -> None:
    config = render(env, sets).config
    assert config["consumer.override.isolation.level"] == "read_committed"
    assert config["errors.tolerance"] == "all"
    assert config["errors.deadletterqueue.topic.name"] == "dlq.outbox"
    assert config["errors.deadletterqueue.context.headers.enable"] == "true"
    assert config["value.converter"].endswith("ByteArrayConverter")
    assert set(config["outbox.targets"].split(",")) == {"payments-api", "notifications-api"}


def test_targets_render_their_method_and_only_the_credentials_they_have() -> None:
    sets = [
        *DEV_SETS,
        "targets.payments-api.auth_header=Authorization",
        "targets.payments-api.auth_secret=${file:/s:t}",
        "targets.notifications-api.method=PUT",
    ]
    config = render("dev", sets).config
    assert config["outbox.target.payments-api.auth.secret"] == "${file:/s:t}"
    assert config["outbox.target.payments-api.method"] == "POST"
    assert config["outbox.target.notifications-api.method"] == "PUT"
    assert "outbox.target.notifications-api.auth.header" not in config


def test_a_literal_secret_in_the_values_fails_the_lint_without_showing_it() -> None:
    sets = [*DEV_SETS, "targets.payments-api.auth_header=Authorization", "targets.payments-api.auth_secret=Bearer s3cr"]
    findings = blocking(lint_bundle(render_bundle(load_bundle(BUNDLE), "dev", sets)))
    assert [(f.check, f.key) for f in findings] == [("secret-placeholder", "outbox.target.payments-api.auth.secret")]
    assert "s3cr" not in findings[0].message + findings[0].fix


@pytest.mark.parametrize("sets", [[], ["targets="]], ids=["targets unset", "targets empty"])
def test_an_environment_without_targets_does_not_render(bare_bundle: Path, sets: list[str]) -> None:
    with pytest.raises(BundleError) as caught:
        render("bare", sets, bare_bundle)
    assert "undefined variable 'targets" in str(caught.value)
    assert "values/bare.yaml" in str(caught.value)  # where to define them


def test_retry_and_http_settings_are_left_to_the_connectors_defaults_unless_set(bare_bundle: Path) -> None:
    config = render("bare", ONE_TARGET, bare_bundle).config
    assert sorted(set(OPTIONAL.values()) & set(config)) == []


def test_each_optional_value_renders_its_key_when_set(bare_bundle: Path) -> None:
    sets = [f"{value}={i}" for i, value in enumerate(OPTIONAL, start=100)]
    config = render("bare", [*ONE_TARGET, *sets], bare_bundle).config
    assert {key: config.get(key) for key in OPTIONAL.values()} == {
        key: str(i) for i, key in enumerate(OPTIONAL.values(), start=100)
    }


def test_every_sink_key_the_bundle_renders_is_one_the_connector_declares(bare_bundle: Path) -> None:
    """A misspelt key would be ignored by the connector, and its default used without a word."""
    sets = [*ONE_TARGET, *(f"{value}=1" for value in OPTIONAL)]
    config = render("bare", sets, bare_bundle).config
    sink_keys = {
        k for k in config if k.startswith(("outbox.", "schema.registry.")) and not k.startswith("outbox.target.")
    }
    assert sorted(sink_keys - java_declared_keys()) == []
    assert "schema.registry.basic.auth.user.info" in sink_keys
    assert "outbox.retry.max.duration.ms" in java_declared_keys()  # the parse found the ConfigDef


@pytest.mark.parametrize("key", ["basic_auth_user_info", "ssl_truststore_password"])
def test_a_literal_registry_credential_fails_the_lint_without_showing_it(key: str) -> None:
    sets = [*DEV_SETS, "schema_registry.url=https://registry:8081", f"schema_registry.{key}=sink:s3cr"]
    findings = blocking(lint_bundle(render_bundle(load_bundle(BUNDLE), "dev", sets)))
    assert [(f.check, f.key) for f in findings] == [("secret-placeholder", "schema.registry." + key.replace("_", "."))]
    assert "s3cr" not in findings[0].message + findings[0].fix


def test_prod_reads_the_confluent_wire_format_with_its_credential_from_a_config_provider() -> None:
    connector = render("prod", [])
    assert connector.config["schema.registry.url"].startswith("https://")
    assert connector.config["schema.registry.basic.auth.user.info"].startswith("${file:")
    assert "outbox.receipts.format" not in connector.config, "receipts stay single-object: the connector's default"
    assert blocking(lint_bundle(render_bundle(load_bundle(BUNDLE), "prod", []))) == []
