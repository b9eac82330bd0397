package dev.ikkai.outbox;

import java.net.http.HttpRequest;
import java.nio.ByteBuffer;
import java.nio.CharBuffer;
import java.nio.charset.CharsetDecoder;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;

import org.apache.kafka.connect.header.Header;
import org.apache.kafka.connect.sink.SinkRecord;

/** Building one HTTP request from an outbox record, and the small pure helpers around responses. */
final class HttpRequests {
    /** W3C trace context headers are copied from the Kafka record when the request does not carry them. */
    static final String[] TRACE_HEADERS = {"traceparent", "tracestate"};

    /**
     * The longest header value the sink sends, in characters (each one byte on the wire): most servers
     * refuse a header line much longer (nginx and Tomcat default to 8 KiB a line), so a longer value is
     * the record's fault and it is dead-lettered rather than sent.
     */
    static final int MAX_HEADER_VALUE_CHARS = 8192;

    /** The User-Agent of every request the sink sends. */
    static final String USER_AGENT = "ikkai-outbox-sink/" + SinkVersion.NUMBER;

    /** How the Idempotency-Key header's value is written. */
    enum KeyFormat {
        /** An RFC 8941 sf-string, {@code "<hex>"}, as the IETF Idempotency-Key draft specifies (the default). */
        STRUCTURED,
        /** The bare token {@code <hex>}, for APIs that compare the header's raw text with the key. */
        TOKEN
    }

    private HttpRequests() {
    }

    /**
     * The request for one attempt, every header checked first (the JDK throws on a value it cannot
     * carry, which must never escape put()).
     *
     * @throws RejectedRequest a header value HTTP cannot carry ({@link RejectedRequest#BAD_HEADER}); permanent
     */
    static HttpRequest build(Targets.Resolved resolved, OutboxRequest request, SinkRecord record, int attempt,
                             Duration timeout, KeyFormat keyFormat, IdempotencyKey.Version keyVersion) throws RejectedRequest {
        Map<String, String> headers = headers(resolved, request, record, attempt, keyFormat, keyVersion);
        for (Map.Entry<String, String> header : headers.entrySet()) {
            checkValue(header.getKey(), header.getValue());
        }
        HttpRequest.Builder builder = HttpRequest.newBuilder(resolved.uri())
            .timeout(timeout)
            .method(resolved.method(), HttpRequest.BodyPublishers.ofByteArray(request.body()));
        headers.forEach(builder::header);
        return builder.build();
    }

    /**
     * A header value the sink sends: visible ASCII, space and tab only (RFC 9110 field-value without
     * obs-text: a Latin-1 byte would not be the character the record meant), at most
     * {@link #MAX_HEADER_VALUE_CHARS}. The JDK refuses control characters and anything above U+00FF.
     */
    static void checkValue(String name, String value) throws RejectedRequest {
        if (value == null) {
            throw new RejectedRequest(RejectedRequest.BAD_HEADER, "header '" + bounded(name) + "' has no value");
        }
        if (value.length() > MAX_HEADER_VALUE_CHARS) {
            throw new RejectedRequest(RejectedRequest.BAD_HEADER, "header '" + bounded(name) + "' is " + value.length()
                + " characters long, over the " + MAX_HEADER_VALUE_CHARS + " an HTTP header line may carry here");
        }
        for (int i = 0; i < value.length(); i++) {
            char c = value.charAt(i);
            if (!(c == ' ' || c == '\t' || c >= 0x21 && c <= 0x7e)) {
                throw new RejectedRequest(RejectedRequest.BAD_HEADER, "header '" + bounded(name) + "' has the character "
                    + String.format("U+%04X", (int) c) + " at " + i + ": an HTTP header value is printable ASCII, "
                    + "space and tab (percent-encode or drop it in the emitter)");
            }
        }
    }

    private static String bounded(String name) {
        return Bounded.text(name, 200);
    }

    /** Every header the sink sends (Idempotency-Key v2 in the draft's sf-string form). */
    static Map<String, String> headers(Targets.Resolved resolved, OutboxRequest request, SinkRecord record, int attempt) {
        return headers(resolved, request, record, attempt, KeyFormat.STRUCTURED, IdempotencyKey.Version.V2);
    }

    /** Every header the sink sends: the record's own, then the ones only the sink may set. */
    static Map<String, String> headers(Targets.Resolved resolved, OutboxRequest request, SinkRecord record, int attempt,
                                       KeyFormat keyFormat, IdempotencyKey.Version keyVersion) {
        Map<String, String> headers = new java.util.TreeMap<>(String.CASE_INSENSITIVE_ORDER);
        headers.putAll(request.headers());
        if (record != null) {
            for (String name : TRACE_HEADERS) {
                Header h = record.headers().lastWithName(name);
                if (h != null && h.value() != null && !headers.containsKey(name)) {
                    headers.put(name, h.value() instanceof byte[] b ? new String(b, StandardCharsets.UTF_8) : h.value().toString());
                }
            }
            headers.put("X-Ikkai-Source", record.topic() + "/" + record.kafkaPartition() + "/" + record.kafkaOffset());
        }
        String key = request.idempotencyKey(keyVersion);
        headers.put("Idempotency-Key", keyFormat == KeyFormat.STRUCTURED ? "\"" + key + "\"" : key);
        headers.put("Content-Type", request.contentType());
        headers.put("User-Agent", USER_AGENT);
        headers.put("X-Ikkai-Decision-Id", request.decisionId());
        headers.put("X-Ikkai-Effect", request.effectName());
        headers.put("X-Ikkai-Attempt", String.valueOf(attempt));
        if (request.modelVersion() != null) {
            headers.put("X-Ikkai-Model-Version", request.modelVersion());
        }
        Target target = resolved.target();
        if (target.authHeader() != null) {
            headers.put(target.authHeader(), target.authSecret());
        }
        return headers;
    }

    /**
     * At most {@code maxBytes} of the body as text (invalid UTF-8 replaced), card numbers masked ({@link CardNumbers}),
     * for a dead-letter header. Masked before the cut (a card's digits reach at most {@link CardNumbers#LONGEST_CARD_BYTES}
     * past it), so a cut never leaves a card number's first digits.
     */
    static String excerpt(byte[] body, int maxBytes) {
        if (body == null || maxBytes == 0) {
            return "";
        }
        String masked = CardNumbers.mask(decoded(body, Math.min(body.length, maxBytes + CardNumbers.LONGEST_CARD_BYTES)));
        byte[] utf8 = masked.getBytes(StandardCharsets.UTF_8);
        String shown = utf8.length <= maxBytes ? masked : decoded(utf8, maxBytes);
        return shown + (body.length > maxBytes ? "…" : "");
    }

    /** The first {@code n} bytes of {@code bytes} as text; a character cut at the end is left out. */
    private static String decoded(byte[] bytes, int n) {
        CharsetDecoder decoder = StandardCharsets.UTF_8.newDecoder()
            .onMalformedInput(CodingErrorAction.REPLACE).onUnmappableCharacter(CodingErrorAction.REPLACE);
        CharBuffer out = CharBuffer.allocate(n);
        decoder.decode(ByteBuffer.wrap(bytes, 0, n), out, false);  // false: a character cut at the end is left out
        out.flip();
        return out.toString();
    }
}
