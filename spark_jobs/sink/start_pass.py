"""The exactly-once writer's start, its writes in one pass: the claim, a handover's fencing, each partition's start.

``start_as_owner`` is the second half of the writer's start (``TransactionalBatchWriter.start``), after its
checks (``start_checks``) and what the markers forbid (``grown_layout.refuse_by_own_markers``), over the query's
markers as the start read them once:

1. the outputs claimed (``claim_log``), whose verdict gives the recorded start;
2. a handover's fencing and the origin's markers, read once when final, an origin of another partition count
   followed (``query_handover.take_over``);
3. each output partition's start as a marker of its own (``partition_transactions.record_start``).

Nothing below reads what the start read already: each step takes the markers and the config it needs.
"""

from __future__ import annotations

from collections.abc import Mapping

from spark_jobs.sink.claim_log import claim_outputs
from spark_jobs.sink.commit_markers import CommitMarker
from spark_jobs.sink.config import SinkConfig
from spark_jobs.sink.partition_transactions import record_start
from spark_jobs.sink.query_handover import take_over


def start_as_owner(config: SinkConfig, markers: Mapping[int, CommitMarker]) -> SinkConfig:
    """Claim the outputs (refused in one line unless the claim log makes this query their owner), with the start
    parameters the claim that made it owner recorded; a handover fences its origin while a partition has no marker
    of this query's own yet (idempotent: a restart after a crash in between does it again), and the origin's markers,
    final then, are read once: an origin of another partition count is followed (``grown_layout``). Then each output
    partition without a marker of its own gets its start as one (``record_start``), so a later handover from this
    query starts after it."""
    config = claim_outputs(config, markers)
    config, origin = take_over(config, fence=len(markers) < config.partitions)
    if config.after_query or config.start_offsets:  # each start durable where it is not 0 (record_start)
        for partition in range(config.partitions):
            if partition not in markers:
                record_start(config, partition, origin)
    return config
