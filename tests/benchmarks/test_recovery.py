"""The pure parts of benchmarks/recovery.py: milestones from stamped log lines, phases, Connect's log format."""

from __future__ import annotations

from datetime import datetime

import pytest

from benchmarks.recovery import (
    CONNECT_MILESTONES,
    JOB_MILESTONES,
    JobRound,
    assignment_delays,
    connect_log_times,
    ends_read_late,
    first_batch,
    milestones,
    phases,
    recovery_targets,
)
from benchmarks.targets import MET, NOT_MEASURED, NOT_MET, verdict

RESTARTED_JOB = [
    (99.0, "infer: batch 7 committed 100 records, slowest partition 0.10 s of 0.50 s\n"),  # the killed job's
    (102.5, "26/11/24 09:00:02 INFO Utils: Successfully started service 'sparkDriver' on port 41234.\n"),
    (104.0, "recovery: model fraud-v3, 2 partitions, mode exactly-once\n"),
    (
        104.2,
        "26/11/24 09:00:04 INFO MicroBatchExecution: Use file:/c to store the query checkpoint.\n",
    ),
    (106.0, "recovery: batch 8 committed 180 records, slowest partition 0.71 s of 1.20 s (2 new producers)\n"),
    (107.0, "recovery: batch 9 committed 90 records, slowest partition 0.05 s of 0.30 s\n"),
]


def test_job_milestones_count_from_the_restart_and_take_each_first_line() -> None:
    points = milestones(RESTARTED_JOB, JOB_MILESTONES, since=100.0)
    assert points == pytest.approx({"session and model": 4.0, "batch committed": 6.0})


def test_a_milestone_is_looked_for_only_after_the_one_before() -> None:
    stamped = [(1.0, "b"), (2.0, "a"), (3.0, "b")]
    assert milestones(stamped, [("first", "a"), ("second", "b")], since=0.0) == {"first": 2.0, "second": 3.0}
    assert milestones(stamped, [("first", "c"), ("second", "b")], since=0.0) == {"first": None, "second": 1.0}


def test_phases_are_durations_between_the_milestones_found() -> None:
    durations = phases({"restart": 1.0, "spark up": 4.0, "model loaded": None, "visible": 10.0})
    assert durations == pytest.approx({"restart": 1.0, "spark up": 3.0, "model loaded": None, "visible": 6.0})


def test_a_round_whose_new_job_committed_before_the_ends_were_read_is_not_measured() -> None:
    restarted = RESTARTED_JOB[1:]  # the new job's lines: its first batch line at 106.0
    assert not ends_read_late(restarted, ends_read=101.0)
    assert ends_read_late(restarted, ends_read=106.0)


def test_the_recovery_target_is_the_median_of_this_checkouts_measured_rounds() -> None:
    def round_(n: int, seconds: float | None, code: str = "this") -> JobRound:
        return JobRound(n, seconds, {}, None, code)

    rows = recovery_targets([round_(1, 13.3), round_(2, 9.0), round_(3, 12.0), round_(4, 1.0, "baseline")])
    ((target, value, how),) = rows
    assert value == 12.0 and verdict(target, value) == NOT_MET and "3 round(s)" in how
    ((_, fast, _),) = recovery_targets([round_(1, 8.0), round_(2, 9.5), round_(3, None)])
    assert fast == pytest.approx(8.75) and verdict(target, fast) == MET  # a late round is left out
    ((_, none, _),) = recovery_targets([round_(1, None)])
    assert verdict(target, none) == NOT_MEASURED


def test_the_first_batch_line_says_its_cost_and_new_producers() -> None:
    batch = first_batch([line for _, line in RESTARTED_JOB[1:]])
    assert batch is not None
    assert (batch.batch_id, batch.records, batch.new_producers) == (8, 180, 2)
    assert (batch.slowest_partition_s, batch.call_s) == pytest.approx((0.71, 1.20))
    assert first_batch(["infer: batch 3 committed 5 records, slowest partition 0.01 s of 0.02 s\n"]) is not None
    assert first_batch(["no batch here\n"]) is None


CONNECT_LOG = """\
[2026-11-24 09:00:00,100] INFO Stopping task (org.apache.kafka.connect.runtime.Worker)
[2026-11-24 09:00:05,250] INFO Kafka Connect worker initializing ... (org.apache.kafka.connect.cli.AbstractConnectCli)
java.lang.IllegalStateException: a continuation line without a timestamp
[2026-11-24 09:00:07,000] INFO Added plugin 'org.apache.kafka.connect.file.FileStreamSourceConnector' (org.apache.kafka.connect.runtime.isolation.DelegatingClassLoader)
[2026-11-24 09:00:09,000] INFO REST server listening at http://127.0.0.1:8083/ (org.apache.kafka.connect.runtime.rest.RestServer)
[2026-11-24 09:00:15,500] INFO [Worker clientId=connect-1, groupId=ikkai-connect] Successfully joined group with generation Generation{generationId=3} (org.apache.kafka.connect.runtime.distributed.WorkerCoordinator)
[2026-11-24 09:00:15,600] INFO [Worker clientId=connect-1, groupId=ikkai-connect] Joined group at generation 3 with protocol version 2 and got assignment: Assignment{error=0, leader='connect-1', connectorIds=[], taskIds=[], delay=5000} with rebalance delay: 5000 (org.apache.kafka.connect.runtime.distributed.DistributedHerder)
[2026-11-24 09:00:20,700] INFO [Worker clientId=connect-1, groupId=ikkai-connect] Joined group at generation 4 with protocol version 2 and got assignment: Assignment{error=0, leader='connect-1', connectorIds=[a], taskIds=[a-0], delay=0} with rebalance delay: 0 (org.apache.kafka.connect.runtime.distributed.DistributedHerder)
[2026-11-24 09:00:21,000] INFO [Worker clientId=connect-1, groupId=ikkai-connect] Finished starting connectors and tasks (org.apache.kafka.connect.runtime.distributed.DistributedHerder)
"""  # noqa: E501 - Connect's own lines, as written


def test_connect_lines_are_stamped_by_their_log_time_and_continuations_skipped() -> None:
    stamped = connect_log_times(CONNECT_LOG.splitlines())
    assert len(stamped) == 8
    assert stamped[0][0] == datetime(2026, 11, 24, 9, 0, 0, 100_000).timestamp()  # the log's local time


def test_connect_milestones_and_the_rebalance_delays_after_the_kill() -> None:
    stamped = connect_log_times(CONNECT_LOG.splitlines())
    killed = datetime(2026, 11, 24, 9, 0, 1).timestamp()  # the log's local time
    points = milestones(stamped, CONNECT_MILESTONES, since=killed)
    assert points == pytest.approx(
        {
            "jvm up": 4.25,
            "plugins found": 6.0,
            "rest up": 8.0,
            "group joined": 14.5,
            "first assignment": 14.6,
            "tasks assigned": 20.0,
        }
    )
    assert phases(points)["tasks assigned"] == pytest.approx(5.4)  # the 5 s scheduled rebalance shows here
    assert assignment_delays(stamped, killed) == [5000, 0]
