package dev.ikkai.outbox;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Clock;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Future;

import org.apache.kafka.clients.producer.MockProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.errors.RecordTooLargeException;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.errors.ConnectException;
import org.apache.kafka.connect.sink.SinkRecord;
import org.junit.jupiter.api.Test;

/** The dead-letter side of the sink alone, with no Connect context: bounded copies, confirmed before their receipts. */
class DeadLettersTest {
    private final MockProducer<byte[], byte[]> producer =
        new MockProducer<>(false, null, new ByteArraySerializer(), new ByteArraySerializer());
    private final DeadLetters deadLetters =
        new DeadLetters(new DeadLetterQueue.Topic(producer, "dlq.outbox", "outbox-sink.http"), Clock.systemUTC());
    private final List<String> receipts = new ArrayList<>();

    private static SinkRecord record(long offset, byte[] value) {
        return new SinkRecord("outbox.requests", 0, Schema.STRING_SCHEMA, "k", Schema.BYTES_SCHEMA, value, offset);
    }

    private void write(long offset, byte[] value) {
        deadLetters.write(record(offset, value), null, new RejectedRequest(RejectedRequest.BAD_PATH, "x"), null, null,
            () -> receipts.add("receipt of " + offset));
    }

    @Test
    void aReceiptIsWrittenOnlyOnceTheBrokerConfirmedItsDeadLetterInOrder() {
        write(7, new byte[] {1});
        write(8, new byte[] {2});
        deadLetters.confirm(null);
        assertEquals(List.of(), receipts, "nothing confirmed yet");
        producer.completeNext();
        deadLetters.confirm(null);
        assertEquals(List.of("receipt of 7"), receipts);
        producer.completeNext();
        deadLetters.confirm(null);
        deadLetters.confirm(null);
        assertEquals(List.of("receipt of 7", "receipt of 8"), receipts, "each receipt once");
        assertEquals(2, producer.history().size());
    }

    @Test
    void aDeadLetterTheBrokerRefusesStopsEveryLaterCallAndWritesNoReceipt() {
        write(7, new byte[] {1});
        producer.errorNext(new RecordTooLargeException("1082100 bytes"));
        ConnectException e = assertThrows(ConnectException.class, () -> deadLetters.confirm(null));
        assertTrue(e.getMessage().contains("outbox.requests-0@7"), e.getMessage());
        assertThrows(ConnectException.class, () -> deadLetters.confirm(null), "and on every later call");
        assertThrows(ConnectException.class, deadLetters::failIfBroken);
        assertEquals(List.of(), receipts);
    }

    @Test
    void aDeadLetterNotConfirmedByTheDeadlineStopsTheTask() {
        write(7, new byte[] {1});
        ConnectException e = assertThrows(ConnectException.class, () -> deadLetters.confirm(Clock.systemUTC().instant()));
        assertTrue(e.getMessage().contains("did not confirm"), e.getMessage());
        assertEquals(List.of(), receipts);
    }

    @Test
    void aProducerThatCannotTakeTheRecordIsAFailedWriteNotAnException() {
        DeadLetterQueue refusing = new DeadLetterQueue() {
            @Override
            public Future<?> write(SinkRecord copy, RejectedRequest why) {
                throw new IllegalStateException("producer closed");
            }

            @Override
            public void close() {
            }
        };
        DeadLetters broken = new DeadLetters(refusing, Clock.systemUTC());
        broken.write(record(3, new byte[] {1}), null, new RejectedRequest(RejectedRequest.BAD_PATH, "x"), null, null,
            () -> receipts.add("never"));
        assertThrows(ConnectException.class, () -> broken.confirm(null));
        assertEquals(List.of(), receipts);
    }

    @Test
    void theCopyIsBoundedWhateverTheRecordAndTheFailureHeld() {
        String huge = "x".repeat(3 * 1024 * 1024);
        RejectedRequest why = DeadLetters.unsendable(new IllegalStateException("failed on " + huge));
        assertTrue(why.getMessage().startsWith("the sink failed on this record: java.lang.IllegalStateException: "));
        assertTrue(why.getMessage().length() <= 2 * 1024, "bounded before it is built: " + why.getMessage().length());
        deadLetters.write(record(9, huge.getBytes(StandardCharsets.UTF_8)), null, why, null, null, () -> { });
        producer.completeNext();
        deadLetters.confirm(null);
        ProducerRecord<byte[], byte[]> sent = producer.history().get(0);
        assertTrue(sent.value().length <= Bounded.DEAD_LETTER_VALUE_BYTES, "value cut: " + sent.value().length);
        int headerBytes = 0;
        for (org.apache.kafka.common.header.Header h : sent.headers()) {
            headerBytes += h.key().length() + (h.value() == null ? 0 : h.value().length);
        }
        assertTrue(headerBytes < 64 * 1024, "headers bounded: " + headerBytes);
    }
}
