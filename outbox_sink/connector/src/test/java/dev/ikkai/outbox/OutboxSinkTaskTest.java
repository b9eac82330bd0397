package dev.ikkai.outbox;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

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
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
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
import org.junit.jupiter.api.Test;

/**
 * The task's delivery loop against a JDK HTTP server: per-key order, a failing target holding back
 * only its own partition, commits never past a held record, rebalances, DLQ, receipts.
 */
class OutboxSinkTaskTest {
    private static final TopicPartition P0 = new TopicPartition("outbox.requests", 0);
    private static final TopicPartition P1 = new TopicPartition("outbox.requests", 1);
    /** Longer than any answer of this test server but the slow ones: a put() collects every other answer. */
    private static final Duration ANSWER_WAIT = Duration.ofSeconds(5);

    private HttpServer server;
    private final List<String> received = Collections.synchronizedList(new ArrayList<>());
    private final Map<String, Integer> failuresLeft = new ConcurrentHashMap<>();
    /** Requests named k<key>.<n> take 5 ms: the keys with one in progress, the most in progress at once, overlaps. */
    private final Set<String> busyKeys = ConcurrentHashMap.newKeySet();
    private final AtomicInteger inProgress = new AtomicInteger();
    private final AtomicInteger mostInProgress = new AtomicInteger();
    private final List<String> overlapping = Collections.synchronizedList(new ArrayList<>());
    private final CountDownLatch slowRelease = new CountDownLatch(1);
    private final AtomicInteger kAnswered = new AtomicInteger();
    private volatile boolean slowReleasedInTime;
    private final CountDownLatch holdArrived = new CountDownLatch(8);
    private final CountDownLatch firstHoldArrived = new CountDownLatch(1);
    private final CountDownLatch holdRelease = new CountDownLatch(1);
    private final CountDownLatch stallRelease = new CountDownLatch(1);
    private final Set<String> stalls = ConcurrentHashMap.newKeySet();
    /** What the DLQ answers for each dead letter; by default it takes it at once. */
    private Function<SinkRecord, Future<Void>> dlq = record -> CompletableFuture.completedFuture(null);
    private final MockProducer<byte[], byte[]> receipts =
        new MockProducer<>(true, null, new ByteArraySerializer(), new ByteArraySerializer());
    private final List<SinkRecord> deadLettered = new ArrayList<>();
    private long timeout = -1;
    private final Set<TopicPartition> paused = new HashSet<>();
    private final List<TopicPartition> resumed = new ArrayList<>();
    private final OutboxCodec codec = new OutboxCodec();
    private OutboxSinkTask task;

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

    private OutboxSinkTask startTask(Duration answerWait) {
        return startTask(answerWait, Map.of());
    }

    private OutboxSinkTask startTask(Duration answerWait, Map<String, String> more) {
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

    private static void await(CountDownLatch latch) {
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

    private SinkRecord record(long offset, String key, String decisionId, String target) {
        return record(0, offset, key, decisionId, target);
    }

    private SinkRecord record(int partition, long offset, String key, String decisionId, String target) {
        return record(partition, offset, key, decisionId, target, r -> { });
    }

    /** A request whose fields {@code change} may overwrite before it is encoded. */
    private SinkRecord record(int partition, long offset, String key, String decisionId, String target,
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
    private void put(List<SinkRecord> batch) {
        timeout = -1;
        task.put(batch);
    }

    /**
     * put() the batch, then empty batches whenever the task asks to be called again (waiting as
     * the worker's poll does), until it holds nothing; the number of put() calls.
     */
    private int putUntilDone(List<SinkRecord> batch) {
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

    private static void sleep(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new AssertionError(e);
        }
    }

    private List<String> receiptKeys() {
        return receipts.history().stream().map(r -> new String(r.key(), StandardCharsets.UTF_8)).toList();
    }

    @Test
    void deadLettersNameTheTaskAsConnectsExecutingClass() {
        // DeadLetterQueue spells the name out (it stands below the task): a renamed task must rename it too.
        assertEquals(OutboxSinkTask.class.getName(), DeadLetterQueue.EXECUTING_CLASS);
    }

    @Test
    void aFailingRequestHoldsBackOnlyItsOwnKey() {
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
        assertEquals(Set.of(), paused);
    }

    @Test
    void slotsAreRefilledAsAnswersComeInWhileEachKeyKeepsItsOffsetOrder() {
        List<SinkRecord> batch = new ArrayList<>();
        batch.add(record(0, 0, "S", "slow.0", "payments-api"));  // holds one slot until the 120 others are answered
        for (int offset = 1; offset <= 120; offset++) {  // 12 keys, 10 requests each, interleaved
            int key = offset % 12;
            batch.add(record(0, offset, "K" + key, "k" + key + "." + offset, "payments-api"));
        }

        putUntilDone(batch);

        assertEquals(List.of(), overlapping, "a key's next request is sent only after its previous one is answered");
        for (int key = 0; key < 12; key++) {
            String prefix = "k" + key + ".";
            List<Integer> sent = received.stream().filter(k -> k.startsWith(prefix))
                .map(k -> Integer.parseInt(k.substring(prefix.length()))).toList();
            assertEquals(sent.stream().sorted().toList(), sent, "key K" + key + " in offset order");
            assertEquals(10, sent.size(), "each request of key K" + key + " sent once");
        }
        assertTrue(mostInProgress.get() > 1 && mostInProgress.get() <= 8, "keys overlap, up to the 8 slots: " + mostInProgress);
        assertTrue(slowReleasedInTime, "the other 120 went on through the free slots while slow.0 hung in its own");
        assertEquals(121, receiptKeys().size());
    }

    @Test
    void rejectedAndUnknownTargetsAreDeadLetteredOnceWithAReceiptEach() {
        List<SinkRecord> batch = List.of(record(0, "A", "bad1", "payments-api"), record(1, "A", "a2", "nowhere-api"),
            record(2, "A", "a3", "payments-api"));

        assertEquals(1, putUntilDone(batch));

        assertEquals(List.of("bad1", "a3"), received, "nothing is sent for the unknown alias");
        assertEquals(List.of("rejected-by-target", "unknown-target"),
            deadLettered.stream().map(r -> r.headers().lastWithName("ikkai.dlq.error_class").value()).toList());
        assertEquals("400", deadLettered.get(0).headers().lastWithName("ikkai.dlq.status_code").value());
        assertEquals(Set.of("bad1", "a2", "a3"), Set.copyOf(receiptKeys()));
    }

    @Test
    void aFailingTargetPausesOnlyItsOwnPartition() {
        failuresLeft.put("down1", 1_000);
        put(List.of(record(0, 5, "A", "down1", "payments-api"), record(0, 6, "A", "a2", "payments-api"),
            record(0, 7, "C", "c1", "payments-api"), record(1, 0, "B", "b1", "payments-api")));

        assertEquals(Set.of(P0), paused, "only the partition holding the failing request is paused");
        assertTrue(timeout > 0, "the task asks to be called again for the retry");
        assertEquals(Set.of("c1", "b1"), Set.copyOf(receiptKeys()), "other keys, and the other partition, went on");
        assertFalse(received.contains("a2"), "a2 waits behind down1, its key's earlier request");

        put(List.of(record(1, 1, "B", "b2", "payments-api")));
        assertTrue(receiptKeys().contains("b2"), "new records of the other partition are delivered at once");
        assertEquals(Set.of(P0), paused);

        failuresLeft.put("down1", 0);  // the target is back
        putUntilDone(List.of());
        assertEquals(List.of("down1", "a2"), receiptKeys().subList(3, 5), "a2 only after down1");
        assertEquals(Set.of(), paused);
        assertTrue(resumed.contains(P0));
    }

    @Test
    void preCommitNeverGoesPastAHeldRecord() {
        failuresLeft.put("down1", 1_000);
        put(List.of(record(0, 5, "A", "down1", "payments-api"), record(0, 6, "C", "c1", "payments-api"),
            record(0, 7, "A", "a2", "payments-api"), record(1, 0, "B", "b1", "payments-api"),
            record(1, 1, "B", "b2", "payments-api")));
        Map<TopicPartition, OffsetAndMetadata> consumed = Map.of(P0, new OffsetAndMetadata(8), P1, new OffsetAndMetadata(2));

        assertEquals(Map.of(P0, new OffsetAndMetadata(5), P1, new OffsetAndMetadata(2)), task.preCommit(consumed),
            "partition 0 commits up to its oldest held record although c1 after it is delivered");

        failuresLeft.put("down1", 0);
        putUntilDone(List.of());
        assertEquals(consumed, task.preCommit(consumed));
    }

    @Test
    void aRevokedPartitionsHeldRecordsAreDroppedAndComeBackFromTheCommittedOffset() {
        failuresLeft.put("down1", 1_000);
        SinkRecord down1 = record(0, 5, "A", "down1", "payments-api");
        put(List.of(down1, record(1, 0, "B", "b1", "payments-api")));
        assertEquals(Set.of(P0), paused);

        task.close(List.of(P0));
        long tries = received.stream().filter("down1"::equals).count();
        put(List.of());
        assertEquals(-1, timeout, "the task holds nothing more, so it asks for no wake-up");
        sleep(20);
        put(List.of());
        assertEquals(tries, received.stream().filter("down1"::equals).count(), "a dropped record is not retried");

        task.open(List.of(P0));  // assigned again: the worker redelivers from the committed offset
        assertTrue(resumed.contains(P0), "a partition opened afresh is resumed, though paused before the rebalance");
        failuresLeft.put("down1", 0);
        putUntilDone(List.of(down1));
        assertEquals(List.of("b1", "down1"), receiptKeys());
    }

    @Test
    void aRetryIsSentWhenDueEvenWithoutNewRecords() {
        failuresLeft.put("later1", 1);  // 503 with Retry-After: 1
        put(List.of(record(0, 0, "A", "later1", "payments-api")));
        assertTrue(timeout > 0 && timeout <= 1_000, "the task asks to be called when the retry is due, not " + timeout);

        put(List.of());
        assertEquals(List.of("later1"), received, "not sent again before it is due");

        sleep(timeout);
        put(List.of());
        assertEquals(List.of("later1", "later1"), received);
        assertEquals(List.of("later1"), receiptKeys());
        assertEquals(-1, timeout);
        assertEquals(Set.of(), paused);
    }

    @Test
    void aSlowAnswerDoesNotHoldBackOtherPartitions() {
        task = startTask(Duration.ofSeconds(1));  // slow1 hangs until released; the first task is idle (stop() closes receipts)
        put(List.of(record(0, 0, "A", "slow1", "payments-api"), record(1, 0, "B", "b1", "payments-api")));
        put(List.of(record(1, 1, "B", "b2", "payments-api")));

        assertTrue(received.contains("slow1"));
        assertEquals(List.of("b1", "b2"), receiptKeys(), "put() handed back the thread while slow1 was in flight");
        assertEquals(1, timeout, "and asks to be called again at once, to collect the answer");
        slowRelease.countDown();
        putUntilDone(List.of());
        assertEquals(List.of("b1", "b2", "slow1"), receiptKeys());
        assertEquals(Set.of(), paused);
    }

    @Test
    void aReceiptThatCannotBeWrittenStopsTheTask() {
        MockProducer<byte[], byte[]> failing = new MockProducer<>(false, null, new ByteArraySerializer(), new ByteArraySerializer());
        task.stop();
        task = new OutboxSinkTask(Clock.systemUTC(), config -> failing, config -> deadLetterQueue(), ANSWER_WAIT);
        task.initialize(new FakeContext());
        task.start(Map.of("outbox.targets", "payments-api",
            "outbox.target.payments-api.url", "http://127.0.0.1:" + server.getAddress().getPort(),
            "outbox.receipts.bootstrap.servers", "unused:9092", "errors.deadletterqueue.topic.name", "dlq.test"));
        task.put(List.of(record(0, "A", "a1", "payments-api")));
        failing.errorNext(new org.apache.kafka.common.errors.TimeoutException("broker gone"));
        assertThrows(org.apache.kafka.connect.errors.ConnectException.class, () -> task.put(List.of()));
    }

    /** A task reading (and receipting) the Confluent wire format against {@code registry}. */
    private OutboxSinkTask startRegistryTask(FakeSchemaRegistry registry) {
        // The first task stays idle, not stopped: stop() would close the receipts producer the two share.
        OutboxSinkTask started = new OutboxSinkTask(Clock.systemUTC(), config -> receipts, config -> deadLetterQueue(), ANSWER_WAIT);
        started.initialize(new FakeContext());
        started.start(Map.of(
            "outbox.targets", "payments-api",
            "outbox.target.payments-api.url", "http://127.0.0.1:" + server.getAddress().getPort() + "/payments",
            "outbox.receipts.bootstrap.servers", "unused:9092",
            "errors.deadletterqueue.topic.name", "dlq.test",
            "outbox.retry.backoff.initial.ms", "1",
            "outbox.retry.backoff.max.ms", "2",
            "schema.registry.url", registry.url(),
            "outbox.receipts.format", "confluent"));
        return started;
    }

    /** {@code record(...)}'s request in the Confluent wire format under {@code schemaId}. */
    private SinkRecord confluentRecord(long offset, String decisionId, int schemaId) throws IOException {
        SinkRecord singleObject = record(0, offset, "A", decisionId, "payments-api");
        GenericRecord request = new org.apache.avro.message.BinaryMessageDecoder<GenericRecord>(GenericData.get(),
            codec.requestSchema()).decode((byte[]) singleObject.value());
        byte[] value = FakeSchemaRegistry.confluent(schemaId, codec.requestSchema(), request);
        return new SinkRecord("outbox.requests", 0, Schema.STRING_SCHEMA, "A", Schema.OPTIONAL_BYTES_SCHEMA, value, offset);
    }

    @Test
    void anUnreachableRegistryHoldsTheRecordWithoutDeadLetteringItThenItIsDeliveredWithAConfluentReceipt() throws Exception {
        try (FakeSchemaRegistry registry = new FakeSchemaRegistry()) {
            int id = registry.register(codec.requestSchema());
            task = startRegistryTask(registry);
            registry.failWith = 503;
            put(List.of(confluentRecord(3, "a1", id)));

            assertEquals(List.of(), deadLettered, "the registry being down is not the record's fault");
            assertEquals(List.of(), received);
            assertEquals(Set.of(P0), paused);
            assertTrue(timeout > 0, "the task asks to be called again to retry the registry");
            assertEquals(Map.of(P0, new OffsetAndMetadata(3)), task.preCommit(Map.of(P0, new OffsetAndMetadata(4))));

            registry.failWith = 0;
            putUntilDone(List.of());

            assertEquals(List.of("a1"), received);
            assertEquals(List.of(), deadLettered);
            byte[] receipt = receipts.history().get(0).value();
            assertEquals(0, receipt[0], "the receipt is in the Confluent wire format");
            assertEquals(registry.subjects.get("outbox.receipts-value"), List.of(ByteBuffer.wrap(receipt, 1, 4).getInt()));
            assertEquals(Set.of(), paused);
        }
    }

    @Test
    void anIdTheRegistryDoesNotHoldIsDeadLetteredWithItsReason() throws Exception {
        try (FakeSchemaRegistry registry = new FakeSchemaRegistry()) {
            task = startRegistryTask(registry);
            assertEquals(1, putUntilDone(List.of(confluentRecord(0, "a1", 999))));

            assertEquals(List.of(), received);
            assertEquals(1, deadLettered.size());
            assertEquals("unknown-schema", deadLettered.get(0).headers().lastWithName("ikkai.dlq.error_class").value());
            assertTrue(deadLettered.get(0).headers().lastWithName("ikkai.dlq.reason").value().toString().contains("999"));
            assertEquals(List.of(), receipts.history(), "no receipt: without its schema the request has no decision_id");
        }
    }

    private String header(SinkRecord deadLetter, String name) {
        org.apache.kafka.connect.header.Header h = deadLetter.headers().lastWithName(name);
        return h == null ? null : String.valueOf(h.value());
    }

    private GenericRecord receipt(int i) {
        try {
            return new org.apache.avro.message.BinaryMessageDecoder<GenericRecord>(GenericData.get(), codec.receiptSchema())
                .decode(receipts.history().get(i).value());
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    @Test
    void aRequestTrulyInFlightWhenItsPartitionIsRevokedIsNeitherReceiptedNorRetried() {
        task = startTask(Duration.ofSeconds(5));  // the first task is idle (stop() would close the shared receipts)
        SinkRecord held = record(0, 5, "A", "hold.r1", "payments-api");
        put(List.of(held));  // hands the thread back after 5 s without an answer: hold.r1 is in flight
        await(firstHoldArrived);
        assertEquals(List.of("hold.r1"), received);
        assertEquals(Set.of(P0), paused);

        task.close(List.of(P0));
        holdRelease.countDown();  // the server answers 201 now, for a partition the task no longer owns
        put(List.of());  // with the answer still counted in flight, this put() would wait for it and receipt it

        assertEquals(List.of(), receiptKeys(), "an answer for a revoked partition is ignored: its next owner delivers it");
        assertEquals(-1, timeout, "nothing held, no wake-up asked");
        task.open(List.of(P0));
        putUntilDone(List.of(held));
        assertEquals(List.of("hold.r1"), receiptKeys());
        assertEquals(List.of("hold.r1", "hold.r1"), received, "sent again by the new owner, with the same key");
    }

    @Test
    void eightStalledKeysOnOnePartitionDoNotTakeAnotherPartitionsSlots() {
        task = startTask(Duration.ofMillis(200));
        List<SinkRecord> batch = new ArrayList<>();
        for (int k = 0; k < 8; k++) {
            batch.add(record(0, k, "S" + k, "hold.s" + k, "payments-api"));  // 8 keys of partition 0, all hanging
        }
        put(batch);
        await(holdArrived);  // all eight are in flight at the server, each holding a slot

        put(List.of(record(1, 0, "B", "b1", "payments-api")));  // then partition 1 gets a record
        for (int round = 0; round < 50 && !receiptKeys().contains("b1"); round++) {
            put(List.of());
        }

        assertEquals(List.of("b1"), receiptKeys(), "partition 1 has slots of its own while partition 0's target hangs");
        assertEquals(Set.of(P0), paused);
        holdRelease.countDown();
        putUntilDone(List.of());
        assertEquals(9, receipts.history().size());
    }

    @Test
    @org.junit.jupiter.api.Timeout(120)
    void a2xxWhoseBodyStallsAfterTheHeadersIsDeliveredOnceAndSaysSo() {
        // Issue 44 case 5: the server answered 201, so the effect was applied; retrying would be a second application
        // and dead-lettering it (status null) a lie. Before, the stall was a timeout retried like any other.
        task = startTask(Duration.ofSeconds(1), Map.of("outbox.http.request.timeout.ms", "500"));

        putUntilDone(List.of(record(0, 0, "A", "stall.1", "payments-api")));

        assertEquals(List.of("stall.1"), received, "one attempt: its status came");
        assertEquals("DELIVERED", receipt(0).get("outcome").toString());
        assertEquals(201, receipt(0).get("status_code"));
        assertEquals(1, receipt(0).get("attempts"));
        assertTrue(receipt(0).get("reason").toString().contains("did not end within 500 ms"), receipt(0).get("reason").toString());
    }

    @Test
    void aHeaderValueHttpCannotCarryIsTheRecordsDeadLetterAndThePartitionGoesOn() {
        SinkRecord traced = record(0, 2, "C", "c1", "payments-api");
        traced.headers().addBytes("traceparent", "00-abc\r\nX-Injected: 1".getBytes(StandardCharsets.UTF_8));
        List<SinkRecord> batch = List.of(
            record(0, 0, "A", "a1", "payments-api", r -> r.put("effect", "notify-客户")),
            record(0, 1, "B", "b1", "payments-api", r -> r.put("headers", Map.of("X-Tenant", "t\u0000"))),
            traced,
            record(0, 3, "D", "d\n1", "payments-api", r -> r.put("path", "/holds/d1")),
            record(0, 4, "E", "e1", "payments-api", r -> r.put("model_version", "m".repeat(8 * 1024 + 1))),
            record(0, 5, "F", "f1", "payments-api", r -> r.put("content_type", "application/json; charset=ü")),
            record(0, 6, "G", "g1", "payments-api"));

        assertEquals(1, putUntilDone(batch), "put() never throws for a record's values");

        assertEquals(List.of("g1"), received, "only the sendable request is sent");
        assertEquals(6, deadLettered.size());
        deadLettered.forEach(d -> assertEquals("bad-header", header(d, "ikkai.dlq.error_class")));
        assertTrue(header(deadLettered.get(0), "ikkai.dlq.reason").contains("X-Ikkai-Effect"),
            header(deadLettered.get(0), "ikkai.dlq.reason"));
        assertEquals(7, receipts.history().size(), "one receipt each: six DEAD_LETTERED, one DELIVERED");
        assertEquals(Set.of(), paused);
    }

    @Test
    void aDeadLetterTheDlqRefusesStopsTheTaskWithoutCommittingOrReceiptingIt() {
        dlq = record -> CompletableFuture.failedFuture(new org.apache.kafka.common.errors.RecordTooLargeException("too large"));
        put(List.of(record(0, 0, "A", "a1", "payments-api")));
        Map<TopicPartition, OffsetAndMetadata> consumed = Map.of(P0, new OffsetAndMetadata(2));

        assertThrows(org.apache.kafka.connect.errors.ConnectException.class,
            () -> task.put(List.of(record(0, 1, "B", "bad1", "payments-api"))));

        assertEquals(List.of("a1"), receiptKeys(), "no receipt says bad1 is on the DLQ");
        assertThrows(org.apache.kafka.connect.errors.ConnectException.class, () -> task.preCommit(consumed),
            "no offset is committed past it");
        assertThrows(org.apache.kafka.connect.errors.ConnectException.class, () -> task.put(List.of()), "and it stays stopped");
    }

    @Test
    void aDeadLettersReceiptIsWrittenOnlyOnceTheDlqHasIt() {
        CompletableFuture<Void> written = new CompletableFuture<>();
        dlq = record -> written;
        put(List.of(record(0, 0, "A", "bad1", "payments-api")));
        assertEquals(List.of(), receiptKeys(), "the DLQ has not confirmed it yet");

        written.complete(null);
        Map<TopicPartition, OffsetAndMetadata> consumed = Map.of(P0, new OffsetAndMetadata(1));
        assertEquals(consumed, task.preCommit(consumed));
        assertEquals(List.of("bad1"), receiptKeys());
        assertEquals("DEAD_LETTERED", receipt(0).get("outcome").toString());
    }

    @Test
    void aReceiptAndADeadLetterStayBoundedWhateverTheRecordHolds() {
        String path = "/" + "p".repeat(2 * 1024 * 1024) + "/../x";  // 2 MB: the reason and the default effect quote it
        byte[] bigBody = new byte[600 * 1024];
        put(List.of(record(0, 0, "A", "x".repeat(100_000), "payments-api", r -> r.put("path", path)),
            record(0, 1, "B", "b1", "nowhere-api", r -> r.put("body", ByteBuffer.wrap(bigBody)))));

        assertEquals(2, receipts.history().size());
        for (int i = 0; i < 2; i++) {
            assertTrue(receipts.history().get(i).value().length <= 8 * 1024, "receipt " + i + " within 8 KiB");
            assertTrue(receipts.history().get(i).key().length <= Bounded.FIELD_BYTES);
        }
        GenericRecord first = receipt(0);
        assertTrue(first.get("reason").toString().contains("…sha256:"), "cut with the digest of the whole reason");
        assertEquals("bad-path", header(deadLettered.get(0), "ikkai.dlq.error_class"));
        deadLettered.get(0).headers().forEach(h -> assertTrue(
            String.valueOf(h.value()).getBytes(StandardCharsets.UTF_8).length <= Bounded.FIELD_BYTES, h.key()));
        SinkRecord big = deadLettered.get(1);
        assertEquals(Bounded.DEAD_LETTER_VALUE_BYTES, ((byte[]) big.value()).length);
        assertEquals(String.valueOf(((byte[]) record(0, 1, "B", "b1", "nowhere-api",
            r -> r.put("body", ByteBuffer.wrap(bigBody))).value()).length), header(big, "ikkai.dlq.value_bytes"));
        assertEquals(64, header(big, "ikkai.dlq.value_sha256").length());
    }

    /** The sink's dead-letter queue in this test: each dead letter collected, its write answered by {@link #dlq}. */
    private DeadLetterQueue deadLetterQueue() {
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

    private final class FakeContext implements SinkTaskContext {
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
