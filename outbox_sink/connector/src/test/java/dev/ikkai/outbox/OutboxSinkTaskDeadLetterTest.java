package dev.ikkai.outbox;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Clock;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;

import org.apache.avro.generic.GenericRecord;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.MockProducer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.connect.sink.SinkRecord;
import org.junit.jupiter.api.Test;

/**
 * What the task dead-letters and receipts: rejected, unknown and unsendable records each once with a receipt, a
 * dead letter's receipt only once the DLQ has it, both bounded; a receipt or dead letter that cannot be written
 * stops the task.
 */
class OutboxSinkTaskDeadLetterTest extends OutboxSinkTaskFixture {
    @Test
    void deadLettersNameTheTaskAsConnectsExecutingClass() {
        // DeadLetterQueue spells the name out (it stands below the task): a renamed task must rename it too.
        assertEquals(OutboxSinkTask.class.getName(), DeadLetterQueue.EXECUTING_CLASS);
    }

    @Test
    void rejectedAndUnknownTargetsAreDeadLetteredOnceWithAReceiptEach() {
        List<SinkRecord> batch = List.of(record(0, "A", "bad1", "payments-api"), record(1, "A", "a2", "nowhere-api"),
            record(2, "A", "a3", "payments-api"));

        assertEquals(1, putUntilDone(batch));

        assertEquals(List.of("bad1", "a3"), received, "nothing is sent for the unknown alias");
        assertEquals(List.of("rejected-by-target", "unknown-target"),
            deadLettered.stream().map(r -> r.headers().lastWithName("ikkai.dlq.error_class").value()).toList());
        assertEquals("400", deadLettered.get(0).headers().lastWithName("ikkai.dlq.status_code").value());
        assertEquals(Set.of("bad1", "a2", "a3"), Set.copyOf(receiptKeys()));
    }

    @Test
    void aReceiptThatCannotBeWrittenStopsTheTask() {
        MockProducer<byte[], byte[]> failing = new MockProducer<>(false, null, new ByteArraySerializer(), new ByteArraySerializer());
        task.stop();
        task = new OutboxSinkTask(Clock.systemUTC(), config -> failing, config -> deadLetterQueue(), ANSWER_WAIT);
        task.initialize(new FakeContext());
        task.start(Map.of("outbox.targets", "payments-api",
            "outbox.target.payments-api.url", "http://127.0.0.1:" + server.getAddress().getPort(),
            "outbox.receipts.bootstrap.servers", "unused:9092", "errors.deadletterqueue.topic.name", "dlq.test"));
        task.put(List.of(record(0, "A", "a1", "payments-api")));
        failing.errorNext(new org.apache.kafka.common.errors.TimeoutException("broker gone"));
        assertThrows(org.apache.kafka.connect.errors.ConnectException.class, () -> task.put(List.of()));
    }

    private String header(SinkRecord deadLetter, String name) {
        org.apache.kafka.connect.header.Header h = deadLetter.headers().lastWithName(name);
        return h == null ? null : String.valueOf(h.value());
    }

    @Test
    void aHeaderValueHttpCannotCarryIsTheRecordsDeadLetterAndThePartitionGoesOn() {
        SinkRecord traced = record(0, 2, "C", "c1", "payments-api");
        traced.headers().addBytes("traceparent", "00-abc\r\nX-Injected: 1".getBytes(StandardCharsets.UTF_8));
        List<SinkRecord> batch = List.of(
            record(0, 0, "A", "a1", "payments-api", r -> r.put("effect", "notify-客户")),
            record(0, 1, "B", "b1", "payments-api", r -> r.put("headers", Map.of("X-Tenant", "t\u0000"))),
            traced,
            record(0, 3, "D", "d\n1", "payments-api", r -> r.put("path", "/holds/d1")),
            record(0, 4, "E", "e1", "payments-api", r -> r.put("model_version", "m".repeat(8 * 1024 + 1))),
            record(0, 5, "F", "f1", "payments-api", r -> r.put("content_type", "application/json; charset=ü")),
            record(0, 6, "G", "g1", "payments-api"));

        assertEquals(1, putUntilDone(batch), "put() never throws for a record's values");

        assertEquals(List.of("g1"), received, "only the sendable request is sent");
        assertEquals(6, deadLettered.size());
        deadLettered.forEach(d -> assertEquals("bad-header", header(d, "ikkai.dlq.error_class")));
        assertTrue(header(deadLettered.get(0), "ikkai.dlq.reason").contains("X-Ikkai-Effect"),
            header(deadLettered.get(0), "ikkai.dlq.reason"));
        assertEquals(7, receipts.history().size(), "one receipt each: six DEAD_LETTERED, one DELIVERED");
        assertEquals(Set.of(), paused);
    }

    @Test
    void aDeadLetterTheDlqRefusesStopsTheTaskWithoutCommittingOrReceiptingIt() {
        dlq = record -> CompletableFuture.failedFuture(new org.apache.kafka.common.errors.RecordTooLargeException("too large"));
        put(List.of(record(0, 0, "A", "a1", "payments-api")));
        Map<TopicPartition, OffsetAndMetadata> consumed = Map.of(P0, new OffsetAndMetadata(2));

        assertThrows(org.apache.kafka.connect.errors.ConnectException.class,
            () -> task.put(List.of(record(0, 1, "B", "bad1", "payments-api"))));

        assertEquals(List.of("a1"), receiptKeys(), "no receipt says bad1 is on the DLQ");
        assertThrows(org.apache.kafka.connect.errors.ConnectException.class, () -> task.preCommit(consumed),
            "no offset is committed past it");
        assertThrows(org.apache.kafka.connect.errors.ConnectException.class, () -> task.put(List.of()), "and it stays stopped");
    }

    @Test
    void aDeadLettersReceiptIsWrittenOnlyOnceTheDlqHasIt() {
        CompletableFuture<Void> written = new CompletableFuture<>();
        dlq = record -> written;
        put(List.of(record(0, 0, "A", "bad1", "payments-api")));
        assertEquals(List.of(), receiptKeys(), "the DLQ has not confirmed it yet");

        written.complete(null);
        Map<TopicPartition, OffsetAndMetadata> consumed = Map.of(P0, new OffsetAndMetadata(1));
        assertEquals(consumed, task.preCommit(consumed));
        assertEquals(List.of("bad1"), receiptKeys());
        assertEquals("DEAD_LETTERED", receipt(0).get("outcome").toString());
    }

    @Test
    void aReceiptAndADeadLetterStayBoundedWhateverTheRecordHolds() {
        String path = "/" + "p".repeat(2 * 1024 * 1024) + "/../x";  // 2 MB: the reason and the default effect quote it
        byte[] bigBody = new byte[600 * 1024];
        put(List.of(record(0, 0, "A", "x".repeat(100_000), "payments-api", r -> r.put("path", path)),
            record(0, 1, "B", "b1", "nowhere-api", r -> r.put("body", ByteBuffer.wrap(bigBody)))));

        assertEquals(2, receipts.history().size());
        for (int i = 0; i < 2; i++) {
            assertTrue(receipts.history().get(i).value().length <= 8 * 1024, "receipt " + i + " within 8 KiB");
            assertTrue(receipts.history().get(i).key().length <= Bounded.FIELD_BYTES);
        }
        GenericRecord first = receipt(0);
        assertTrue(first.get("reason").toString().contains("…sha256:"), "cut with the digest of the whole reason");
        assertEquals("bad-path", header(deadLettered.get(0), "ikkai.dlq.error_class"));
        deadLettered.get(0).headers().forEach(h -> assertTrue(
            String.valueOf(h.value()).getBytes(StandardCharsets.UTF_8).length <= Bounded.FIELD_BYTES, h.key()));
        SinkRecord big = deadLettered.get(1);
        assertEquals(Bounded.DEAD_LETTER_VALUE_BYTES, ((byte[]) big.value()).length);
        assertEquals(String.valueOf(((byte[]) record(0, 1, "B", "b1", "nowhere-api",
            r -> r.put("body", ByteBuffer.wrap(bigBody))).value()).length), header(big, "ikkai.dlq.value_bytes"));
        assertEquals(64, header(big, "ikkai.dlq.value_sha256").length());
    }
}
