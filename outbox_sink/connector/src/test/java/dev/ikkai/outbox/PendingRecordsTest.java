package dev.ikkai.outbox;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.time.Instant;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;

import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.sink.SinkRecord;
import org.junit.jupiter.api.Test;

/** What may be sent next, and what may be committed, over plain records and a given time. */
class PendingRecordsTest {
    private static final TopicPartition P0 = new TopicPartition("t", 0);
    private static final TopicPartition P1 = new TopicPartition("t", 1);
    private static final Instant NOW = Instant.parse("2025-01-01T00:00:00Z");

    private final PendingRecords pending = new PendingRecords();

    private static SinkRecord record(int partition, long offset, String key) {
        return new SinkRecord("t", partition, Schema.STRING_SCHEMA, key, Schema.OPTIONAL_BYTES_SCHEMA, null, offset);
    }

    private static List<String> described(List<PendingRecords.Pending> records) {
        return records.stream().map(p -> p.record.kafkaPartition() + "@" + p.record.kafkaOffset()).toList();
    }

    private static void failedUntil(PendingRecords.Pending p, Instant next) {
        p.attempts = new Attempts(NOW);
        p.attempts.attempts = 1;
        p.attempts.nextAttemptAt = next;
    }

    @Test
    void theOldestRecordOfEachKeyIsDueTakenFromThePartitionsInTurn() {
        pending.add(List.of(record(0, 0, "A"), record(0, 1, "A"), record(0, 2, "B"), record(0, 3, "C"),
            record(1, 0, "A"), record(1, 1, "D")));

        assertEquals(List.of("0@0", "1@0", "0@2", "1@1", "0@3"), described(pending.due(NOW, 10)),
            "0@1 waits behind 0@0 (same key); key A of partition 1 is another key");
        assertEquals(List.of("0@0", "1@0"), described(pending.due(NOW, 1)), "at most one per partition");
    }

    @Test
    void aPartitionsRequestsInFlightTakeOnlyItsOwnSlots() {
        pending.add(List.of(record(0, 0, "A"), record(0, 1, "B"), record(0, 2, "C"), record(1, 0, "D"), record(1, 1, "E")));
        pending.due(NOW, 2).stream().filter(p -> p.partition.equals(P0)).forEach(p -> p.inFlight = true);  // 0@0, 0@1 stall

        assertEquals(List.of("1@0", "1@1"), described(pending.due(NOW, 2)),
            "partition 0's stalled requests fill its two slots, not partition 1's");
    }

    @Test
    void aRecordInFlightOrWaitingHoldsBackItsKeyOnly() {
        pending.add(List.of(record(0, 0, "A"), record(0, 1, "A"), record(0, 2, "B"), record(0, 3, "B")));
        List<PendingRecords.Pending> first = pending.due(NOW, 10);
        first.get(0).inFlight = true;
        failedUntil(first.get(1), NOW.plusSeconds(5));

        assertEquals(List.of(), pending.due(NOW, 10));
        assertEquals(Optional.of(NOW.plusSeconds(5)), pending.nextRetryAt(), "only a waiting record has a retry time");
        assertEquals(List.of("0@2"), described(pending.due(NOW.plusSeconds(5), 10)), "B's retry is due; A is in flight");

        first.get(0).inFlight = false;
        pending.finish(first.get(0));
        assertEquals(List.of("0@1"), described(pending.due(NOW, 10)), "A's next record once the earlier one is final");
    }

    @Test
    void commitsStopAtTheOldestHeldRecordOfEachPartition() {
        pending.add(List.of(record(0, 5, "A"), record(0, 6, "B"), record(1, 0, "C")));
        List<PendingRecords.Pending> due = pending.due(NOW, 10);
        pending.finish(due.get(1));  // 1@0
        pending.finish(due.get(2));  // 0@6, after the held 0@5
        Map<TopicPartition, OffsetAndMetadata> consumed = Map.of(P0, new OffsetAndMetadata(7), P1, new OffsetAndMetadata(1));

        assertEquals(Map.of(P0, new OffsetAndMetadata(5), P1, new OffsetAndMetadata(1)), pending.committable(consumed));
        assertEquals(Set.of(P0), pending.holding());

        pending.finish(due.get(0));
        assertEquals(consumed, pending.committable(consumed));
        assertEquals(Set.of(), pending.holding());
    }

    @Test
    void aRecordGivenTwiceIsHeldOnceUntilItsPartitionIsDropped() {
        List<SinkRecord> batch = List.of(record(0, 0, "A"), record(0, 1, "B"));
        assertEquals(2, pending.add(batch));
        assertEquals(0, pending.add(batch), "the worker's redelivery of the same batch");
        pending.finish(pending.due(NOW, 1).get(0));
        assertEquals(0, pending.add(batch), "nor is a finished record taken again");

        assertEquals(1, pending.drop(List.of(P0)).size());
        assertEquals(0, pending.size());
        assertEquals(2, pending.add(batch), "a partition assigned again starts afresh from its committed offset");
    }
}
