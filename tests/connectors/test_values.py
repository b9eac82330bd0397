"""Values a person types: a ``--set`` no template uses is an error naming the keys that exist, and values
are type-checked against what the platform and the bundle declare."""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors.errors import BundleError
from connectors.render import load_bundle, render_bundle
from connectors.values import parse_set
from tests.connectors.conftest import SHIPPED, BundleFactory

# retry.* is optional (left out when unset); targets are iterated: new keys there are real changes.
TEMPLATE = """{
  "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
  "tasks.max": {{ tasks_max | tojson }},
  "topic": {{ source.topic | tojson }},
  "file": {{ source.file | tojson }},
  {%- if retry.backoff_ms is defined %}
  "retry.backoff.ms": {{ retry.backoff_ms | tojson }},
  {%- endif %}
  "version": {{ version | tojson }},
  "enabled": {{ enabled | tojson }},
  "targets": {{ targets | join(",") | tojson }}
}
"""
DEFAULTS = {
    "source": {"topic": "ingest.x", "file": "/tmp/x"},
    "retry": {},
    "version": "1.0",
    "enabled": True,
    "targets": {"a": {"url": "http://a"}},
    "partitions": 3,
}


@pytest.fixture
def folder(make_bundle: BundleFactory) -> Path:
    manifest = {
        "name": "b",
        "owner_prefix": "b.",
        "defaults": DEFAULTS,
        "connectors": [{"name": "one", "template": "templates/one.json.j2"}],
    }
    return make_bundle(manifest, {"templates/one.json.j2": TEMPLATE}, {"dev": {}, "bad": {"partitions": "many"}})


def render(folder: Path, *sets: str, env: str = "dev") -> dict[str, str]:
    return dict(render_bundle(load_bundle(folder), env, sets).connectors[0].config)


def test_a_top_level_typo_names_the_key_the_closest_one_and_the_keys_that_exist(folder: Path) -> None:
    with pytest.raises(BundleError) as caught:
        render(folder, "tasks_mx=3")
    error = caught.value
    assert error.file == "--set"
    assert "tasks_mx is used by no template" in str(error)
    assert error.fix is not None and error.fix.startswith("did you mean tasks_max?")
    assert "partitions" in error.fix and "source" in error.fix and "env" not in error.fix.split(": ", 1)[1].split(", ")


def test_a_nested_typo_lists_the_keys_under_its_parent(folder: Path) -> None:
    with pytest.raises(BundleError) as caught:
        render(folder, "source.fiel=/tmp/y")
    assert caught.value.fix == "did you mean source.file? values under source: file, topic"


def test_a_declared_value_no_template_reads_is_an_error_too(folder: Path) -> None:
    with pytest.raises(BundleError, match="partitions is declared but used by no template"):
        render(folder, "partitions=6")
    render(folder, "partitions=3")  # the value it has already: changes nothing, harms nothing


def test_new_keys_that_change_the_output_are_accepted(folder: Path) -> None:
    config = render(folder, "retry.backoff_ms=200", "targets.b.url=http://b", "source.file=/tmp/z")
    assert config["retry.backoff.ms"] == "200" and config["targets"] == "a,b" and config["file"] == "/tmp/z"


def test_text_for_a_number_is_an_error_that_says_where_the_type_is_declared(folder: Path) -> None:
    with pytest.raises(BundleError) as caught:
        render(folder, "tasks_max=many")
    assert str(caught.value) == (
        "bundle b --set: tasks_max is text ('many'), but the platform defaults declare it as a number (1): "
        "give tasks_max a number"
    )
    with pytest.raises(BundleError, match=r"values/bad.yaml: partitions is text \('many'\), but the bundle defaults"):
        render(folder, env="bad")


@pytest.mark.parametrize(
    ("assignment", "problem"),
    [
        ("enabled=sometimes", "enabled is text ('sometimes'), but the bundle defaults declare it as a boolean"),
        ("source=/tmp/x", "source is text ('/tmp/x'), but the bundle defaults declare it as a mapping"),
        ("targets.a=[1, 2]", "targets.a is a list ([1, 2]), but the bundle defaults declare it as a mapping"),
        ("tasks_max=true", "tasks_max is a boolean (True), but the platform defaults declare it as a number"),
    ],
)
def test_each_declared_type_is_checked(folder: Path, assignment: str, problem: str) -> None:
    with pytest.raises(BundleError) as caught:
        render(folder, assignment)
    assert problem in str(caught.value)


def test_text_values_keep_what_was_typed(folder: Path) -> None:
    assert render(folder, "version=1.10")["version"] == "1.10"  # not the number 1.1
    assert parse_set(["a=true", "b=007", "c=true"], "b", declared={"a": "x", "b": "y", "c": False}) == {
        "a": "true",
        "b": "007",
        "c": True,
    }
    assert render(folder, "tasks_max=4")["tasks.max"] == "4"


def test_shipped_bundles_take_their_documented_overrides() -> None:
    outbox = render_bundle(
        load_bundle(SHIPPED / "outbox-sink"),
        "prod",
        ["kafka.bootstrap_servers=b:9092", "retry.backoff_initial_ms=100", "targets.extra-api.url=http://x"],
    ).connectors[0]
    assert outbox.config["outbox.retry.backoff.initial.ms"] == "100"
    assert outbox.config["outbox.target.extra-api.url"] == "http://x"
    with pytest.raises(BundleError, match=r"did you mean database\.password"):
        render_bundle(load_bundle(SHIPPED / "postgres-cdc"), "dev", ["database.pasword=x"])
