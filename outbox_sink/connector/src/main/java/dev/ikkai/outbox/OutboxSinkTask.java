package dev.ikkai.outbox;

import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Function;

import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerRecord;
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
    private final Duration answerWait;
    private OutboxSinkConfig config;
    private Map<String, Target> targets;
    private RetryPolicy policy;
    private OutboxCodec codec;
    private HttpSender http;
    private Producer<byte[], byte[]> receipts;
    private String receiptsTopic;
    private final Function<OutboxSinkConfig, DeadLetterQueue> deadLetterQueues;
    private DeadLetterQueue deadLetters;
    private OutboxMetrics metrics;
    private HttpRequests.KeyFormat keyFormat;
    private IdempotencyKey.Version keyVersion;
    /** Dead letters the DLQ has not confirmed yet, oldest first; each one's receipt is written once it has. */
    private final List<DeadLetterWrite> deadLetterWrites = new ArrayList<>();
    /** Why the DLQ failed to take a dead letter: the task stops, and commits nothing more. */
    private Exception deadLetterFailure;
    private final AtomicReference<Exception> receiptFailure = new AtomicReference<>();

    private final PendingRecords pending = new PendingRecords();
    private final List<Sent> inFlight = new ArrayList<>();
    /** The partitions this task paused because they hold records. */
    private final Set<TopicPartition> paused = new HashSet<>();

    public OutboxSinkTask() {
        this(Clock.systemUTC(), KafkaProducer::new, config -> new DeadLetterQueue.Topic(
            new KafkaProducer<>(config.receiptProducerConfig()), config.deadLetterTopic(), config.connectorName()), ANSWER_WAIT);
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
        config = new OutboxSinkConfig(props);
        targets = config.targets();
        policy = new RetryPolicy(config.duration(OutboxSinkConfig.BACKOFF_INITIAL), config.duration(OutboxSinkConfig.BACKOFF_MAX),
            config.duration(OutboxSinkConfig.RETRY_MAX_DURATION));
        codec = config.codec();
        if (config.deadLetterTopic().isBlank()) {
            throw new ConnectException("the outbox sink needs a dead-letter queue: set errors.tolerance=all and "
                + OutboxSinkConnector.DLQ_TOPIC + " (e.g. dlq.outbox)");
        }
        http = new HttpSender(config.duration(OutboxSinkConfig.HTTP_CONNECT_TIMEOUT), "outbox-http", clock,
            config.getInt(OutboxSinkConfig.RESPONSE_MAX_BYTES));
        keyFormat = config.keyFormat();
        keyVersion = config.keyVersion();
        receiptsTopic = config.getString(OutboxSinkConfig.RECEIPTS_TOPIC);
        receipts = producers.apply(config.receiptProducerConfig());
        deadLetters = deadLetterQueues.apply(config);
        metrics = new OutboxMetrics(context.pluginMetrics());
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
        failIfReceiptsBroken();
        confirmDeadLetters(null);
        pending.add(records);
        Instant sliceEnd = clock.instant().plus(config.duration(OutboxSinkConfig.PUT_MAX_DURATION));
        while (true) {
            boolean progress = completeAnswered();
            if (clock.instant().isBefore(sliceEnd)) {
                progress |= sendDue();
            }
            if (progress) {
                continue;
            }
            Instant now = clock.instant();
            // Nothing to send now: wait for an answer (a retry coming due meanwhile waits for it too).
            if (inFlight.isEmpty() || !now.isBefore(sliceEnd) || !awaitAnswer(min(answerWait, Duration.between(now, sliceEnd)))) {
                break;
            }
        }
        confirmDeadLetters(null);
        holdBackPartitionsThatWait();
        askToBeCalledAgain(sliceEnd);
    }

    /** Every attempt whose answer is in gets its outcome; true if there was any. */
    private boolean completeAnswered() {
        boolean any = false;
        for (Iterator<Sent> it = inFlight.iterator(); it.hasNext(); ) {
            Sent sent = it.next();
            if (sent.answer().isDone()) {
                it.remove();
                sent.pending().inFlight = false;
                boolean done;
                try {
                    done = complete(sent, sent.answer().join());
                } catch (Throwable t) {  // the backstop: one record's failure is its dead letter (failedOn)
                    done = failedOn(sent.pending(), t);
                }
                if (done) {
                    pending.finish(sent.pending());
                }
                any = true;
            }
        }
        return any;
    }

    /**
     * Starts an attempt for every record whose turn it is, as far as its partition's in-flight slots allow
     * (slots are per partition: a stalled target holds only its own partitions' slots); true if there was any.
     */
    private boolean sendDue() {
        List<PendingRecords.Pending> due = pending.due(clock.instant(), config.getInt(OutboxSinkConfig.MAX_IN_FLIGHT));
        for (PendingRecords.Pending p : due) {
            Sent sent;
            try {
                sent = send(p);
            } catch (ConnectException e) {  // the task's own failure (the receipt schema refused): not the record's
                throw e;
            } catch (Throwable t) {  // the backstop: one record's failure is its dead letter (failedOn)
                failedOn(p, t);
                sent = null;
                p.registryRetryAt = null;
            }
            if (sent == null) {
                if (p.registryRetryAt == null) {
                    pending.finish(p);
                }
            } else {
                p.inFlight = true;
                inFlight.add(sent);
            }
        }
        return !due.isEmpty();
    }

    /**
     * The backstop of one record: anything it throws while it is decoded, checked, built, sent or judged (a
     * StackOverflowError of a library, an unexpected RuntimeException) is its dead letter ({@code unsendable}), so no
     * record can stop the task. Rethrown, failing the task without committing, are only the failures that are not
     * one record's: {@link #isJvmWide} ones. Returns true (the record is final).
     */
    private boolean failedOn(PendingRecords.Pending p, Throwable t) {
        if (isJvmWide(t)) {
            throw (Error) t;  // isJvmWide holds only for Errors
        }
        log.error("outbox request at {}-{}@{} failed the sink ({}); it is dead-lettered", p.record.topic(),
            p.record.kafkaPartition(), p.record.kafkaOffset(), t.getClass().getName());
        if (p.request != null && p.attempts == null) {
            p.attempts = new Attempts(clock.instant());
        }
        if (p.attempts != null) {
            p.attempts.lastAttemptAt = clock.instant();
        }
        String message = t.getMessage() == null ? "" : ": " + Bounded.quoted(Urls.redact(Bounded.text(t.getMessage(), 64 * 1024)));
        deadLetter(p.record, p.request, new RejectedRequest(RejectedRequest.UNSENDABLE,
            "the sink failed on this record: " + t.getClass().getName() + message), p.attempts, null);
        return true;
    }

    /**
     * Failures that are the JVM's or the plugin's, never one record's: every VirtualMachineError but StackOverflowError
     * (an OutOfMemoryError, InternalError: the heap or the VM is shared by every task of the worker), and LinkageError
     * (a class missing from the plugin would fail every record: dead-lettering them all would empty the topic into the
     * DLQ). A StackOverflowError unwinds only the thread that overflowed, so it is the record's.
     */
    static boolean isJvmWide(Throwable t) {
        return t instanceof VirtualMachineError && !(t instanceof StackOverflowError) || t instanceof LinkageError;
    }

    /** Waits up to {@code wait} for any attempt in flight to be answered; false if none was. */
    private boolean awaitAnswer(Duration wait) {
        if (wait.isNegative() || wait.isZero()) {
            return false;
        }
        CompletableFuture<?>[] answers = inFlight.stream().map(Sent::answer).toArray(CompletableFuture<?>[]::new);
        try {
            CompletableFuture.anyOf(answers).get(wait.toMillis() + 1, TimeUnit.MILLISECONDS);
            return true;
        } catch (TimeoutException e) {
            return false;
        } catch (ExecutionException e) {  // an answer is never exceptional (HttpSender), but it is an answer
            return true;
        } catch (InterruptedException e) {  // the worker is cancelling the task: leave at once, the flag set
            Thread.currentThread().interrupt();
            return false;
        }
    }

    /** Pauses every partition that still holds a record, resumes every one this task paused that holds none. */
    private void holdBackPartitionsThatWait() {
        Set<TopicPartition> holding = pending.holding();
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

    /** While records are held, asks the worker to call put() again when there is something to do. */
    private void askToBeCalledAgain(Instant sliceEnd) {
        if (pending.size() == 0) {
            return;
        }
        Instant now = clock.instant();
        long wait;
        if (!inFlight.isEmpty() || !now.isBefore(sliceEnd)
            || !pending.due(now, config.getInt(OutboxSinkConfig.MAX_IN_FLIGHT)).isEmpty()) {
            wait = 1;  // answers to collect, or requests due that this put() had no time or slot for
        } else {
            // Rounded up: woken a fraction of a millisecond early, put() would find nothing due.
            wait = pending.nextRetryAt().map(at -> Math.max(1, (Duration.between(now, at).toNanos() + 999_999) / 1_000_000))
                .orElse(1L);
        }
        context.timeout(wait);
    }

    private static Duration min(Duration a, Duration b) {
        return a.compareTo(b) <= 0 ? a : b;
    }

    /**
     * Starts one attempt; null when the record is final without sending (undecodable, not allowed), or
     * when it waits for the schema registry ({@code p.registryRetryAt} set).
     */
    private Sent send(PendingRecords.Pending p) {
        SinkRecord record = p.record;
        p.registryRetryAt = null;
        try {
            if (p.request == null) {
                p.request = codec.decodeRequest(record.value() instanceof byte[] bytes ? bytes : null);
            }
            codec.prepareReceipts();
        } catch (RejectedRequest e) {
            deadLetter(record, null, e, null, null);
            return null;
        } catch (RuntimeException e) {  // OutboxCodec turns decoding failures into RejectedRequest; this is the backstop
            deadLetter(record, null, new RejectedRequest(RejectedRequest.UNDECODABLE, "decoding failed: " + e), null, null);
            return null;
        } catch (SchemaRegistryClient.Unavailable e) {
            waitForRegistry(p, e);
            return null;
        } catch (SchemaRegistryClient.Refused e) {
            throw new ConnectException("the receipt schema cannot be registered, so no receipt can be written: "
                + e.getMessage() + "; let the registry accept it (compatibility BACKWARD or weaker) or set "
                + OutboxSinkConfig.RECEIPTS_FORMAT + "=" + OutboxSinkConfig.SINGLE_OBJECT);
        }
        OutboxRequest request = p.request;
        if (p.attempts == null) {
            p.attempts = new Attempts(clock.instant());
        }
        Attempts state = p.attempts;
        Targets.Resolved resolved;
        try {
            resolved = Targets.resolve(targets, request);
        } catch (RejectedRequest e) {
            state.lastAttemptAt = clock.instant();
            deadLetter(record, request, e, state, null);
            return null;
        }
        HttpRequest httpRequest;
        try {
            httpRequest = HttpRequests.build(resolved, request, record, state.attempts + 1,
                config.duration(OutboxSinkConfig.HTTP_REQUEST_TIMEOUT), keyFormat, keyVersion);
        } catch (RejectedRequest e) {
            state.lastAttemptAt = clock.instant();
            deadLetter(record, request, e, state, null);
            return null;
        } catch (RuntimeException e) {  // whatever else the JDK refuses in this record's request is its own failure
            state.lastAttemptAt = clock.instant();
            deadLetter(record, request, new RejectedRequest(RejectedRequest.UNSENDABLE,
                "the HTTP request could not be built: " + e), state, null);
            return null;
        }
        state.attempts++;
        Instant sentAt = clock.instant();
        if (state.attempts > 1) {
            state.lastAttemptAt = sentAt;
        }
        return new Sent(p, resolved, sentAt, http.send(httpRequest));
    }

    /**
     * The registry could not answer for this record: it is not the record's fault, so it is neither
     * sent nor dead-lettered but tried again after a backoff, for as long as it takes (its partition
     * waits, paused, and its offset is not committed). Its HTTP retry budget has not started.
     */
    private void waitForRegistry(PendingRecords.Pending p, SchemaRegistryClient.Unavailable e) {
        p.registryFailures++;
        Duration wait = policy.backoff(p.registryFailures, Optional.empty(), ThreadLocalRandom.current().nextDouble());
        p.registryRetryAt = clock.instant().plus(wait);
        if (p.registryFailures == 1 || p.registryFailures % 20 == 0) {
            log.warn("outbox request at {}-{}@{} waits for the schema registry (try {}, next in {} ms): {}",
                p.record.topic(), p.record.kafkaPartition(), p.record.kafkaOffset(), p.registryFailures, wait.toMillis(),
                e.getMessage());
        }
    }

    /** What one answer means for its record; true when the outcome is final. */
    private boolean complete(Sent sent, HttpSender.Answer answer) {
        Attempts state = sent.pending().attempts;
        OutboxRequest request = sent.pending().request;
        Instant now = answer.at();
        metrics.latency(Duration.between(sent.sentAt(), now).toMillis());
        Optional<Duration> retryAfter = Optional.empty();
        String problem;
        HttpResponse<byte[]> response = answer.response();
        if (response == null) {  // connection refused or reset, timeout (HttpTimeoutException)
            state.lastStatus = null;
            state.lastDigest = null;
            problem = "failed: " + Bounded.quoted(Urls.redact(String.valueOf(answer.error())));
        } else {
            int status = response.statusCode();
            state.lastStatus = status;
            state.lastDigest = Sha256.hex(response.body());
            switch (RetryPolicy.classify(status)) {
                case DELIVERED -> {
                    metrics.delivered();
                    // Applied, whatever its body did next: the receipt says what that was (cut, stalled, broken off).
                    writeReceipt(request, Receipt.Outcome.DELIVERED, state, answer.bodyProblem());
                    return true;
                }
                case REJECT -> {
                    RejectedRequest why = new RejectedRequest(RejectedRequest.REJECTED_BY_TARGET,
                        sent.resolved().method() + " " + sent.resolved().target().alias() + Targets.shownPath(request.path())
                            + " returned " + status);
                    deadLetter(sent.pending().record, request, why, state,
                        HttpRequests.excerpt(response.body(), config.getInt(OutboxSinkConfig.EXCERPT_BYTES)));
                    return true;
                }
                default -> {
                    String header = response.headers().firstValue("Retry-After").orElse(null);
                    retryAfter = RetryPolicy.parseRetryAfter(header, now);
                    problem = "returned " + status + (header == null ? ""
                        : " with Retry-After: " + (header.length() > 40 ? header.substring(0, 40) + "…" : header));
                }
            }
        }
        Duration wait = policy.backoff(state.attempts, retryAfter, ThreadLocalRandom.current().nextDouble());
        if (!policy.withinBudget(state.firstAttemptAt, now, wait)) {
            RejectedRequest why = new RejectedRequest(RejectedRequest.RETRIES_EXHAUSTED, "gave up after " + state.attempts
                + " attempts over " + Duration.between(state.firstAttemptAt, now).toSeconds() + " s; the last one " + problem);
            deadLetter(sent.pending().record, request, why, state, null);
            return true;
        }
        metrics.retried();
        state.nextAttemptAt = now.plus(wait);
        log.debug("outbox request {} to {} {}; attempt {} in {} ms", request.decisionId(), request.target(), problem,
            state.attempts + 1, wait.toMillis());
        return false;
    }

    /**
     * Writes the record's bounded copy ({@link DeadLetterCopy}) to the DLQ through the sink's own producer
     * ({@link DeadLetterQueue}); its receipt is written once the broker confirms it ({@link #confirmDeadLetters}), so
     * a receipt never says a dead letter is on the DLQ when a read_committed reader cannot find it there.
     */
    private void deadLetter(SinkRecord record, OutboxRequest request, RejectedRequest why, Attempts state, String excerpt) {
        metrics.deadLettered();
        SinkRecord copy = DeadLetterCopy.of(record, request, why, state, excerpt);
        log.warn("outbox request at {}-{}@{} dead-lettered ({}): {}", record.topic(), record.kafkaPartition(),
            record.kafkaOffset(), why.kind(), Bounded.text(why.getMessage(), Bounded.FIELD_BYTES));
        java.util.concurrent.Future<?> written;
        try {
            written = deadLetters.write(copy, why);
        } catch (RuntimeException e) {  // the producer could not even take it: Kafka (the DLQ) is failing
            written = CompletableFuture.failedFuture(e);
        }
        Runnable receipt = request == null ? () -> { }
            : () -> writeReceipt(request, Receipt.Outcome.DEAD_LETTERED, state, why.kind() + ": " + why.getMessage());
        deadLetterWrites.add(new DeadLetterWrite(record.topic() + "-" + record.kafkaPartition() + "@" + record.kafkaOffset(),
            written, receipt));
    }

    /**
     * Writes the receipt of each dead letter the DLQ has confirmed, oldest first; with {@code until}, waits
     * for every one up to then. A dead letter the DLQ refused, or not confirmed by {@code until}, is Kafka
     * failing: the task stops (a ConnectException, now and on every later call) and commits nothing more,
     * so the restarted task dead-letters the record again.
     */
    private void confirmDeadLetters(Instant until) {
        failIfDeadLettersBroken();
        for (Iterator<DeadLetterWrite> it = deadLetterWrites.iterator(); it.hasNext(); ) {
            DeadLetterWrite write = it.next();
            if (until == null && !write.written().isDone()) {
                continue;
            }
            try {
                long nanos = until == null ? 0 : Math.max(0, Duration.between(clock.instant(), until).toNanos());
                write.written().get(nanos, TimeUnit.NANOSECONDS);
            } catch (ExecutionException e) {
                deadLetterFailure = new ConnectException("the dead-letter queue did not take the dead letter of " + write.where()
                    + ": " + e.getCause(), e.getCause());
            } catch (TimeoutException e) {
                deadLetterFailure = new ConnectException("the dead-letter queue did not confirm the dead letter of "
                    + write.where() + " within " + OutboxSinkConfig.DLQ_WRITE_TIMEOUT.toSeconds() + " s");
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new ConnectException("interrupted while waiting for the dead-letter queue", e);
            } catch (RuntimeException e) {  // a cancelled write
                deadLetterFailure = new ConnectException("the dead letter of " + write.where() + " was not written: " + e, e);
            }
            failIfDeadLettersBroken();
            it.remove();
            write.receipt().run();
        }
    }

    private void failIfDeadLettersBroken() {
        if (deadLetterFailure != null) {
            throw new ConnectException("stopping so that no dead-lettered request is committed without its dead letter "
                + "(the restarted task dead-letters it again): " + deadLetterFailure.getMessage(), deadLetterFailure);
        }
    }

    /**
     * One receipt on outbox.receipts, each text field at most {@link Bounded#FIELD_BYTES} (cut with a
     * digest), so a receipt is never larger than a few KiB whatever the record held.
     */
    private void writeReceipt(OutboxRequest request, Receipt.Outcome outcome, Attempts state, String reason) {
        int max = Bounded.FIELD_BYTES;
        String decisionId = Bounded.text(request.decisionId(), max);
        Receipt receipt = new Receipt(decisionId, Bounded.text(request.key(), max), Bounded.text(request.target(), max),
            outcome, state.lastStatus, state.attempts, state.firstAttemptAt.toEpochMilli(), state.lastAttemptAt.toEpochMilli(),
            state.lastDigest, Bounded.text(reason, max), Bounded.text(request.effectName(), max), request.idempotencyKey(keyVersion),
            request.effectKind());
        receipts.send(new ProducerRecord<>(receiptsTopic, OutboxCodec.utf8(decisionId), codec.encodeReceipt(receipt)),
            (metadata, error) -> {
                if (error != null) {
                    receiptFailure.compareAndSet(null, error);
                }
            });
    }

    /**
     * Receipts must be on the broker before the offsets of their requests are committed; and no
     * offset is committed past a record still held (waiting for its answer or a retry), so a crash
     * redelivers it.
     */
    @Override
    public Map<TopicPartition, OffsetAndMetadata> preCommit(Map<TopicPartition, OffsetAndMetadata> currentOffsets) {
        confirmDeadLetters(clock.instant().plus(OutboxSinkConfig.DLQ_WRITE_TIMEOUT));
        receipts.flush();
        failIfReceiptsBroken();
        return pending.committable(currentOffsets);
    }

    private void failIfReceiptsBroken() {
        Exception failure = receiptFailure.get();
        if (failure != null) {
            throw new ConnectException("writing a receipt to " + receiptsTopic + " failed; stopping so that no request "
                + "is committed without its receipt (the restarted task redelivers them): " + failure, failure);
        }
    }

    /**
     * Revoked (or lost) partitions: their held records are dropped, answers still due for them are
     * ignored. Their offsets were committed no further than the oldest held record, so the next
     * owner gets those records again and sends them with the same Idempotency-Key.
     */
    @Override
    public void close(Collection<TopicPartition> partitions) {
        int dropped = pending.drop(partitions).size();
        inFlight.removeIf(sent -> partitions.contains(sent.pending().partition));
        paused.removeAll(partitions);
        if (dropped > 0) {
            log.info("dropped {} held outbox request(s) of closed partitions {}; their next owner redelivers them "
                + "from the committed offset", dropped, partitions);
        }
    }

    @Override
    public void stop() {
        pending.dropAll();
        inFlight.clear();
        paused.clear();
        if (http != null) {
            http.close();
        }
        if (receipts != null) {
            receipts.close(Duration.ofSeconds(30));
        }
        if (deadLetters != null) {
            deadLetters.close();
        }
    }

    /** A dead letter handed to the DLQ producer, and its receipt, written once the broker has it. */
    record DeadLetterWrite(String where, java.util.concurrent.Future<?> written, Runnable receipt) {
    }

    /** One attempt in flight. */
    record Sent(PendingRecords.Pending pending, Targets.Resolved resolved, Instant sentAt, CompletableFuture<HttpSender.Answer> answer) {
    }
}
