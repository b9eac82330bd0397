package dev.ikkai.outbox;

import java.nio.ByteBuffer;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;

import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.connect.sink.SinkRecord;

/**
 * The records a task has received and not yet finished (delivered or dead-lettered), per partition
 * in offset order, and the rules of what may be sent next and which offsets may be committed.
 * Pure bookkeeping: no I/O, the caller passes the time; used on the task's thread only.
 *
 * <ul>
 *   <li>Order per key: of a partition's records with one Kafka key, only the oldest one held may be
 *       sent; the later ones wait until it is final. Records of other keys go on.
 *   <li>Commits: a partition's committable offset is that of the oldest record it holds, never past
 *       it, or the consumed offset when it holds none. A crash therefore redelivers every record held.
 *   <li>A record at an offset the partition already holds or has finished is ignored, so a batch
 *       given twice (the worker's redelivery) is held once.
 * </ul>
 */
final class PendingRecords {
    /** One record held until its outcome is final. */
    static final class Pending {
        final SinkRecord record;
        final TopicPartition partition;
        final Object key;
        /** Decoded at the first attempt; null before, and for a record that never decodes. */
        OutboxRequest request;
        /** Null until the first attempt. */
        Attempts attempts;
        boolean inFlight;
        /** When to try again a record the schema registry could not decode or receipt yet; null when not waiting. */
        Instant registryRetryAt;
        int registryFailures;

        Pending(SinkRecord record) {
            this.record = record;
            this.partition = new TopicPartition(record.topic(), record.kafkaPartition());
            this.key = record.key() instanceof byte[] bytes ? ByteBuffer.wrap(bytes) : record.key();  // equal by content
        }

        /** Failed transiently (or the registry did) and its next attempt is not due yet. */
        boolean waitingAt(Instant now) {
            return !inFlight && (registryRetryAt != null && registryRetryAt.isAfter(now)
                || attempts != null && attempts.nextAttemptAt.isAfter(now));
        }

        /** When this record is due again, if it waits for a retry. */
        Instant retryAt() {
            if (inFlight) {
                return null;
            }
            if (registryRetryAt != null) {
                return registryRetryAt;
            }
            return attempts != null ? attempts.nextAttemptAt : null;
        }
    }

    private static final class Partition {
        final List<Pending> records = new ArrayList<>();
        /** The offset after the last one received. */
        long nextOffset = Long.MIN_VALUE;
    }

    private final Map<TopicPartition, Partition> partitions = new LinkedHashMap<>();

    /** Holds the records not seen before; how many that was. */
    int add(Collection<SinkRecord> records) {
        int added = 0;
        for (SinkRecord record : records) {
            Pending pending = new Pending(record);
            Partition partition = partitions.computeIfAbsent(pending.partition, tp -> new Partition());
            if (record.kafkaOffset() < partition.nextOffset) {
                continue;
            }
            partition.nextOffset = record.kafkaOffset() + 1;
            partition.records.add(pending);
            added++;
        }
        return added;
    }

    /**
     * The records whose turn it is at {@code now}: the oldest held record of each key, unless it is in
     * flight or waiting for a retry; of each partition at most {@code perPartition} in flight at once
     * (counting those already in flight). The limit is per partition so that a target that stalls
     * holds only the slots of the partitions whose records go to it: the others keep theirs.
     */
    List<Pending> due(Instant now, int perPartition) {
        List<List<Pending>> ready = new ArrayList<>();
        for (Partition partition : partitions.values()) {
            int slots = perPartition - (int) partition.records.stream().filter(p -> p.inFlight).count();
            List<Pending> turn = new ArrayList<>();
            Set<Object> keys = new HashSet<>();
            for (Iterator<Pending> it = partition.records.iterator(); it.hasNext() && turn.size() < slots; ) {
                Pending p = it.next();
                if (keys.add(p.key) && !p.inFlight && !p.waitingAt(now)) {
                    turn.add(p);
                }
            }
            ready.add(turn);
        }
        List<Pending> due = new ArrayList<>();  // the partitions in turn: each one's first, then each one's second...
        while (ready.stream().anyMatch(turn -> !turn.isEmpty())) {
            for (List<Pending> turn : ready) {
                if (!turn.isEmpty()) {
                    due.add(turn.remove(0));
                }
            }
        }
        return due;
    }

    /** The record's outcome is final: it is no longer held. */
    void finish(Pending pending) {
        Partition partition = partitions.get(pending.partition);
        if (partition != null) {
            partition.records.remove(pending);
        }
    }

    /** The earliest time a record waiting for a retry is due, if any waits. */
    Optional<Instant> nextRetryAt() {
        Instant earliest = null;
        for (Partition partition : partitions.values()) {
            for (Pending p : partition.records) {
                Instant at = p.retryAt();
                if (at != null && (earliest == null || at.isBefore(earliest))) {
                    earliest = at;
                }
            }
        }
        return Optional.ofNullable(earliest);
    }

    /** The partitions holding at least one record. */
    Set<TopicPartition> holding() {
        Set<TopicPartition> holding = new HashSet<>();
        partitions.forEach((tp, partition) -> {
            if (!partition.records.isEmpty()) {
                holding.add(tp);
            }
        });
        return holding;
    }

    /** How many records are held. */
    int size() {
        return partitions.values().stream().mapToInt(p -> p.records.size()).sum();
    }

    /** Per partition of {@code consumed}, the offset up to which every record is final. */
    Map<TopicPartition, OffsetAndMetadata> committable(Map<TopicPartition, OffsetAndMetadata> consumed) {
        Map<TopicPartition, OffsetAndMetadata> committable = new HashMap<>();
        consumed.forEach((tp, offset) -> {
            Partition partition = partitions.get(tp);
            if (partition == null || partition.records.isEmpty()) {
                committable.put(tp, offset);
            } else {
                long oldest = partition.records.get(0).record.kafkaOffset();
                committable.put(tp, oldest < offset.offset() ? new OffsetAndMetadata(oldest) : offset);
            }
        });
        return committable;
    }

    /** Forgets these partitions (revoked, or the task stops); the records they held. */
    List<Pending> drop(Collection<TopicPartition> dropped) {
        List<Pending> records = new ArrayList<>();
        for (TopicPartition tp : dropped) {
            Partition partition = partitions.remove(tp);
            if (partition != null) {
                records.addAll(partition.records);
            }
        }
        return records;
    }

    /** Forgets every partition; the records they held. */
    List<Pending> dropAll() {
        return drop(List.copyOf(partitions.keySet()));
    }
}
