"""Every shipped schema version is backward compatible with the one before; a bad change is caught."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ikkai.contract.codec import SchemaCatalog, SchemaError, SingleObjectCodec, schemas_dir
from ikkai.contract.compatibility import catalog_problems, check_catalog, reader_problems


def test_the_shipped_catalog_is_backward_compatible() -> None:
    check_catalog(SchemaCatalog.from_dir(schemas_dir()))


def _copy_with_v2(tmp_path: Path, change: Any) -> Path:
    root = tmp_path / "schemas"
    (root / "payment_event").mkdir(parents=True)
    shutil.copy(schemas_dir() / "payment_event" / "v1.avsc", root / "payment_event" / "v1.avsc")
    v2 = json.loads((root / "payment_event" / "v1.avsc").read_text())
    change(v2)
    (root / "payment_event" / "v2.avsc").write_text(json.dumps(v2))
    return root


def _field(schema: dict[str, Any], name: str) -> dict[str, Any]:
    return next(f for f in schema["fields"] if f["name"] == name)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda s: s["fields"].append({"name": "channel", "type": "string"}), "new field has no default"),
        (lambda s: _field(s, "amount_minor").update(type="int"), "writer type long cannot be read as int"),
        (lambda s: _field(s, "card_present").update(type="string"), "writer type boolean cannot be read as string"),
        (lambda s: s.update(name="Payment"), "renamed"),
    ],
    ids=["field-without-default", "narrowed-type", "changed-type", "renamed-record"],
)
def test_an_incompatible_change_fails_the_check(tmp_path: Path, change: Any, problem: str) -> None:
    catalog = SchemaCatalog.from_dir(_copy_with_v2(tmp_path, change))
    assert any(problem in p for p in catalog_problems(catalog))
    with pytest.raises(SchemaError, match=r"payment_event/v2\.avsc"):
        check_catalog(catalog)


def test_what_the_checker_calls_incompatible_really_fails_to_decode(tmp_path: Path) -> None:
    root = _copy_with_v2(tmp_path, lambda s: s["fields"].append({"name": "channel", "type": "string"}))
    codec = SingleObjectCodec(SchemaCatalog.from_dir(root))
    record = {
        "event_id": "e", "payment_id": "p", "customer_id": "c", "merchant_id": "m", "amount_minor": 1,
        "currency": "EUR", "country": "DE", "card_present": True, "event_time": 0,
    }  # fmt: skip
    with pytest.raises(SchemaError, match="cannot read a record written with payment_event v1"):
        codec.decode("payment_event", codec.encode("payment_event", record, version=1))


@pytest.mark.parametrize(
    ("writer", "reader"),
    [
        ("int", "long"),
        ("long", "double"),
        ("string", ["null", "string"]),
        (["null", "int"], ["null", "long"]),
        ({"type": "array", "items": "int"}, {"type": "array", "items": "long"}),
        ({"type": "enum", "name": "A", "symbols": ["X"]}, {"type": "enum", "name": "A", "symbols": ["X", "Y"]}),
    ],
)
def test_allowed_promotions(writer: Any, reader: Any) -> None:
    wrap = lambda t: {"type": "record", "name": "R", "fields": [{"name": "f", "type": t}]}  # noqa: E731
    assert reader_problems(wrap(reader), wrap(writer)) == []


def test_a_gap_in_versions_is_reported(tmp_path: Path) -> None:
    root = _copy_with_v2(tmp_path, lambda s: None)
    (root / "payment_event" / "v2.avsc").rename(root / "payment_event" / "v3.avsc")
    assert any("without gaps" in p for p in catalog_problems(SchemaCatalog.from_dir(root)))
