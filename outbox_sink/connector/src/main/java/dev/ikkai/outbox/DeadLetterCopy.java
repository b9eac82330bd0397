package dev.ikkai.outbox;

import java.util.Map;

import org.apache.kafka.connect.header.Header;
import org.apache.kafka.connect.sink.SinkRecord;

/**
 * The dead letter of one record: a copy of it, bounded ({@link Bounded}: value, key and the record's own headers cut,
 * every ikkai.dlq.* header at most {@link Bounded#FIELD_BYTES}), with the ikkai.dlq.* headers that say why. At most
 * about 600 KiB whatever the record held (docs/outbox.md, "Bounds"), under the 1 MiB a broker takes by default. Pure.
 */
final class DeadLetterCopy {
    private DeadLetterCopy() {
    }

    static SinkRecord of(SinkRecord record, OutboxRequest request, RejectedRequest why, Attempts state, String excerpt) {
        Map<String, String> cut = new java.util.LinkedHashMap<>();
        Object key = record.key();
        if (key instanceof byte[] bytes && bytes.length > Bounded.DEAD_LETTER_KEY_BYTES) {
            cut.put("ikkai.dlq.key_bytes", String.valueOf(bytes.length));
            key = Bounded.bytes(bytes, Bounded.DEAD_LETTER_KEY_BYTES);
        } else if (key instanceof String text && text.length() > Bounded.DEAD_LETTER_KEY_BYTES / 3) {
            String bounded = Bounded.text(text, Bounded.DEAD_LETTER_KEY_BYTES);
            if (!bounded.equals(text)) {
                cut.put("ikkai.dlq.key_bytes", String.valueOf(OutboxCodec.utf8(text).length));
                key = bounded;
            }
        }
        Object value = record.value();
        if (value instanceof byte[] bytes && bytes.length > Bounded.DEAD_LETTER_VALUE_BYTES) {
            cut.put("ikkai.dlq.value_bytes", String.valueOf(bytes.length));
            cut.put("ikkai.dlq.value_sha256", Sha256.hex(bytes));
            value = Bounded.bytes(bytes, Bounded.DEAD_LETTER_VALUE_BYTES);
        }
        SinkRecord copy = new SinkRecord(record.topic(), record.kafkaPartition(), record.keySchema(), key,
            record.valueSchema(), value, record.kafkaOffset(), record.timestamp(), record.timestampType());
        long headerBytes = 0;
        int headersLeftOut = 0;
        for (Header h : record.headers()) {
            headerBytes += h.key().length() * 3L + headerSize(h.value());
            if (headerBytes <= Bounded.DEAD_LETTER_HEADER_BYTES) {
                copy.headers().add(h);
            } else {
                headersLeftOut++;
            }
        }
        if (headersLeftOut > 0) {
            cut.put("ikkai.dlq.headers_left_out", String.valueOf(headersLeftOut));
        }
        Map<String, String> dlq = new java.util.LinkedHashMap<>();
        dlq.put("ikkai.dlq.stage", "outbox");
        dlq.put("ikkai.dlq.error_class", why.kind());
        dlq.put("ikkai.dlq.reason", why.getMessage());
        if (request != null) {
            dlq.put("ikkai.dlq.decision_id", request.decisionId());
            dlq.put("ikkai.dlq.target", request.target());
            dlq.put("ikkai.dlq.effect", request.effectName());
        }
        if (state != null && state.lastStatus != null) {
            dlq.put("ikkai.dlq.status_code", String.valueOf(state.lastStatus));
        }
        if (state != null) {
            dlq.put("ikkai.dlq.attempts", String.valueOf(state.attempts));
        }
        if (excerpt != null) {
            dlq.put("ikkai.dlq.response_excerpt", excerpt);
        }
        dlq.putAll(cut);
        dlq.forEach((name, text) -> copy.headers().addString(name, Bounded.text(text, Bounded.FIELD_BYTES)));
        return copy;
    }

    private static long headerSize(Object value) {
        if (value == null) {
            return 0;
        }
        if (value instanceof byte[] bytes) {
            return bytes.length;
        }
        return (long) String.valueOf(value).length() * 3;  // at most 3 UTF-8 bytes per UTF-16 unit
    }
}
