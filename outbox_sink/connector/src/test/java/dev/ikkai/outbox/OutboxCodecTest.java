package dev.ikkai.outbox;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Map;

import org.apache.avro.SchemaNormalization;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.message.BinaryMessageDecoder;
import org.apache.avro.message.BinaryMessageEncoder;
import org.junit.jupiter.api.Test;

class OutboxCodecTest {
    private final OutboxCodec codec = new OutboxCodec();

    private byte[] encodedRequest(Map<String, String> headers, String method) throws Exception {
        GenericRecord r = new GenericData.Record(codec.requestSchema());
        r.put("decision_id", "dec-1");
        r.put("key", "pay-1");
        r.put("target", "payments-api");
        r.put("path", "/holds/pay-1");
        r.put("method", method);
        r.put("content_type", "application/json");
        r.put("body", ByteBuffer.wrap("{\"amount\":5}".getBytes(StandardCharsets.UTF_8)));
        r.put("headers", headers);
        r.put("created_at", 1_700_000_000_000L);
        r.put("model_version", "fraud@3");
        ByteBuffer b = new BinaryMessageEncoder<GenericRecord>(GenericData.get(), codec.requestSchema()).encode(r);
        byte[] bytes = new byte[b.remaining()];
        b.get(bytes);
        return bytes;
    }

    @Test
    void decodesASingleObjectEncodedRequest() throws Exception {
        byte[] bytes = encodedRequest(Map.of("traceparent", "00-abc-def-01"), null);
        assertEquals((byte) 0xC3, bytes[0]);
        assertEquals((byte) 0x01, bytes[1]);
        OutboxRequest req = codec.decodeRequest(bytes);
        assertEquals("dec-1", req.decisionId());
        assertEquals("pay-1", req.key());
        assertNull(req.method());
        assertArrayEquals("{\"amount\":5}".getBytes(StandardCharsets.UTF_8), req.body());
        assertEquals("00-abc-def-01", req.headers().get("TraceParent"));
        assertEquals(1_700_000_000_000L, req.createdAt());
        assertEquals("fraud@3", req.modelVersion());
    }

    @Test
    void theFingerprintIsCrc64OfTheCanonicalSchemaLittleEndian() throws Exception {
        byte[] bytes = encodedRequest(Map.of(), "PUT");
        long fingerprint = ByteBuffer.wrap(bytes, 2, 8).order(java.nio.ByteOrder.LITTLE_ENDIAN).getLong();
        assertEquals(SchemaNormalization.parsingFingerprint64(codec.requestSchema()), fingerprint);
    }

    @Test
    void garbageTombstonesAndUnknownSchemasAreUndecodable() {
        assertEquals(RejectedRequest.UNDECODABLE, assertThrows(RejectedRequest.class, () -> codec.decodeRequest(null)).kind());
        assertEquals(RejectedRequest.UNDECODABLE,
            assertThrows(RejectedRequest.class, () -> codec.decodeRequest("{\"json\": true}".getBytes(StandardCharsets.UTF_8))).kind());
        byte[] unknown = new byte[] {(byte) 0xC3, 0x01, 1, 2, 3, 4, 5, 6, 7, 8, 0};
        assertEquals(RejectedRequest.UNDECODABLE, assertThrows(RejectedRequest.class, () -> codec.decodeRequest(unknown)).kind());
    }

    @Test
    void receiptsRoundTrip() throws Exception {
        Receipt receipt = new Receipt("dec-1", "pay-1", "payments-api", Receipt.Outcome.DEAD_LETTERED, 400, 1,
            1_000L, 2_000L, "ab".repeat(32), "rejected-by-target: POST payments-api/x returned 400");
        GenericRecord back = new BinaryMessageDecoder<GenericRecord>(GenericData.get(), codec.receiptSchema())
            .decode(codec.encodeReceipt(receipt));
        assertEquals("dec-1", back.get("decision_id").toString());
        assertEquals("DEAD_LETTERED", back.get("outcome").toString());
        assertEquals(400, back.get("status_code"));
        assertEquals(1, back.get("attempts"));
        assertEquals(1_000L, back.get("first_attempt_at"));
        assertEquals(2_000L, back.get("last_attempt_at"));
        assertEquals("ab".repeat(32), back.get("response_digest").toString());
    }

    @Test
    void aDeliveredReceiptWithoutAReasonEncodes() throws Exception {
        Receipt receipt = new Receipt("dec-2", "pay-2", "payments-api", Receipt.Outcome.DELIVERED, 201, 3, 1L, 9L, null, null);
        GenericRecord back = new BinaryMessageDecoder<GenericRecord>(GenericData.get(), codec.receiptSchema())
            .decode(codec.encodeReceipt(receipt));
        assertNull(back.get("reason"));
        assertEquals(3, back.get("attempts"));
    }
}
