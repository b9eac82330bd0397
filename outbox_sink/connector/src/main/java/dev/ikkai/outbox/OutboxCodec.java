package dev.ikkai.outbox;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.avro.AvroRuntimeException;
import org.apache.avro.Schema;
import org.apache.avro.SchemaNormalization;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.avro.io.EncoderFactory;
import org.apache.avro.message.BinaryMessageDecoder;
import org.apache.avro.message.BinaryMessageEncoder;

/**
 * Requests and receipts in Avro, with the schemas of the catalog folder (schemas/outbox_request/v*.avsc,
 * copied in at build time). Two framings (docs/schema-registry.md):
 *
 * <ul>
 *   <li>single-object (0xC3 0x01, CRC-64-AVRO fingerprint, body): a request written with any catalog
 *       version decodes; receipts are written with the newest version.
 *   <li>Confluent wire format (0x00, 4-byte big-endian schema id, body), with a schema registry: a
 *       request's writer schema is fetched by id (once per id) and resolved to the newest catalog
 *       version by Avro's rules; with {@code confluentReceipts}, receipts are written with the id of
 *       the newest receipt schema, registered under {@code receiptsSubject} once ({@link #prepareReceipts}).
 * </ul>
 *
 * A request in either framing decodes, whichever the receipts are written in.
 */
public final class OutboxCodec {
    static final byte CONFLUENT_MAGIC = 0x00;
    static final int CONFLUENT_HEADER = 5;

    private final Schema requestSchema;
    private final Schema receiptSchema;
    private final BinaryMessageDecoder<GenericRecord> requests;
    /** The catalog's request versions by CRC-64-AVRO fingerprint: the writer schema of a single-object value. */
    private final Map<Long, Schema> requestVersionsByFingerprint;
    private final BinaryMessageEncoder<GenericRecord> receipts;
    private final SchemaRegistryClient registry;
    private final boolean confluentReceipts;
    private final String receiptsSubject;
    /** Per writer schema id, the reader resolving it to {@link #requestSchema}. */
    private final Map<Integer, GenericDatumReader<GenericRecord>> readers = new ConcurrentHashMap<>();
    private volatile Integer receiptSchemaId;

    /** Single-object only: no registry. */
    public OutboxCodec() {
        this(null, false, null);
    }

    /**
     * @param registry          where the writer schemas of Confluent-framed requests are found; null: such
     *                          requests are rejected (they cannot be read without one)
     * @param confluentReceipts write receipts in the Confluent wire format (needs {@code registry})
     * @param receiptsSubject   the subject the receipt schema is registered under (TopicNameStrategy:
     *                          {@code <receipts topic>-value})
     */
    OutboxCodec(SchemaRegistryClient registry, boolean confluentReceipts, String receiptsSubject) {
        if (confluentReceipts && registry == null) {
            throw new IllegalArgumentException("Confluent-framed receipts need a schema registry");
        }
        this.registry = registry;
        this.confluentReceipts = confluentReceipts;
        this.receiptsSubject = receiptsSubject;
        List<Schema> requestVersions = catalog("outbox_request");
        this.requestSchema = requestVersions.get(requestVersions.size() - 1);
        List<Schema> receiptVersions = catalog("outbox_receipt");
        this.receiptSchema = receiptVersions.get(receiptVersions.size() - 1);
        this.requests = new BinaryMessageDecoder<>(GenericData.get(), requestSchema);
        requestVersions.forEach(requests::addSchema);
        Map<Long, Schema> byFingerprint = new java.util.HashMap<>();
        requestVersions.forEach(v -> byFingerprint.put(SchemaNormalization.parsingFingerprint64(v), v));
        this.requestVersionsByFingerprint = Map.copyOf(byFingerprint);
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

    /**
     * The request in {@code value}, in either framing.
     *
     * Never throws anything else for any bytes: lengths are checked before Avro allocates ({@link AvroBounds}),
     * and whatever Avro or the field conversions throw is the record's {@link RejectedRequest#UNDECODABLE}.
     *
     * @throws RejectedRequest                  the value is not a request this sink can ever read (permanent)
     * @throws SchemaRegistryClient.Unavailable the registry could not say what schema id the value names (retry)
     */
    public OutboxRequest decodeRequest(byte[] value) throws RejectedRequest, SchemaRegistryClient.Unavailable {
        if (value == null) {
            throw new RejectedRequest(RejectedRequest.UNDECODABLE, "the record has no value (a tombstone is not a request)");
        }
        try {
            return request(value.length > 0 && value[0] == CONFLUENT_MAGIC ? decodeConfluent(value) : decodeSingleObject(value));
        } catch (RuntimeException e) {
            throw new RejectedRequest(RejectedRequest.UNDECODABLE, "does not decode as an outbox request: " + e);
        }
    }

    private static OutboxRequest request(GenericRecord r) {
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

    private GenericRecord decodeSingleObject(byte[] value) throws RejectedRequest {
        if (value.length >= 10 && value[0] == (byte) 0xC3 && value[1] == 0x01) {
            Schema writer = requestVersionsByFingerprint.get(ByteBuffer.wrap(value, 2, 8).order(ByteOrder.LITTLE_ENDIAN).getLong());
            if (writer != null) {
                AvroBounds.check(writer, value, 10);
            }  // else: an unknown fingerprint, which Avro refuses before reading anything
        }
        try {
            return requests.decode(value);
        } catch (IOException | AvroRuntimeException e) {
            throw new RejectedRequest(RejectedRequest.UNDECODABLE,
                "not an outbox request in Avro single-object encoding with a known schema: " + e);
        }
    }

    private GenericRecord decodeConfluent(byte[] value) throws RejectedRequest, SchemaRegistryClient.Unavailable {
        if (value.length < CONFLUENT_HEADER) {
            throw new RejectedRequest(RejectedRequest.UNDECODABLE, "starts with 0x00 (the Confluent wire format) but has "
                + value.length + " bytes, fewer than its 5-byte header");
        }
        int id = ByteBuffer.wrap(value, 1, 4).getInt();
        if (registry == null) {
            throw new RejectedRequest(RejectedRequest.UNDECODABLE, "in the Confluent wire format (schema id " + id
                + ") but the sink has no schema.registry.url: set it to the registry the emitter writes to, "
                + "then replay this record from the dead-letter queue");
        }
        GenericDatumReader<GenericRecord> reader = readers.get(id);
        if (reader == null) {
            Schema writer;
            try {
                writer = registry.schemaById(id);
            } catch (SchemaRegistryClient.Refused e) {
                throw new RejectedRequest(RejectedRequest.UNKNOWN_SCHEMA, e.getMessage());
            }
            reader = new GenericDatumReader<>(writer, requestSchema);
            readers.put(id, reader);
        }
        AvroBounds.check(reader.getSchema(), value, CONFLUENT_HEADER);
        try {
            return reader.read(null, DecoderFactory.get().binaryDecoder(value, CONFLUENT_HEADER,
                value.length - CONFLUENT_HEADER, null));
        } catch (IOException | AvroRuntimeException e) {
            throw new RejectedRequest(RejectedRequest.UNDECODABLE, "schema id " + id + " of " + registry.url()
                + " does not read as an outbox request (" + requestSchema.getFullName() + "): " + e);
        }
    }

    /**
     * Makes sure receipts can be encoded: in the Confluent framing, registers the receipt schema
     * under its subject the first time (the registry answers the existing id if it holds it already).
     */
    void prepareReceipts() throws SchemaRegistryClient.Unavailable, SchemaRegistryClient.Refused {
        if (confluentReceipts && receiptSchemaId == null) {
            receiptSchemaId = registry.register(receiptsSubject, receiptSchema);
        }
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
        Schema.Field kind = receiptSchema.getField("effect_kind");
        if (kind != null && receipt.effectKind() != null) {
            Schema kinds = kind.schema().getTypes().get(1);  // ["null", OutboxEffectKind]
            r.put("effect_kind", new GenericData.EnumSymbol(kinds, receipt.effectKind().name()));
        }
        if (confluentReceipts) {
            return confluent(r);
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

    private byte[] confluent(GenericRecord r) {
        Integer id = receiptSchemaId;
        if (id == null) {
            throw new IllegalStateException("the receipt schema is not registered yet: call prepareReceipts() first");
        }
        ByteArrayOutputStream out = new ByteArrayOutputStream(128);
        out.write(CONFLUENT_MAGIC);
        out.writeBytes(ByteBuffer.allocate(4).putInt(id).array());
        BinaryEncoder encoder = EncoderFactory.get().binaryEncoder(out, null);
        try {
            new GenericDatumWriter<GenericRecord>(receiptSchema).write(r, encoder);
            encoder.flush();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return out.toByteArray();
    }

    public static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    private static String text(Object o) {
        return o == null ? null : o.toString();
    }
}
