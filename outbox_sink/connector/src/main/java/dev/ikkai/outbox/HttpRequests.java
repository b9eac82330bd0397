package dev.ikkai.outbox;

import java.net.http.HttpRequest;
import java.nio.ByteBuffer;
import java.nio.CharBuffer;
import java.nio.charset.CharsetDecoder;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.time.Duration;
import java.util.HexFormat;
import java.util.Map;

import org.apache.kafka.connect.header.Header;
import org.apache.kafka.connect.sink.SinkRecord;

/** Building one HTTP request from an outbox record, and the small pure helpers around responses. */
final class HttpRequests {
    /** W3C trace context headers are copied from the Kafka record when the request does not carry them. */
    static final String[] TRACE_HEADERS = {"traceparent", "tracestate"};

    private HttpRequests() {
    }

    static HttpRequest build(Targets.Resolved resolved, OutboxRequest request, SinkRecord record, int attempt, Duration timeout) {
        HttpRequest.Builder builder = HttpRequest.newBuilder(resolved.uri())
            .timeout(timeout)
            .method(resolved.method(), HttpRequest.BodyPublishers.ofByteArray(request.body()));
        for (Map.Entry<String, String> header : headers(resolved, request, record, attempt).entrySet()) {
            builder.header(header.getKey(), header.getValue());
        }
        return builder.build();
    }

    /** Every header the sink sends: the record's own, then the ones only the sink may set. */
    static Map<String, String> headers(Targets.Resolved resolved, OutboxRequest request, SinkRecord record, int attempt) {
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
        headers.put("Idempotency-Key", request.idempotencyKey());
        headers.put("Content-Type", request.contentType());
        headers.put("User-Agent", OutboxSinkTask.USER_AGENT);
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

    static String sha256Hex(byte[] body) {
        try {
            return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(body == null ? new byte[0] : body));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("every JDK has SHA-256", e);
        }
    }

    /** At most {@code maxBytes} of the body as text (invalid UTF-8 replaced), for a dead-letter header. */
    static String excerpt(byte[] body, int maxBytes) {
        if (body == null || maxBytes == 0) {
            return "";
        }
        int n = Math.min(body.length, maxBytes);
        CharsetDecoder decoder = StandardCharsets.UTF_8.newDecoder()
            .onMalformedInput(CodingErrorAction.REPLACE).onUnmappableCharacter(CodingErrorAction.REPLACE);
        CharBuffer out = CharBuffer.allocate(n);
        decoder.decode(ByteBuffer.wrap(body, 0, n), out, false);  // false: a character cut at the end is left out
        out.flip();
        return out.toString() + (body.length > n ? "…" : "");
    }
}
