package dev.ikkai.outbox;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.time.Clock;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.sink.SinkRecord;
import org.junit.jupiter.api.Test;

/**
 * The task's delivery loop against a JDK HTTP server: per-key order, a failing target holding back
 * only its own partition, commits never past a held record, rebalances, a schema registry that cannot answer.
 * Dead letters and receipts: {@link OutboxSinkTaskDeadLetterTest}.
 */
class OutboxSinkTaskTest extends OutboxSinkTaskFixture {
    @Test
    void aFailingRequestHoldsBackOnlyItsOwnKey() {
        failuresLeft.put("a1", 2);
        List<SinkRecord> batch = List.of(record(0, "A", "a1", "payments-api"), record(1, "B", "b1", "payments-api"),
            record(2, "A", "a2", "payments-api"), record(3, "B", "b2", "payments-api"));

        putUntilDone(batch);

        List<String> a = received.stream().filter(k -> k.startsWith("a")).toList();
        assertEquals(List.of("a1", "a1", "a1", "a2"), a, "a2 is sent only after a1 is final");
        List<String> b = received.stream().filter(k -> k.startsWith("b")).toList();
        assertEquals(List.of("b1", "b2"), b, "key B is neither held back nor sent twice");
        assertEquals(4, receipts.history().size());
        assertTrue(deadLettered.isEmpty());
        assertEquals(Set.of(), paused);
    }

    @Test
    void slotsAreRefilledAsAnswersComeInWhileEachKeyKeepsItsOffsetOrder() {
        List<SinkRecord> batch = new ArrayList<>();
        batch.add(record(0, 0, "S", "slow.0", "payments-api"));  // holds one slot until the 120 others are answered
        for (int offset = 1; offset <= 120; offset++) {  // 12 keys, 10 requests each, interleaved
            int key = offset % 12;
            batch.add(record(0, offset, "K" + key, "k" + key + "." + offset, "payments-api"));
        }

        putUntilDone(batch);

        assertEquals(List.of(), overlapping, "a key's next request is sent only after its previous one is answered");
        for (int key = 0; key < 12; key++) {
            String prefix = "k" + key + ".";
            List<Integer> sent = received.stream().filter(k -> k.startsWith(prefix))
                .map(k -> Integer.parseInt(k.substring(prefix.length()))).toList();
            assertEquals(sent.stream().sorted().toList(), sent, "key K" + key + " in offset order");
            assertEquals(10, sent.size(), "each request of key K" + key + " sent once");
        }
        assertTrue(mostInProgress.get() > 1 && mostInProgress.get() <= 8, "keys overlap, up to the 8 slots: " + mostInProgress);
        assertTrue(slowReleasedInTime, "the other 120 went on through the free slots while slow.0 hung in its own");
        assertEquals(121, receiptKeys().size());
    }

    @Test
    void aFailingTargetPausesOnlyItsOwnPartition() {
        failuresLeft.put("down1", 1_000);
        put(List.of(record(0, 5, "A", "down1", "payments-api"), record(0, 6, "A", "a2", "payments-api"),
            record(0, 7, "C", "c1", "payments-api"), record(1, 0, "B", "b1", "payments-api")));

        assertEquals(Set.of(P0), paused, "only the partition holding the failing request is paused");
        assertTrue(timeout > 0, "the task asks to be called again for the retry");
        assertEquals(Set.of("c1", "b1"), Set.copyOf(receiptKeys()), "other keys, and the other partition, went on");
        assertFalse(received.contains("a2"), "a2 waits behind down1, its key's earlier request");

        put(List.of(record(1, 1, "B", "b2", "payments-api")));
        assertTrue(receiptKeys().contains("b2"), "new records of the other partition are delivered at once");
        assertEquals(Set.of(P0), paused);

        failuresLeft.put("down1", 0);  // the target is back
        putUntilDone(List.of());
        assertEquals(List.of("down1", "a2"), receiptKeys().subList(3, 5), "a2 only after down1");
        assertEquals(Set.of(), paused);
        assertTrue(resumed.contains(P0));
    }

    @Test
    void preCommitNeverGoesPastAHeldRecord() {
        failuresLeft.put("down1", 1_000);
        put(List.of(record(0, 5, "A", "down1", "payments-api"), record(0, 6, "C", "c1", "payments-api"),
            record(0, 7, "A", "a2", "payments-api"), record(1, 0, "B", "b1", "payments-api"),
            record(1, 1, "B", "b2", "payments-api")));
        Map<TopicPartition, OffsetAndMetadata> consumed = Map.of(P0, new OffsetAndMetadata(8), P1, new OffsetAndMetadata(2));

        assertEquals(Map.of(P0, new OffsetAndMetadata(5), P1, new OffsetAndMetadata(2)), task.preCommit(consumed),
            "partition 0 commits up to its oldest held record although c1 after it is delivered");

        failuresLeft.put("down1", 0);
        putUntilDone(List.of());
        assertEquals(consumed, task.preCommit(consumed));
    }

    @Test
    void aRevokedPartitionsHeldRecordsAreDroppedAndComeBackFromTheCommittedOffset() {
        failuresLeft.put("down1", 1_000);
        SinkRecord down1 = record(0, 5, "A", "down1", "payments-api");
        put(List.of(down1, record(1, 0, "B", "b1", "payments-api")));
        assertEquals(Set.of(P0), paused);

        task.close(List.of(P0));
        long tries = received.stream().filter("down1"::equals).count();
        put(List.of());
        assertEquals(-1, timeout, "the task holds nothing more, so it asks for no wake-up");
        sleep(20);
        put(List.of());
        assertEquals(tries, received.stream().filter("down1"::equals).count(), "a dropped record is not retried");

        task.open(List.of(P0));  // assigned again: the worker redelivers from the committed offset
        assertTrue(resumed.contains(P0), "a partition opened afresh is resumed, though paused before the rebalance");
        failuresLeft.put("down1", 0);
        putUntilDone(List.of(down1));
        assertEquals(List.of("b1", "down1"), receiptKeys());
    }

    @Test
    void aRetryIsSentWhenDueEvenWithoutNewRecords() {
        failuresLeft.put("later1", 1);  // 503 with Retry-After: 1
        put(List.of(record(0, 0, "A", "later1", "payments-api")));
        assertTrue(timeout > 0 && timeout <= 1_000, "the task asks to be called when the retry is due, not " + timeout);

        put(List.of());
        assertEquals(List.of("later1"), received, "not sent again before it is due");

        sleep(timeout);
        put(List.of());
        assertEquals(List.of("later1", "later1"), received);
        assertEquals(List.of("later1"), receiptKeys());
        assertEquals(-1, timeout);
        assertEquals(Set.of(), paused);
    }

    @Test
    void aSlowAnswerDoesNotHoldBackOtherPartitions() {
        task = startTask(Duration.ofSeconds(1));  // slow1 hangs until released; the first task is idle (stop() closes receipts)
        put(List.of(record(0, 0, "A", "slow1", "payments-api"), record(1, 0, "B", "b1", "payments-api")));
        put(List.of(record(1, 1, "B", "b2", "payments-api")));

        assertTrue(received.contains("slow1"));
        assertEquals(List.of("b1", "b2"), receiptKeys(), "put() handed back the thread while slow1 was in flight");
        assertEquals(1, timeout, "and asks to be called again at once, to collect the answer");
        slowRelease.countDown();
        putUntilDone(List.of());
        assertEquals(List.of("b1", "b2", "slow1"), receiptKeys());
        assertEquals(Set.of(), paused);
    }

    /** A task reading (and receipting) the Confluent wire format against {@code registry}. */
    private OutboxSinkTask startRegistryTask(FakeSchemaRegistry registry) {
        // The first task stays idle, not stopped: stop() would close the receipts producer the two share.
        OutboxSinkTask started = new OutboxSinkTask(Clock.systemUTC(), config -> receipts, config -> deadLetterQueue(), ANSWER_WAIT);
        started.initialize(new FakeContext());
        started.start(Map.of(
            "outbox.targets", "payments-api",
            "outbox.target.payments-api.url", "http://127.0.0.1:" + server.getAddress().getPort() + "/payments",
            "outbox.receipts.bootstrap.servers", "unused:9092",
            "errors.deadletterqueue.topic.name", "dlq.test",
            "outbox.retry.backoff.initial.ms", "1",
            "outbox.retry.backoff.max.ms", "2",
            "schema.registry.url", registry.url(),
            "outbox.receipts.format", "confluent"));
        return started;
    }

    /** {@code record(...)}'s request in the Confluent wire format under {@code schemaId}. */
    private SinkRecord confluentRecord(long offset, String decisionId, int schemaId) throws IOException {
        SinkRecord singleObject = record(0, offset, "A", decisionId, "payments-api");
        GenericRecord request = new org.apache.avro.message.BinaryMessageDecoder<GenericRecord>(GenericData.get(),
            codec.requestSchema()).decode((byte[]) singleObject.value());
        byte[] value = FakeSchemaRegistry.confluent(schemaId, codec.requestSchema(), request);
        return new SinkRecord("outbox.requests", 0, Schema.STRING_SCHEMA, "A", Schema.OPTIONAL_BYTES_SCHEMA, value, offset);
    }

    @Test
    void anUnreachableRegistryHoldsTheRecordWithoutDeadLetteringItThenItIsDeliveredWithAConfluentReceipt() throws Exception {
        try (FakeSchemaRegistry registry = new FakeSchemaRegistry()) {
            int id = registry.register(codec.requestSchema());
            task = startRegistryTask(registry);
            registry.failWith = 503;
            put(List.of(confluentRecord(3, "a1", id)));

            assertEquals(List.of(), deadLettered, "the registry being down is not the record's fault");
            assertEquals(List.of(), received);
            assertEquals(Set.of(P0), paused);
            assertTrue(timeout > 0, "the task asks to be called again to retry the registry");
            assertEquals(Map.of(P0, new OffsetAndMetadata(3)), task.preCommit(Map.of(P0, new OffsetAndMetadata(4))));

            registry.failWith = 0;
            putUntilDone(List.of());

            assertEquals(List.of("a1"), received);
            assertEquals(List.of(), deadLettered);
            byte[] receipt = receipts.history().get(0).value();
            assertEquals(0, receipt[0], "the receipt is in the Confluent wire format");
            assertEquals(registry.subjects.get("outbox.receipts-value"), List.of(ByteBuffer.wrap(receipt, 1, 4).getInt()));
            assertEquals(Set.of(), paused);
        }
    }

    @Test
    void anIdTheRegistryDoesNotHoldIsDeadLetteredWithItsReason() throws Exception {
        try (FakeSchemaRegistry registry = new FakeSchemaRegistry()) {
            task = startRegistryTask(registry);
            assertEquals(1, putUntilDone(List.of(confluentRecord(0, "a1", 999))));

            assertEquals(List.of(), received);
            assertEquals(1, deadLettered.size());
            assertEquals("unknown-schema", deadLettered.get(0).headers().lastWithName("ikkai.dlq.error_class").value());
            assertTrue(deadLettered.get(0).headers().lastWithName("ikkai.dlq.reason").value().toString().contains("999"));
            assertEquals(List.of(), receipts.history(), "no receipt: without its schema the request has no decision_id");
        }
    }

    @Test
    void aRequestTrulyInFlightWhenItsPartitionIsRevokedIsNeitherReceiptedNorRetried() {
        task = startTask(Duration.ofSeconds(5));  // the first task is idle (stop() would close the shared receipts)
        SinkRecord held = record(0, 5, "A", "hold.r1", "payments-api");
        put(List.of(held));  // hands the thread back after 5 s without an answer: hold.r1 is in flight
        await(firstHoldArrived);
        assertEquals(List.of("hold.r1"), received);
        assertEquals(Set.of(P0), paused);

        task.close(List.of(P0));
        holdRelease.countDown();  // the server answers 201 now, for a partition the task no longer owns
        put(List.of());  // with the answer still counted in flight, this put() would wait for it and receipt it

        assertEquals(List.of(), receiptKeys(), "an answer for a revoked partition is ignored: its next owner delivers it");
        assertEquals(-1, timeout, "nothing held, no wake-up asked");
        task.open(List.of(P0));
        putUntilDone(List.of(held));
        assertEquals(List.of("hold.r1"), receiptKeys());
        assertEquals(List.of("hold.r1", "hold.r1"), received, "sent again by the new owner, with the same key");
    }

    @Test
    void eightStalledKeysOnOnePartitionDoNotTakeAnotherPartitionsSlots() {
        task = startTask(Duration.ofMillis(200));
        List<SinkRecord> batch = new ArrayList<>();
        for (int k = 0; k < 8; k++) {
            batch.add(record(0, k, "S" + k, "hold.s" + k, "payments-api"));  // 8 keys of partition 0, all hanging
        }
        put(batch);
        await(holdArrived);  // all eight are in flight at the server, each holding a slot

        put(List.of(record(1, 0, "B", "b1", "payments-api")));  // then partition 1 gets a record
        for (int round = 0; round < 50 && !receiptKeys().contains("b1"); round++) {
            put(List.of());
        }

        assertEquals(List.of("b1"), receiptKeys(), "partition 1 has slots of its own while partition 0's target hangs");
        assertEquals(Set.of(P0), paused);
        holdRelease.countDown();
        putUntilDone(List.of());
        assertEquals(9, receipts.history().size());
    }

    @Test
    @org.junit.jupiter.api.Timeout(120)
    void a2xxWhoseBodyStallsAfterTheHeadersIsDeliveredOnceAndSaysSo() {
        // Issue 44 case 5: the server answered 201, so the effect was applied; retrying would be a second application
        // and dead-lettering it (status null) a lie. Before, the stall was a timeout retried like any other.
        task = startTask(Duration.ofSeconds(1), Map.of("outbox.http.request.timeout.ms", "500"));

        putUntilDone(List.of(record(0, 0, "A", "stall.1", "payments-api")));

        assertEquals(List.of("stall.1"), received, "one attempt: its status came");
        assertEquals("DELIVERED", receipt(0).get("outcome").toString());
        assertEquals(201, receipt(0).get("status_code"));
        assertEquals(1, receipt(0).get("attempts"));
        assertTrue(receipt(0).get("reason").toString().contains("did not end within 500 ms"), receipt(0).get("reason").toString());
    }
}
