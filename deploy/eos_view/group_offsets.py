"""The sink connectors' committed offsets (their ``connect-*`` consumer groups), read in a short-lived child process.

Reading a group's committed offsets with the admin client goes through librdkafka's coordinator request, which
has a known use-after-free (librdkafka issue #4605, fixed by an unreleased PR): while a broker restarts, the
process can abort (``rd_kafka_enq_once_del_source_return: Assertion 'eonce->refcnt > 0' failed``, exit 134),
with a long-lived admin client and with a fresh one alike. In ``ikkai serve`` that abort took the API, /metrics
and the auto-restart loop down with it. So these reads run in a child, ``python -m deploy.eos_view.group_offsets``
(never a ``fork`` of the threaded server): it gets the client settings and its deadline as JSON on stdin (never
on its command line, where ``ps`` shows them), writes the groups as JSON on stdout and exits. A child that dies,
aborts or overruns its deadline (it is killed then) costs one sample's consumer lag, reported as unreadable with
how it ended; the server and the rest of the sample stay up. Each sample starts a fresh child with a fresh
client, so nothing of a failed read lives on.

Cost per sample: one Python start (about half a second of CPU), one ListGroups and one OffsetFetch per ``connect-*``
group (at most ``max_groups``, in name order).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException
from confluent_kafka.admin import AdminClient

from deploy.kafka_windows import Deadline, Where
from ikkai.errors import IkkaiError
from ikkai.redaction import redact_urls

SINK_GROUP_PREFIX = "connect-"  # Kafka Connect's consumer group of a sink connector: connect-<name>
CHILD = (sys.executable, "-m", "deploy.eos_view.group_offsets")
START_SECONDS = 10.0  # the child's own start (Python, confluent_kafka) on a loaded machine, beyond its deadline
MAX_REASON = 200  # characters of a dead child's last stderr line shown

Groups = dict[str, tuple[str, dict[Where, int]]]  # group id → (its state, (topic, partition) → next offset)


@dataclass(frozen=True)
class SinkGroups:
    groups: Groups
    left_out: int = 0  # connect-* groups beyond max_groups, not read


GroupReader = Callable[[Deadline, int], SinkGroups]  # (deadline, max groups) → the groups read


class GroupOffsetsUnreadable(IkkaiError):
    """The child process that reads the consumer groups' offsets failed, died or gave no answer in time."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"consumer groups' committed offsets unreadable: {reason}", fix="is Kafka up? the next "
                         "sample tries again with a new process")  # fmt: skip
        self.reason = reason


def read_groups(admin: AdminClient, deadline: Deadline, max_groups: int) -> SinkGroups:
    """The first ``max_groups`` ``connect-*`` groups (by name) with their state and committed offsets, in this
    process: only for the child (and tests), since an abort inside librdkafka ends the process that calls it."""
    listed = admin.list_consumer_groups(request_timeout=deadline.left()).result(timeout=deadline.left())
    names = sorted(g.group_id for g in listed.valid if g.group_id.startswith(SINK_GROUP_PREFIX))
    states = {g.group_id: str(getattr(g.state, "name", g.state or "")) for g in listed.valid}
    chosen = names[:max_groups]
    futures = {
        group: admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                 request_timeout=deadline.left())[group]
        for group in chosen
    }  # fmt: skip
    groups: Groups = {}
    for group, future in futures.items():
        answer = future.result(timeout=deadline.left())
        committed = {(tp.topic, tp.partition): tp.offset for tp in answer.topic_partitions or [] if tp.offset >= 0}
        if committed:
            groups[group] = (states.get(group, ""), committed)
    return SinkGroups(groups, len(names) - len(chosen))


def encoded(found: SinkGroups) -> str:
    """The child's answer. Pure."""
    groups = {g: [state, [[t, p, o] for (t, p), o in sorted(c.items())]] for g, (state, c) in found.groups.items()}
    return json.dumps({"groups": groups, "left_out": found.left_out})


def decoded(text: str) -> SinkGroups:
    """The child's answer read back; a problem it reported raises ``GroupOffsetsUnreadable``. Pure."""
    try:
        answer = json.loads(text)
        if answer.get("problem"):
            raise GroupOffsetsUnreadable(str(answer["problem"])[:MAX_REASON])
        groups = {str(g): (str(state), {(str(t), int(p)): int(o) for t, p, o in rows})
                  for g, (state, rows) in answer["groups"].items()}  # fmt: skip
        return SinkGroups(groups, int(answer["left_out"]))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise GroupOffsetsUnreadable(f"its reading process answered no groups: {type(exc).__name__}") from exc


def how_it_ended(code: int, stderr: str) -> str:
    """A failed child's exit, by signal name when a signal ended it, and its last stderr line, bounded. Pure."""
    number = -code if code < 0 else code - 128 if code > 128 else 0
    try:
        by = f"{signal.Signals(number).name} (exit {code})" if number else f"exit {code}"
    except ValueError:
        by = f"exit {code}"
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    said = f": {redact_urls(lines[-1])[:MAX_REASON]}" if lines else ""  # shown on the page: no URL credential
    return f"its reading process died, {by}{said}"


def in_child(config: Mapping[str, Any], command: Sequence[str] = CHILD) -> GroupReader:
    """A ``GroupReader`` that runs ``command`` (this module) with ``config``, the admin client's settings."""

    def read(deadline: Deadline, max_groups: int) -> SinkGroups:
        seconds = deadline.left()
        ask = json.dumps({"config": dict(config), "seconds": seconds, "max_groups": max_groups})
        try:
            done = subprocess.run(list(command), input=ask, capture_output=True, text=True,
                                  timeout=seconds + START_SECONDS, check=False)  # fmt: skip
        except subprocess.TimeoutExpired:
            raise GroupOffsetsUnreadable(f"its reading process gave no answer within {seconds + START_SECONDS:.0f} s "
                                         "and was killed") from None  # fmt: skip
        if done.returncode != 0:
            raise GroupOffsetsUnreadable(how_it_ended(done.returncode, done.stderr))
        return decoded(done.stdout)

    return read


def main() -> None:
    """The child: settings and deadline on stdin, the groups (or the problem the reads had) on stdout."""
    ask = json.loads(sys.stdin.read())
    try:
        found = read_groups(AdminClient(ask["config"]), Deadline(float(ask["seconds"])), int(ask["max_groups"]))
        print(encoded(found))
    except (KafkaException, TimeoutError) as exc:
        text = str(exc.args[0]) if exc.args else ""
        print(json.dumps({"problem": (text or "no answer within its deadline").splitlines()[0]}))


if __name__ == "__main__":
    main()
