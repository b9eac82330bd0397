package dev.ikkai.outbox;

import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collection;
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

import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.connect.errors.ConnectException;
import org.apache.kafka.connect.sink.SinkRecord;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The outbox sink's engine: it decides what each held record needs (send it, wait for its answer or its retry, deliver
 * it, dead-letter it) and sends it, and needs no Connect context — {@link OutboxSinkTask} hands it records and acts on
 * what it returns ({@link Slice}: which partitions to pause, when to be called again). The behaviour is described on
 * {@link OutboxSinkTask}.
 *
 * <p>Records are held per partition ({@link PendingRecords}) until their outcome is final; {@link #put} sends every
 * held request whose turn it is (the oldest held request of each key, up to {@code outbox.max.in.flight.requests} at
 * once per partition), collects answers as they come in, and returns once nothing is due and no answer came for its
 * answer wait, or its slice ({@code outbox.put.max.duration.ms}) is over. Dead letters go to {@link DeadLetters},
 * receipts to {@link Receipts}.
 */
final class Delivery implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(Delivery.class);

    private final Clock clock;
    private final Duration answerWait;
    private final Map<String, Target> targets;
    private final RetryPolicy policy;
    private final OutboxCodec codec;
    private final HttpSender http;
    private final HttpRequests.KeyFormat keyFormat;
    private final IdempotencyKey.Version keyVersion;
    private final Duration requestTimeout;
    private final Duration putMaxDuration;
    private final int maxInFlight;
    private final int excerptBytes;
    private final OutboxMetrics metrics;
    private final DeadLetters deadLetters;
    private final Receipts receipts;
    private final PendingRecords pending = new PendingRecords();
    private final List<Sent> inFlight = new ArrayList<>();

    /**
     * @param codec the codec {@code receipts} encodes with too (one registration of the receipt schema)
     * @param answerWait how long {@link #put} waits for an answer when it has nothing else to do before it returns
     */
    Delivery(OutboxSinkConfig config, OutboxCodec codec, Clock clock, Duration answerWait, OutboxMetrics metrics,
             DeadLetters deadLetters, Receipts receipts) {
        this.clock = clock;
        this.answerWait = answerWait;
        this.targets = config.targets();
        this.policy = new RetryPolicy(config.duration(OutboxSinkConfig.BACKOFF_INITIAL),
            config.duration(OutboxSinkConfig.BACKOFF_MAX), config.duration(OutboxSinkConfig.RETRY_MAX_DURATION));
        this.codec = codec;
        this.http = new HttpSender(config.duration(OutboxSinkConfig.HTTP_CONNECT_TIMEOUT), "outbox-http", clock,
            config.getInt(OutboxSinkConfig.RESPONSE_MAX_BYTES));
        this.keyFormat = config.keyFormat();
        this.keyVersion = config.keyVersion();
        this.requestTimeout = config.duration(OutboxSinkConfig.HTTP_REQUEST_TIMEOUT);
        this.putMaxDuration = config.duration(OutboxSinkConfig.PUT_MAX_DURATION);
        this.maxInFlight = config.getInt(OutboxSinkConfig.MAX_IN_FLIGHT);
        this.excerptBytes = config.getInt(OutboxSinkConfig.EXCERPT_BYTES);
        this.metrics = metrics;
        this.deadLetters = deadLetters;
        this.receipts = receipts;
    }

    /** What one {@link #put} leaves: the partitions still holding a record, and when to call again (-1: no need). */
    record Slice(Set<TopicPartition> holding, long callAgainMs) {
    }

    /**
     * Takes {@code records} in and works for one slice: sends what is due, collects answers, writes the outcomes.
     * Throws (a ConnectException) only for the task's own failures: a receipt or a dead letter Kafka did not take,
     * the receipt schema refused by the registry, a JVM-wide error ({@link #isJvmWide}).
     */
    Slice put(Collection<SinkRecord> records) {
        receipts.failIfBroken();
        deadLetters.confirm(null);
        pending.add(records);
        Instant sliceEnd = clock.instant().plus(putMaxDuration);
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
        deadLetters.confirm(null);
        return new Slice(pending.holding(), callAgainMs(sliceEnd));
    }

    /**
     * The offsets safe to commit: every confirmed dead letter's receipt written, every receipt on the broker, and
     * never past a record still held (waiting for its answer or a retry), so a crash redelivers it.
     */
    Map<TopicPartition, OffsetAndMetadata> committable(Map<TopicPartition, OffsetAndMetadata> currentOffsets) {
        deadLetters.confirm(clock.instant().plus(OutboxSinkConfig.DLQ_WRITE_TIMEOUT));
        receipts.flush();
        return pending.committable(currentOffsets);
    }

    /** Drops the held records of {@code partitions} and ignores their answers still due; how many were dropped. */
    int drop(Collection<TopicPartition> partitions) {
        int dropped = pending.drop(partitions).size();
        inFlight.removeIf(sent -> partitions.contains(sent.pending().partition));
        return dropped;
    }

    @Override
    public void close() {
        pending.dropAll();
        inFlight.clear();
        http.close();
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
        List<PendingRecords.Pending> due = pending.due(clock.instant(), maxInFlight);
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
        deadLetter(p.record, p.request, DeadLetters.unsendable(t), p.attempts, null);
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

    private static Duration min(Duration a, Duration b) {
        return a.compareTo(b) <= 0 ? a : b;
    }

    /** While records are held, when put() should be called again, in ms (at least 1); -1 when none is held. */
    private long callAgainMs(Instant sliceEnd) {
        if (pending.size() == 0) {
            return -1;
        }
        Instant now = clock.instant();
        if (!inFlight.isEmpty() || !now.isBefore(sliceEnd) || !pending.due(now, maxInFlight).isEmpty()) {
            return 1;  // answers to collect, or requests due that this put() had no time or slot for
        }
        // Rounded up: woken a fraction of a millisecond early, put() would find nothing due.
        return pending.nextRetryAt().map(at -> Math.max(1, (Duration.between(now, at).toNanos() + 999_999) / 1_000_000))
            .orElse(1L);
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
                requestTimeout, keyFormat, keyVersion);
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
                    receipts.write(request, Receipt.Outcome.DELIVERED, state, answer.bodyProblem());
                    return true;
                }
                case REJECT -> {
                    RejectedRequest why = new RejectedRequest(RejectedRequest.REJECTED_BY_TARGET,
                        sent.resolved().method() + " " + sent.resolved().target().alias() + Targets.shownPath(request.path())
                            + " returned " + status);
                    deadLetter(sent.pending().record, request, why, state,
                        HttpRequests.excerpt(response.body(), excerptBytes));
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

    /** Dead-letters the record ({@link DeadLetters}); its receipt is written once the DLQ confirmed it. */
    private void deadLetter(SinkRecord record, OutboxRequest request, RejectedRequest why, Attempts state, String excerpt) {
        metrics.deadLettered();
        Runnable receipt = request == null ? () -> { }
            : () -> receipts.write(request, Receipt.Outcome.DEAD_LETTERED, state, why.kind() + ": " + why.getMessage());
        deadLetters.write(record, request, why, state, excerpt, receipt);
    }

    /** One attempt in flight. */
    private record Sent(PendingRecords.Pending pending, Targets.Resolved resolved, Instant sentAt,
                        CompletableFuture<HttpSender.Answer> answer) {
    }
}
