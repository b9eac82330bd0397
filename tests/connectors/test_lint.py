"""Policy lint: one test per check (it fires, and the compliant config passes), waivers, secrets."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from connectors.errors import PolicyViolation
from connectors.lint import CHECKS, PluginCatalog, PluginInfo, lint_bundle, lint_connector, require_clean
from connectors.manifest import ConnectorSpec, Waiver, parse_manifest
from connectors.render import RenderedConnector

SOURCE = "org.apache.kafka.connect.file.FileStreamSourceConnector"
SINK = "com.example.HttpSinkConnector"

MANIFEST = {"name": "b", "owner_prefix": "b.", "connectors": [{"name": "one", "template": "t.j2"}]}
GOOD_SOURCE = {
    "connector.class": SOURCE,
    "topic": "ingest.payments",
    "producer.override.enable.idempotence": "true",
    "producer.override.acks": "all",
    "exactly.once.support": "required",
    "transforms": "key",
    "transforms.key.type": "dev.ikkai.connect.transforms.JsonFieldToKey",
    "transforms.key.field": "payment_id",
}
GOOD_SINK = {
    "connector.class": SINK,
    "topics": "outbox.requests",
    "consumer.override.isolation.level": "read_committed",
    "errors.tolerance": "all",
    "errors.deadletterqueue.topic.name": "dlq.outbox",
    "errors.deadletterqueue.context.headers.enable": "true",
}


def connector(config: Mapping[str, str], waivers: tuple[Waiver, ...] = ()) -> RenderedConnector:
    return RenderedConnector(name="b.one", spec=ConnectorSpec("one", "t.j2", waivers=waivers), config=dict(config))


def checks_fired(config: Mapping[str, str], catalog: PluginCatalog | None = None) -> list[tuple[str, str | None]]:
    return [(f.check, f.key) for f in lint_connector(connector(config), catalog or PluginCatalog())]


def test_compliant_source_and_sink_pass() -> None:
    assert checks_fired(GOOD_SOURCE) == []
    assert checks_fired(GOOD_SINK) == []


@pytest.mark.parametrize(
    ("base", "change", "expected"),
    [
        (GOOD_SOURCE, {"producer.override.acks": "1"}, ("source-idempotent-producer", "producer.override.acks")),
        (
            GOOD_SOURCE,
            {"producer.override.enable.idempotence": None},
            ("source-idempotent-producer", "producer.override.enable.idempotence"),
        ),
        (
            GOOD_SOURCE,
            {"producer.override.max.in.flight.requests.per.connection": "10"},
            ("source-idempotent-producer", "producer.override.max.in.flight.requests.per.connection"),
        ),
        (
            GOOD_SINK,
            {"consumer.override.isolation.level": "read_uncommitted"},
            ("sink-read-committed", "consumer.override.isolation.level"),
        ),
        (GOOD_SINK, {"errors.tolerance": "none"}, ("sink-error-routing", "errors.tolerance")),
        (
            GOOD_SINK,
            {"errors.deadletterqueue.topic.name": "events.failures"},
            ("sink-error-routing", "errors.deadletterqueue.topic.name"),
        ),
        (
            GOOD_SINK,
            {"errors.deadletterqueue.context.headers.enable": None},
            ("sink-error-routing", "errors.deadletterqueue.context.headers.enable"),
        ),
        (GOOD_SOURCE, {"transforms": None}, ("source-business-key", "transforms")),
        (GOOD_SOURCE, {"topic": "payments"}, ("topic-naming", "topic")),
        (GOOD_SOURCE, {"topic": "events.payments"}, ("topic-naming", "topic")),
        (GOOD_SINK, {"topics": "outbox.requests,Raw_Stuff"}, ("topic-naming", "topics")),
        (GOOD_SOURCE, {"exactly.once.support": "requested"}, ("source-exactly-once", "exactly.once.support")),
        (GOOD_SOURCE, {"database.password": "hunter2"}, ("secret-placeholder", "database.password")),
        (
            GOOD_SOURCE,
            {"sasl.jaas.config": "org.apache...PlainLoginModule required password=x;"},
            ("secret-placeholder", "sasl.jaas.config"),
        ),
        (GOOD_SOURCE, {"api.token": "abc"}, ("secret-placeholder", "api.token")),
        (GOOD_SOURCE, {"aws.secret.key": "abc"}, ("secret-placeholder", "aws.secret.key")),
    ],
)
def test_each_check_fires(base: dict[str, str], change: dict[str, str | None], expected: tuple[str, str]) -> None:
    config = {k: v for k, v in {**base, **change}.items() if v is not None}
    assert checks_fired(config) == [expected]


def test_every_check_is_exercised_above() -> None:
    cases = test_each_check_fires.pytestmark[0].args[1]  # type: ignore[attr-defined]
    assert {expected[0] for _, _, expected in cases} == set(CHECKS)


def test_password_typed_key_from_the_plugin_is_a_secret_whatever_its_name() -> None:
    catalog = PluginCatalog({SOURCE: PluginInfo(kind="source", password_keys=frozenset({"connection.url"}))})
    assert checks_fired({**GOOD_SOURCE, "connection.url": "jdbc:pg://u:p@h/db"}, catalog) == [
        ("secret-placeholder", "connection.url")
    ]
    assert checks_fired({**GOOD_SOURCE, "connection.url": "${file:/etc/ikkai/db.properties:url}"}, catalog) == []


@pytest.mark.parametrize("placeholder", ["${file:/s/db.properties:password}", "${dir:/run/secrets:db}", "${env:DB_PW}"])
def test_config_provider_placeholders_are_accepted(placeholder: str) -> None:
    assert checks_fired({**GOOD_SOURCE, "database.password": placeholder}) == []


def test_keys_that_only_mention_key_are_not_secrets() -> None:
    config = {
        **GOOD_SOURCE,
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "transforms.key.field": "payment_id",
        "message.key.columns": "id",
    }
    assert checks_fired(config) == []


def test_debezium_sources_are_keyed_by_their_primary_key() -> None:
    config = {k: v for k, v in GOOD_SOURCE.items() if not k.startswith("transforms")}
    config["connector.class"] = "io.debezium.connector.postgresql.PostgresConnector"
    assert checks_fired(config) == []


def test_a_waiver_keeps_the_finding_visible_but_not_blocking() -> None:
    reason = "the legacy file drop has no business id; keyed downstream"
    c = connector({**GOOD_SOURCE, "transforms": ""}, (Waiver("source-business-key", reason),))
    findings = lint_connector(c)
    assert [(f.check, f.waived) for f in findings] == [("source-business-key", reason)]


def test_require_clean_raises_with_the_first_fix() -> None:
    from connectors.render import ConnectorBundle, RenderedBundle

    c = connector({**GOOD_SOURCE, "database.password": "hunter2"})
    bundle = RenderedBundle(bundle=ConnectorBundle.__new__(ConnectorBundle), env="dev", connectors=(c,))
    object.__setattr__(bundle.bundle, "manifest", type("M", (), {"name": "b"})())
    with pytest.raises(PolicyViolation) as caught:
        require_clean(bundle, lint_connector(c))
    assert "secret-placeholder" in str(caught.value) and "hunter2" not in str(caught.value)
    assert "nothing was written" in str(caught.value)


def test_a_waiver_for_an_unknown_check_is_an_error(tmp_path: Path) -> None:
    from connectors.errors import BundleError
    from connectors.render import ConnectorBundle, RenderedBundle

    c = connector(GOOD_SOURCE, (Waiver("source-bussiness-key", "typo in the check id, should fail"),))
    bundle = RenderedBundle(ConnectorBundle(tmp_path, parse_manifest(MANIFEST, "b")), "dev", (c,))
    with pytest.raises(BundleError, match="unknown check 'source-bussiness-key'"):
        lint_bundle(bundle)


def test_repr_of_a_rendered_connector_hides_literal_secrets() -> None:
    text = repr(connector({**GOOD_SOURCE, "database.password": "hunter2"}))
    assert "hunter2" not in text and "<redacted>" in text


@pytest.mark.parametrize(
    ("key", "url"),
    [
        ("connection.url", "jdbc:postgresql://db/x?user=a&password=hunter2"),
        ("outbox.target.api.url", "http://svc:hunter2@api.internal/v1"),
        ("http.endpoint", "https://api.internal/hook?api_key=hunter2"),
    ],
)
def test_a_url_carrying_a_credential_is_a_finding_under_any_key(key: str, url: str) -> None:
    """Key names cannot mark a credential inside a URL: the URL itself is checked, and never printed in clear."""
    findings = lint_connector(connector({**GOOD_SOURCE, key: url}))
    assert [(f.check, f.key) for f in findings] == [("secret-placeholder", key)]
    assert "hunter2" not in f"{findings[0].message} {findings[0].fix}"


def test_a_url_whose_credentials_are_placeholders_passes() -> None:
    url = "jdbc:postgresql://db/x?user=a&password=${file:/etc/ikkai/db.properties:password}"
    assert checks_fired({**GOOD_SOURCE, "connection.url": url, "registry.url": "https://registry:8081"}) == []
