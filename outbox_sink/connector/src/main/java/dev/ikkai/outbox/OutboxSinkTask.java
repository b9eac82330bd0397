package dev.ikkai.outbox;

import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Function;

import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.connect.errors.ConnectException;
import org.apache.kafka.connect.errors.RetriableException;
import org.apache.kafka.connect.header.Header;
import org.apache.kafka.connect.sink.ErrantRecordReporter;
import org.apache.kafka.connect.sink.SinkRecord;
import org.apache.kafka.connect.sink.SinkTask;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Sends each outbox request once it is its key's turn, and never blocks the worker for long.
 *
 * <p>Records are processed in batch order, in waves: each wave sends the oldest unfinished request
 * of every key (up to {@code outbox.max.in.flight.requests} at once), so a key's requests are
 * sent one after the other while different keys overlap. A request that fails transiently (408,
 * 409 - its key still being processed -, 429, 5xx, connection error or timeout) is remembered with its next attempt time, and every
 * later record with the same key waits behind it; other keys go on. When nothing is due any
 * more but requests are still waiting, the task asks Connect to redeliver the batch after the earliest
 * wait ({@code context.timeout} + {@link RetriableException}): the consumer is paused meanwhile,
 * no offsets move, and requests already final are skipped on redelivery.
 *
 * <p>Final outcomes: 2xx is delivered; any other status, an unknown alias, a bad path or an
 * undecodable value goes to the dead-letter queue through the errant record reporter; a request
 * still failing transiently after {@code outbox.retry.max.duration.ms} too, or told by Retry-After
 * to wait longer than that (capped first: no answer can overflow the clock). Each final outcome
 * of a decodable request produces a receipt on outbox.receipts, keyed by decision_id.
 *
 * <p>Delivery is at least once: after a task restart, requests whose offsets were not yet
 * committed are sent again with the same Idempotency-Key (one per side effect:
 * {@link OutboxRequest#idempotencyKey()}), so the receiver applies them once,
 * and their receipts are written again (same decision_id, outcome, status and response digest
 * when the receiver answers a repeated key with its stored response; attempts and times are
 * those of the new delivery). Receipt readers keep one receipt per (decision_id, effect), DELIVERED
 * winning over DEAD_LETTERED (docs/outbox.md).
 */
public final class OutboxSinkTask extends SinkTask {
    private static final Logger log = LoggerFactory.getLogger(OutboxSinkTask.class);
    static final String USER_AGENT = "ikkai-outbox-sink/" + OutboxSinkConnector.VERSION;

    private final Clock clock;
    private final Function<Map<String, Object>, Producer<byte[], byte[]>> producers;
    private OutboxSinkConfig config;
    private Map<String, Target> targets;
    private RetryPolicy policy;
    private OutboxCodec codec;
    private HttpClient http;
    private Producer<byte[], byte[]> receipts;
    private String receiptsTopic;
    private ErrantRecordReporter reporter;
    private OutboxMetrics metrics;
    private final AtomicReference<Exception> receiptFailure = new AtomicReference<>();

    /** Per record (topic, partition, offset) of the batch being redelivered: state until put() returns. */
    private final Map<Coordinates, Attempts> attempts = new HashMap<>();
    private final Set<Coordinates> finished = new HashSet<>();

    public OutboxSinkTask() {
        this(Clock.systemUTC(), KafkaProducer::new);
    }

    /** For tests: another clock, and a producer for receipts that is not a real one. */
    OutboxSinkTask(Clock clock, Function<Map<String, Object>, Producer<byte[], byte[]>> producers) {
        this.clock = clock;
        this.producers = producers;
    }

    @Override
    public String version() {
        return OutboxSinkConnector.VERSION;
    }

    @Override
    public void start(Map<String, String> props) {
        config = new OutboxSinkConfig(props);
        targets = config.targets();
        policy = new RetryPolicy(config.duration(OutboxSinkConfig.BACKOFF_INITIAL), config.duration(OutboxSinkConfig.BACKOFF_MAX),
            config.duration(OutboxSinkConfig.RETRY_MAX_DURATION));
        codec = new OutboxCodec();
        reporter = context.errantRecordReporter();
        if (reporter == null) {
            throw new ConnectException("the outbox sink needs a dead-letter queue: set errors.tolerance=all and "
                + "errors.deadletterqueue.topic.name (the worker gave this task no errant record reporter)");
        }
        http = HttpClient.newBuilder()
            .connectTimeout(config.duration(OutboxSinkConfig.HTTP_CONNECT_TIMEOUT))
            .followRedirects(HttpClient.Redirect.NEVER)
            .version(HttpClient.Version.HTTP_1_1)
            .build();
        receiptsTopic = config.getString(OutboxSinkConfig.RECEIPTS_TOPIC);
        receipts = producers.apply(config.receiptProducerConfig());
        metrics = new OutboxMetrics(context.pluginMetrics());
        log.info("outbox sink task started; targets {}", targets.values());
    }

    @Override
    public void put(Collection<SinkRecord> records) {
        failIfReceiptsBroken();
        Instant sliceEnd = clock.instant().plus(config.duration(OutboxSinkConfig.PUT_MAX_DURATION));
        int maxInFlight = config.getInt(OutboxSinkConfig.MAX_IN_FLIGHT);
        boolean progress = true;
        while (progress) {
            // One wave: the oldest unfinished request of each key, if it is due, sent together (at most maxInFlight).
            progress = false;
            List<Sent> wave = new ArrayList<>();
            Set<String> keys = new HashSet<>();
            Instant now = clock.instant();
            for (SinkRecord record : records) {
                Coordinates where = Coordinates.of(record);
                if (finished.contains(where) || !keys.add(orderKey(record))) {
                    continue;  // final already, or an earlier request of its key is not
                }
                Attempts previous = attempts.get(where);
                if ((previous != null && previous.nextAttemptAt.isAfter(now)) || now.isAfter(sliceEnd) || wave.size() >= maxInFlight) {
                    continue;
                }
                Sent sent = send(record, where);
                progress = true;
                if (sent == null) {
                    finished.add(where);
                } else {
                    wave.add(sent);
                }
            }
            for (Sent sent : wave) {
                if (complete(sent)) {
                    finished.add(sent.where());
                }
            }
        }
        int waiting = 0;
        Instant wakeAt = null;
        for (SinkRecord record : records) {
            Coordinates where = Coordinates.of(record);
            if (!finished.contains(where)) {
                waiting++;
                Attempts state = attempts.get(where);
                if (state != null && (wakeAt == null || state.nextAttemptAt.isBefore(wakeAt))) {
                    wakeAt = state.nextAttemptAt;
                }
            }
        }
        if (waiting > 0) {
            Instant now = clock.instant();
            long wait = now.isAfter(sliceEnd) || wakeAt == null ? 1 : Math.max(1, Duration.between(now, wakeAt).toMillis());
            context.timeout(wait);
            throw new RetriableException(waiting + " outbox request(s) waiting for their turn or a retry; next in " + wait + " ms");
        }
        attempts.clear();
        finished.clear();
    }

    private static String orderKey(SinkRecord record) {
        return record.topic() + "/" + record.kafkaPartition() + "/" + record.key();
    }

    /** Starts one attempt; null when the record is final without sending (undecodable, not allowed). */
    private Sent send(SinkRecord record, Coordinates where) {
        OutboxRequest request;
        try {
            request = codec.decodeRequest(record.value() instanceof byte[] bytes ? bytes : null);
        } catch (RejectedRequest e) {
            deadLetter(record, null, e, null, null);
            return null;
        }
        Attempts state = attempts.computeIfAbsent(where, w -> new Attempts(clock.instant()));
        Targets.Resolved resolved;
        try {
            resolved = Targets.resolve(targets, request);
        } catch (RejectedRequest e) {
            state.lastAttemptAt = clock.instant();
            deadLetter(record, request, e, state, null);
            return null;
        }
        state.attempts++;
        Instant sentAt = clock.instant();
        if (state.attempts > 1) {
            state.lastAttemptAt = sentAt;
        }
        HttpRequest httpRequest = HttpRequests.build(resolved, request, record, state.attempts,
            config.duration(OutboxSinkConfig.HTTP_REQUEST_TIMEOUT));
        return new Sent(record, where, request, resolved, state, sentAt, http.sendAsync(httpRequest, HttpResponse.BodyHandlers.ofByteArray()));
    }

    /** Waits for one attempt (bounded by the request timeout); true when the outcome is final. */
    private boolean complete(Sent sent) {
        Attempts state = sent.state();
        OutboxRequest request = sent.request();
        Optional<Duration> retryAfter = Optional.empty();
        String problem;
        try {
            HttpResponse<byte[]> response = sent.response().get();
            metrics.latency(Duration.between(sent.sentAt(), clock.instant()).toMillis());
            int status = response.statusCode();
            state.lastStatus = status;
            state.lastDigest = HttpRequests.sha256Hex(response.body());
            switch (RetryPolicy.classify(status)) {
                case DELIVERED -> {
                    metrics.delivered();
                    writeReceipt(request, Receipt.Outcome.DELIVERED, state, null);
                    return true;
                }
                case REJECT -> {
                    RejectedRequest why = new RejectedRequest(RejectedRequest.REJECTED_BY_TARGET,
                        sent.resolved().method() + " " + sent.resolved().target().alias() + request.path() + " returned " + status);
                    deadLetter(sent.record(), request, why, state,
                        HttpRequests.excerpt(response.body(), config.getInt(OutboxSinkConfig.EXCERPT_BYTES)));
                    return true;
                }
                default -> {
                    String header = response.headers().firstValue("Retry-After").orElse(null);
                    retryAfter = RetryPolicy.parseRetryAfter(header, clock.instant());
                    problem = "returned " + status + (header == null ? ""
                        : " with Retry-After: " + (header.length() > 40 ? header.substring(0, 40) + "…" : header));
                }
            }
        } catch (ExecutionException e) {  // connection refused or reset, timeout (HttpTimeoutException)
            metrics.latency(Duration.between(sent.sentAt(), clock.instant()).toMillis());
            state.lastStatus = null;
            state.lastDigest = null;
            problem = "failed: " + e.getCause();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new RetriableException("interrupted while sending " + request.decisionId(), e);
        }
        Instant now = clock.instant();
        Duration wait = policy.backoff(state.attempts, retryAfter, ThreadLocalRandom.current().nextDouble());
        if (!policy.withinBudget(state.firstAttemptAt, now, wait)) {
            RejectedRequest why = new RejectedRequest(RejectedRequest.RETRIES_EXHAUSTED, "gave up after " + state.attempts
                + " attempts over " + Duration.between(state.firstAttemptAt, now).toSeconds() + " s; the last one " + problem);
            deadLetter(sent.record(), request, why, state, null);
            return true;
        }
        metrics.retried();
        state.nextAttemptAt = now.plus(wait);
        log.debug("outbox request {} to {} {}; attempt {} in {} ms", request.decisionId(), request.target(), problem,
            state.attempts + 1, wait.toMillis());
        return false;
    }

    private void deadLetter(SinkRecord record, OutboxRequest request, RejectedRequest why, Attempts state, String excerpt) {
        metrics.deadLettered();
        SinkRecord copy = new SinkRecord(record.topic(), record.kafkaPartition(), record.keySchema(), record.key(),
            record.valueSchema(), record.value(), record.kafkaOffset(), record.timestamp(), record.timestampType());
        for (Header h : record.headers()) {
            copy.headers().add(h);
        }
        copy.headers().addString("ikkai.dlq.stage", "outbox");
        copy.headers().addString("ikkai.dlq.error_class", why.kind());
        copy.headers().addString("ikkai.dlq.reason", why.getMessage());
        if (request != null) {
            copy.headers().addString("ikkai.dlq.decision_id", request.decisionId());
            copy.headers().addString("ikkai.dlq.target", request.target());
            copy.headers().addString("ikkai.dlq.effect", request.effectName());
        }
        if (state != null && state.lastStatus != null) {
            copy.headers().addString("ikkai.dlq.status_code", String.valueOf(state.lastStatus));
        }
        if (state != null) {
            copy.headers().addString("ikkai.dlq.attempts", String.valueOf(state.attempts));
        }
        if (excerpt != null) {
            copy.headers().addString("ikkai.dlq.response_excerpt", excerpt);
        }
        log.warn("outbox request at {}-{}@{} dead-lettered ({}): {}", record.topic(), record.kafkaPartition(),
            record.kafkaOffset(), why.kind(), why.getMessage());
        reporter.report(copy, why);
        if (request != null) {
            writeReceipt(request, Receipt.Outcome.DEAD_LETTERED, state, why.kind() + ": " + why.getMessage());
        }
    }

    private void writeReceipt(OutboxRequest request, Receipt.Outcome outcome, Attempts state, String reason) {
        Receipt receipt = new Receipt(request.decisionId(), request.key(), request.target(), outcome, state.lastStatus,
            state.attempts, state.firstAttemptAt.toEpochMilli(), state.lastAttemptAt.toEpochMilli(),
            state.lastDigest, reason, request.effectName(), request.idempotencyKey());
        receipts.send(new ProducerRecord<>(receiptsTopic, OutboxCodec.utf8(request.decisionId()), codec.encodeReceipt(receipt)),
            (metadata, error) -> {
                if (error != null) {
                    receiptFailure.compareAndSet(null, error);
                }
            });
    }

    /** Receipts must be on the broker before the offsets of their requests are committed. */
    @Override
    public Map<TopicPartition, OffsetAndMetadata> preCommit(Map<TopicPartition, OffsetAndMetadata> currentOffsets) {
        receipts.flush();
        failIfReceiptsBroken();
        return currentOffsets;
    }

    private void failIfReceiptsBroken() {
        Exception failure = receiptFailure.get();
        if (failure != null) {
            throw new ConnectException("writing a receipt to " + receiptsTopic + " failed; stopping so that no request "
                + "is committed without its receipt (the restarted task redelivers them): " + failure, failure);
        }
    }

    @Override
    public void close(Collection<TopicPartition> partitions) {
        attempts.keySet().removeIf(c -> partitions.contains(c.partition()));
        finished.removeIf(c -> partitions.contains(c.partition()));
    }

    @Override
    public void stop() {
        if (receipts != null) {
            receipts.close(Duration.ofSeconds(30));
        }
    }

    /** One attempt in flight. */
    record Sent(SinkRecord record, Coordinates where, OutboxRequest request, Targets.Resolved resolved, Attempts state,
                Instant sentAt, CompletableFuture<HttpResponse<byte[]>> response) {
    }

    record Coordinates(TopicPartition partition, long offset) {
        static Coordinates of(SinkRecord r) {
            return new Coordinates(new TopicPartition(r.topic(), r.kafkaPartition()), r.kafkaOffset());
        }
    }

    /** What is known about one record's deliveries so far. */
    static final class Attempts {
        final Instant firstAttemptAt;
        Instant lastAttemptAt;
        Instant nextAttemptAt;
        int attempts;
        Integer lastStatus;
        String lastDigest;

        Attempts(Instant first) {
            this.firstAttemptAt = first;
            this.lastAttemptAt = first;
            this.nextAttemptAt = first;
        }
    }
}
