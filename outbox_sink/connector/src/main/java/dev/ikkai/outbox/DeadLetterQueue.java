package dev.ikkai.outbox;

import java.nio.charset.StandardCharsets;
import java.util.concurrent.Future;

import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.connect.header.Header;
import org.apache.kafka.connect.sink.SinkRecord;
import org.apache.kafka.connect.storage.SimpleHeaderConverter;

/**
 * Where the sink writes its dead letters, with a future that completes only when the broker has the record.
 *
 * <p>Why the sink writes them itself and does not hand them to Connect's {@code ErrantRecordReporter}: with more than
 * one error reporter (the shipped bundle's {@code errors.log.enable=true} adds the log reporter), Connect leaves out of
 * the future it returns every reporter future that is already done, the DLQ producer's too when the broker refused
 * the record at once (a {@code RecordTooLargeException}), so the sink saw a completed future for a dead letter that
 * was never written (issue 44). {@link Producer} is the sink's own, with {@code acks=all} and idempotence: its future
 * is the broker's answer, and a read_committed reader finds every record it confirms (nothing transactional writes
 * there).
 */
interface DeadLetterQueue extends AutoCloseable {
    /** Connect's executing class of a sink's put stage: the task (a string, so this floor names no room above it). */
    String EXECUTING_CLASS = "dev.ikkai.outbox.OutboxSinkTask";

    /** Starts writing {@code copy} (already bounded) for the rejection {@code why}; the future fails if the broker refuses. */
    Future<?> write(SinkRecord copy, RejectedRequest why);

    @Override
    void close();

    /** Connect's context headers (errors.deadletterqueue.context.headers.enable), written by the sink, bounded. */
    String ERRORS = "__connect.errors.";

    /** The dead-letter topic through the sink's own producer. */
    final class Topic implements DeadLetterQueue {
        private final Producer<byte[], byte[]> producer;
        private final String topic;
        private final String connector;
        private final SimpleHeaderConverter headers = new SimpleHeaderConverter();

        Topic(Producer<byte[], byte[]> producer, String topic, String connector) {
            this.producer = producer;
            this.topic = topic;
            this.connector = connector;
        }

        @Override
        public Future<?> write(SinkRecord copy, RejectedRequest why) {
            RecordHeaders out = new RecordHeaders();
            for (Header h : copy.headers()) {
                out.add(h.key(), bytes(copy.topic(), h));
            }
            out.add(ERRORS + "topic", utf8(copy.topic()));
            out.add(ERRORS + "partition", utf8(String.valueOf(copy.kafkaPartition())));
            out.add(ERRORS + "offset", utf8(String.valueOf(copy.kafkaOffset())));
            out.add(ERRORS + "connector.name", utf8(Bounded.quoted(connector)));
            out.add(ERRORS + "stage", utf8("TASK_PUT"));
            out.add(ERRORS + "class.name", utf8(EXECUTING_CLASS));
            out.add(ERRORS + "exception.class.name", utf8(RejectedRequest.class.getName()));
            out.add(ERRORS + "exception.message", utf8(Bounded.text(why.kind() + ": " + why.getMessage(), Bounded.FIELD_BYTES)));
            return producer.send(new ProducerRecord<>(topic, null, null,
                key(copy.key()), value(copy.value()), out));
        }

        /** A header as the worker's SimpleHeaderConverter would have written it (bytes as they are, text as UTF-8). */
        private byte[] bytes(String sourceTopic, Header h) {
            Object v = h.value();
            if (v == null || v instanceof byte[]) {
                return (byte[]) v;
            }
            if (v instanceof String text) {
                return utf8(text);
            }
            return headers.fromConnectHeader(sourceTopic, h.key(), h.schema(), v);
        }

        /** The key as the bundle's StringConverter wrote it (a byte-array key as it is). */
        private static byte[] key(Object key) {
            return key == null ? null : key instanceof byte[] bytes ? bytes : utf8(String.valueOf(key));
        }

        /** The value as the bundle's ByteArrayConverter holds it. */
        private static byte[] value(Object value) {
            return value == null ? null : value instanceof byte[] bytes ? bytes : utf8(String.valueOf(value));
        }

        private static byte[] utf8(String text) {
            return text.getBytes(StandardCharsets.UTF_8);
        }

        @Override
        public void close() {
            producer.close(java.time.Duration.ofSeconds(30));
        }
    }
}
