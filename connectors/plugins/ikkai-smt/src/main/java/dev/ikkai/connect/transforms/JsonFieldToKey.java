/*
 * Keys a record by a business id read from its raw JSON value, leaving the value untouched.
 *
 * Kafka's own SMTs (ValueToKey, ExtractField) need a structured value, and a source such as
 * FileStreamSource emits each line as an opaque string; parsing it into a Struct would change
 * the bytes that land in ingest.<endpoint>, which must stay exactly as received
 * (docs/architecture.md, rule 2). This transform parses a copy of the value, takes one top-level
 * field and makes it the key.
 *
 *   transforms=key
 *   transforms.key.type=dev.ikkai.connect.transforms.JsonFieldToKey
 *   transforms.key.field=payment_id
 *
 * A value that is not a JSON object, or lacks a scalar field, still lands, byte for byte, with a
 * null key and the reason in the header "ikkai.key.error" (on.unkeyable=null-key, the default):
 * the raw topic keeps everything it was given, and the enrich job sends such records to its DLQ
 * with their offsets (docs/architecture.md, rule 7: validation happens downstream, nothing is
 * lost at the boundary). A source connector has no dead-letter queue, so the alternative,
 * on.unkeyable=fail, stops the task at the first such record (with errors.tolerance=all Connect
 * would drop it silently).
 */
package dev.ikkai.connect.transforms;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.connect.connector.ConnectRecord;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.errors.DataException;
import org.apache.kafka.connect.transforms.Transformation;

public class JsonFieldToKey<R extends ConnectRecord<R>> implements Transformation<R> {
    public static final String FIELD = "field";
    public static final String ON_UNKEYABLE = "on.unkeyable";
    public static final String ERROR_HEADER = "ikkai.key.error";
    private static final ObjectMapper MAPPER = new ObjectMapper();
    private static final ConfigDef CONFIG = new ConfigDef()
        .define(FIELD, ConfigDef.Type.STRING, ConfigDef.NO_DEFAULT_VALUE, new ConfigDef.NonEmptyString(),
                ConfigDef.Importance.HIGH, "Top-level field of the JSON value whose value becomes the record key.")
        .define(ON_UNKEYABLE, ConfigDef.Type.STRING, "null-key", ConfigDef.ValidString.in("null-key", "fail"),
                ConfigDef.Importance.MEDIUM, "A value with no such field: land it with a null key and the reason in"
                + " the header " + ERROR_HEADER + " (null-key), or fail the task (fail).");

    private String field;
    private boolean failUnkeyable;

    @Override
    public void configure(Map<String, ?> configs) {
        Map<String, Object> parsed = CONFIG.parse(configs);
        field = (String) parsed.get(FIELD);
        failUnkeyable = "fail".equals(parsed.get(ON_UNKEYABLE));
    }

    @Override
    public R apply(R record) {
        String id;
        try {
            id = businessId(record.value());
        } catch (DataException e) {
            if (failUnkeyable) {
                throw e;
            }
            R unkeyed = record.newRecord(record.topic(), record.kafkaPartition(), Schema.OPTIONAL_STRING_SCHEMA, null,
                record.valueSchema(), record.value(), record.timestamp(), record.headers().duplicate());
            unkeyed.headers().addString(ERROR_HEADER, e.getMessage());
            return unkeyed;
        }
        return record.newRecord(record.topic(), record.kafkaPartition(), Schema.STRING_SCHEMA, id,
            record.valueSchema(), record.value(), record.timestamp(), record.headers());
    }

    private String businessId(Object value) {
        String text;
        if (value instanceof String s) {
            text = s;
        } else if (value instanceof byte[] bytes) {
            text = new String(bytes, StandardCharsets.UTF_8);
        } else {
            throw new DataException("JsonFieldToKey needs a string or bytes value, got "
                + (value == null ? "null" : value.getClass().getName()));
        }
        JsonNode id;
        try {
            JsonNode root = MAPPER.readTree(text);
            id = root != null && root.isObject() ? root.get(field) : null;
        } catch (Exception e) {
            throw new DataException("value is not JSON: " + e.getMessage(), e);
        }
        if (id == null || id.isNull() || id.isContainerNode()) {
            throw new DataException("value has no scalar field '" + field + "' to key the record by");
        }
        return id.asText();
    }

    @Override
    public ConfigDef config() {
        return CONFIG;
    }

    @Override
    public void close() {
    }
}
