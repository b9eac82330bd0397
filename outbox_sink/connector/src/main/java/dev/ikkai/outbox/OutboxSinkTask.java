package dev.ikkai.outbox;

import java.time.Clock;
import java.time.Duration;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Function;

import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.connect.errors.ConnectException;
import org.apache.kafka.connect.sink.SinkRecord;
import org.apache.kafka.connect.sink.SinkTask;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Sends each outbox request once it is its key's turn; a failing target holds back only its own
 * partitions, and the worker is never blocked for long.
 *
 * <p>The task is Connect's adapter (as Debezium's {@code EventRouter} over its delegate): it hands records to the
 * {@link Delivery} engine, which decides and sends, with {@link DeadLetters} (bounded copies through the sink's own
 * {@code acks=all} producer) and {@link Receipts}; it pauses, resumes and asks to be called again as the engine says.
 *
 * <p>Records are held per partition ({@link PendingRecords}) until their outcome is final. Each
 * put() sends every held request whose turn it is (the oldest held request of each key, up to
 * {@code outbox.max.in.flight.requests} at once per partition), so a key's requests are sent one after the other
 * while different keys overlap, and goes on as answers come in; it hands the thread back to the
 * worker once nothing is due and no answer came for {@link #ANSWER_WAIT}. A request that fails
 * transiently (408, 409 - its key still being processed -, 429, 5xx, connection error or timeout)
 * is kept with its next attempt time, and every later record with the same key waits behind it;
 * other keys go on. put() never throws for a target's failure.
 *
 * <p>A partition still holding a record when put() returns is paused ({@code context.pause}): it
 * takes no new records until everything it holds is final, then it is resumed. So a partition
 * waits behind its first waiting record; the task's other partitions keep flowing. put() asks
 * the worker to call it again when the next retry is due ({@code context.timeout}), or at once
 * while answers are awaited, so retries happen even when no new records arrive. preCommit()
 * commits, per partition, only up to its oldest held record: a crash or a rebalance redelivers
 * what was held, and a revoked partition's held records are dropped in close() for its next owner.
 *
 * <p>Nothing a record holds and nothing a server does stops the task: a value that does not decode, a
 * header value HTTP cannot carry, anything thrown while building its request is that record's dead
 * letter; every attempt ends within its deadline, headers and body ({@link HttpSender}). A dead
 * letter's receipt is written once the DLQ confirms it, and no offset is committed before; a DLQ
 * write that fails (Kafka itself failing) is the one thing that stops the task, without committing.
 *
 * <p>Final outcomes: 2xx and 303 are delivered, whatever the body does after the headers (the receipt's reason says when it was cut, stalled or broke off); any other status, an unknown alias, a bad path or an
 * undecodable value goes to the dead-letter queue through the sink's own producer ({@link DeadLetterQueue}); a request
 * still failing transiently after {@code outbox.retry.max.duration.ms} too, or told by Retry-After
 * to wait longer than that (capped first: no answer can overflow the clock). Each final outcome
 * of a decodable request produces a receipt on outbox.receipts, keyed by decision_id.
 *
 * <p>Requests in the Confluent wire format need the schema registry ({@link OutboxCodec}): an id it
 * does not hold is dead-lettered ({@code unknown-schema}); a registry that cannot answer (down, 5xx,
 * a credential refused) is not the record's fault, so the record waits and is tried again after a
 * backoff, as long as it takes, holding back its partition like a failing target.
 *
 * <p>Delivery is at least once: after a task restart, requests whose offsets were not yet
 * committed are sent again with the same Idempotency-Key (one per side effect:
 * {@link IdempotencyKey}), so the receiver applies them once,
 * and their receipts are written again (same decision_id, outcome, status and response digest
 * when the receiver answers a repeated key with its stored response; attempts and times are
 * those of the new delivery). Receipt readers keep one receipt per (decision_id, effect kind, effect), DELIVERED
 * winning over DEAD_LETTERED (docs/outbox.md).
 */
public final class OutboxSinkTask extends SinkTask {
    private static final Logger log = LoggerFactory.getLogger(OutboxSinkTask.class);
    /**
     * How long put() waits for an answer when it has nothing else to do before handing the thread back
     * to the worker, which then polls the partitions that are not paused. It bounds how long a slow
     * target's answer can hold back new records of other partitions, and how late a retry that comes
     * due during such a wait is sent.
     */
    static final Duration ANSWER_WAIT = Duration.ofMillis(200);

    private final Clock clock;
    private final Function<Map<String, Object>, Producer<byte[], byte[]>> producers;
    private final Function<OutboxSinkConfig, DeadLetterQueue> deadLetterQueues;
    private final Duration answerWait;
    private Receipts receipts;
    private DeadLetters deadLetters;
    private Delivery delivery;
    /** The partitions this task paused because they hold records. */
    private final Set<TopicPartition> paused = new HashSet<>();

    public OutboxSinkTask() {
        this(Clock.systemUTC(), KafkaProducer::new, DeadLetters::topic, ANSWER_WAIT);
    }

    /**
     * For tests: another clock, a producer for receipts and a dead-letter queue that are not real ones, another
     * {@link #ANSWER_WAIT}.
     */
    OutboxSinkTask(Clock clock, Function<Map<String, Object>, Producer<byte[], byte[]>> producers,
                   Function<OutboxSinkConfig, DeadLetterQueue> deadLetterQueues, Duration answerWait) {
        this.clock = clock;
        this.producers = producers;
        this.deadLetterQueues = deadLetterQueues;
        this.answerWait = answerWait;
    }

    @Override
    public String version() {
        return SinkVersion.NUMBER;
    }

    @Override
    public void start(Map<String, String> props) {
        OutboxSinkConfig config = new OutboxSinkConfig(props);
        Map<String, Target> targets = config.targets();
        OutboxCodec codec = config.codec();
        if (config.deadLetterTopic().isBlank()) {
            throw new ConnectException("the outbox sink needs a dead-letter queue: set errors.tolerance=all and "
                + OutboxSinkConfig.DLQ_TOPIC + " (e.g. dlq.outbox)");
        }
        receipts = new Receipts(producers.apply(config.receiptProducerConfig()),
            config.getString(OutboxSinkConfig.RECEIPTS_TOPIC), codec, config.keyVersion());
        deadLetters = new DeadLetters(deadLetterQueues.apply(config), clock);
        delivery = new Delivery(config, codec, clock, answerWait, new OutboxMetrics(context.pluginMetrics()), deadLetters,
            receipts);
        log.info("outbox sink task started; targets {}", targets.values());
    }

    /**
     * Partitions (re)assigned to this task start afresh from their committed offset; one it paused
     * before a rebalance may still be paused in the worker's books, so it is resumed.
     */
    @Override
    public void open(Collection<TopicPartition> partitions) {
        if (!partitions.isEmpty()) {
            context.resume(partitions.toArray(new TopicPartition[0]));
        }
    }

    @Override
    public void put(Collection<SinkRecord> records) {
        Delivery.Slice slice = delivery.put(records);
        holdBackPartitionsThatWait(slice.holding());
        if (slice.callAgainMs() >= 0) {  // while records are held: called again when there is something to do
            context.timeout(slice.callAgainMs());
        }
    }

    /** Pauses every partition that still holds a record, resumes every one this task paused that holds none. */
    private void holdBackPartitionsThatWait(Set<TopicPartition> holding) {
        List<TopicPartition> pause = holding.stream().filter(tp -> !paused.contains(tp)).toList();
        List<TopicPartition> resume = paused.stream().filter(tp -> !holding.contains(tp)).toList();
        if (!pause.isEmpty()) {
            log.debug("pausing {}: each holds a request waiting for its answer or a retry", pause);
            context.pause(pause.toArray(new TopicPartition[0]));
            paused.addAll(pause);
        }
        if (!resume.isEmpty()) {
            log.debug("resuming {}: every request they held is final", resume);
            context.resume(resume.toArray(new TopicPartition[0]));
            paused.removeAll(resume);
        }
    }

    /**
     * Receipts must be on the broker before the offsets of their requests are committed; and no
     * offset is committed past a record still held (waiting for its answer or a retry), so a crash
     * redelivers it.
     */
    @Override
    public Map<TopicPartition, OffsetAndMetadata> preCommit(Map<TopicPartition, OffsetAndMetadata> currentOffsets) {
        return delivery.committable(currentOffsets);
    }

    /**
     * Revoked (or lost) partitions: their held records are dropped, answers still due for them are
     * ignored. Their offsets were committed no further than the oldest held record, so the next
     * owner gets those records again and sends them with the same Idempotency-Key.
     */
    @Override
    public void close(Collection<TopicPartition> partitions) {
        int dropped = delivery.drop(partitions);
        paused.removeAll(partitions);
        if (dropped > 0) {
            log.info("dropped {} held outbox request(s) of closed partitions {}; their next owner redelivers them "
                + "from the committed offset", dropped, partitions);
        }
    }

    @Override
    public void stop() {
        paused.clear();
        if (delivery != null) {
            delivery.close();
        }
        if (receipts != null) {
            receipts.close();
        }
        if (deadLetters != null) {
            deadLetters.close();
        }
    }
}
