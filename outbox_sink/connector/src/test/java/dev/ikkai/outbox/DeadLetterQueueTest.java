package dev.ikkai.outbox;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;

import org.apache.kafka.clients.producer.MockProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.errors.RecordTooLargeException;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.sink.SinkRecord;
import org.junit.jupiter.api.Test;

/** Issue 44, case 1: a dead letter's future is the broker's answer, and its record is bounded whatever the reason. */
class DeadLetterQueueTest {
    private final MockProducer<byte[], byte[]> producer =
        new MockProducer<>(false, null, new ByteArraySerializer(), new ByteArraySerializer());
    private final DeadLetterQueue queue = new DeadLetterQueue.Topic(producer, "dlq.outbox", "outbox-sink.http");

    private static SinkRecord record(String key, byte[] value) {
        SinkRecord record = new SinkRecord("outbox.requests", 2, Schema.STRING_SCHEMA, key, Schema.BYTES_SCHEMA, value, 41L);
        record.headers().addBytes("traceparent", "00-a-b-01".getBytes(StandardCharsets.UTF_8));
        return record;
    }

    @Test
    void aDeadLetterTheBrokerRefusesIsAFailedWriteNeverAConfirmedOne() {
        Future<?> written = queue.write(record("k", new byte[] {1}), new RejectedRequest(RejectedRequest.BAD_PATH, "x"));
        assertFalse(written.isDone(), "not confirmed before the broker answers");
        producer.errorNext(new RecordTooLargeException("1082100 bytes"));
        ExecutionException e = assertThrows(ExecutionException.class, written::get);
        assertTrue(e.getCause() instanceof RecordTooLargeException);
    }

    @Test
    void theRecordCarriesConnectsContextHeadersBoundedAndTheRecordsOwnBytes() throws Exception {
        String huge = "a".repeat(400 * 1024);  // a ~400 KB target alias quoted in the reason: the trigger
        RejectedRequest why = new RejectedRequest(RejectedRequest.UNKNOWN_TARGET, "target alias '" + huge + "' is unknown");
        OutboxRequest request = new OutboxRequest("d-1", "k", huge, "/" + huge, null, "application/json", new byte[0],
            java.util.Map.of(), 0L, null);
        SinkRecord copy = DeadLetterCopy.of(record("k", new byte[] {7, 8}), request, why, null, null);
        Future<?> written = queue.write(copy, why);
        producer.completeNext();
        written.get();
        ProducerRecord<byte[], byte[]> sent = producer.history().get(0);
        assertEquals("dlq.outbox", sent.topic());
        assertArrayEquals("k".getBytes(StandardCharsets.UTF_8), sent.key());
        assertArrayEquals(new byte[] {7, 8}, sent.value());
        assertEquals("41", new String(sent.headers().lastHeader("__connect.errors.offset").value(), StandardCharsets.UTF_8));
        assertEquals("2", new String(sent.headers().lastHeader("__connect.errors.partition").value(), StandardCharsets.UTF_8));
        assertArrayEquals("00-a-b-01".getBytes(StandardCharsets.UTF_8), sent.headers().lastHeader("traceparent").value());
        int total = 0;
        for (org.apache.kafka.common.header.Header h : sent.headers()) {
            assertTrue(h.value().length <= Bounded.FIELD_BYTES, h.key() + " is " + h.value().length + " bytes");
            total += h.key().length() + h.value().length;
        }
        assertTrue(total < 16 * 1024, "all headers together: " + total + " bytes");
    }
}
