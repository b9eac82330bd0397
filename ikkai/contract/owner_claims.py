"""Who writes an output topic: claims in one totally ordered log, and the fold that decides them. Pure.

Every start of a query appends one ``OwnerClaim`` to ``_ikkai.owners`` (one partition) before its
first output record (``spark_jobs.sink.claim_log`` writes and reads it). ``fold`` reads the claims
in offset order and decides each one, the same way for every reader:

- Ownership is per pair (input topic, output topic): another input writing the same output topic
  writes other events (enrich's CDC query beside the API's) and is no conflict.
- A **claim** is valid when every pair it names is unowned or already its own query's; it then
  owns them. A restart (every pair its own already) that names a one-time start parameter again
  must name the recorded one. (A query that changes its output topics is refused by its markers.)
- A **handover** from query P is valid when P owns every pair it names and it names exactly P's
  output topics of that input: it moves them. Naming it again on a restart is accepted.
- A **shadow** claim is a claim whose every output topic is a shadow topic (``*.shadow``), and
  which takes nothing over but another shadow query's topics, exactly those (a shadow's grown layout
  continues as a new shadow query ``--after-query`` the old one).
- Anything else is **void**: kept in the log, it changes nothing. Its claimer is refused.

The first valid claim of a pair wins, whatever comes later: the log is never compacted (a compacted
topic keeps the last record of a key, not the first) and never deleted. The claim that made a query
owner keeps its start parameters (``made_owner_by``): where an output partition without a marker of
its own starts, whatever the later restarts are given. Host and time are for people only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ikkai.contract.codec import RecordCodec
from ikkai.errors import IkkaiError

CLAIM, HANDOVER, SHADOW = "claim", "handover", "shadow"
KINDS = (CLAIM, HANDOVER, SHADOW)
SHADOW_SUFFIX = ".shadow"
Query = tuple[str, str]  # (app, query)
Pair = tuple[str, str]  # (input topic, output topic)


class OwnerClaimError(IkkaiError):
    """A start whose claim is void, or a claim log that cannot decide (unreadable, or configured to lose claims)."""

    def __init__(self, topic: str, problem: str, fix: str) -> None:
        super().__init__(f"{topic}: {problem}", fix=fix)
        self.topic = topic


@dataclass(frozen=True)
class OwnerClaim:
    """One start of a query, as ``ikkai/contract/schemas/owner_claim/v1.avsc`` records it."""

    app: str
    query: str
    kind: str
    source_topic: str
    output_topics: tuple[str, ...]
    nonce: str
    source_topic_id: str = ""
    from_query: str = ""
    start_offsets: Mapping[int, int] = field(default_factory=dict)
    input_recreated: str = ""
    host: str = ""  # for people only
    written_at: int = 0  # for people only: epoch milliseconds

    @property
    def owner(self) -> Query:
        return self.app, self.query

    @property
    def key(self) -> bytes:
        return f"{self.app}.{self.query}".encode()

    def encode(self, codec: RecordCodec) -> bytes:
        record: dict[str, Any] = {**self.__dict__, "output_topics": list(self.output_topics)}
        record["start_offsets"] = [{"partition": p, "offset": o} for p, o in sorted(self.start_offsets.items())]
        return codec.encode("owner_claim", record)

    @classmethod
    def decode(cls, data: bytes, codec: RecordCodec) -> OwnerClaim:
        record = codec.decode("owner_claim", data)
        record["output_topics"] = tuple(record["output_topics"])
        record["start_offsets"] = {int(s["partition"]): int(s["offset"]) for s in record["start_offsets"]}
        return cls(**record)


@dataclass(frozen=True)
class Verdict:
    """What the fold decided about one claim; a void one says why and what the claimer can do."""

    valid: bool
    problem: str = ""
    fix: str = ""


@dataclass
class Ownership:
    """The fold's state after some prefix of the log."""

    owners: dict[Pair, Query] = field(default_factory=dict)
    made_owner_by: dict[Query, OwnerClaim] = field(default_factory=dict)  # the claim that made it owner
    recreated: dict[Query, str] = field(default_factory=dict)  # the latest --input-recreated of a valid claim
    verdicts: dict[str, Verdict] = field(default_factory=dict)  # by nonce

    def owned(self, query: Query, source_topic: str) -> set[str]:
        return {t for (s, t), q in self.owners.items() if s == source_topic and q == query}

    def apply(self, claim: OwnerClaim) -> Verdict:
        verdict = self._judge(claim)
        self.verdicts[claim.nonce] = verdict
        if verdict.valid:
            if claim.input_recreated:
                self.recreated[claim.owner] = claim.input_recreated
            if not set(claim.output_topics) <= self.owned(claim.owner, claim.source_topic):  # it becomes owner now
                for topic in claim.output_topics:
                    self.owners[(claim.source_topic, topic)] = claim.owner
                self.made_owner_by[claim.owner] = claim
        return verdict

    def _judge(self, claim: OwnerClaim) -> Verdict:
        if claim.kind not in KINDS:
            return Verdict(False, f"claim kind {claim.kind!r} is none of {', '.join(KINDS)}", "report this bug")
        if claim.kind == SHADOW:
            live = [t for t in claim.output_topics if not t.endswith(SHADOW_SUFFIX)]
            mine = set(claim.output_topics) <= self.owned(claim.owner, claim.source_topic)
            origin = self.owned((claim.app, claim.from_query), claim.source_topic) if claim.from_query else set()
            if live or (claim.from_query and not mine and origin != set(claim.output_topics)):
                what = f"writes {', '.join(live)}" if live else f"takes over query {claim.from_query}'s output"
                return Verdict(
                    False, f"shadow query {claim.query} {what}: a shadow writes only its own *{SHADOW_SUFFIX} topics",
                    "run the shadow without --after-query (or --after-query the shadow query that owns exactly these "
                    f"*{SHADOW_SUFFIX} topics); to make a candidate live, continue the live query with the new model "
                    "(the same --query: a cutover)",
                )  # fmt: skip
            if claim.from_query and not mine:
                return Verdict(True)  # a shadow continuing a shadow of exactly its topics (a grown layout): moves them
        if set(claim.output_topics) <= self.owned(claim.owner, claim.source_topic):
            return self._restart(claim)
        if claim.kind == HANDOVER:
            return self._handover(claim)
        return self._first(claim)

    def _first(self, claim: OwnerClaim) -> Verdict:
        taken = sorted((t, self.owners[(claim.source_topic, t)]) for t in claim.output_topics
                       if self.owners.get((claim.source_topic, t), claim.owner) != claim.owner)  # fmt: skip
        if not taken:
            return Verdict(True)
        topic, (app, query) = taken[0]
        return Verdict(
            False, f"query {query} (app {app}) owns {topic} for input {claim.source_topic}: a new query "
            f"{claim.query} over it would decide its events again",
            f"continue that query (--query {query}: a new model or setting is a cutover there), hand over from it "
            f"(--after-query {query}, a fresh --checkpoint), or write other topics (--shadow for a candidate model)",
        )  # fmt: skip

    def _handover(self, claim: OwnerClaim) -> Verdict:
        origin = (claim.app, claim.from_query)
        theirs = self.owned(origin, claim.source_topic)
        if not theirs:
            holder = next((self.owners[(claim.source_topic, t)] for t in sorted(claim.output_topics)
                           if (claim.source_topic, t) in self.owners), None)  # fmt: skip
            if holder is not None:
                return Verdict(
                    False, f"query {claim.from_query} owns no output of input {claim.source_topic}; query "
                    f"{holder[1]} (app {holder[0]}) owns {', '.join(sorted(claim.output_topics))}",
                    f"hand over from the query that owns them: --after-query {holder[1]}",
                )  # fmt: skip
            return Verdict(
                False, f"query {claim.from_query} owns no output of input {claim.source_topic}: there is nothing "
                "to hand over", "start without --after-query (no query owns these topics), or check the name",
            )  # fmt: skip
        if theirs != set(claim.output_topics):
            return Verdict(
                False, f"a handover takes over exactly the topics query {claim.from_query} writes "
                f"({', '.join(sorted(theirs))}); query {claim.query} writes {', '.join(claim.output_topics)}",
                f"write query {claim.from_query}'s topics, or start without --after-query and write other topics "
                "(a candidate model: --shadow)",
            )  # fmt: skip
        return Verdict(True)

    def _restart(self, claim: OwnerClaim) -> Verdict:
        first = self.made_owner_by[claim.owner]
        if claim.kind == HANDOVER and claim.from_query != first.from_query:
            started = f"took over from query {first.from_query}" if first.from_query else "started without a handover"
            return Verdict(
                False, f"query {claim.query} owns its output since its first start, which {started}; "
                f"--after-query {claim.from_query} would start it again",
                "drop --after-query: this query goes on from its claim and its markers",
            )  # fmt: skip
        if claim.start_offsets and dict(claim.start_offsets) != dict(first.start_offsets):
            recorded = format_offsets(first.start_offsets)
            started = f"with --start-offsets {recorded}" if recorded else "without --start-offsets"
            return Verdict(
                False, f"query {claim.query} first started {started}; --start-offsets "
                f"{format_offsets(claim.start_offsets)} would move where its output starts",
                f"drop --start-offsets (the recorded {recorded or 'start'} stays in force), or start a new query",
            )  # fmt: skip
        return Verdict(True)


def fold(claims: Iterable[OwnerClaim]) -> Ownership:
    """Decide every claim in log order (module docstring)."""
    ownership = Ownership()
    for claim in claims:
        ownership.apply(claim)
    return ownership


def format_offsets(offsets: Mapping[int, int]) -> str:
    """``--start-offsets``' own notation: ``0:120,1:80``."""
    return ",".join(f"{p}:{o}" for p, o in sorted(offsets.items()))
