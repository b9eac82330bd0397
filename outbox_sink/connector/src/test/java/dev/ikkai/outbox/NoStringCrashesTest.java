package dev.ikkai.outbox;

import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Supplier;

import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.sink.SinkRecord;
import org.junit.jupiter.api.Test;

/**
 * Issue 44, case 2: no string a record can hold crashes the sink, up to Kafka's record limit (1 MiB), on a thread with
 * a worker-sized stack. Each field of a request is filled with generated texts built from the pieces the redaction
 * and the path checks look for (URLs, '@', placeholders, parameters, dot segments), at lengths from 0 to 1 MiB; every
 * step the sink takes with a record's strings (resolve, build the request, redact, bound, derive the key) either
 * succeeds or rejects the record, and every rejection's message is bounded.
 */
class NoStringCrashesTest {
    /** Kafka's default record limit (message.max.bytes): no field of a record can be longer. */
    static final int RECORD_LIMIT = 1024 * 1024;
    /** A Connect worker thread's stack is the JVM's default; this one is smaller, so a recursion shows sooner. */
    static final long STACK_BYTES = 512 * 1024;
    static final String[] PIECES = {"a", "/", "//", "://", "https://", "@", "u:p@", "${file:x}", "${", "}", "?", "&", ";",
        "token=", "=", "%2e", "..", ".", ";x", " ", "\u001f", "客", "#", ":", "x=1", "http"};

    @Test
    void aLongPathAnsweredByTheTargetIsQuotedWithoutRecursion() {
        // The emitter accepts this path (printable ASCII, 2,048 bytes); the old redaction overflowed the stack on it.
        String path = "/go?next=https://" + "x".repeat(2048 - 17);
        onSmallStack(() -> Urls.redactPath(path));
        String longest = "/r?u=https://" + "u".repeat(RECORD_LIMIT) + "@host/x?token=abc";
        String shown = onSmallStack(() -> Urls.redactPath(longest));
        assertTrue(shown.contains(Urls.REDACTED) && !shown.contains("token=abc"), "still redacted at 1 MiB");
    }

    @Test
    void everyFieldUpToTheRecordLimitIsSentOrRejectedNeverThrown() {
        SplittableRandom random = new SplittableRandom(2044);
        int[] lengths = {0, 1, 100, 2_048, 2_049, 8_193, 65_536, 300_000, RECORD_LIMIT};
        List<String> problems = new ArrayList<>();
        for (int length : lengths) {
            for (int example = 0; example < (length > 100_000 ? 3 : 12); example++) {
                String text = generated(random, length);
                for (String field : List.of("target", "path", "method", "header name", "header value", "decision_id", "effect",
                    "content_type", "model_version")) {
                    String problem = onSmallStack(() -> exercise(field, text));
                    if (problem != null) {
                        problems.add(field + " of " + length + " chars: " + problem);
                    }
                }
                String redacted = onSmallStack(() -> Urls.redact(text));
                if (redacted == null) {
                    problems.add("redact returned null");
                }
            }
        }
        assertTrue(problems.isEmpty(), String.join("\n", problems.subList(0, Math.min(10, problems.size()))));
    }

    /** What went wrong with one field holding {@code text}, or null: it was built, or rejected with a bounded reason. */
    private static String exercise(String field, String text) {
        OutboxRequest request = new OutboxRequest(field.equals("decision_id") ? text : "d-1", "k-1",
            field.equals("target") ? text : "payments-api", field.equals("path") ? text : "/holds",
            field.equals("method") ? text : null, field.equals("content_type") ? text : "application/json", new byte[0],
            field.equals("header name") ? Map.of(text, "v") : field.equals("header value") ? Map.of("X-Note", text) : Map.of(),
            0L, field.equals("model_version") ? text : null, field.equals("effect") ? text : null);
        SinkRecord record = new SinkRecord("outbox.requests", 0, Schema.STRING_SCHEMA, "k-1", Schema.BYTES_SCHEMA, new byte[0], 1L);
        try {
            Targets.Resolved resolved = Targets.resolve(TargetsTest.TARGETS, request);
            HttpRequests.build(resolved, request, record, 1, Duration.ofSeconds(1), HttpRequests.KeyFormat.STRUCTURED,
                IdempotencyKey.Version.V2);
        } catch (RejectedRequest e) {
            int bytes = e.getMessage().getBytes(StandardCharsets.UTF_8).length;
            if (bytes > RejectedRequest.MESSAGE_BYTES) {
                return "a reason of " + bytes + " bytes, over " + RejectedRequest.MESSAGE_BYTES;
            }
        }
        request.idempotencyKey(IdempotencyKey.Version.V2);
        Bounded.text(request.effectName(), Bounded.FIELD_BYTES);
        return null;
    }

    private static String generated(SplittableRandom random, int length) {
        StringBuilder text = new StringBuilder(length + 16);
        if (length > 0) {
            text.append('/');
        }
        while (text.length() < length) {
            // Long runs of one piece are what a recursion per character or a quadratic scan trips on.
            String piece = PIECES[random.nextInt(PIECES.length)];
            int repeat = random.nextInt(4) == 0 ? 1 + random.nextInt(Math.max(1, (length - text.length()) / piece.length())) : 1;
            for (int r = 0; r < repeat && text.length() < length; r++) {
                text.append(piece);
            }
        }
        return text.length() > length ? text.substring(0, length) : text.toString();
    }

    /** {@code work}'s result, run on a thread with a {@link #STACK_BYTES} stack; any Throwable fails the test. */
    static <T> T onSmallStack(Supplier<T> work) {
        AtomicReference<T> result = new AtomicReference<>();
        AtomicReference<Throwable> thrown = new AtomicReference<>();
        Thread thread = new Thread(null, () -> {
            try {
                result.set(work.get());
            } catch (Throwable t) {  // what the test looks for: a StackOverflowError above all
                thrown.set(t);
            }
        }, "small-stack", STACK_BYTES);
        thread.start();
        try {
            thread.join();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new AssertionError(e);
        }
        if (thrown.get() != null) {
            fail("a record's string threw " + thrown.get().getClass().getName(), thrown.get());
        }
        return result.get();
    }
}
