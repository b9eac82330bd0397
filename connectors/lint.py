"""Policy lint: the rules of docs/architecture.md as checks over rendered connector configs. Pure.

Each check has an id, says how to fix what it found, and can be waived per connector in
``bundle.yaml`` only with a written reason; a waived finding is still reported, as waived.
What a plugin declares (source or sink, which keys are PASSWORD-typed) comes from the Connect
cluster when one is reachable (``PluginCatalog``); offline, the class name decides the kind and
only key names mark secrets. A secret must be a placeholder of one of the config providers the
environment's workers have (``RenderedBundle.config_providers``, from the value ``config_providers``);
a URL under any key may not carry a literal credential (user info, a password-like parameter: the
rule of ``ikkai.redaction``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial

from connectors.errors import BundleError, PolicyViolation
from connectors.render import RenderedBundle, RenderedConnector
from connectors.secrets import DEFAULT_PROVIDERS, named_like_secret, placeholder_provider
from ikkai.contract.topics import DLQ_PREFIX
from ikkai.contract.topics import INGEST_PREFIX as INGEST
from ikkai.redaction import carries_url_credentials

TOPIC_NAME = re.compile(r"^(ingest|events|outbox|dlq)\.[a-z0-9$][a-zA-Z0-9._$-]*$")  # $1: a RegexRouter group
KEY_SETTING_TRANSFORMS = (
    "org.apache.kafka.connect.transforms.ValueToKey",
    "org.apache.kafka.connect.transforms.ExtractField$Key",
    "dev.ikkai.connect.transforms.JsonFieldToKey",
)
# Sources whose records are keyed by the source's own primary key.
KEYED_SOURCE_PREFIXES = ("io.debezium.connector.",)


@dataclass(frozen=True)
class PluginInfo:
    kind: str  # "source", "sink" or "unknown"
    password_keys: frozenset[str] = frozenset()


@dataclass(frozen=True)
class PluginCatalog:
    """What the Connect cluster says about each connector class (empty when linting offline)."""

    plugins: Mapping[str, PluginInfo] = field(default_factory=dict)

    def info(self, connector_class: str) -> PluginInfo:
        known = self.plugins.get(connector_class)
        if known is not None:
            return known
        simple = connector_class.rsplit(".", 1)[-1]
        kind = "source" if "Source" in simple else "sink" if "Sink" in simple else "unknown"
        if connector_class.startswith(KEYED_SOURCE_PREFIXES):
            kind = "source"
        return PluginInfo(kind=kind)


@dataclass(frozen=True)
class Finding:
    check: str
    connector: str
    message: str
    fix: str
    key: str | None = None
    waived: str | None = None  # the written reason, when waived

    def as_dict(self) -> dict[str, str | None]:
        return {
            "check": self.check,
            "connector": self.connector,
            "key": self.key,
            "message": self.message,
            "fix": self.fix,
            "waived": self.waived,
        }


Check = Callable[[RenderedConnector, PluginInfo], Iterator[Finding]]


def _finding(c: RenderedConnector, check: str, message: str, fix: str, key: str | None = None) -> Finding:
    return Finding(check=check, connector=c.name, message=message, fix=fix, key=key)


def source_idempotent_producer(c: RenderedConnector, plugin: PluginInfo) -> Iterator[Finding]:
    if plugin.kind != "source":
        return
    wanted = {"producer.override.enable.idempotence": "true", "producer.override.acks": "all"}
    for key, value in wanted.items():
        if c.config.get(key, "").lower() != value:
            yield _finding(
                c,
                "source-idempotent-producer",
                f"{key} is {c.config.get(key)!r}, not {value!r}",
                f'set "{key}": "{value}" so retries cannot duplicate or reorder records',
                key,
            )
    in_flight = c.config.get("producer.override.max.in.flight.requests.per.connection")
    if in_flight is not None and (not in_flight.isdigit() or int(in_flight) > 5):
        key = "producer.override.max.in.flight.requests.per.connection"
        yield _finding(
            c,
            "source-idempotent-producer",
            f"{key} is {in_flight}, above 5",
            "at most 5 keeps per-partition order with idempotence",
            key,
        )


def sink_read_committed(c: RenderedConnector, plugin: PluginInfo) -> Iterator[Finding]:
    key = "consumer.override.isolation.level"
    if plugin.kind == "sink" and c.config.get(key) != "read_committed":
        yield _finding(
            c,
            "sink-read-committed",
            f"{key} is {c.config.get(key)!r}",
            f'set "{key}": "read_committed" so aborted transactions are never delivered',
            key,
        )


def sink_error_routing(c: RenderedConnector, plugin: PluginInfo) -> Iterator[Finding]:
    if plugin.kind != "sink":
        return
    check = "sink-error-routing"
    if c.config.get("errors.tolerance") != "all":
        yield _finding(
            c,
            check,
            "errors.tolerance is not 'all': one bad record stops the sink",
            'set "errors.tolerance": "all" and route failures to a DLQ topic',
            "errors.tolerance",
        )
    dlq = c.config.get("errors.deadletterqueue.topic.name", "")
    if not dlq.startswith(DLQ_PREFIX):
        yield _finding(
            c,
            check,
            f"errors.deadletterqueue.topic.name is {dlq!r}, not a dlq.* topic",
            'set "errors.deadletterqueue.topic.name": "dlq.<stage>"',
            "errors.deadletterqueue.topic.name",
        )
    if c.config.get("errors.deadletterqueue.context.headers.enable") != "true":
        key = "errors.deadletterqueue.context.headers.enable"
        yield _finding(
            c, check, f"{key} is not true: DLQ records would lose why they failed", f'set "{key}": "true"', key
        )


def source_business_key(c: RenderedConnector, plugin: PluginInfo) -> Iterator[Finding]:
    if plugin.kind != "source" or c.connector_class.startswith(KEYED_SOURCE_PREFIXES):
        return
    aliases = [a.strip() for a in c.config.get("transforms", "").split(",") if a.strip()]
    types = {c.config.get(f"transforms.{alias}.type", "") for alias in aliases}
    if not types & set(KEY_SETTING_TRANSFORMS):
        yield _finding(
            c,
            "source-business-key",
            "no transform sets the record key to a business id",
            "add a key transform, e.g. dev.ikkai.connect.transforms.JsonFieldToKey with "
            "field=payment_id, or ValueToKey + ExtractField$Key on structured values",
            "transforms",
        )


def topic_naming(c: RenderedConnector, plugin: PluginInfo) -> Iterator[Finding]:
    topics: list[tuple[str, str]] = []
    for key in ("topic", "topics", "kafka.topic", "errors.deadletterqueue.topic.name"):
        topics += [(key, t.strip()) for t in c.config.get(key, "").split(",") if t.strip()]
    for key, value in c.config.items():
        if key.startswith("transforms.") and key.endswith(".replacement"):
            topics.append((key, value))
    for key, topic in topics:
        if not TOPIC_NAME.match(topic):
            yield _finding(
                c,
                "topic-naming",
                f"{key}: {topic!r} is not ingest.<endpoint>, events.<type>, outbox.* or dlq.*",
                "rename the topic to say what stage it belongs to",
                key,
            )
        elif plugin.kind == "source" and key in ("topic", "kafka.topic") and not topic.startswith(INGEST):
            yield _finding(
                c,
                "topic-naming",
                f"{key}: source writes to {topic!r}, not ingest.<endpoint>",
                "sources land raw data in ingest.<endpoint>; enrichment writes events.*",
                key,
            )


def source_exactly_once(c: RenderedConnector, plugin: PluginInfo) -> Iterator[Finding]:
    key = "exactly.once.support"
    if plugin.kind == "source" and c.config.get(key) != "required":
        yield _finding(
            c,
            "source-exactly-once",
            f"{key} is {c.config.get(key)!r}",
            f'set "{key}": "required" (waive with a reason if the plugin cannot support it)',
            key,
        )


def secrets_as_placeholders(
    c: RenderedConnector, plugin: PluginInfo, providers: Collection[str] = DEFAULT_PROVIDERS
) -> Iterator[Finding]:
    """A secret is a reference to a config provider the environment's workers have, never a literal,
    also inside a URL."""
    for key in sorted(c.config):
        value = c.config[key]
        typed = key in plugin.password_keys
        if not (typed or named_like_secret(key)) and carries_url_credentials(value):
            yield _finding(
                c,
                "secret-placeholder",
                f"{key} holds a URL with a literal credential in it (user info or a password-like parameter)",
                "take it out of the URL: into the connector's own password key, or write the parameter's value "
                f"as a config-provider placeholder (e.g. ?password=${{file:/etc/ikkai/secrets.properties:{key}}}); "
                f"this environment's config_providers: {', '.join(providers)}",
                key,
            )
            continue
        if not ((typed or named_like_secret(key)) and value.strip()):
            continue
        why = "is PASSWORD-typed" if typed else "is named like a secret"
        provider = placeholder_provider(value)
        if provider is None:
            yield _finding(
                c,
                "secret-placeholder",
                f"{key} {why} and holds a literal value",
                f'reference it through a config provider, e.g. "{key}": "${{file:/etc/ikkai/secrets.'
                f'properties:{key}}}" (or ${{dir:…}}, ${{env:…}}, ${{secrets:<namespace>/<secret>:<key>}}); '
                f"this environment's config_providers: {', '.join(providers)}",
                key,
            )
        elif provider not in providers:
            yield _finding(
                c,
                "secret-placeholder",
                f"{key} {why} and references the config provider {provider!r}, which this environment's "
                f"workers do not have (config_providers: {', '.join(providers)})",
                f"use one of {', '.join(providers)}, or add {provider!r} to config_providers in the environment's "
                "values (and to the worker's config.providers)",
                key,
            )


CHECKS: dict[str, Check] = {
    "source-idempotent-producer": source_idempotent_producer,
    "sink-read-committed": sink_read_committed,
    "sink-error-routing": sink_error_routing,
    "source-business-key": source_business_key,
    "topic-naming": topic_naming,
    "source-exactly-once": source_exactly_once,
    "secret-placeholder": secrets_as_placeholders,
}


def lint_connector(
    c: RenderedConnector, catalog: PluginCatalog = PluginCatalog(), providers: Collection[str] = DEFAULT_PROVIDERS
) -> list[Finding]:
    """Every check over one connector; ``providers``: the config providers whose placeholders are accepted."""
    plugin = catalog.info(c.connector_class)
    checks: dict[str, Check] = {**CHECKS, "secret-placeholder": partial(secrets_as_placeholders, providers=providers)}
    findings = []
    for check_id, check in checks.items():
        waiver = c.spec.waiver(check_id)
        for found in check(c, plugin):
            findings.append(found if waiver is None else Finding(**{**found.__dict__, "waived": waiver.reason}))
    return findings


def lint_bundle(rendered: RenderedBundle, catalog: PluginCatalog = PluginCatalog()) -> list[Finding]:
    for c in rendered.connectors:
        for waiver in c.spec.waivers:
            if waiver.check not in CHECKS:
                raise BundleError(
                    rendered.name,
                    "bundle.yaml",
                    f"connector {c.spec.name}: waiver for unknown check {waiver.check!r}",
                    fix=f"checks: {', '.join(CHECKS)}",
                )
    return [finding for c in rendered.connectors for finding in lint_connector(c, catalog, rendered.config_providers)]


def require_clean(rendered: RenderedBundle, findings: list[Finding]) -> None:
    """Raise ``PolicyViolation`` when any finding is not waived."""
    open_findings = blocking(findings)
    if open_findings:
        raise PolicyViolation(rendered.name, [(f.check, f.connector, f.message, f.fix) for f in open_findings])


def blocking(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.waived is None]
