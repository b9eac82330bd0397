package dev.ikkai.outbox;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.avro.AvroRuntimeException;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.message.BinaryMessageDecoder;
import org.apache.avro.message.BinaryMessageEncoder;

/**
 * Avro single-object encoding (0xC3 0x01, CRC-64-AVRO fingerprint, body) of requests and receipts,
 * with the schemas of the catalog folder (schemas/outbox_request/v*.avsc, copied in at build
 * time). A request written with any known version decodes; receipts are written with the newest.
 */
public final class OutboxCodec {
    private final Schema requestSchema;
    private final Schema receiptSchema;
    private final BinaryMessageDecoder<GenericRecord> requests;
    private final BinaryMessageEncoder<GenericRecord> receipts;

    public OutboxCodec() {
        List<Schema> requestVersions = catalog("outbox_request");
        this.requestSchema = requestVersions.get(requestVersions.size() - 1);
        List<Schema> receiptVersions = catalog("outbox_receipt");
        this.receiptSchema = receiptVersions.get(receiptVersions.size() - 1);
        this.requests = new BinaryMessageDecoder<>(GenericData.get(), requestSchema);
        requestVersions.forEach(requests::addSchema);
        this.receipts = new BinaryMessageEncoder<>(GenericData.get(), receiptSchema);
    }

    /** Every version of one schema in the catalog, oldest first: v1.avsc, v2.avsc ... until one is missing. */
    static List<Schema> catalog(String name) {
        List<Schema> versions = new ArrayList<>();
        for (int v = 1; ; v++) {
            try (InputStream in = OutboxCodec.class.getResourceAsStream("/schemas/" + name + "/v" + v + ".avsc")) {
                if (in == null) {
                    break;
                }
                versions.add(new Schema.Parser().parse(in));
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
        if (versions.isEmpty()) {
            throw new IllegalStateException("schemas/" + name + "/v1.avsc is missing from the plugin jar; rebuild it with `ikkai setup`");
        }
        return Collections.unmodifiableList(versions);
    }

    public Schema requestSchema() {
        return requestSchema;
    }

    public Schema receiptSchema() {
        return receiptSchema;
    }

    public OutboxRequest decodeRequest(byte[] value) throws RejectedRequest {
        if (value == null) {
            throw new RejectedRequest(RejectedRequest.UNDECODABLE, "the record has no value (a tombstone is not a request)");
        }
        GenericRecord r;
        try {
            r = requests.decode(value);
        } catch (IOException | AvroRuntimeException e) {
            throw new RejectedRequest(RejectedRequest.UNDECODABLE,
                "not an outbox request in Avro single-object encoding with a known schema: " + e);
        }
        Map<String, String> headers = new TreeMap<>(String.CASE_INSENSITIVE_ORDER);
        Object rawHeaders = r.get("headers");
        if (rawHeaders instanceof Map<?, ?> map) {
            map.forEach((k, v) -> headers.put(String.valueOf(k), String.valueOf(v)));
        }
        ByteBuffer buffer = ((ByteBuffer) r.get("body")).duplicate();
        byte[] body = new byte[buffer.remaining()];
        buffer.get(body);
        return new OutboxRequest(
            text(r.get("decision_id")), text(r.get("key")), text(r.get("target")), text(r.get("path")),
            text(r.get("method")), text(r.get("content_type")), body, Collections.unmodifiableMap(headers),
            (Long) r.get("created_at"), text(r.get("model_version")),
            r.getSchema().getField("effect") == null ? null : text(r.get("effect")));
    }

    public byte[] encodeReceipt(Receipt receipt) {
        GenericRecord r = new GenericData.Record(receiptSchema);
        r.put("decision_id", receipt.decisionId());
        r.put("key", receipt.key());
        r.put("target", receipt.target());
        r.put("outcome", new GenericData.EnumSymbol(receiptSchema.getField("outcome").schema(), receipt.outcome().name()));
        r.put("status_code", receipt.statusCode());
        r.put("attempts", receipt.attempts());
        r.put("first_attempt_at", receipt.firstAttemptAt());
        r.put("last_attempt_at", receipt.lastAttemptAt());
        r.put("response_digest", receipt.responseDigest());
        r.put("reason", receipt.reason());
        if (receiptSchema.getField("effect") != null) {
            r.put("effect", receipt.effect());
            r.put("idempotency_key", receipt.idempotencyKey());
        }
        try {
            ByteBuffer encoded = receipts.encode(r);
            byte[] bytes = new byte[encoded.remaining()];
            encoded.get(bytes);
            return bytes;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    public static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    private static String text(Object o) {
        return o == null ? null : o.toString();
    }
}
