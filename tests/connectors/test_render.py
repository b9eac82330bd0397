"""Rendering: value layers, StrictUndefined errors with file and line, strict manifests."""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors.errors import BundleError
from connectors.render import RenderedConnector, load_bundle, render_bundle
from connectors.secrets import redact
from tests.connectors.conftest import SHIPPED, BundleFactory

TEMPLATE = """{
  "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
  "tasks.max": {{ tasks_max | tojson }},
  "topic": {{ topic | tojson }},
  "file": {{ db_host | tojson }}
}
"""


def manifest(**extra: object) -> dict[str, object]:
    return {
        "name": "b",
        "owner_prefix": "b.",
        "connectors": [{"name": "one", "template": "templates/one.json.j2"}],
        **extra,
    }


def test_values_layer_platform_then_bundle_then_env_then_set(make_bundle: BundleFactory) -> None:
    folder = make_bundle(
        manifest(defaults={"topic": "ingest.bundle", "db_host": "bundle-host", "tasks_max": 2}),
        {"templates/one.json.j2": TEMPLATE},
        {"dev": {"db_host": "env-host"}},
    )
    config = render_bundle(load_bundle(folder), "dev", ["topic=ingest.cli"]).connectors[0].config
    assert config["tasks.max"] == "2"  # bundle default beats the platform default (1)
    assert config["file"] == "env-host"  # env beats bundle default
    assert config["topic"] == "ingest.cli"  # --set beats everything
    assert config["name"] == "b.one"  # owner prefix + connector name


def test_platform_default_is_the_lowest_layer(make_bundle: BundleFactory) -> None:
    folder = make_bundle(
        manifest(), {"templates/one.json.j2": TEMPLATE}, {"dev": {"topic": "ingest.x", "db_host": "h"}}
    )
    assert render_bundle(load_bundle(folder), "dev").connectors[0].config["tasks.max"] == "1"


def test_undefined_variable_names_file_line_and_value(make_bundle: BundleFactory) -> None:
    folder = make_bundle(manifest(), {"templates/one.json.j2": TEMPLATE}, {"dev": {"topic": "ingest.x"}})
    with pytest.raises(BundleError) as caught:
        render_bundle(load_bundle(folder), "dev")
    error = caught.value
    assert (error.file, error.line) == ("templates/one.json.j2", 5)
    assert str(error) == (
        "bundle b templates/one.json.j2 line 5: undefined variable 'db_host': "
        "define it in values/dev.yaml, the bundle defaults or --set"
    )


def test_undefined_nested_value_is_named(make_bundle: BundleFactory) -> None:
    template = '{\n  "topic": {{ sources.payments.topic | tojson }}\n}\n'
    folder = make_bundle(manifest(), {"templates/one.json.j2": template}, {"dev": {"sources": {"payments": {}}}})
    with pytest.raises(BundleError, match=r"line 2: undefined variable 'topic'"):
        render_bundle(load_bundle(folder), "dev")


def test_template_syntax_error_has_its_line(make_bundle: BundleFactory) -> None:
    folder = make_bundle(manifest(), {"templates/one.json.j2": '{\n\n  "a": {{ x \n}'}, {"dev": {}})
    with pytest.raises(BundleError) as caught:
        render_bundle(load_bundle(folder), "dev")
    assert caught.value.line == 4 and "syntax error" in str(caught.value)


def test_invalid_json_output_is_reported(make_bundle: BundleFactory) -> None:
    folder = make_bundle(
        manifest(), {"templates/one.json.j2": '{"topic": {{ topic }}}'}, {"dev": {"topic": "ingest.x"}}
    )
    with pytest.raises(BundleError, match=r"renders to invalid JSON.*tojson"):
        render_bundle(load_bundle(folder), "dev")


def test_missing_environment_lists_the_known_ones(make_bundle: BundleFactory) -> None:
    folder = make_bundle(manifest(), {"templates/one.json.j2": TEMPLATE}, {"dev": {}, "prod": {}})
    with pytest.raises(BundleError, match=r"values/staging\.yaml: not found: environments of this bundle: dev, prod"):
        render_bundle(load_bundle(folder), "staging")


@pytest.mark.parametrize(
    ("patch", "problem"),
    [
        ({"colour": "red"}, "unknown key 'colour'"),
        ({"owner_prefix": "Payments"}, "must be lower-case and end with"),
        ({"connectors": []}, "must be a non-empty list"),
        ({"connectors": [{"name": "one", "template": "t", "state": "sleeping"}]}, "'sleeping' is not one of"),
        (
            {"connectors": [{"name": "one", "template": "t", "waivers": [{"check": "x", "reason": "no"}]}]},
            "a waiver needs a written reason",
        ),
        ({"connectors": [{"name": "one", "template": "t", "tmeplate": "t"}]}, "unknown key 'tmeplate'"),
    ],
)
def test_manifest_rejects_what_it_does_not_know(
    make_bundle: BundleFactory, patch: dict[str, object], problem: str
) -> None:
    folder = make_bundle({**manifest(), **patch}, {}, {"dev": {}})
    with pytest.raises(BundleError, match=problem):
        load_bundle(folder)


def test_shipped_payments_bundle_renders_for_every_environment() -> None:
    bundle = load_bundle(SHIPPED / "payments-ingest")
    for env in ("dev", "prod"):
        rendered = render_bundle(bundle, env)
        assert [c.name for c in rendered.connectors] == ["payments-ingest.payments", "payments-ingest.refunds"]
        assert rendered.connector("payments-ingest.payments").config["transforms.businessKey.field"] == "payment_id"


def test_set_parses_scalars_and_rejects_garbage(make_bundle: BundleFactory, tmp_path: Path) -> None:
    folder = make_bundle(
        manifest(), {"templates/one.json.j2": TEMPLATE}, {"dev": {"topic": "ingest.x", "db_host": "h"}}
    )
    rendered = render_bundle(load_bundle(folder), "dev", ["tasks_max=4"])
    assert rendered.connectors[0].config["tasks.max"] == "4"
    with pytest.raises(BundleError, match="is not key=value"):
        render_bundle(load_bundle(folder), "dev", ["tasks_max"])


def test_set_accepts_yaml_lists_for_list_values() -> None:
    from connectors.values import parse_set

    assert parse_set(["tables=[{name: payments, key: payment_id}]", "db.port=5433", "x=a: b", "y={z}"], "b") == {
        "tables": [{"name": "payments", "key": "payment_id"}],
        "db": {"port": 5433},
        "x": "a: b",
        "y": "{z}",
    }
    rendered = render_bundle(load_bundle(SHIPPED / "postgres-cdc"), "dev", ["tables=[{name: orders, key: order_id}]"])
    assert rendered.connectors[0].config["transforms.key_orders.field"] == "order_id"


def test_a_set_equal_to_a_templates_own_default_is_used_and_a_typo_beside_it_is_not() -> None:
    """``method=POST`` renders what the template's ``default("POST")`` renders, yet the template reads it."""
    bundle = load_bundle(SHIPPED / "outbox-sink")
    sets = ["kafka.bootstrap_servers=b:9092", "targets.down-api.url=http://down/api", "targets.down-api.method=POST"]
    rendered = render_bundle(bundle, "dev", sets)
    [config] = [c.config for c in rendered.connectors]
    assert config["outbox.target.down-api.method"] == "POST"
    with pytest.raises(BundleError, match=r"targets.down-api.metod is used by no template.*did you mean"):
        render_bundle(bundle, "dev", [*sets, "targets.down-api.metod=POST"])


@pytest.mark.parametrize(
    "reach",
    [
        "cycler.__init__.__globals__.os.popen('touch ' ~ marker).read()",
        "joiner.__init__.__globals__.os.system('touch ' ~ marker)",
        "namespace.__init__.__globals__['os'].system('touch ' ~ marker)",
    ],
)
def test_a_template_reaching_for_python_internals_is_refused_and_runs_nothing(
    make_bundle: BundleFactory, tmp_path: Path, reach: str
) -> None:
    """A template is code from a bundle author: it renders in Jinja's sandbox, so it cannot run a command."""
    marker = tmp_path / "ran"
    template = '{\n  "topic": "ingest.x",\n  "file": "{{ ' + reach + ' }}"\n}\n'
    folder = make_bundle(manifest(), {"templates/one.json.j2": template}, {"dev": {"marker": str(marker)}})
    with pytest.raises(BundleError) as caught:
        render_bundle(load_bundle(folder), "dev")
    assert not marker.exists(), "the template ran a shell command"
    error = caught.value
    assert (error.file, error.line) == ("templates/one.json.j2", 3)
    assert "\n" not in str(error)
    assert str(error).startswith("bundle b templates/one.json.j2 line 3: the template reaches for '__init__'")
    assert "a template may only read values" in str(error)


def test_credentials_inside_urls_are_masked_in_the_printed_config_and_the_repr() -> None:
    """``redact`` (render's masked output, plan, describe) hides a URL's credentials under any key name."""
    config = {"connection.url": "jdbc:postgresql://db/x?user=a&password=hunter2", "api.url": "http://svc:pw@h/v1"}
    shown = redact(config)
    assert shown == {
        "connection.url": "jdbc:postgresql://db/x?user=a&password=<redacted>",
        "api.url": "http://<redacted>@h/v1",
    }
    spec = load_bundle(SHIPPED / "payments-ingest").manifest.connectors[0]
    text = repr(RenderedConnector(name="b.one", spec=spec, config=config))
    assert "hunter2" not in text and "svc:pw" not in text


def test_many_sets_are_checked_with_each_value_parsed_and_each_template_compiled_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each --set is checked by rendering without it; that must not re-read every file and every --set and
    recompile the templates each time (80 sets took 14 s)."""
    import jinja2
    import yaml

    loads: list[str] = []
    compiles: list[str] = []
    real_load, real_compile = yaml.safe_load, jinja2.Environment.compile
    monkeypatch.setattr(yaml, "safe_load", lambda text: loads.append(str(text)[:20]) or real_load(text))
    monkeypatch.setattr(
        jinja2.Environment,
        "compile",
        lambda self, *a, **k: compiles.append(str(k.get("name"))) or real_compile(self, *a, **k),
    )
    bundle = load_bundle(SHIPPED / "outbox-sink")
    for n in (10, 40):
        loads.clear()
        compiles.clear()
        sets = ["kafka.bootstrap_servers=localhost:9092"] + [f"targets.t{i}.url=http://h{i}/x" for i in range(n)]
        rendered = render_bundle(bundle, "dev", sets)
        assert rendered.connectors[0].config["outbox.target.t3.url"] == "http://h3/x"
        assert len(loads) <= n + 10, f"{len(loads)} YAML reads for {n} sets"
        assert len(compiles) <= 2, f"{len(compiles)} template compiles for {n} sets"
