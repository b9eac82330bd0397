"""The claim log on Kafka: every start of a query claims its output topics before its first output record.

``claim_outputs`` is the sink's start step (``start_pass.start_as_owner``):

1. Its own markers were judged already, by the writer's checks before it (``grown_layout.refuse_by_own_markers``):
   a query whose markers have another layout or input, that handed its output over, or that would write other
   topics than its markers name, never reaches its claim.
2. It appends one ``OwnerClaim`` (``ikkai.contract.owner_claims``) to ``_ikkai.owners`` in a
   transaction of ``transactional.id`` ``<app>.<query>.owner-claim``: ``init_transactions`` fences
   an older claimer of the same query (a zombie start) and ends the transaction it left open.
3. It reads the log ``read_committed`` from its beginning until it sees its own claim (its nonce).
   A read_committed reader reaches offset X only once the last stable offset (LSO) is past X
   (KIP-98): every transaction that wrote below X has committed or aborted, and aborted records
   are filtered out. So the claims it has read are every claim ahead of its own, each final.
4. It folds them (``owner_claims.fold``, the same for every reader) and is refused in one line
   when its own claim is void. Otherwise its start parameters are the ones recorded by the claim
   that made it owner: where its output partitions without a marker of their own start.

A start reads only this log, its own commits topic and, on a handover, its origin's: another
application's commits topics are never read, so none of them can stop a start.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from ikkai.contract import kafka
from ikkai.contract.codec import SchemaError, default_codec
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.owner_claims import CLAIM, HANDOVER, SHADOW, OwnerClaim, fold, format_offsets
from ikkai.contract.owner_claims import OwnerClaimError as OwnerClaimError  # the claims' refusal, raised here too
from ikkai.contract.topics import OWNERS
from ikkai.errors import ConfigError
from spark_jobs.sink.commit_markers import CommitMarker
from spark_jobs.sink.commit_pause import PAUSE_BOUND_S
from spark_jobs.sink.config import OPERATOR_GUIDE, SinkConfig
from spark_jobs.sink.kafka_errors import TransactionError, call_with_retries

# Never compacted (a compacted topic keeps the last record of a key, not the first, and could change the winner),
# never deleted (a deleted claim would let a later one win).
OWNERS_TOPIC_CONFIG = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}
# A claimer that dies with its claim open holds every later claimer's read back until the broker aborts it.
CLAIM_TRANSACTION_TIMEOUT_MS = 10_000
CLAIM_DEADLINE_S = 90.0  # covers that timeout and the coordinator's check for timed-out transactions (10 s)
CLAIMS_GUIDE = f"{OPERATOR_GUIDE}: concurrent starts"


def claim_transactional_id(app: str, query: str) -> str:
    """``<app>.<query>.owner-claim``: never a partition writer's ``<app>.<query>.<p>`` (those end in digits)."""
    return f"{app}.{query}.owner-claim"


def claim_outputs(
    config: SinkConfig, own: Mapping[int, CommitMarker], deadline_s: float = CLAIM_DEADLINE_S
) -> SinkConfig:
    """Claim the query's outputs (module docstring); the config its writers run with: the recorded start.

    ``own``: the query's markers, as the start read them and judged them (``grown_layout.refuse_by_own_markers``).
    """
    ensure_owners_topic(config.cluster)
    claim = OwnerClaim(
        config.app, config.query, SHADOW if config.shadow else HANDOVER if config.after_query else CLAIM,
        config.source_topic, tuple(config.output_topics), uuid.uuid4().hex, source_topic_id=config.source_topic_id,
        from_query=config.after_query, start_offsets=dict(config.start_offsets),
        input_recreated=config.input_recreated, host=socket.gethostname()[:100], written_at=int(time.time() * 1000),
    )  # fmt: skip
    ownership = fold(write_claim(config.cluster, claim, deadline_s))
    verdict = ownership.verdicts[claim.nonce]
    if not verdict.valid:
        raise OwnerClaimError(OWNERS, verdict.problem, fix=verdict.fix)
    recorded = ownership.made_owner_by[claim.owner]
    return recorded_start(config, recorded, ownership.recreated.get(claim.owner, ""), own)


def recorded_start(
    config: SinkConfig, recorded: OwnerClaim, recreated: str, own: Mapping[int, CommitMarker]
) -> SinkConfig:
    """The config with the start parameters of the claim that made the query owner. Pure.

    A query that has markers but no claim (markers written before the claim log) keeps the origin
    its markers name. Start offsets are offsets of the topic id they were given for: on a recreated
    input the operator accepted (``--input-recreated``, given now or recorded), the query starts at
    offset 0 of the new topic; on a recreated input not accepted it is refused with that fix.
    """
    after = recorded.from_query or next((m.started_after for m in own.values() if m.started_after), "")
    offsets = dict(recorded.start_offsets)
    accepted = config.input_recreated or recreated
    if offsets and recorded.source_topic_id and config.source_topic_id != recorded.source_topic_id:
        if accepted != config.source_topic_id:
            raise OwnerClaimError(
                OWNERS, f"query {config.query} was started with --start-offsets {format_offsets(offsets)} on input "
                f"topic id {recorded.source_topic_id}; {config.source_topic!r} now has id {config.source_topic_id} "
                "(deleted and recreated): those offsets mean nothing there",
                fix=f"to decide every record of the new topic once, start with --input-recreated "
                f"{config.source_topic_id} and a fresh --checkpoint ({OPERATOR_GUIDE}: topic recreation)",
            )  # fmt: skip
        offsets = {}
    input_recreated = accepted if accepted == config.source_topic_id else config.input_recreated
    return dataclasses.replace(config, after_query=after, start_offsets=offsets, input_recreated=input_recreated)


def write_claim(cluster: KafkaContext, claim: OwnerClaim, deadline_s: float = CLAIM_DEADLINE_S) -> list[OwnerClaim]:
    """Commit ``claim`` on the log, then read the log back to it: every claim up to and including it, in order."""
    txn_id, codec = claim_transactional_id(claim.app, claim.query), default_codec()
    claim_fault_point(None, "before")
    producer = Producer(cluster.producer_config(**{
        "transactional.id": txn_id, "transaction.timeout.ms": CLAIM_TRANSACTION_TIMEOUT_MS,
    }))  # fmt: skip
    step_s = CLAIM_TRANSACTION_TIMEOUT_MS / 2000  # each step ends well inside the claim's transaction timeout
    try:
        call_with_retries(
            txn_id, "init_transactions", lambda: producer.init_transactions(deadline_s), deadline_s=deadline_s
        )
        call_with_retries(txn_id, "begin_transaction", producer.begin_transaction, deadline_s=step_s)
        producer.produce(OWNERS, key=claim.key, value=claim.encode(codec), partition=0)
        claim_fault_point(producer, "open")
        call_with_retries(txn_id, "commit_transaction", lambda: producer.commit_transaction(step_s), deadline_s=step_s)
    except (KafkaException, TransactionError) as exc:
        problem = str(exc) if isinstance(exc, TransactionError) else exc.args[0].str()
        raise OwnerClaimError(
            OWNERS, f"the claim of query {claim.query} could not be written ({problem})",
            fix="another start of this query may be claiming at the same time (it fenced this one); otherwise check "
            "the broker and this client's ACLs (Write on _ikkai.owners and on its transactional id); start again",
        ) from exc  # fmt: skip
    finally:
        producer.flush(5)
    return read_back(cluster, claim.nonce, deadline_s)


def read_back(cluster: KafkaContext, nonce: str, deadline_s: float = CLAIM_DEADLINE_S) -> list[OwnerClaim]:
    """The log read_committed from its beginning up to the claim ``nonce``: every earlier claim resolved."""
    codec = default_codec()
    consumer = Consumer(cluster.consumer_config(
        f"_ikkai.owners.reader.{uuid.uuid4().hex}", **{"enable.auto.commit": False, "fetch.wait.max.ms": 50},
    ))  # fmt: skip
    claims: list[OwnerClaim] = []
    give_up_at = time.monotonic() + deadline_s
    try:
        consumer.assign([TopicPartition(OWNERS, 0, OFFSET_BEGINNING)])
        while time.monotonic() < give_up_at:
            message: Any = consumer.poll(0.5)
            if message is None:
                continue  # nothing past the LSO yet: an open claim transaction ahead, or the fetch under way
            if message.error() is not None:
                if message.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise OwnerClaimError(OWNERS, f"reading failed: {message.error().str()}", fix="check the broker")
            try:
                claim = OwnerClaim.decode(message.value(), codec)
            except SchemaError as exc:  # not a claim: it claims nothing (only ikkai's jobs should write here)
                sys.stderr.write(f"{OWNERS}: offset {message.offset()} is not an owner claim, ignored ({exc})\n")
                continue
            claims.append(claim)
            if claim.nonce == nonce:
                return claims
    finally:
        consumer.close()
    raise OwnerClaimError(
        OWNERS, f"this start's claim was committed but not readable within {deadline_s:.0f}s: a transaction opened "
        "ahead of it is still open (a claimer that died holds it until its transaction.timeout.ms)",
        fix=f"start again once the broker has aborted it ({CLAIMS_GUIDE}); if it stays, find the producer that "
        f"writes {OWNERS} with a long transaction.timeout.ms",
    )  # fmt: skip


def ensure_owners_topic(cluster: KafkaContext) -> None:
    """Create ``_ikkai.owners`` (one partition, never compacted, never deleted) unless it exists; refuse one that loses
    claims or has more than one partition (claims must be totally ordered)."""
    admin = AdminClient(cluster.client_config())
    existing = admin.list_topics(timeout=30).topics.get(OWNERS)
    if existing is None:
        try:
            kafka.ensure_topics(cluster, [OWNERS], 1, config=OWNERS_TOPIC_CONFIG)
        except ConfigError as exc:
            raise OwnerClaimError(OWNERS, f"cannot create it: {exc}", fix=_create_fix()) from exc
        existing = admin.list_topics(OWNERS, timeout=30).topics.get(OWNERS)
    if existing is not None and existing.error is None and len(existing.partitions) != 1:
        raise OwnerClaimError(
            OWNERS, f"has {len(existing.partitions)} partitions: claims on several partitions have no order",
            fix=f"delete it and let a job create it again with one partition, or {_create_fix()}",
        )  # fmt: skip
    refuse_a_losing_config(admin)


def refuse_a_losing_config(admin: AdminClient) -> None:
    """The log must keep every claim: ``cleanup.policy=delete`` with ``retention.ms`` and ``retention.bytes`` -1."""
    resource = ConfigResource(ResourceType.TOPIC, OWNERS)
    try:
        entries = admin.describe_configs([resource])[resource].result(timeout=30)
    except KafkaException as exc:
        raise OwnerClaimError(
            OWNERS, f"its configuration cannot be read ({exc.args[0].name()})",
            fix="grant DescribeConfigs on _ikkai.owners to the job's principal",
        ) from exc  # fmt: skip
    found = {name: entries[name].value if name in entries else "" for name in OWNERS_TOPIC_CONFIG}
    wrong = {name: value for name, value in found.items() if value != OWNERS_TOPIC_CONFIG[name]}
    if wrong:
        shown = ", ".join(f"{name}={value}" for name, value in sorted(wrong.items()))
        raise OwnerClaimError(
            OWNERS, f"{shown}: the log could lose or replace a claim (compaction keeps a key's last claim, retention "
            "drops the first), and a later claim would then win",
            fix=f"kafka-configs.sh --alter --entity-type topics --entity-name {OWNERS} --add-config "
            + ",".join(f"{n}={v}" for n, v in OWNERS_TOPIC_CONFIG.items()),
        )  # fmt: skip


def _create_fix() -> str:
    settings = " ".join(f"--config {n}={v}" for n, v in OWNERS_TOPIC_CONFIG.items())
    return f"create it: kafka-topics.sh --create --topic {OWNERS} --partitions 1 {settings}"


# Fault injection for tests, like the sink's IKKAI_FAULT_PAUSE_BEFORE_COMMIT: the folder a test watches.
PAUSE_CLAIM = "IKKAI_FAULT_PAUSE_CLAIM"


def claim_fault_point(producer: Producer | None, step: str) -> None:
    """Test-only, off unless ``$IKKAI_FAULT_PAUSE_CLAIM`` names a folder. ``before`` (no producer yet): write ``ready``
    there and wait for ``go``; ``open`` (the claim produced, its transaction open on the broker): write ``paused`` and
    wait for ``release``. Each wait ends after ``PAUSE_BOUND_S`` at most."""
    folder = os.environ.get(PAUSE_CLAIM)
    if not folder:
        return
    signal, wait_for = ("ready", "go") if step == "before" else ("paused", "release")
    if producer is not None:
        producer.flush(PAUSE_BOUND_S)
    (Path(folder) / signal).write_text(str(os.getpid()))
    give_up_at = time.monotonic() + PAUSE_BOUND_S
    while not (Path(folder) / wait_for).exists() and time.monotonic() < give_up_at:
        time.sleep(0.05)
