package dev.ikkai.outbox;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.avro.Schema;
import org.apache.avro.SchemaBuilder;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.DecoderFactory;
import org.apache.kafka.common.config.ConfigException;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** Requests in the Confluent wire format (00 + schema id) and receipts written in it, against a fake registry. */
class ConfluentWireFormatTest {
    private FakeSchemaRegistry registry;

    @BeforeEach
    void start() throws Exception {
        registry = new FakeSchemaRegistry();
    }

    @AfterEach
    void stop() {
        registry.close();
    }

    private SchemaRegistryClient client(String url) {
        return new SchemaRegistryClient(url, null, null, Duration.ofSeconds(5));
    }

    private OutboxCodec codec(boolean confluentReceipts) {
        return new OutboxCodec(client(registry.url()), confluentReceipts, "outbox.receipts-value");
    }

    private static GenericRecord request(Schema schema, String decisionId) {
        GenericRecord r = new GenericData.Record(schema);
        r.put("decision_id", decisionId);
        r.put("key", "pay-1");
        r.put("target", "payments-api");
        r.put("path", "/holds/pay-1");
        r.put("content_type", "application/json");
        r.put("body", ByteBuffer.wrap("{\"amount\":5}".getBytes(StandardCharsets.UTF_8)));
        r.put("headers", Map.of("traceparent", "00-abc-def-01"));
        r.put("created_at", 1_700_000_000_000L);
        r.put("model_version", "fraud@3");
        if (schema.getField("effect") != null) {
            r.put("effect", "hold-payment");
        }
        return r;
    }

    @Test
    void aRequestInTheConfluentWireFormatDecodesWithItsWriterSchemaFromTheRegistryOncePerId() throws Exception {
        OutboxCodec codec = codec(false);
        Schema latest = codec.requestSchema();
        int id = registry.register(latest);
        byte[] value = FakeSchemaRegistry.confluent(id, latest, request(latest, "dec-1"));

        OutboxRequest first = codec.decodeRequest(value);
        OutboxRequest second = codec.decodeRequest(FakeSchemaRegistry.confluent(id, latest, request(latest, "dec-2")));

        assertEquals("dec-1", first.decisionId());
        assertEquals("dec-2", second.decisionId());
        assertEquals("hold-payment", first.effect());
        assertArrayEquals("{\"amount\":5}".getBytes(StandardCharsets.UTF_8), first.body());
        assertEquals("00-abc-def-01", first.headers().get("TraceParent"));
        assertEquals(List.of("GET /ccompat/schemas/ids/" + id), registry.calls, "the writer schema is fetched once per id");
    }

    @Test
    void anOlderCatalogVersionAndASchemaTheCatalogDoesNotHoldResolveToTheNewestRequestSchema() throws Exception {
        OutboxCodec codec = codec(false);
        Schema v1 = OutboxCodec.catalog("outbox_request").get(0);
        int v1Id = registry.register(v1);
        assertNull(codec.decodeRequest(FakeSchemaRegistry.confluent(v1Id, v1, request(v1, "dec-v1"))).effect());

        // Another producer's schema: the newest fields plus one of its own, which the reader skips.
        SchemaBuilder.FieldAssembler<Schema> fields = SchemaBuilder.record(v1.getName()).namespace(v1.getNamespace()).fields();
        for (Schema.Field f : codec.requestSchema().getFields()) {
            fields = fields.name(f.name()).type(f.schema()).noDefault();
        }
        Schema extended = fields.name("producer_note").type().stringType().noDefault().endRecord();
        GenericRecord record = request(extended, "dec-x");
        record.put("producer_note", "not in the catalog");
        int extendedId = registry.register(extended);
        OutboxRequest decoded = codec.decodeRequest(FakeSchemaRegistry.confluent(extendedId, extended, record));
        assertEquals("dec-x", decoded.decisionId());
        assertEquals("hold-payment", decoded.effect());
    }

    @Test
    void singleObjectRequestsStillDecodeWithARegistryConfigured() throws Exception {
        OutboxCodec codec = codec(true);
        Schema latest = codec.requestSchema();
        ByteBuffer b = new org.apache.avro.message.BinaryMessageEncoder<GenericRecord>(GenericData.get(), latest)
            .encode(request(latest, "dec-so"));
        byte[] bytes = new byte[b.remaining()];
        b.get(bytes);
        assertEquals("dec-so", codec.decodeRequest(bytes).decisionId());
        assertEquals(List.of(), registry.calls, "a C3 01 record never asks the registry");
    }

    @Test
    void anIdTheRegistryDoesNotHoldIsRejectedForTheDeadLetterQueue() {
        byte[] value = {0, 0, 0, 0x30, 0x39, 2, 4};
        RejectedRequest rejected = assertThrows(RejectedRequest.class, () -> codec(false).decodeRequest(value));
        assertEquals(RejectedRequest.UNKNOWN_SCHEMA, rejected.kind());
        assertTrue(rejected.getMessage().contains("schema id 12345"), rejected.getMessage());
    }

    @Test
    void aKnownSchemaIdWithACorruptBodyIsUndecodableNeverAnotherException() throws Exception {
        OutboxCodec codec = codec(false);
        Schema latest = codec.requestSchema();
        int id = registry.register(latest);
        byte[] valid = FakeSchemaRegistry.confluent(id, latest, request(latest, "d"));
        byte[] header = java.util.Arrays.copyOf(valid, 5);

        byte[] hugeString = OutboxCodecTest.claimsAHugeString(header);  // 57 bytes, a decision_id of 1.5 GB
        byte[] badUnion = OutboxCodecTest.concat(valid, 0, 5, OutboxCodecTest.varint(1), "d".getBytes(StandardCharsets.UTF_8),
            OutboxCodecTest.varint(1), "k".getBytes(StandardCharsets.UTF_8), OutboxCodecTest.varint(1),
            "t".getBytes(StandardCharsets.UTF_8), OutboxCodecTest.varint(1), "/".getBytes(StandardCharsets.UTF_8),
            OutboxCodecTest.varint(7));  // the method's union has 2 branches
        byte[] truncated = java.util.Arrays.copyOf(valid, valid.length - 4);

        for (byte[] value : List.of(hugeString, badUnion, truncated)) {
            RejectedRequest e = assertThrows(RejectedRequest.class, () -> codec.decodeRequest(value));
            assertEquals(RejectedRequest.UNDECODABLE, e.kind(), e.getMessage());
        }
    }

    @Test
    void aConfluentRecordWithoutARegistryIsRejectedAndSaysWhichKeyToSet() {
        byte[] value = {0, 0, 0, 0, 7, 2, 4};
        RejectedRequest rejected = assertThrows(RejectedRequest.class, () -> new OutboxCodec().decodeRequest(value));
        assertEquals(RejectedRequest.UNDECODABLE, rejected.kind());
        assertTrue(rejected.getMessage().contains("schema.registry.url"), rejected.getMessage());
        RejectedRequest shortOne = assertThrows(RejectedRequest.class, () -> codec(false).decodeRequest(new byte[] {0, 1}));
        assertEquals(RejectedRequest.UNDECODABLE, shortOne.kind());
    }

    @Test
    void aRegistryThatCannotAnswerIsUnavailableNotARejection() {
        byte[] value = {0, 0, 0, 0, 7, 2, 4};
        for (int status : new int[] {500, 503, 429, 401}) {
            registry.failWith = status;
            assertThrows(SchemaRegistryClient.Unavailable.class, () -> codec(false).decodeRequest(value), "status " + status);
        }
        registry.failWith = 0;
        String wrongPath = registry.url().replace("/ccompat", "/nothing-here");
        OutboxCodec misconfigured = new OutboxCodec(client(wrongPath), false, "s");
        assertThrows(SchemaRegistryClient.Unavailable.class, () -> misconfigured.decodeRequest(value),
            "a bare 404 is a wrong URL, not an unknown id");
        String down = registry.url();
        registry.close();
        assertThrows(SchemaRegistryClient.Unavailable.class, () -> new OutboxCodec(client(down), false, "s").decodeRequest(value));
    }

    @Test
    void confluentReceiptsRegisterTheirSchemaOnceAndCarryItsId() throws Exception {
        OutboxCodec codec = codec(true);
        assertThrows(IllegalStateException.class, () -> codec.encodeReceipt(receipt()), "not before the schema is registered");
        codec.prepareReceipts();
        codec.prepareReceipts();
        byte[] encoded = codec.encodeReceipt(receipt());

        List<Integer> ids = registry.subjects.get("outbox.receipts-value");
        assertEquals(1, ids.size(), "registered once: " + registry.calls);
        assertEquals(0, encoded[0]);
        int id = ByteBuffer.wrap(encoded, 1, 4).getInt();
        assertEquals(ids.get(0), id);
        GenericRecord back = new GenericDatumReader<GenericRecord>(registry.schema(id))
            .read(null, DecoderFactory.get().binaryDecoder(encoded, 5, encoded.length - 5, null));
        assertEquals("dec-1", back.get("decision_id").toString());
        assertEquals("DELIVERED", back.get("outcome").toString());
        assertEquals("hold-payment", back.get("effect").toString());
    }

    @Test
    void singleObjectReceiptsNeverAskTheRegistry() throws Exception {
        OutboxCodec codec = codec(false);
        codec.prepareReceipts();
        byte[] encoded = codec.encodeReceipt(receipt());
        assertEquals((byte) 0xC3, encoded[0]);
        assertEquals(List.of(), registry.calls);
    }

    @Test
    void basicAuthIsSentAsTheUserInfoSays() throws Exception {
        SchemaRegistryClient client = new SchemaRegistryClient(registry.url(), "sink:s3cret", null, Duration.ofSeconds(5));
        client.register("outbox.receipts-value", new OutboxCodec().receiptSchema());
        assertEquals("Basic " + Base64.getEncoder().encodeToString("sink:s3cret".getBytes(StandardCharsets.UTF_8)),
            registry.lastAuthorization);
    }

    private static Receipt receipt() {
        return new Receipt("dec-1", "pay-1", "payments-api", Receipt.Outcome.DELIVERED, 201, 1, 1L, 2L, null, null,
            "hold-payment", "ab".repeat(32));
    }

    // -- configuration ------------------------------------------------------------------------

    private static Map<String, String> config(String... pairs) {
        Map<String, String> config = new HashMap<>(Map.of(
            "outbox.targets", "payments-api",
            "outbox.target.payments-api.url", "http://127.0.0.1:1/payments",
            "outbox.receipts.bootstrap.servers", "unused:9092"));
        for (int i = 0; i < pairs.length; i += 2) {
            config.put(pairs[i], pairs[i + 1]);
        }
        return config;
    }

    @Test
    void confluentReceiptsWithoutARegistryAreRefusedNamingTheKey() {
        ConfigException e = assertThrows(ConfigException.class,
            () -> new OutboxSinkConfig(config("outbox.receipts.format", "confluent")));
        assertTrue(e.getMessage().contains("schema.registry.url"), e.getMessage());
        assertThrows(ConfigException.class, () -> new OutboxSinkConfig(config("outbox.receipts.format", "json")));
    }

    @Test
    void credentialsInTheUrlAndAUserInfoWithoutAColonAreRefusedWithoutShowingThem() {
        ConfigException inUrl = assertThrows(ConfigException.class,
            () -> new OutboxSinkConfig(config("schema.registry.url", "https://sink:s3cret@registry:8081")));
        assertFalse(inUrl.getMessage().contains("s3cret"), inUrl.getMessage());
        assertTrue(inUrl.getMessage().contains("schema.registry.basic.auth.user.info"), inUrl.getMessage());
        ConfigException noColon = assertThrows(ConfigException.class, () -> new OutboxSinkConfig(config(
            "schema.registry.url", "https://registry:8081", "schema.registry.basic.auth.user.info", "s3cret")));
        assertFalse(noColon.getMessage().contains("s3cret"), noColon.getMessage());
        assertThrows(ConfigException.class, () -> new OutboxSinkConfig(config("schema.registry.url", "registry:8081")));
    }

    @Test
    void theConnectorsValidationNamesTheRegistryKeyToSet() {
        Map<String, String> props = config("outbox.receipts.format", "confluent", "errors.tolerance", "all",
            "errors.deadletterqueue.topic.name", "dlq.outbox");
        List<String> errors = new OutboxSinkConnector().validate(props).configValues().stream()
            .filter(v -> v.name().equals("schema.registry.url")).findFirst().orElseThrow().errorMessages();
        assertEquals(1, errors.size(), errors.toString());
        assertTrue(errors.get(0).contains("outbox.receipts.format=confluent"), errors.get(0));
        props.put("schema.registry.url", registry.url());
        assertTrue(new OutboxSinkConnector().validate(props).configValues().stream().allMatch(v -> v.errorMessages().isEmpty()));
    }

    @Test
    void theUserInfoIsAPasswordAndAValidConfigBuildsARegistryCodec() {
        OutboxSinkConfig config = new OutboxSinkConfig(config("schema.registry.url", registry.url(),
            "schema.registry.basic.auth.user.info", "sink:s3cret", "outbox.receipts.format", "confluent"));
        assertEquals(org.apache.kafka.common.config.ConfigDef.Type.PASSWORD,
            OutboxSinkConfig.DEFINITION.configKeys().get("schema.registry.basic.auth.user.info").type);
        assertFalse(config.values().toString().contains("s3cret"));
        assertTrue(config.codec() != null);
        assertNull(new OutboxSinkConfig(config()).schemaRegistry(), "no url, no registry");
    }
}
