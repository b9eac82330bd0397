package dev.ikkai.outbox;

import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.connect.errors.ConnectException;
import org.apache.kafka.connect.sink.SinkRecord;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The sink's dead letters: each a bounded copy of its record ({@link DeadLetterCopy}) written through the sink's own
 * {@code acks=all} producer ({@link DeadLetterQueue}), its receipt run only once the broker confirmed it, so a receipt
 * never says a dead letter is on the DLQ when a read_committed reader cannot find it there. A dead letter the DLQ
 * refuses, or does not confirm in time, is Kafka failing: from then on every call throws, and no offset is committed
 * past it (the restarted task dead-letters the record again). Needs no Connect context.
 */
final class DeadLetters implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(DeadLetters.class);

    private final DeadLetterQueue queue;
    private final Clock clock;
    /** Dead letters the DLQ has not confirmed yet, oldest first; each one's receipt is run once it has. */
    private final List<Write> writes = new ArrayList<>();
    /** Why the DLQ failed to take a dead letter: the task stops, and commits nothing more. */
    private Exception failure;

    DeadLetters(DeadLetterQueue queue, Clock clock) {
        this.queue = queue;
        this.clock = clock;
    }

    /** The connector's dead-letter topic, through a producer of the sink's own (acks=all, idempotent). */
    static DeadLetterQueue topic(OutboxSinkConfig config) {
        return new DeadLetterQueue.Topic(new KafkaProducer<>(config.receiptProducerConfig()), config.deadLetterTopic(),
            config.connectorName());
    }

    /**
     * The rejection of a record the sink itself failed on ({@code unsendable}): the throwable's class and its message,
     * bounded and redacted before it is built into anything.
     */
    static RejectedRequest unsendable(Throwable t) {
        String message = t.getMessage() == null ? ""
            : ": " + Bounded.quoted(Urls.redact(Bounded.text(t.getMessage(), 64 * 1024)));
        return new RejectedRequest(RejectedRequest.UNSENDABLE,
            "the sink failed on this record: " + t.getClass().getName() + message);
    }

    /** Starts writing the dead letter of {@code record}; {@code receipt} runs once the DLQ confirmed it ({@link #confirm}). */
    void write(SinkRecord record, OutboxRequest request, RejectedRequest why, Attempts state, String excerpt, Runnable receipt) {
        SinkRecord copy = DeadLetterCopy.of(record, request, why, state, excerpt);
        log.warn("outbox request at {}-{}@{} dead-lettered ({}): {}", record.topic(), record.kafkaPartition(),
            record.kafkaOffset(), why.kind(), Bounded.text(why.getMessage(), Bounded.FIELD_BYTES));
        Future<?> written;
        try {
            written = queue.write(copy, why);
        } catch (RuntimeException e) {  // the producer could not even take it: Kafka (the DLQ) is failing
            written = CompletableFuture.failedFuture(e);
        }
        writes.add(new Write(record.topic() + "-" + record.kafkaPartition() + "@" + record.kafkaOffset(), written, receipt));
    }

    /**
     * Runs the receipt of each dead letter the DLQ has confirmed, oldest first; with {@code until}, waits
     * for every one up to then. A dead letter the DLQ refused, or not confirmed by {@code until}, is Kafka
     * failing: a ConnectException, now and on every later call.
     */
    void confirm(Instant until) {
        failIfBroken();
        for (Iterator<Write> it = writes.iterator(); it.hasNext(); ) {
            Write write = it.next();
            if (until == null && !write.written().isDone()) {
                continue;
            }
            try {
                long nanos = until == null ? 0 : Math.max(0, Duration.between(clock.instant(), until).toNanos());
                write.written().get(nanos, TimeUnit.NANOSECONDS);
            } catch (ExecutionException e) {
                failure = new ConnectException("the dead-letter queue did not take the dead letter of " + write.where()
                    + ": " + e.getCause(), e.getCause());
            } catch (TimeoutException e) {
                failure = new ConnectException("the dead-letter queue did not confirm the dead letter of "
                    + write.where() + " within " + OutboxSinkConfig.DLQ_WRITE_TIMEOUT.toSeconds() + " s");
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new ConnectException("interrupted while waiting for the dead-letter queue", e);
            } catch (RuntimeException e) {  // a cancelled write
                failure = new ConnectException("the dead letter of " + write.where() + " was not written: " + e, e);
            }
            failIfBroken();
            it.remove();
            write.receipt().run();
        }
    }

    void failIfBroken() {
        if (failure != null) {
            throw new ConnectException("stopping so that no dead-lettered request is committed without its dead letter "
                + "(the restarted task dead-letters it again): " + failure.getMessage(), failure);
        }
    }

    @Override
    public void close() {
        queue.close();
    }

    /** A dead letter handed to the DLQ producer, and its receipt, run once the broker has it. */
    private record Write(String where, Future<?> written, Runnable receipt) {
    }
}
