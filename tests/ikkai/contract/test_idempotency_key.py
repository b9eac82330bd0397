"""The Idempotency-Key: the shared vectors byte for byte, and injective over explicit and default effects (v2).

tests/outbox_sink/idempotency_key_vectors.json is the file the sink's IdempotencyKeyTest (Java) reads
too; both languages derive every key in it. The property: no two different (decision, effect) pairs
share a v2 key, an effect being explicit (a name) or the default (target + path) — built from atoms
that collide under a plain join (``api/ok/1`` = ``api`` + ``/ok/1``, U+001F, ``:``, digits, tags).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ikkai.contract.ids import KEY_VERSION, idempotency_key, idempotency_key_preimage
from ikkai.contract.outbox import OutboxRequest, OutboxRequestError, derive_idempotency_key

VECTORS = json.loads((Path(__file__).parents[2] / "outbox_sink" / "idempotency_key_vectors.json").read_text("utf-8"))

ATOMS = ["api", "/ok", "/1", "api/ok/1", "ok", "/", "\x1f", ":", "1", "3", "2:v2", "e", "d", "1:e", "ü", "😀", ""]
texts = st.one_of(st.lists(st.sampled_from(ATOMS), max_size=4).map("".join), st.text(max_size=6))
Effect = tuple[str, ...]  # ("e", effect) explicit, or ("d", target, path) the default
effects = st.one_of(
    st.tuples(st.just("e"), texts.filter(bool)),  # an empty effect is the default one: not explicit
    st.tuples(st.just("d"), texts, texts),
)


def key(decision_id: str, effect: Effect, version: Any = KEY_VERSION) -> str:
    if effect[0] == "e":
        return idempotency_key(decision_id, effect[1], version=version)
    return idempotency_key(decision_id, None, effect[1], effect[2], version=version)


@pytest.mark.parametrize("vector", VECTORS["vectors"], ids=lambda v: f"{v['version']}: {v['name']}")
def test_the_shared_vectors_derive_byte_for_byte(vector: dict[str, Any]) -> None:
    parts = (vector["decision_id"], vector["effect"], vector["target"], vector["path"])
    assert idempotency_key_preimage(*parts, version=vector["version"]).hex() == vector["preimage_hex"]
    assert idempotency_key(*parts, version=vector["version"]) == vector["key"]


def neighbours(decision_id: str, effect: Effect) -> set[tuple[str, Effect]]:
    """The pairs a plain join would confuse with this one: its effect name as an explicit effect and as
    every target/path split of it, and every split of ``decision_id U+001F name`` at a U+001F."""
    name = effect[1] if effect[0] == "e" else effect[1] + effect[2]
    near: set[tuple[str, Effect]] = {(decision_id, effect)}
    near |= {(decision_id, ("d", name[:i], name[i:])) for i in range(len(name) + 1)}
    joined = decision_id + "\x1f" + name
    near |= {(joined[:i], ("e", joined[i + 1 :])) for i, c in enumerate(joined) if c == "\x1f" and joined[i + 1 :]}
    return near


@settings(max_examples=200, derandomize=True)
@given(st.lists(st.tuples(texts, effects), min_size=1, max_size=10))
def test_no_two_effects_share_a_v2_key(pairs: list[tuple[str, Effect]]) -> None:
    keys: dict[str, tuple[str, Effect]] = {}
    for pair in set().union(*(neighbours(*p) for p in pairs)):
        other = keys.setdefault(key(*pair, "v2"), pair)
        assert other == pair, f"{other!r} and {pair!r} share a key"


def test_v1_is_kept_for_the_migration_and_is_what_collided() -> None:
    explicit, default = ("d-1", ("e", "api/ok/1")), ("d-1", ("d", "api", "/ok/1"))
    assert key(*explicit, "v1") == key(*default, "v1")  # issue 44: why v2 exists
    assert key(*explicit, "v2") != key(*default, "v2")
    assert KEY_VERSION == "v2"  # what the shipped bundle's sink sends


def test_a_request_knows_its_key_in_each_version_and_which_version_a_key_is() -> None:
    explicit = OutboxRequest("d-1", "pay-1", "api", "/ok/1", b"{}", 0, effect="api/ok/1")
    default = OutboxRequest("d-1", "pay-1", "api", "/ok/1", b"{}", 0)
    assert explicit.effect_name == default.effect_name == "api/ok/1"  # one name (the receipt's effect) ...
    assert explicit.idempotency_key != default.idempotency_key  # ... two keys
    assert default.idempotency_key == derive_idempotency_key("d-1", target="api", path="/ok/1")
    assert explicit.idempotency_key == derive_idempotency_key("d-1", "api/ok/1")
    for request in (explicit, default):
        for version in ("v1", "v2"):
            assert request.key_version(request.idempotency_key_as(version)) == version
    assert explicit.key_version(default.idempotency_key) is None
    assert explicit.idempotency_key_as("v1") == default.idempotency_key_as("v1")


def test_the_contract_refuses_what_a_key_cannot_be_made_of() -> None:
    with pytest.raises(OutboxRequestError) as caught:
        derive_idempotency_key("d-1")  # neither an effect nor a target and path
    assert caught.value.field == "effect"
    with pytest.raises(OutboxRequestError) as caught:
        derive_idempotency_key("", "hold-payment")
    assert caught.value.field == "decision_id"
    with pytest.raises(OutboxRequestError) as caught:
        derive_idempotency_key("d-1", "a\x1fb", version="v1")  # v1 joins by U+001F
    assert caught.value.field == "effect"
    assert derive_idempotency_key("d-1", "a\x1fb") == idempotency_key("d-1", "a\x1fb")  # v2 takes any string
    with pytest.raises(OutboxRequestError) as caught:
        derive_idempotency_key("d-1", "hold-payment", version="v3")  # type: ignore[arg-type]
    assert caught.value.field == "version"
