package dev.ikkai.outbox;

import java.time.Duration;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.connect.errors.ConnectException;

/**
 * Where the sink writes its receipts (outbox.receipts, keyed by decision_id), each text field bounded. A receipt the
 * producer fails to write stops the task before any offset is committed past it ({@link #failIfBroken}).
 */
final class Receipts implements AutoCloseable {
    private final Producer<byte[], byte[]> producer;
    private final String topic;
    private final OutboxCodec codec;
    private final IdempotencyKey.Version keyVersion;
    private final AtomicReference<Exception> failure = new AtomicReference<>();

    Receipts(Producer<byte[], byte[]> producer, String topic, OutboxCodec codec, IdempotencyKey.Version keyVersion) {
        this.producer = producer;
        this.topic = topic;
        this.codec = codec;
        this.keyVersion = keyVersion;
    }

    /**
     * One receipt on outbox.receipts, each text field at most {@link Bounded#FIELD_BYTES} (cut with a
     * digest), so a receipt is never larger than a few KiB whatever the record held.
     */
    void write(OutboxRequest request, Receipt.Outcome outcome, Attempts state, String reason) {
        int max = Bounded.FIELD_BYTES;
        String decisionId = Bounded.text(request.decisionId(), max);
        Receipt receipt = new Receipt(decisionId, Bounded.text(request.key(), max), Bounded.text(request.target(), max),
            outcome, state.lastStatus, state.attempts, state.firstAttemptAt.toEpochMilli(), state.lastAttemptAt.toEpochMilli(),
            state.lastDigest, Bounded.text(reason, max), Bounded.text(request.effectName(), max), request.idempotencyKey(keyVersion),
            request.effectKind());
        producer.send(new ProducerRecord<>(topic, OutboxCodec.utf8(decisionId), codec.encodeReceipt(receipt)),
            (metadata, error) -> {
                if (error != null) {
                    failure.compareAndSet(null, error);
                }
            });
    }

    /** Every receipt written so far is on the broker; or the task stops ({@link #failIfBroken}). */
    void flush() {
        producer.flush();
        failIfBroken();
    }

    void failIfBroken() {
        Exception failed = failure.get();
        if (failed != null) {
            throw new ConnectException("writing a receipt to " + topic + " failed; stopping so that no request "
                + "is committed without its receipt (the restarted task redelivers them): " + failed, failed);
        }
    }

    @Override
    public void close() {
        producer.close(Duration.ofSeconds(30));
    }
}
