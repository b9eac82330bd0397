"""The claim log on the real broker: a claimer decides only on a resolved prefix, whatever is open ahead of it.

The worst interleaving of the protocol itself is built on purpose: another claimer's transaction is left open on
``_ikkai.owners`` with a claim of the same topics, ahead of a claim that then commits. The later claimer must not
decide while it is open (its read-back cannot pass it, read_committed), and must decide right once it is resolved:
refused if the claim ahead committed, owner if it was aborted.
"""

from __future__ import annotations

import threading
import time
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from ikkai.contract.codec import default_codec
from ikkai.contract.kafka import KafkaContext
from ikkai.contract.owner_claims import CLAIM, OwnerClaim, fold
from ikkai.contract.topics import OWNERS
from spark_jobs.sink import claim_log
from spark_jobs.sink.claim_log import OwnerClaimError, claim_outputs, ensure_owners_topic, write_claim
from spark_jobs.sink.config import SinkConfig
from stack.kit.topic_io import create_topic, unique

WAIT_S = 120.0


def claim(query: str, outputs: tuple[str, ...]) -> OwnerClaim:
    return OwnerClaim("ikkai", query, CLAIM, "events.claims", outputs, uuid.uuid4().hex)


def written(cluster: KafkaContext, nonce: str) -> bool:
    """``nonce``'s claim is on the log, committed or not (a read_uncommitted reader)."""
    settings = {"group.id": unique("test.owners"), "enable.partition.eof": True, "isolation.level": "read_uncommitted"}
    consumer = Consumer({**cluster.client_config(), **settings})
    codec = default_codec()
    try:
        consumer.assign([TopicPartition(OWNERS, 0, 0)])
        while True:
            message: Any = consumer.poll(5)
            if message is None or message.error() is not None:
                return False
            if OwnerClaim.decode(message.value(), codec).nonce == nonce:
                return True
    finally:
        consumer.close()


@pytest.mark.integration
@pytest.mark.parametrize("ahead", ["committed", "aborted"])
def test_a_claim_behind_an_open_claim_transaction_waits_for_it_and_then_decides_right(
    cluster: KafkaContext, ahead: str
) -> None:
    ensure_owners_topic(cluster)
    outputs = (unique("decisions.claims"),)
    first, second = claim(unique("first"), outputs), claim(unique("second"), outputs)
    open_claimer = Producer(cluster.producer_config(**{"transactional.id": unique("test.open-claim")}))
    open_claimer.init_transactions(30)
    open_claimer.begin_transaction()
    open_claimer.produce(OWNERS, key=first.key, value=first.encode(default_codec()), partition=0)
    assert open_claimer.flush(30) == 0  # on the broker, inside the open transaction
    result: dict[str, Any] = {}
    claimer = threading.Thread(target=lambda: result.update(claims=write_claim(cluster, second, WAIT_S)), daemon=True)
    claimer.start()
    give_up_at = time.monotonic() + WAIT_S
    while not written(cluster, second.nonce):  # the second claim is committed behind the open one
        assert time.monotonic() < give_up_at and claimer.is_alive()
    assert claimer.is_alive() and "claims" not in result  # it cannot decide while the claim ahead is open
    if ahead == "committed":
        open_claimer.commit_transaction(30)
    else:
        open_claimer.abort_transaction(30)
    claimer.join(WAIT_S)
    assert not claimer.is_alive()
    ownership = fold(result["claims"])
    assert result["claims"][-1] == second
    assert ownership.verdicts[second.nonce].valid is (ahead == "aborted")
    assert ownership.owners[("events.claims", outputs[0])] == ("ikkai", first.query if ahead == "committed" else
                                                               second.query)  # fmt: skip


def sink(query: str, outputs: tuple[str, ...], **extra: Any) -> SinkConfig:
    return SinkConfig(app="ikkai", query=query, cluster=KafkaContext.from_environment(extra.pop("bootstrap")),
                      output_topics=outputs,
                      partitions=2, order_by=("input_offset",), source_topic="events.claims", **extra)  # fmt: skip


@pytest.mark.integration
def test_claimers_started_together_make_one_owner_and_the_others_are_refused_naming_it(bootstrap: str) -> None:
    outputs = (unique("decisions.together"), unique("outbox.together"))
    queries = [unique("q") for _ in range(3)]
    outcomes: dict[str, Any] = {}

    def start(query: str) -> None:
        try:
            outcomes[query] = claim_outputs(sink(query, outputs, bootstrap=bootstrap), own={})
        except OwnerClaimError as exc:
            outcomes[query] = exc

    threads = [threading.Thread(target=start, args=(q,), daemon=True) for q in queries]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S)
    [owner] = [q for q in queries if isinstance(outcomes[q], SinkConfig)]
    refused = [outcomes[q] for q in queries if q != owner]
    assert len(refused) == 2 and all(f"query {owner} (app ikkai) owns" in str(e) for e in refused)


def test_a_log_that_could_lose_a_claim_is_refused_with_the_command_that_fixes_it() -> None:
    class Admin:
        def __init__(self, **config: str) -> None:
            self.config = config

        def describe_configs(self, resources: list[Any]) -> dict[Any, Any]:
            entries = {n: SimpleNamespace(value=v) for n, v in self.config.items()}
            return {resources[0]: SimpleNamespace(result=lambda timeout: entries)}

    good = dict(claim_log.OWNERS_TOPIC_CONFIG)
    claim_log.refuse_a_losing_config(Admin(**good))  # type: ignore[arg-type]
    for change in ({"cleanup.policy": "compact"}, {"retention.ms": "604800000"}, {"retention.bytes": "1073741824"}):
        with pytest.raises(OwnerClaimError) as refused:
            claim_log.refuse_a_losing_config(Admin(**{**good, **change}))  # type: ignore[arg-type]
        text = str(refused.value)
        assert text.startswith(f"{OWNERS}: ") and "\n" not in text
        assert "kafka-configs.sh --alter --entity-type topics --entity-name _ikkai.owners --add-config " in text
        assert "cleanup.policy=delete,retention.ms=-1,retention.bytes=-1" in text


def test_the_claim_transactional_id_is_none_of_a_partition_writers() -> None:
    assert claim_log.claim_transactional_id("ikkai", "infer") == "ikkai.infer.owner-claim"
    config = SinkConfig(app="ikkai", query="infer.owner-claim", cluster=KafkaContext('b:1'), output_topics=("o",),
                        partitions=3, order_by=("x",), source_topic="i")  # fmt: skip
    assert claim_log.claim_transactional_id("ikkai", "infer") not in {config.transactional_id(p) for p in range(3)}


@pytest.mark.integration
def test_a_start_that_died_after_its_claim_leaves_its_parameters_to_the_next_start(bootstrap: str) -> None:
    """The claim is written, then the job dies before its first output: the next start, without the one-time flags,
    gets them from the claim (an output partition without a marker starts there); the same flags again are accepted,
    others refused naming the recorded ones."""
    outputs, query = (unique("decisions.crash"),), unique("crashed")
    first = claim_outputs(sink(query, outputs, bootstrap=bootstrap, start_offsets={0: 59, 1: 61}), own={})
    assert dict(first.start_offsets) == {0: 59, 1: 61}
    again = claim_outputs(sink(query, outputs, bootstrap=bootstrap), own={})  # the usual arguments
    assert dict(again.start_offsets) == {0: 59, 1: 61} and again.after_query == ""
    same = claim_outputs(sink(query, outputs, bootstrap=bootstrap, start_offsets={0: 59, 1: 61}), own={})
    assert dict(same.start_offsets) == {0: 59, 1: 61}
    with pytest.raises(OwnerClaimError, match=r"first started with --start-offsets 0:59,1:61; --start-offsets 0:0"):
        claim_outputs(sink(query, outputs, bootstrap=bootstrap, start_offsets={0: 0}), own={})
    successor = unique("successor")
    handed = claim_outputs(sink(successor, outputs, bootstrap=bootstrap, after_query=query), own={})
    restarted = claim_outputs(sink(successor, outputs, bootstrap=bootstrap), own={})
    assert handed.after_query == restarted.after_query == query  # the handover's origin is recorded too


@pytest.mark.integration
def test_a_start_reads_no_other_applications_commits_topic(cluster: KafkaContext) -> None:
    """Case 11: a start used to read every ``_ikkai.commits.*`` topic on the cluster to infer who owns what, so one
    unreadable commits topic of another application (here a record that is no marker) stopped every start. Now a
    start reads the claim log and its own commits topic only."""
    from spark_jobs.sink.transactional_sink import start_as_owner

    foreign = f"_ikkai.commits.{unique('other')}.q"
    create_topic(cluster, foreign)
    producer = Producer(cluster.client_config())
    producer.produce(foreign, key=b"not a marker", value=b"\x00\xff not an Avro commit marker")
    assert producer.flush(30) == 0
    config = sink(unique("q"), (unique("decisions.eleven"),), bootstrap=cluster.bootstrap_servers)
    started = start_as_owner(config, {})
    assert (started.query, started.output_topics) == (config.query, config.output_topics)
