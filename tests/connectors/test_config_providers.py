"""Secrets as config-provider placeholders: which providers an environment's workers have is configured
(the value ``config_providers``), and the lint accepts exactly those, in Kafka's ``${provider:[path:]key}`` form."""

from __future__ import annotations

import pytest

from connectors.errors import BundleError
from connectors.lint import lint_bundle, lint_connector
from connectors.manifest import ConnectorSpec
from connectors.render import RenderedConnector, load_bundle, render_bundle
from connectors.secrets import DEFAULT_PROVIDERS, is_placeholder, placeholder_provider, redact
from tests.connectors.conftest import BundleFactory
from tests.connectors.test_lint import GOOD_SOURCE

STRIMZI = "${secrets:kafka/postgres-cdc:password}"


def secret_findings(value: str, providers: tuple[str, ...] = DEFAULT_PROVIDERS) -> list[str]:
    c = RenderedConnector("b.one", ConnectorSpec("one", "t.j2"), {**GOOD_SOURCE, "database.password": value})
    return [f.message for f in lint_connector(c, providers=providers) if f.check == "secret-placeholder"]


@pytest.mark.parametrize(
    ("value", "provider"),
    [
        ("${file:/etc/ikkai/db.properties:password}", "file"),
        ("${dir:/run/secrets:db-password}", "dir"),
        ("${directory:/opt/kafka/external-configuration/db:password}", "directory"),
        ("${env:DB_PASSWORD}", "env"),
        ("${env::DB_PASSWORD}", "env"),  # Kafka's form with an empty path
        (STRIMZI, "secrets"),
        ("${vault:secret/data/ikkai/db:password}", "vault"),
        (" ${env:DB_PASSWORD} ", "env"),
    ],
)
def test_each_providers_form_is_a_placeholder(value: str, provider: str) -> None:
    assert placeholder_provider(value) == provider
    assert is_placeholder(value) and is_placeholder(value, [provider]) and not is_placeholder(value, ["other"])


@pytest.mark.parametrize(
    "value", ["hunter2", "${}", "${secrets}", "${secrets:}", "pre ${env:X}", "${env:X} post", "${1x:a:b}", "$(env:X)"]
)
def test_literals_and_broken_references_are_not_placeholders(value: str) -> None:
    assert placeholder_provider(value) is None


def test_the_default_providers_are_the_embedded_workers_and_strimzis_form_is_named_not_called_literal() -> None:
    from stack.stack_config import CONFIG_PROVIDERS

    assert set(DEFAULT_PROVIDERS) == set(CONFIG_PROVIDERS)
    (message,) = secret_findings(STRIMZI)
    assert "config provider 'secrets'" in message and "literal" not in message
    assert secret_findings("${env:DB_PASSWORD}") == []
    assert secret_findings("hunter2") == ["database.password is named like a secret and holds a literal value"]


def test_a_strimzi_environment_accepts_its_providers_and_only_those() -> None:
    strimzi = ("secrets", "env")
    assert secret_findings(STRIMZI, strimzi) == []
    assert secret_findings("${env:DB_PASSWORD}", strimzi) == []
    (message,) = secret_findings("${file:/etc/ikkai/db.properties:password}", strimzi)
    assert "config provider 'file'" in message and "secrets, env" in message
    assert secret_findings("${vault:secret/data/db:password}", ("vault",)) == []
    assert len(secret_findings("hunter2", strimzi)) == 1


def test_redaction_keeps_any_reference_and_hides_literals() -> None:
    shown = redact({"database.password": STRIMZI, "api.token": "abc", "sasl.jaas.config": "${vault:kv/jaas:config}"})
    assert shown == {
        "database.password": STRIMZI,
        "api.token": "<redacted>",
        "sasl.jaas.config": "${vault:kv/jaas:config}",
    }


TEMPLATE = (
    '{"connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",'
    ' "database.password": {{ pw | tojson }}}'
)
MANIFEST = {"name": "b", "owner_prefix": "b.", "connectors": [{"name": "one", "template": "t.j2"}]}


def test_config_providers_are_declared_per_environment_in_the_values(make_bundle: BundleFactory) -> None:
    folder = make_bundle(
        MANIFEST,
        {"t.j2": TEMPLATE},
        {
            "dev": {"pw": "${file:/tmp/db.properties:password}"},
            "k8s": {"pw": STRIMZI, "config_providers": ["secrets", "env"]},
        },
    )
    bundle = load_bundle(folder)
    dev, k8s = render_bundle(bundle, "dev"), render_bundle(bundle, "k8s")
    assert dev.config_providers == DEFAULT_PROVIDERS and k8s.config_providers == ("secrets", "env")
    assert [f for f in lint_bundle(k8s) if f.check == "secret-placeholder"] == []
    assert [f for f in lint_bundle(dev) if f.check == "secret-placeholder"] == []
    # The Strimzi reference rendered for dev, whose workers have no 'secrets' provider, is refused.
    wrong = render_bundle(bundle, "dev", [f"pw={STRIMZI}"])
    assert [f.key for f in lint_bundle(wrong) if f.check == "secret-placeholder"] == ["database.password"]
    # --set can name them too (comma-separated or a YAML list).
    assert render_bundle(bundle, "dev", ["config_providers=file,secrets"]).config_providers == ("file", "secrets")
    assert render_bundle(bundle, "dev", ["config_providers=[vault]"]).config_providers == ("vault",)


@pytest.mark.parametrize("bad", [[], [1], ["ok", "not a name"], {"secrets": "x"}, 3])
def test_config_providers_that_are_not_names_are_an_error_naming_the_values_file(
    make_bundle: BundleFactory, bad: object
) -> None:
    folder = make_bundle(MANIFEST, {"t.j2": TEMPLATE}, {"k8s": {"pw": STRIMZI, "config_providers": bad}})
    with pytest.raises(BundleError, match=r"values/k8s.yaml: config_providers is .* not a list") as caught:
        render_bundle(load_bundle(folder), "k8s")
    assert caught.value.fix and "config.providers" in caught.value.fix
