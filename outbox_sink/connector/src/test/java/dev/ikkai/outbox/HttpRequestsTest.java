package dev.ikkai.outbox;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.http.HttpRequest;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;

import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.sink.SinkRecord;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

class HttpRequestsTest {
    private static final Map<String, Target> TARGETS = Targets.parse(List.of("payments-api"), Map.of(
        "outbox.target.payments-api.url", "http://127.0.0.1:8080",
        "outbox.target.payments-api.auth.header", "X-Api-Key",
        "outbox.target.payments-api.auth.secret", "k"));

    @Test
    void theSinkSetsIdempotencyKeyAuthAndTracing() throws RejectedRequest {
        OutboxRequest request = new OutboxRequest("dec-9", "pay-9", "payments-api", "/holds", null, "application/json",
            new byte[0], Map.of("X-Tenant", "t1"), 0L, "fraud@2");
        SinkRecord record = new SinkRecord("outbox.requests", 2, Schema.STRING_SCHEMA, "pay-9", Schema.BYTES_SCHEMA, new byte[0], 41L);
        record.headers().addBytes("traceparent", "00-trace-span-01".getBytes(StandardCharsets.UTF_8));
        Map<String, String> headers = HttpRequests.headers(Targets.resolve(TARGETS, request), request, record, 2,
            HttpRequests.KeyFormat.STRUCTURED, IdempotencyKey.Version.V1);
        // v1: sha-256 of "dec-9" U+001F "payments-api/holds": no effect name, so target + path (contract.py agrees).
        // An RFC 8941 sf-string, as the IETF Idempotency-Key draft specifies.
        assertEquals("\"e04087f98d6ce415062f93f9b299ed937cf261f45698dad34ee27e3358f605c9\"", headers.get("Idempotency-Key"));
        assertEquals("dec-9", headers.get("X-Ikkai-Decision-Id"));
        assertEquals("payments-api/holds", headers.get("X-Ikkai-Effect"));
        assertEquals("application/json", headers.get("content-type"));
        assertEquals("k", headers.get("X-Api-Key"));
        assertEquals("t1", headers.get("X-Tenant"));
        assertEquals("00-trace-span-01", headers.get("traceparent"));
        assertEquals("outbox.requests/2/41", headers.get("X-Ikkai-Source"));
        assertEquals("2", headers.get("X-Ikkai-Attempt"));
        assertEquals("fraud@2", headers.get("X-Ikkai-Model-Version"));
        HttpRequest built = HttpRequests.build(Targets.resolve(TARGETS, request), request, record, 2, Duration.ofSeconds(1),
            HttpRequests.KeyFormat.STRUCTURED, IdempotencyKey.Version.V1);  // the JDK accepts them all
        assertEquals(headers.get("Idempotency-Key"), built.headers().firstValue("Idempotency-Key").orElseThrow());
    }

    @Test
    void theBareTokenFormIsTheConnectorsChoice() throws RejectedRequest {
        OutboxRequest request = new OutboxRequest("dec-9", "pay-9", "payments-api", "/holds", null, "application/json",
            new byte[0], Map.of(), 0L, null);
        Map<String, String> headers = HttpRequests.headers(Targets.resolve(TARGETS, request), request, null, 1,
            HttpRequests.KeyFormat.TOKEN, IdempotencyKey.Version.V1);
        assertEquals("e04087f98d6ce415062f93f9b299ed937cf261f45698dad34ee27e3358f605c9", headers.get("Idempotency-Key"));
    }

    private static final String OVER_8_KIB = "x".repeat(8 * 1024 + 1);  // one past MAX_HEADER_VALUE_CHARS, the emitter's bound too

    /** Every field that becomes a header, with every class of value the JDK refuses or a server cannot take. */
    static Stream<Arguments> hostileValues() {
        List<String> values = List.of("line\nbreak", "cr\rlf", "nul\u0000", "del\u007f", "bell\u0007", "notify-客户", "é-latin1",
            "emoji-\uD83D\uDE00", OVER_8_KIB);
        List<String> fields = List.of("record header", "decision_id", "effect", "model_version", "content_type",
            "kafka traceparent");
        return fields.stream().flatMap(field -> values.stream().map(value -> Arguments.of(field, value)));
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("hostileValues")
    void aValueHttpCannotCarryIsTheRecordsRejectionNeverTheJdksException(String field, String value) throws RejectedRequest {
        OutboxRequest request = new OutboxRequest(
            field.equals("decision_id") ? value : "dec-9", "pay-9", "payments-api", "/holds", null,
            field.equals("content_type") ? value : "application/json", new byte[0],
            field.equals("record header") ? Map.of("X-Tenant", value) : Map.of(), 0L,
            field.equals("model_version") ? value : "fraud@2",
            field.equals("effect") ? value : "hold-payment");
        SinkRecord record = new SinkRecord("outbox.requests", 2, Schema.STRING_SCHEMA, "pay-9", Schema.BYTES_SCHEMA, new byte[0], 41L);
        if (field.equals("kafka traceparent")) {
            record.headers().addBytes("traceparent", value.getBytes(StandardCharsets.UTF_8));
        }
        Targets.Resolved resolved = Targets.resolve(TARGETS, request);

        RejectedRequest rejected = assertThrows(RejectedRequest.class, () -> HttpRequests.build(resolved, request, record, 1,
            Duration.ofSeconds(1), HttpRequests.KeyFormat.STRUCTURED, IdempotencyKey.Version.V2));

        assertEquals(RejectedRequest.BAD_HEADER, rejected.kind());
        assertTrue(rejected.getMessage().length() < 400, "the reason names the header, not its whole value");
    }

    @Test
    void printableAsciiSpaceAndTabUpToTheLimitAreSent() throws RejectedRequest {
        String longest = "v".repeat(HttpRequests.MAX_HEADER_VALUE_CHARS);
        OutboxRequest request = new OutboxRequest("dec 9\t~!", "pay-9", "payments-api", "/holds", null, "application/json",
            new byte[0], Map.of("X-Long", longest), 0L, "m@1", "hold-payment");
        HttpRequest built = HttpRequests.build(Targets.resolve(TARGETS, request), request, null, 1, Duration.ofSeconds(1),
            HttpRequests.KeyFormat.STRUCTURED, IdempotencyKey.Version.V2);
        assertEquals(longest, built.headers().firstValue("X-Long").orElseThrow());
    }

    @Test
    void eachSideEffectOfADecisionHasItsOwnKey() {
        OutboxRequest hold = new OutboxRequest("dec-9", "pay-9", "payments-api", "/holds", null, "application/json",
            new byte[0], Map.of(), 0L, null, "hold-payment");
        OutboxRequest notify = new OutboxRequest("dec-9", "pay-9", "notifications-api", "/n", null, "application/json",
            new byte[0], Map.of(), 0L, null, "notify-customer");
        // The same vector as tests/outbox_sink/test_contract.py: both sides derive the same key.
        assertEquals("c1a02b85c4b683f44d325b9a398ca5eacabe76e2205009d08ef22d15d51ce4b3",
            hold.idempotencyKey(IdempotencyKey.Version.V1));
        assertFalse(hold.idempotencyKey(IdempotencyKey.Version.V1).equals(notify.idempotencyKey(IdempotencyKey.Version.V1)));
        assertFalse(hold.idempotencyKey(IdempotencyKey.Version.V2).equals(notify.idempotencyKey(IdempotencyKey.Version.V2)));
        assertFalse(hold.idempotencyKey(IdempotencyKey.Version.V2).equals(hold.idempotencyKey(IdempotencyKey.Version.V1)));
        assertEquals("notify-customer", notify.effectName());
    }

    @Test
    void excerptIsBoundedAndNeverSplitsACharacter() {
        assertEquals("amount must…", HttpRequests.excerpt("amount must be positive".getBytes(StandardCharsets.UTF_8), 11));
        String cut = HttpRequests.excerpt("ab€".getBytes(StandardCharsets.UTF_8), 4);
        assertFalse(cut.contains("\uFFFD"), cut);
        assertEquals("", HttpRequests.excerpt("x".getBytes(StandardCharsets.UTF_8), 0));
    }
}
