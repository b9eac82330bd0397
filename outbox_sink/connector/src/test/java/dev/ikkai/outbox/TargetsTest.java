package dev.ikkai.outbox;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.URI;
import java.util.List;
import java.util.Map;

import org.apache.kafka.common.config.ConfigException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

class TargetsTest {
    static final Map<String, String> CONFIG = Map.of(
        "outbox.target.payments-api.url", "http://127.0.0.1:8080/v1/",
        "outbox.target.payments-api.auth.header", "Authorization",
        "outbox.target.payments-api.auth.secret", "Bearer s3cret",
        "outbox.target.notifications-api.url", "https://notify.internal",
        "outbox.target.notifications-api.method", "put");
    static final Map<String, Target> TARGETS = Targets.parse(List.of("payments-api", "notifications-api"), CONFIG);

    static OutboxRequest request(String target, String path, String method, Map<String, String> headers) {
        return new OutboxRequest("d-1", "pay-1", target, path, method, "application/json", new byte[0], headers, 0L, null);
    }

    @Test
    void parsesAliasesWithDefaults() {
        Target payments = TARGETS.get("payments-api");
        assertEquals(URI.create("http://127.0.0.1:8080/v1"), payments.baseUrl());
        assertEquals("POST", payments.method());
        assertEquals("PUT", TARGETS.get("notifications-api").method());
        assertTrue(!payments.toString().contains("s3cret"), "the auth value never shows in toString");
    }

    @Test
    void resolvesAPathUnderTheBaseUrl() throws RejectedRequest {
        Targets.Resolved r = Targets.resolve(TARGETS, request("payments-api", "/holds/pay-1?x=1", null, Map.of()));
        assertEquals(URI.create("http://127.0.0.1:8080/v1/holds/pay-1?x=1"), r.uri());
        assertEquals("POST", r.method());
        assertEquals("PATCH", Targets.resolve(TARGETS, request("payments-api", "/h", "patch", Map.of())).method());
    }

    @Test
    void unknownAliasIsRejected() {
        RejectedRequest e = assertThrows(RejectedRequest.class,
            () -> Targets.resolve(TARGETS, request("http://evil.example", "/x", null, Map.of())));
        assertEquals(RejectedRequest.UNKNOWN_TARGET, e.kind());
    }

    @ParameterizedTest
    @ValueSource(strings = {"", "holds", "//evil.example/x", "/../admin", "/a/./b", "/a/%2e%2e/b", "/a/..;/admin", "/a/..;x=1/b", "/a/.;/b", "/a/%2E%2e;/b", "/..;", "/a/%2fb", "/a/..%2F..",
        "/a/%5c..", "/a b", "/a#frag",
        "/a\\b", "/ü", "@evil.example/x",
        // Issue 44 case 8: decoded twice, or cut at a decoded ';' or NUL, these are "..", or a '/'.
        "/a/.%252e/b", "/a/%252e%252e/b", "/a/..%3b/b", "/a/..%3Bx/b", "/a/..%00/b", "/a/..%253b/b", "/a/%25252e%25252e/b",
        "/a/b%252fc", "/a/%2525252525252e"})
    void pathsThatLeaveTheBaseOrAreNotPlainAreRejected(String path) {
        RejectedRequest e = assertThrows(RejectedRequest.class,
            () -> Targets.resolve(TARGETS, request("payments-api", path, null, Map.of())));
        assertEquals(RejectedRequest.BAD_PATH, e.kind());
    }

    @ParameterizedTest
    @ValueSource(strings = {"/a/100%25/b", "/a/x%20y", "/a/..b/c", "/a/.well-known/x", "/a/%2e%2ex/b", "/a/b;v=1"})
    void encodedCharactersThatStayInTheirSegmentAreSent(String path) throws RejectedRequest {
        assertEquals("payments-api", Targets.resolve(TARGETS, request("payments-api", path, null, Map.of())).target().alias());
    }

    @ParameterizedTest
    @ValueSource(strings = {"GET", "CONNECT", "TRACE"})
    void methodsOutsideTheSideEffectSetAreRejected(String method) {
        RejectedRequest e = assertThrows(RejectedRequest.class,
            () -> Targets.resolve(TARGETS, request("payments-api", "/h", method, Map.of())));
        assertEquals(RejectedRequest.BAD_METHOD, e.kind());
    }

    @ParameterizedTest
    @ValueSource(strings = {"Idempotency-Key", "authorization", "Host", "content-type", "X-Ikkai-Attempt", "bad header"})
    void headersTheSinkOwnsCannotComeFromTheRecord(String name) {
        RejectedRequest e = assertThrows(RejectedRequest.class,
            () -> Targets.resolve(TARGETS, request("payments-api", "/h", null, Map.of(name, "x"))));
        assertEquals(RejectedRequest.RESERVED_HEADER, e.kind());
    }

    @Test
    void badConfigsNameTheKey() {
        assertEquals("outbox.target.a.url", key(() -> Targets.parse(List.of("a"), Map.of())));
        assertEquals("outbox.target.a.url", key(() -> Targets.parse(List.of("a"), Map.of("outbox.target.a.url", "ftp://x"))));
        assertEquals("outbox.target.a.url", key(() -> Targets.parse(List.of("a"), Map.of("outbox.target.a.url", "http://x/?q=1"))));
        assertEquals("outbox.target.a.method",
            key(() -> Targets.parse(List.of("a"), Map.of("outbox.target.a.url", "http://x", "outbox.target.a.method", "GET"))));
        assertEquals("outbox.target.a.auth.header",
            key(() -> Targets.parse(List.of("a"), Map.of("outbox.target.a.url", "http://x", "outbox.target.a.auth.secret", "t"))));
        assertEquals("outbox.target.b.url",
            key(() -> Targets.parse(List.of("a"), Map.of("outbox.target.a.url", "http://x", "outbox.target.b.url", "http://y"))));
        assertEquals(OutboxSinkConfig.TARGETS, key(() -> Targets.parse(List.of("Payments API"), Map.of())));
    }

    private static String key(org.junit.jupiter.api.function.Executable parse) {
        ConfigException e = assertThrows(ConfigException.class, parse);
        return e.getMessage().replaceFirst("^Invalid value .* for configuration ([^:]+):.*$", "$1");
    }
}
