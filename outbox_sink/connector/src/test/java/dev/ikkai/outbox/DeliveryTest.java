package dev.ikkai.outbox;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Clock;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

import com.sun.net.httpserver.HttpServer;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.message.BinaryMessageDecoder;
import org.apache.avro.message.BinaryMessageEncoder;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.MockProducer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.metrics.Metrics;
import org.apache.kafka.common.metrics.internals.PluginMetricsImpl;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.sink.SinkRecord;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The delivery engine alone, with no Connect context: what it sends, what it holds, what it writes and what it lets
 * commit, against a scripted HTTP server (a decision named "ok…" gets 201, "bad…" 400, "later…" 503 Retry-After 60).
 */
class DeliveryTest {
    private static final TopicPartition P0 = new TopicPartition("outbox.requests", 0);
    private static final TopicPartition P1 = new TopicPartition("outbox.requests", 1);

    private HttpServer server;
    private final List<String> received = new ArrayList<>();
    private final MockProducer<byte[], byte[]> receiptProducer =
        new MockProducer<>(true, null, new ByteArraySerializer(), new ByteArraySerializer());
    private final List<SinkRecord> deadLettered = new ArrayList<>();
    private final OutboxCodec codec = new OutboxCodec();
    private Delivery delivery;

    @BeforeEach
    void start() throws IOException {
        server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
        server.setExecutor(Executors.newCachedThreadPool());
        server.createContext("/", exchange -> {
            String decision = exchange.getRequestHeaders().getFirst("X-Ikkai-Decision-Id");
            synchronized (received) {
                received.add(decision);
            }
            int status = decision.startsWith("bad") ? 400 : decision.startsWith("later") ? 503 : 201;
            if (status == 503) {
                exchange.getResponseHeaders().add("Retry-After", "60");
            }
            byte[] body = "{}".getBytes(StandardCharsets.UTF_8);
            exchange.sendResponseHeaders(status, body.length);
            exchange.getResponseBody().write(body);
            exchange.close();
        });
        server.start();
        OutboxSinkConfig config = new OutboxSinkConfig(new HashMap<>(Map.of(
            "outbox.targets", "payments-api",
            "outbox.target.payments-api.url", "http://127.0.0.1:" + server.getAddress().getPort() + "/payments",
            "outbox.receipts.bootstrap.servers", "unused:9092",
            "errors.deadletterqueue.topic.name", "dlq.test",
            "outbox.idempotency.key.version", "v2")));
        DeadLetterQueue queue = new DeadLetterQueue() {
            @Override
            public Future<?> write(SinkRecord copy, RejectedRequest why) {
                deadLettered.add(copy);
                return CompletableFuture.completedFuture(null);
            }

            @Override
            public void close() {
            }
        };
        Clock clock = Clock.systemUTC();
        delivery = new Delivery(config, codec, clock, Duration.ofMillis(200),
            new OutboxMetrics(new PluginMetricsImpl(new Metrics(), new HashMap<>())), new DeadLetters(queue, clock),
            new Receipts(receiptProducer, "outbox.receipts", codec, config.keyVersion()));
    }

    @AfterEach
    void stop() {
        delivery.close();
        server.stop(0);
        ((ExecutorService) server.getExecutor()).shutdownNow();
    }

    private SinkRecord record(int partition, long offset, String decisionId, String effect) {
        GenericRecord r = new GenericData.Record(codec.requestSchema());
        r.put("decision_id", decisionId);
        r.put("key", "k-" + decisionId);
        r.put("target", "payments-api");
        r.put("path", "/holds/" + decisionId);
        r.put("content_type", "application/json");
        r.put("body", ByteBuffer.wrap(new byte[] {'{', '}'}));
        r.put("headers", Map.of());
        r.put("created_at", 1L);
        r.put("effect", effect);
        try {
            ByteBuffer b = new BinaryMessageEncoder<GenericRecord>(GenericData.get(), codec.requestSchema()).encode(r);
            byte[] value = new byte[b.remaining()];
            b.get(value);
            return new SinkRecord("outbox.requests", partition, Schema.STRING_SCHEMA, "k-" + decisionId,
                Schema.OPTIONAL_BYTES_SCHEMA, value, offset);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** put() until nothing is held or only records waiting a retry (Retry-After 60) are; the last slice. */
    private Delivery.Slice putUntilSettled(List<SinkRecord> records) {
        Delivery.Slice slice = delivery.put(records);
        for (int rounds = 0; slice.callAgainMs() == 1 && rounds < 1_000; rounds++) {
            slice = delivery.put(List.of());
        }
        return slice;
    }

    private List<GenericRecord> receipts() {
        BinaryMessageDecoder<GenericRecord> decoder = new BinaryMessageDecoder<>(GenericData.get(), codec.receiptSchema());
        return receiptProducer.history().stream().map(r -> {
            try {
                return decoder.decode(r.value());
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }).toList();
    }

    @Test
    void deliveredAndRejectedRecordsAreFinalWithOneReceiptEachAndNothingHeld() {
        Delivery.Slice slice = putUntilSettled(List.of(record(0, 0, "ok-1", null), record(0, 1, "bad-1", "hold"),
            record(1, 0, "ok-2", "notify")));

        assertEquals(Set.of(), slice.holding());
        assertEquals(-1, slice.callAgainMs(), "nothing held: no need to be called again");
        Map<String, String> outcomes = new HashMap<>();
        Map<String, String> kinds = new HashMap<>();
        for (GenericRecord r : receipts()) {
            outcomes.put(r.get("decision_id").toString(), r.get("outcome").toString());
            kinds.put(r.get("decision_id").toString(), r.get("effect_kind").toString());
        }
        assertEquals(Map.of("ok-1", "DELIVERED", "bad-1", "DEAD_LETTERED", "ok-2", "DELIVERED"), outcomes);
        assertEquals(Map.of("ok-1", "DEFAULT", "bad-1", "EXPLICIT", "ok-2", "EXPLICIT"), kinds);
        assertEquals(1, deadLettered.size());
        assertEquals(1L, deadLettered.get(0).kafkaOffset());
        Map<TopicPartition, OffsetAndMetadata> consumed = Map.of(P0, new OffsetAndMetadata(2), P1, new OffsetAndMetadata(1));
        assertEquals(consumed, delivery.committable(consumed));
    }

    @Test
    void aRecordWaitingForItsRetryHoldsItsPartitionAndItsOffsetOnly() {
        Delivery.Slice slice = putUntilSettled(List.of(record(0, 0, "ok-1", null), record(0, 1, "later-1", null),
            record(0, 2, "ok-3", null), record(1, 0, "ok-2", null)));

        assertEquals(Set.of(P0), slice.holding());
        assertTrue(slice.callAgainMs() > 50_000 && slice.callAgainMs() <= 60_000, "called again for the retry: "
            + slice.callAgainMs());
        Map<TopicPartition, OffsetAndMetadata> consumed = Map.of(P0, new OffsetAndMetadata(3), P1, new OffsetAndMetadata(1));
        assertEquals(Map.of(P0, new OffsetAndMetadata(1), P1, new OffsetAndMetadata(1)), delivery.committable(consumed),
            "never past the held record");
        assertEquals(3, receipts().size(), "the records of other keys went on: ok-1, ok-3, ok-2");
        assertEquals(1, delivery.drop(List.of(P0)), "the held record is dropped with its partition");
        assertEquals(consumed.get(P1), delivery.committable(consumed).get(P1));
    }
}
