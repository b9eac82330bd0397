package dev.ikkai.outbox;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Clock;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicInteger;

import com.sun.net.httpserver.HttpServer;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.message.BinaryMessageEncoder;
import org.apache.kafka.clients.producer.MockProducer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.metrics.Metrics;
import org.apache.kafka.common.metrics.PluginMetrics;
import org.apache.kafka.common.metrics.internals.PluginMetricsImpl;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.sink.ErrantRecordReporter;
import org.apache.kafka.connect.sink.SinkRecord;
import org.apache.kafka.connect.sink.SinkTaskContext;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;

/**
 * What the task tests share: a JDK HTTP server as the payments-api target, answering as each request's decision id
 * asks ({@code slow}, {@code hold}, {@code stall}, {@code k<key>.<n>}, {@code bad}, {@code later}, failures per key),
 * and a started task whose receipts, dead letters, pauses and wake-ups the tests read, fed as the worker feeds it.
 */
abstract class OutboxSinkTaskFixture {
    static final TopicPartition P0 = new TopicPartition("outbox.requests", 0);
    static final TopicPartition P1 = new TopicPartition("outbox.requests", 1);
    /** Longer than any answer of this test server but the slow ones: a put() collects every other answer. */
    static final Duration ANSWER_WAIT = Duration.ofSeconds(5);

    HttpServer server;
    final List<String> received = Collections.synchronizedList(new ArrayList<>());
    final Map<String, Integer> failuresLeft = new ConcurrentHashMap<>();
    /** Requests named k<key>.<n> take 5 ms: the keys with one in progress, the most in progress at once, overlaps. */
    final Set<String> busyKeys = ConcurrentHashMap.newKeySet();
    final AtomicInteger inProgress = new AtomicInteger();
    final AtomicInteger mostInProgress = new AtomicInteger();
    final List<String> overlapping = Collections.synchronizedList(new ArrayList<>());
    final CountDownLatch slowRelease = new CountDownLatch(1);
    final AtomicInteger kAnswered = new AtomicInteger();
    volatile boolean slowReleasedInTime;
    final CountDownLatch holdArrived = new CountDownLatch(8);
    final CountDownLatch firstHoldArrived = new CountDownLatch(1);
    final CountDownLatch holdRelease = new CountDownLatch(1);
    final CountDownLatch stallRelease = new CountDownLatch(1);
    final Set<String> stalls = ConcurrentHashMap.newKeySet();
    /** What the DLQ answers for each dead letter; by default it takes it at once. */
    Function<SinkRecord, Future<Void>> dlq = record -> CompletableFuture.completedFuture(null);
    final MockProducer<byte[], byte[]> receipts =
        new MockProducer<>(true, null, new ByteArraySerializer(), new ByteArraySerializer());
    final List<SinkRecord> deadLettered = new ArrayList<>();
    long timeout = -1;
    final Set<TopicPartition> paused = new HashSet<>();
    final List<TopicPartition> resumed = new ArrayList<>();
    final OutboxCodec codec = new OutboxCodec();
    OutboxSinkTask task;

    @BeforeEach
    void start() throws IOException {
        server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
        server.setExecutor(Executors.newCachedThreadPool());  // a slow answer must not hold back the others
        server.createContext("/", exchange -> {
            String key = exchange.getRequestHeaders().getFirst("X-Ikkai-Decision-Id");  // the test names requests by decision
            received.add(key);
            if (key.startsWith("slow")) {  // hangs until released: by the test, or once 120 k-requests are answered
                try {
                    slowReleasedInTime = slowRelease.await(60, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            if (key.startsWith("hold")) {  // in flight until the test releases it
                holdArrived.countDown();
                firstHoldArrived.countDown();
                await(holdRelease);
            }
            if (key.startsWith("stall") && stalls.add(key)) {  // the first attempt: headers, 3 bytes of 1000, then nothing
                exchange.sendResponseHeaders(201, 1000);
                exchange.getResponseBody().write("{\"a".getBytes(StandardCharsets.UTF_8));
                exchange.getResponseBody().flush();
                await(stallRelease);
                exchange.close();
                return;
            }
            if (key.startsWith("k")) {
                String kafkaKey = key.substring(0, key.indexOf('.'));
                if (!busyKeys.add(kafkaKey)) {
                    overlapping.add(key);
                }
                mostInProgress.accumulateAndGet(inProgress.incrementAndGet(), Math::max);
                sleep(5);
                inProgress.decrementAndGet();
                busyKeys.remove(kafkaKey);  // before the answer leaves: the key's next request cannot be here yet
            }
            int left = failuresLeft.getOrDefault(key, 0);
            int status = key.startsWith("bad") ? 400 : left > 0 ? 503 : 201;
            failuresLeft.computeIfPresent(key, (k, v) -> v - 1);
            if (status == 503 && key.startsWith("later")) {
                exchange.getResponseHeaders().add("Retry-After", "1");
            }
            byte[] body = ("{\"key\":\"" + key + "\"}").getBytes(StandardCharsets.UTF_8);
            exchange.sendResponseHeaders(status, body.length);
            exchange.getResponseBody().write(body);
            exchange.close();
            if (key.startsWith("k") && kAnswered.incrementAndGet() == 120) {
                slowRelease.countDown();
            }
        });
        server.start();
        task = startTask(ANSWER_WAIT);
    }

    OutboxSinkTask startTask(Duration answerWait) {
        return startTask(answerWait, Map.of());
    }

    OutboxSinkTask startTask(Duration answerWait, Map<String, String> more) {
        OutboxSinkTask task = new OutboxSinkTask(Clock.systemUTC(), config -> receipts, config -> deadLetterQueue(), answerWait);
        task.initialize(new FakeContext());
        Map<String, String> config = new HashMap<>(Map.of(
            "outbox.targets", "payments-api",
            "outbox.target.payments-api.url", "http://127.0.0.1:" + server.getAddress().getPort() + "/payments",
            "outbox.receipts.bootstrap.servers", "unused:9092",
            "errors.deadletterqueue.topic.name", "dlq.test",
            "outbox.retry.backoff.initial.ms", "1",
            "outbox.retry.backoff.max.ms", "2"));
        config.putAll(more);
        task.start(config);
        return task;
    }

    static void await(CountDownLatch latch) {
        try {
            latch.await(60, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    @AfterEach
    void stop() {
        holdRelease.countDown();
        stallRelease.countDown();
        slowRelease.countDown();
        task.stop();
        server.stop(0);
        ((ExecutorService) server.getExecutor()).shutdownNow();
    }

    SinkRecord record(long offset, String key, String decisionId, String target) {
        return record(0, offset, key, decisionId, target);
    }

    SinkRecord record(int partition, long offset, String key, String decisionId, String target) {
        return record(partition, offset, key, decisionId, target, r -> { });
    }

    /** A request whose fields {@code change} may overwrite before it is encoded. */
    SinkRecord record(int partition, long offset, String key, String decisionId, String target,
                              java.util.function.Consumer<GenericRecord> change) {
        GenericRecord r = new GenericData.Record(codec.requestSchema());
        r.put("decision_id", decisionId);
        r.put("key", key);
        r.put("target", target);
        r.put("path", "/holds/" + decisionId);
        r.put("content_type", "application/json");
        r.put("body", ByteBuffer.wrap(new byte[] {'{', '}'}));
        r.put("headers", Map.of());
        r.put("created_at", 1L);
        change.accept(r);
        ByteBuffer b;
        try {
            b = new BinaryMessageEncoder<GenericRecord>(GenericData.get(), codec.requestSchema()).encode(r);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        byte[] value = new byte[b.remaining()];
        b.get(value);
        return new SinkRecord("outbox.requests", partition, Schema.STRING_SCHEMA, key, Schema.OPTIONAL_BYTES_SCHEMA, value, offset);
    }

    /** One put() as the worker makes it: the timeout the task asks for is read once, before the next poll. */
    void put(List<SinkRecord> batch) {
        timeout = -1;
        task.put(batch);
    }

    /**
     * put() the batch, then empty batches whenever the task asks to be called again (waiting as
     * the worker's poll does), until it holds nothing; the number of put() calls.
     */
    int putUntilDone(List<SinkRecord> batch) {
        put(batch);
        for (int rounds = 1; rounds < 10_000; rounds++) {
            if (timeout < 0) {
                return rounds;
            }
            sleep(timeout);
            put(List.of());
        }
        throw new AssertionError("never finished");
    }

    static void sleep(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new AssertionError(e);
        }
    }

    List<String> receiptKeys() {
        return receipts.history().stream().map(r -> new String(r.key(), StandardCharsets.UTF_8)).toList();
    }

    GenericRecord receipt(int i) {
        try {
            return new org.apache.avro.message.BinaryMessageDecoder<GenericRecord>(GenericData.get(), codec.receiptSchema())
                .decode(receipts.history().get(i).value());
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** The sink's dead-letter queue in this test: each dead letter collected, its write answered by {@link #dlq}. */
    DeadLetterQueue deadLetterQueue() {
        return new DeadLetterQueue() {
            @Override
            public Future<?> write(SinkRecord copy, RejectedRequest why) {
                deadLettered.add(copy);
                return dlq.apply(copy);
            }

            @Override
            public void close() {
            }
        };
    }

    final class FakeContext implements SinkTaskContext {
        private final PluginMetrics metrics = new PluginMetricsImpl(new Metrics(), new HashMap<>());

        @Override public Map<String, String> configs() { return Map.of(); }
        @Override public void offset(Map<TopicPartition, Long> offsets) { }
        @Override public void offset(TopicPartition tp, long offset) { }
        @Override public void timeout(long timeoutMs) { timeout = timeoutMs; }
        @Override public Set<TopicPartition> assignment() { return Set.of(P0, P1); }
        @Override public void pause(TopicPartition... partitions) { paused.addAll(List.of(partitions)); }
        @Override public void requestCommit() { }
        @Override public PluginMetrics pluginMetrics() { return metrics; }

        @Override
        public void resume(TopicPartition... partitions) {
            List.of(partitions).forEach(paused::remove);
            resumed.addAll(List.of(partitions));
        }

        @Override
        public ErrantRecordReporter errantRecordReporter() {
            return (record, error) -> {
                deadLettered.add(record);
                return dlq.apply(record);
            };
        }
    }
}
