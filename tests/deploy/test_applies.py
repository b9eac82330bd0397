"""The record of applies (``_ikkai.applies``): what it holds (no secret, not even hashed), its bound, how the page
reads it; and, against the real stack, that every apply writes it and that a record that cannot be written never
fails the apply."""

from __future__ import annotations

import json
import shutil
import socket
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from confluent_kafka.admin import AdminClient, ConfigResource

from connectors.render import RenderedBundle, load_bundle, render_bundle
from deploy import applies, bundle_ops
from deploy.applies import RECORD_MAX, config_digest, parse_value, record_value
from deploy.bundle_ops import BundleRequest
from deploy.bundle_output import render_text
from deploy.connect_rest import ConnectClient
from deploy.reconcile import ValidationFailed
from deploy.serve.page.views import AS_RENDERED, CHANGED, bundle_row, last_apply_view
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.topics import APPLIES
from ikkai.settings import Endpoints
from stack.kit.topic_io import read_all

SHIPPED = Path(__file__).resolve().parents[2] / "connectors" / "bundles"
SECRET = "hunter2-" + "q" * 8  # a literal secret, waived on purpose: it must never reach the record
SECRET_KEYS = '"connection.password": {{ password | tojson }},\n  "connection.url": {{ url | tojson }},\n  '  # noqa: S105


def bundle_folder(tmp_path: Path, owner: str = "payments team") -> Path:
    """payments-ingest under a name and owner prefix of its own, with two keys holding a (waived) literal secret."""
    hex_ = uuid.uuid4().hex[:8]
    folder = tmp_path / f"applies-{hex_}"
    shutil.copytree(SHIPPED / "payments-ingest", folder)
    manifest = yaml.safe_load((folder / "bundle.yaml").read_text())
    waiver = {"check": "secret-placeholder", "reason": "a test of the record of applies: the secret must not leak"}
    manifest.update(name=folder.name, owner_prefix=f"applies-{hex_}.", owner=owner)
    for connector in manifest["connectors"]:
        connector["waivers"] = [waiver]
    (folder / "bundle.yaml").write_text(yaml.safe_dump(manifest))
    template = folder / "templates" / "file-source.json.j2"
    template.write_text(template.read_text().replace('"errors.tolerance"', SECRET_KEYS + '"errors.tolerance"'))
    return folder


def sets(folder: Path, secret: str = SECRET, *extra: str) -> tuple[str, ...]:
    drops = folder.parent / f"{folder.name}-drops"
    drops.mkdir(exist_ok=True)
    found = []
    for source in ("payments", "refunds"):
        (drops / f"{source}.jsonl").touch()
        found += [f"sources.{source}.file={drops / source}.jsonl", f"sources.{source}.topic=ingest.{folder.name}"]
    return (*found, f"password={secret}", f"url=jdbc:postgresql://db/x?user=a&password={secret}", *extra)


def rendered(folder: Path, secret: str = SECRET, *extra: str) -> RenderedBundle:
    return render_bundle(load_bundle(folder), "dev", sets(folder, secret, *extra))


def test_the_digest_is_of_the_redacted_render_so_a_secret_changes_nothing(tmp_path: Path) -> None:
    folder = bundle_folder(tmp_path)
    digest = config_digest(rendered(folder))
    assert digest == config_digest(rendered(folder, "another-secret-value"))
    assert digest != config_digest(rendered(folder, SECRET, "partitions=5"))  # any other value does


def test_the_record_holds_who_when_digest_result_and_names_and_no_secret(tmp_path: Path) -> None:
    bundle = rendered(bundle_folder(tmp_path))
    when = datetime(2026, 11, 26, 19, 40, 2, tzinfo=UTC)
    names = [c.name for c in bundle.connectors]
    value = record_value(bundle, who="ana@build-7", when=when, result=applies.APPLIED, written=names)
    assert SECRET.encode() not in value and b"hunter2" not in value
    assert json.loads(value) == {
        "bundle": bundle.name, "env": "dev", "who": "ana@build-7", "when": "2026-11-26T19:40:02Z",
        "digest": config_digest(bundle), "result": "applied", "written": names,
    }  # fmt: skip
    last = parse_value(value)
    assert last is not None and (last.who, last.result, last.written) == ("ana@build-7", "applied", tuple(names))


def test_a_record_is_bounded_and_says_how_many_names_it_left_out(tmp_path: Path) -> None:
    bundle = rendered(bundle_folder(tmp_path))
    names = [f"connector-{i:05d}-" + "n" * 200 for i in range(1000)]
    value = record_value(bundle, who="x" * 10_000, when=datetime.now(UTC), result=applies.APPLIED, written=names)
    data = json.loads(value)
    assert len(value) <= RECORD_MAX
    assert data["written"] == names[: len(data["written"])] and data["left_out"] == 1000 - len(data["written"])
    assert 0 < len(data["written"]) < 1000 and len(data["who"]) == 200


@pytest.mark.parametrize("value", [None, b"", b"not json", b'{"who": "x"}', b"[1]", b"{" + b" " * RECORD_MAX + b"}"])
def test_a_tombstone_or_a_foreign_value_is_no_last_apply(value: bytes | None) -> None:
    assert parse_value(value) is None


def test_the_bundles_row_shows_the_owner_and_whether_the_bundle_renders_as_it_was_applied(tmp_path: Path) -> None:
    folder = bundle_folder(tmp_path)
    value = record_value(rendered(folder), who="ana@build-7", when=datetime.now(UTC), result="applied", written=[])
    last = parse_value(value)
    now = last_apply_view(last, config_digest(rendered(folder, "a-rotated-secret")))
    assert now is not None and now["since"] == AS_RENDERED and now["who"] == "ana@build-7"
    changed = last_apply_view(last, config_digest(rendered(folder, SECRET, "partitions=5")))
    assert changed is not None and changed["since"] == CHANGED
    assert last_apply_view(None, "d") is None
    row = bundle_row("b", {"pending": False, "connectors": []}, owner="payments team", last_apply=now)
    assert (row["owner"], row["last_apply"]) == ("payments team", now)


def test_render_json_names_the_owner(tmp_path: Path) -> None:
    folder = bundle_folder(tmp_path, owner="payments team (#payments-oncall)")
    data = bundle_ops.render_data(BundleRequest(str(folder), "dev", sets(folder)))
    assert data["owner"] == "payments team (#payments-oncall)"
    assert render_text(data).splitlines()[0] == "# owner: payments team (#payments-oncall)"


# -- against the real stack -------------------------------------------------------------------------------------


def clusters_file(tmp_path: Path, stack: Endpoints, bootstrap: str) -> Path:
    path = tmp_path / "clusters.yaml"
    path.write_text(yaml.safe_dump({"dev": {"connect_url": stack.connect_url, "bootstrap_servers": bootstrap}}))
    return path


def remove(stack: Endpoints, folder: Path) -> None:
    client = ConnectClient(stack.connect_url)
    prefix = yaml.safe_load((folder / "bundle.yaml").read_text())["owner_prefix"]
    for name in client.connectors():
        if name.startswith(prefix):
            client.delete_connector(name)


@pytest.mark.integration
def test_every_apply_is_recorded_compacted_without_its_secrets(
    stack: Endpoints, cluster: KafkaContext, tmp_path: Path
) -> None:
    folder = bundle_folder(tmp_path)
    clusters = clusters_file(tmp_path, stack, stack.bootstrap_servers)
    warnings: list[str] = []
    try:
        with pytest.raises(ValidationFailed):  # Connect refuses tasks.max=0: a failed apply is recorded too
            bundle_ops.apply_data(BundleRequest(str(folder), "dev", sets(folder, SECRET, "tasks_max=0"),
                                                clusters=clusters), warn=warnings.append)  # fmt: skip
        data = bundle_ops.apply_data(BundleRequest(str(folder), "dev", sets(folder), clusters=clusters),
                                     warn=warnings.append)  # fmt: skip
    finally:
        remove(stack, folder)
    assert warnings == [] and "record_warning" not in data and len(data["written"]) == 2
    key = f"dev/{folder.name}".encode()
    # What a read_committed consumer of the topic sees: both records, neither with the secret in any form.
    mine = [(k, v) for k, v in read_all(cluster, APPLIES) if k == key]
    assert [json.loads(v or b"")["result"] for _, v in mine] == ["failed", "applied"]
    assert not [v for _, v in mine if v is None or SECRET.encode() in v or b"hunter2" in v]
    failed, applied = (json.loads(v or b"") for _, v in mine)
    assert failed["written"] == [] and applied["written"] == data["written"]
    assert applied["who"] == applies.cli_user() and applied["digest"] == config_digest(rendered(folder, "other"))
    # The page's bounded read finds the last one, and the topic keeps the last per key.
    found, complete = applies.last_applies(KafkaContext(stack.bootstrap_servers), "dev", 30)
    last = found[folder.name]
    assert complete
    assert (last.result, last.digest, last.written) == ("applied", applied["digest"], tuple(data["written"]))
    resource = ConfigResource(ConfigResource.Type.TOPIC, APPLIES)
    admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
    described = admin.describe_configs([resource])[resource].result(timeout=30)  # type: ignore[no-untyped-call]
    assert described["cleanup.policy"].value == "compact"


@pytest.mark.integration
def test_a_record_that_cannot_be_written_is_a_warning_and_the_apply_stands(stack: Endpoints, tmp_path: Path) -> None:
    with socket.socket() as closed:  # a port nothing listens on once this closes: Kafka "down"
        closed.bind(("127.0.0.1", 0))
        nowhere = f"127.0.0.1:{closed.getsockname()[1]}"
    folder = bundle_folder(tmp_path)
    warnings: list[str] = []
    try:
        request = BundleRequest(str(folder), "dev", sets(folder), clusters=clusters_file(tmp_path, stack, nowhere))
        data = bundle_ops.apply_data(request, warn=warnings.append)
    finally:
        remove(stack, folder)
    assert len(data["written"]) == 2 and set(data["states"].values()) == {"RUNNING"}
    assert len(warnings) == 1 and warnings[0].startswith(f"warning: apply of dev/{folder.name} not recorded")
    assert SECRET not in warnings[0]
