package dev.ikkai.connect.transforms;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.errors.DataException;
import org.apache.kafka.connect.header.Header;
import org.apache.kafka.connect.source.SourceRecord;
import org.junit.jupiter.api.Test;

class JsonFieldToKeyTest {
    private static SourceRecord line(Object value) {
        return new SourceRecord(Map.of(), Map.of(), "ingest.payments", null, null, null, Schema.STRING_SCHEMA, value);
    }

    private static JsonFieldToKey<SourceRecord> transform(String onUnkeyable) {
        JsonFieldToKey<SourceRecord> smt = new JsonFieldToKey<>();
        smt.configure(Map.of(JsonFieldToKey.FIELD, "payment_id", JsonFieldToKey.ON_UNKEYABLE, onUnkeyable));
        return smt;
    }

    @Test
    void keysByTheFieldAndLeavesTheValueAsReceived() {
        String raw = "{\"payment_id\": \"p-1\",  \"amount\": \"12.30\"}";
        SourceRecord out = transform("null-key").apply(line(raw));
        assertEquals("p-1", out.key());
        assertSame(raw, out.value());
        byte[] bytes = raw.getBytes(StandardCharsets.UTF_8);
        assertArrayEquals(bytes, (byte[]) transform("null-key").apply(line(bytes)).value());
    }

    @Test
    void anUnkeyableLineLandsWithANullKeyAndTheReason() {
        for (String raw : new String[] {"not json", "[1]", "{\"payment_id\": {\"a\": 1}}", "{\"other\": 1}"}) {
            SourceRecord out = transform("null-key").apply(line(raw));
            assertNull(out.key(), raw);
            assertSame(raw, out.value());
            Header reason = out.headers().lastWithName(JsonFieldToKey.ERROR_HEADER);
            assertTrue(reason != null && !reason.value().toString().isEmpty(), raw);
        }
    }

    @Test
    void failModeStopsAtTheFirstUnkeyableLine() {
        assertThrows(DataException.class, () -> transform("fail").apply(line("not json")));
    }
}
