"""The claim fold, pure: the first valid claim wins, handovers move exactly the owner's topics, shadows claim only
shadow topics, void claims change nothing, and the claim that made a query owner keeps its start parameters."""

from __future__ import annotations

import itertools
from typing import Any

from ikkai.contract.codec import default_codec
from ikkai.contract.owner_claims import CLAIM, HANDOVER, SHADOW, OwnerClaim, fold

LIVE = ("decisions.fraud", "outbox.requests", "dlq.infer")
_nonces = itertools.count()


def claim(query: str, kind: str = CLAIM, outputs: tuple[str, ...] = LIVE, **extra: Any) -> OwnerClaim:
    settings: dict[str, Any] = {"source_topic": "events.payments", "source_topic_id": "id-1", **extra}
    return OwnerClaim("ikkai", query, kind, output_topics=outputs, nonce=f"n{next(_nonces)}", **settings)


def valid(claims: list[OwnerClaim]) -> list[bool]:
    ownership = fold(claims)
    return [ownership.verdicts[c.nonce].valid for c in claims]


def test_the_first_claim_wins_and_a_later_claim_of_the_same_key_changes_nothing() -> None:
    """Compaction would keep the last record of a key: the fold reads every record, and the first valid one wins."""
    a, b, a_again = claim("a"), claim("b"), claim("a")
    ownership = fold([a, b, a_again])
    assert valid([a, b, a_again]) == [True, False, True]
    assert set(ownership.owners.values()) == {("ikkai", "a")}
    assert ownership.made_owner_by[("ikkai", "a")] == a  # its restart does not replace the claim that made it owner
    void = ownership.verdicts[b.nonce]
    assert "query a (app ikkai) owns decisions.fraud" in void.problem and "--after-query a" in void.fix
    assert "\n" not in void.problem + void.fix


def test_two_claims_in_either_order_make_exactly_one_owner() -> None:
    a, b = claim("a"), claim("b")
    assert valid([a, b]) == [True, False] and valid([b, a]) == [True, False]


def test_another_input_writing_the_same_topic_is_no_conflict() -> None:
    api, cdc = claim("enrich", outputs=("events.payments",)), claim("cdc", outputs=("events.payments",))
    cdc = OwnerClaim(**{**cdc.__dict__, "source_topic": "ingest.payments-db"})
    assert valid([api, cdc]) == [True, True]


def test_a_handover_moves_exactly_the_owners_topics_along_a_chain() -> None:
    a, b, c = claim("a"), claim("b", HANDOVER, from_query="a"), claim("c", HANDOVER, from_query="b")
    a_back, b_back = claim("a"), claim("b")
    ownership = fold([a, b, c, a_back, b_back])
    assert [ownership.verdicts[x.nonce].valid for x in (a, b, c, a_back, b_back)] == [True, True, True, False, False]
    assert set(ownership.owners.values()) == {("ikkai", "c")}
    assert ownership.made_owner_by[("ikkai", "c")].from_query == "b"
    assert "query c (app ikkai) owns" in ownership.verdicts[a_back.nonce].problem
    newcomer = claim("d")
    assert not fold([a, b, c, newcomer]).verdicts[newcomer.nonce].valid
    from_stale = claim("d", HANDOVER, from_query="a")  # a handed over already: the fix names who owns them now
    verdict = fold([a, b, c, from_stale]).verdicts[from_stale.nonce]
    assert not verdict.valid and "--after-query c" in verdict.fix


def test_a_handover_of_other_topics_is_void() -> None:
    """Case 3's rule: a handover names exactly the origin's topics (a shadow's are others)."""
    live = claim("live")
    partial = claim("p", HANDOVER, outputs=LIVE[:2], from_query="live")
    verdict = fold([live, partial]).verdicts[partial.nonce]
    assert not verdict.valid and "exactly the topics query live writes" in verdict.problem
    nobody = claim("n", HANDOVER, from_query="ghost")
    assert "nothing to hand over" in fold([nobody]).verdicts[nobody.nonce].problem


SHADOWS = ("decisions.fraud.shadow", "dlq.infer.shadow")


def test_a_shadow_claims_only_shadow_topics_and_takes_nothing_over() -> None:
    live = claim("live")
    shadow = claim("s", SHADOW, outputs=("decisions.fraud.shadow", "dlq.infer.shadow"))
    over_live = claim("s2", SHADOW, outputs=("decisions.fraud.shadow", "outbox.requests"))
    taking = claim("s3", SHADOW, outputs=("decisions.fraud.shadow",), from_query="live")
    ownership = fold([live, shadow, over_live, taking])
    assert [ownership.verdicts[x.nonce].valid for x in (live, shadow, over_live, taking)] == [True, True, False, False]
    assert "writes outbox.requests" in ownership.verdicts[over_live.nonce].problem
    assert "takes over query live's output" in ownership.verdicts[taking.nonce].problem
    assert ownership.owners[("events.payments", "outbox.requests")] == ("ikkai", "live")


def test_a_shadow_continues_only_a_shadow_of_exactly_its_topics() -> None:
    """A shadow's grown layout is a new shadow query after the old one (the refusal prints --after-query): valid when
    the origin owns exactly its *.shadow topics, and the live query's output stays the live query's. Found by the
    explorer: the printed command was refused. Mutation: every shadow with --after-query void -> s-p3 is refused."""
    live, shadow = claim("live"), claim("s", SHADOW, outputs=SHADOWS)
    grown = claim("s-p3", SHADOW, outputs=SHADOWS, from_query="s")
    again = claim("s-p3", SHADOW, outputs=SHADOWS, from_query="s")
    fewer = claim("s2", SHADOW, outputs=SHADOWS[:1], from_query="s-p3")
    ownership = fold([live, shadow, grown, again, fewer])
    assert [ownership.verdicts[x.nonce].valid for x in (live, shadow, grown, again, fewer)] == [
        True, True, True, True, False,
    ]  # fmt: skip
    assert {ownership.owners[("events.payments", t)] for t in SHADOWS} == {("ikkai", "s-p3")}
    assert ownership.owners[("events.payments", "outbox.requests")] == ("ikkai", "live")


def test_start_parameters_stay_those_of_the_claim_that_made_the_query_owner() -> None:
    """Case 2's rule: the same --start-offsets again is accepted, other ones are void and name the recorded ones."""
    first = claim("q", start_offsets={0: 59, 1: 61})
    plain, same, other = claim("q"), claim("q", start_offsets={0: 59, 1: 61}), claim("q", start_offsets={0: 0, 1: 0})
    ownership = fold([first, plain, same, other])
    assert [ownership.verdicts[x.nonce].valid for x in (first, plain, same, other)] == [True, True, True, False]
    assert ownership.made_owner_by[("ikkai", "q")].start_offsets == {0: 59, 1: 61}
    verdict = ownership.verdicts[other.nonce]
    assert "--start-offsets 0:59,1:61" in verdict.problem and "drop --start-offsets" in verdict.fix
    late = claim("r"), claim("r", start_offsets={0: 5})
    assert valid(list(late)) == [True, False]
    handed = claim("h", HANDOVER, from_query="q")
    again, elsewhere = claim("h", HANDOVER, from_query="q"), claim("h", HANDOVER, from_query="x")
    assert valid([first, handed, again, elsewhere]) == [True, True, True, False]


def test_input_recreated_is_kept_from_the_latest_valid_claim_and_a_void_claim_records_nothing() -> None:
    first, recreated = claim("q"), claim("q", input_recreated="id-2")
    intruder = claim("x", input_recreated="id-9")
    ownership = fold([first, recreated, intruder])
    assert ownership.recreated == {("ikkai", "q"): "id-2"}


def test_a_query_owns_every_topic_it_claimed_and_its_start_parameters_follow_the_claim_that_made_it_owner() -> None:
    first, more = claim("q", outputs=("a",)), claim("q", outputs=("a", "b"), start_offsets={0: 4})
    ownership = fold([first, more, claim("x", outputs=("b",))])
    assert ownership.owners == {("events.payments", "a"): ("ikkai", "q"), ("events.payments", "b"): ("ikkai", "q")}
    assert ownership.made_owner_by[("ikkai", "q")] == more


def test_a_claim_round_trips_through_its_schema() -> None:
    codec = default_codec()
    original = claim("q", HANDOVER, from_query="p", start_offsets={1: 7, 0: 3}, input_recreated="id-2", host="h")
    assert OwnerClaim.decode(original.encode(codec), codec) == original
