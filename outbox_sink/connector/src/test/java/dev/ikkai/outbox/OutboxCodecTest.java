package dev.ikkai.outbox;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
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

    /** A valid request whose first four strings are one character each: "d", "k", "t", "/" (so byte offsets are known). */
    private byte[] tinyRequest() throws Exception {
        GenericRecord r = new GenericData.Record(codec.requestSchema());
        r.put("decision_id", "d");
        r.put("key", "k");
        r.put("target", "t");
        r.put("path", "/");
        r.put("content_type", "a");
        r.put("body", ByteBuffer.wrap(new byte[0]));
        r.put("headers", Map.of());
        r.put("created_at", 1L);
        ByteBuffer b = new BinaryMessageEncoder<GenericRecord>(GenericData.get(), codec.requestSchema()).encode(r);
        byte[] bytes = new byte[b.remaining()];
        b.get(bytes);
        return bytes;
    }

    /** The single-object header (C3 01 + the newest request schema's fingerprint), then {@code body}. */
    private byte[] knownFingerprint(byte[] body) throws Exception {
        byte[] value = new byte[10 + body.length];
        System.arraycopy(tinyRequest(), 0, value, 0, 10);
        System.arraycopy(body, 0, value, 10, body.length);
        return value;
    }

    /** Avro's zig-zag varint of {@code n}. */
    static byte[] varint(long n) {
        long z = (n << 1) ^ (n >> 63);
        java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
        while ((z & ~0x7FL) != 0) {
            out.write((int) ((z & 0x7F) | 0x80));
            z >>>= 7;
        }
        out.write((int) z);
        return out.toByteArray();
    }

    /** 57 bytes: a known fingerprint, then a decision_id that claims 1.5 GB. */
    static byte[] claimsAHugeString(byte[] header) {
        byte[] value = new byte[57];
        System.arraycopy(header, 0, value, 0, header.length);
        byte[] length = varint(1_500_000_000L);
        System.arraycopy(length, 0, value, header.length, length.length);
        return value;
    }

    @Test
    void aKnownFingerprintWithACorruptBodyIsUndecodableNeverAnotherException() throws Exception {
        byte[] valid = tinyRequest();
        assertEquals("d", codec.decodeRequest(valid).decisionId(), "the baseline decodes");

        byte[] badUnion = valid.clone();
        int method = 10 + 2 + 2 + 2 + 2;  // header, then "d", "k", "t", "/": each a length byte and one character
        assertEquals(0, badUnion[method], "the method's union index (0: null)");
        badUnion[method] = 0x0A;  // branch 5 of a 2-branch union: an ArrayIndexOutOfBoundsException inside Avro
        byte[] hugeString = claimsAHugeString(knownFingerprint(new byte[0]));
        byte[] truncated = java.util.Arrays.copyOf(valid, valid.length - 3);
        byte[] negativeLength = knownFingerprint(varint(-5));
        byte[] hugeMap = knownFingerprint(concat(valid, 10, method + 1, varint(0), new byte[] {2, 'a'}, varint(2_000_000_000L)));

        for (byte[] value : List.of(badUnion, hugeString, truncated, negativeLength, hugeMap)) {
            RejectedRequest e = assertThrows(RejectedRequest.class, () -> codec.decodeRequest(value));
            assertEquals(RejectedRequest.UNDECODABLE, e.kind(), e.getMessage());
        }
        assertEquals(57, hugeString.length);
        assertTrue(assertThrows(RejectedRequest.class, () -> codec.decodeRequest(hugeString)).getMessage()
            .contains("claims 1500000000 bytes"), "the reason says what is wrong, before anything was allocated");
    }

    /** {@code source[from, to)} followed by each of {@code more}. */
    static byte[] concat(byte[] source, int from, int to, byte[]... more) {
        java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
        out.write(source, from, to - from);
        for (byte[] m : more) {
            out.writeBytes(m);
        }
        return out.toByteArray();
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

    @Test
    void aReceiptSaysWhetherItsEffectWasNamedOrIsTheDefaultOne() throws Exception {
        // The explicit effect api/ok/1 and the default effect of target api, path /ok/1: one name, two effects.
        OutboxRequest explicit = new OutboxRequest("dec-3", "pay-3", "api", "/other", "POST", "application/json",
            new byte[0], Map.of(), 1L, null, "api/ok/1");
        OutboxRequest byDefault = new OutboxRequest("dec-3", "pay-3", "api", "/ok/1", "POST", "application/json",
            new byte[0], Map.of(), 1L, null, null);
        assertEquals(explicit.effectName(), byDefault.effectName());
        List<String> kinds = new ArrayList<>();
        for (OutboxRequest request : List.of(explicit, byDefault)) {
            Receipt receipt = new Receipt("dec-3", "pay-3", "api", Receipt.Outcome.DELIVERED, 201, 1, 1L, 1L, null, null,
                request.effectName(), request.idempotencyKey(IdempotencyKey.Version.V2), request.effectKind());
            GenericRecord back = new BinaryMessageDecoder<GenericRecord>(GenericData.get(), codec.receiptSchema())
                .decode(codec.encodeReceipt(receipt));
            assertEquals("api/ok/1", back.get("effect").toString());
            kinds.add(back.get("effect_kind").toString());
        }
        assertEquals(List.of("EXPLICIT", "DEFAULT"), kinds);
    }
}
