"""bundle.yaml's optional ``owner``: a team or contact, bounded and printable, refused with the file and field named."""

from __future__ import annotations

import pytest

from connectors.errors import BundleError
from connectors.manifest import OWNER_MAX, parse_manifest


def manifest(**extra: object) -> dict[str, object]:
    return {"name": "b", "owner_prefix": "b.", "connectors": [{"name": "one", "template": "t.j2"}], **extra}


def test_owner_is_kept_trimmed() -> None:
    assert parse_manifest(manifest(owner="  payments-team (#payments-oncall)  "), "b").owner == (
        "payments-team (#payments-oncall)"
    )


def test_owner_is_optional() -> None:
    assert parse_manifest(manifest(), "b").owner == ""


def test_owner_of_the_longest_length_is_kept() -> None:
    assert parse_manifest(manifest(owner="x" * OWNER_MAX), "b").owner == "x" * OWNER_MAX


@pytest.mark.parametrize(
    ("owner", "problem"),
    [
        ("x" * (OWNER_MAX + 1), f"owner: is {OWNER_MAX + 1} characters long, more than {OWNER_MAX}"),
        ("team\nrm -rf", "owner: must be printable text on one line"),
        ("team\x1b[31m", "owner: must be printable text on one line"),
        ("", "owner: must be a non-empty string"),
        (["a", "b"], "owner: must be a non-empty string"),
        (7, "owner: must be a non-empty string"),
    ],
)
def test_owner_that_is_not_a_short_printable_text_is_refused_naming_file_and_field(owner: object, problem: str) -> None:
    with pytest.raises(BundleError) as caught:
        parse_manifest(manifest(owner=owner), "b")
    assert caught.value.file == "bundle.yaml"
    assert str(caught.value).startswith(f"bundle b bundle.yaml: {problem}")
    assert "e.g. owner: payments-team" in str(caught.value)
