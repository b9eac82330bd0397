package dev.ikkai.outbox;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Clock;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;

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
import org.apache.kafka.connect.errors.RetriableException;
import org.apache.kafka.connect.sink.ErrantRecordReporter;
import org.apache.kafka.connect.sink.SinkRecord;
import org.apache.kafka.connect.sink.SinkTaskContext;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** The task's delivery loop against a JDK HTTP server: per-key order, redelivery, DLQ, receipts. */
class OutboxSinkTaskTest {
    private HttpServer server;
    private final List<String> received = Collections.synchronizedList(new ArrayList<>());
    private final Map<String, Integer> failuresLeft = new ConcurrentHashMap<>();
    private final MockProducer<byte[], byte[]> receipts =
        new MockProducer<>(true, null, new ByteArraySerializer(), new ByteArraySerializer());
    private final List<SinkRecord> deadLettered = new ArrayList<>();
    private long timeout = -1;
    private final OutboxCodec codec = new OutboxCodec();
    private OutboxSinkTask task;

    @BeforeEach
    void start() throws IOException {
        server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
        server.createContext("/", exchange -> {
            String key = exchange.getRequestHeaders().getFirst("X-Ikkai-Decision-Id");  // the test names requests by decision
            received.add(key);
            int left = failuresLeft.getOrDefault(key, 0);
            int status = key.startsWith("bad") ? 400 : left > 0 ? 503 : 201;
            failuresLeft.computeIfPresent(key, (k, v) -> v - 1);
            byte[] body = ("{\"key\":\"" + key + "\"}").getBytes(StandardCharsets.UTF_8);
            exchange.sendResponseHeaders(status, body.length);
            exchange.getResponseBody().write(body);
            exchange.close();
        });
        server.start();
        task = new OutboxSinkTask(Clock.systemUTC(), config -> receipts);
        task.initialize(new FakeContext());
        task.start(Map.of(
            "outbox.targets", "payments-api",
            "outbox.target.payments-api.url", "http://127.0.0.1:" + server.getAddress().getPort() + "/payments",
            "outbox.receipts.bootstrap.servers", "unused:9092",
            "outbox.retry.backoff.initial.ms", "1",
            "outbox.retry.backoff.max.ms", "2"));
    }

    @AfterEach
    void stop() {
        task.stop();
        server.stop(0);
    }

    private SinkRecord record(long offset, String key, String decisionId, String target) throws IOException {
        GenericRecord r = new GenericData.Record(codec.requestSchema());
        r.put("decision_id", decisionId);
        r.put("key", key);
        r.put("target", target);
        r.put("path", "/holds/" + decisionId);
        r.put("content_type", "application/json");
        r.put("body", ByteBuffer.wrap(new byte[] {'{', '}'}));
        r.put("headers", Map.of());
        r.put("created_at", 1L);
        ByteBuffer b = new BinaryMessageEncoder<GenericRecord>(GenericData.get(), codec.requestSchema()).encode(r);
        byte[] value = new byte[b.remaining()];
        b.get(value);
        return new SinkRecord("outbox.requests", 0, Schema.STRING_SCHEMA, key, Schema.OPTIONAL_BYTES_SCHEMA, value, offset);
    }

    /** put() until it returns, as Connect redelivers the batch after each RetriableException; the number of put() calls. */
    private int putUntilDone(List<SinkRecord> batch) throws InterruptedException {
        for (int rounds = 1; rounds < 1000; rounds++) {
            try {
                task.put(batch);
                return rounds;
            } catch (RetriableException e) {
                assertTrue(timeout > 0, "a retry always tells Connect when to redeliver");
                Thread.sleep(timeout);  // what the worker's paused poll does
            }
        }
        throw new AssertionError("never finished");
    }

    @Test
    void aFailingRequestHoldsBackOnlyItsOwnKey() throws Exception {
        failuresLeft.put("a1", 2);
        List<SinkRecord> batch = List.of(record(0, "A", "a1", "payments-api"), record(1, "B", "b1", "payments-api"),
            record(2, "A", "a2", "payments-api"), record(3, "B", "b2", "payments-api"));

        putUntilDone(batch);

        List<String> a = received.stream().filter(k -> k.startsWith("a")).toList();
        assertEquals(List.of("a1", "a1", "a1", "a2"), a, "a2 is sent only after a1 is final");
        List<String> b = received.stream().filter(k -> k.startsWith("b")).toList();
        assertEquals(List.of("b1", "b2"), b, "key B is neither held back nor sent twice");
        assertEquals(4, receipts.history().size());
        assertTrue(deadLettered.isEmpty());
    }

    @Test
    void rejectedAndUnknownTargetsAreDeadLetteredOnceWithAReceiptEach() throws Exception {
        List<SinkRecord> batch = List.of(record(0, "A", "bad1", "payments-api"), record(1, "A", "a2", "nowhere-api"),
            record(2, "A", "a3", "payments-api"));

        assertEquals(1, putUntilDone(batch));

        assertEquals(List.of("bad1", "a3"), received, "nothing is sent for the unknown alias");
        assertEquals(List.of("rejected-by-target", "unknown-target"),
            deadLettered.stream().map(r -> r.headers().lastWithName("ikkai.dlq.error_class").value()).toList());
        assertEquals("400", deadLettered.get(0).headers().lastWithName("ikkai.dlq.status_code").value());
        assertEquals(Set.of("bad1", "a2", "a3"),
            Set.copyOf(receipts.history().stream().map(r -> new String(r.key(), StandardCharsets.UTF_8)).toList()));
    }

    @Test
    void aReceiptThatCannotBeWrittenStopsTheTask() throws Exception {
        MockProducer<byte[], byte[]> failing = new MockProducer<>(false, null, new ByteArraySerializer(), new ByteArraySerializer());
        task.stop();
        task = new OutboxSinkTask(Clock.systemUTC(), config -> failing);
        task.initialize(new FakeContext());
        task.start(Map.of("outbox.targets", "payments-api",
            "outbox.target.payments-api.url", "http://127.0.0.1:" + server.getAddress().getPort(),
            "outbox.receipts.bootstrap.servers", "unused:9092"));
        task.put(List.of(record(0, "A", "a1", "payments-api")));
        failing.errorNext(new org.apache.kafka.common.errors.TimeoutException("broker gone"));
        assertThrows(org.apache.kafka.connect.errors.ConnectException.class, () -> task.put(List.of()));
    }

    private final class FakeContext implements SinkTaskContext {
        private final PluginMetrics metrics = new PluginMetricsImpl(new Metrics(), new HashMap<>());

        @Override public Map<String, String> configs() { return Map.of(); }
        @Override public void offset(Map<TopicPartition, Long> offsets) { }
        @Override public void offset(TopicPartition tp, long offset) { }
        @Override public void timeout(long timeoutMs) { timeout = timeoutMs; }
        @Override public Set<TopicPartition> assignment() { return Set.of(); }
        @Override public void pause(TopicPartition... partitions) { }
        @Override public void resume(TopicPartition... partitions) { }
        @Override public void requestCommit() { }
        @Override public PluginMetrics pluginMetrics() { return metrics; }

        @Override
        public ErrantRecordReporter errantRecordReporter() {
            return (record, error) -> {
                deadLettered.add(record);
                return CompletableFuture.completedFuture(null);
            };
        }
    }
}
