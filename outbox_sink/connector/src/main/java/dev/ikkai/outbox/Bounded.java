package dev.ikkai.outbox;

import java.nio.ByteBuffer;
import java.nio.CharBuffer;
import java.nio.charset.CharsetDecoder;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;

/**
 * The size rule of everything the sink writes about a record (receipts, dead-letter headers), so that
 * no record, however long its fields, makes a write the broker refuses (the task would stop on it and
 * meet it again after every restart). Pure.
 *
 * <p>The rule, as the jobs' dead letters cut theirs (spark_jobs/sink/dead_letters.py): a text over its
 * limit keeps its first bytes (never half a character) and ends in {@code …sha256:<64 hex>}, the
 * digest of the whole text, so two long values that share a prefix stay apart and the original can be
 * matched; the result is at most the limit in UTF-8 bytes.
 */
final class Bounded {
    /** Each text field of a receipt (decision_id, key, target, effect, reason) and each ikkai.dlq.* header. */
    static final int FIELD_BYTES = 1024;
    /** A dead letter's copy of the record's value (the rest: ikkai.dlq.value_bytes, ikkai.dlq.value_sha256). */
    static final int DEAD_LETTER_VALUE_BYTES = 512 * 1024;
    /** A dead letter's copy of the record's key (the rest: ikkai.dlq.key_bytes). */
    static final int DEAD_LETTER_KEY_BYTES = 16 * 1024;
    /** The record's own headers a dead letter copies, in all (names and values); the later ones are left out. */
    static final int DEAD_LETTER_HEADER_BYTES = 64 * 1024;
    /** A piece of a record or of a server's answer quoted in a reason (a path, an alias, a header name, an error). */
    static final int QUOTE_BYTES = 300;
    private static final String CUT = "…sha256:";
    private static final int SUFFIX_BYTES = CUT.getBytes(StandardCharsets.UTF_8).length + 64;

    private Bounded() {
    }

    /** {@code text} itself when at most {@code maxBytes} in UTF-8, else its cut form (see the class). */
    static String text(String text, int maxBytes) {
        if (text == null) {
            return null;
        }
        if (text.length() * 3 <= maxBytes) {  // cheap: no UTF-8 char is more than 3 bytes per UTF-16 unit
            return text;
        }
        byte[] utf8 = text.getBytes(StandardCharsets.UTF_8);
        if (utf8.length <= maxBytes) {
            return text;
        }
        return prefix(utf8, Math.max(0, maxBytes - SUFFIX_BYTES)) + CUT + Sha256.hex(utf8);
    }

    /** {@code text} as a reason may quote it: at most {@link #QUOTE_BYTES}, cut as {@link #text} cuts. */
    static String quoted(String text) {
        return text(text, QUOTE_BYTES);
    }

    /** The longest prefix of {@code utf8} of at most {@code maxBytes} bytes that ends on a character boundary. */
    private static String prefix(byte[] utf8, int maxBytes) {
        CharsetDecoder decoder = StandardCharsets.UTF_8.newDecoder()
            .onMalformedInput(CodingErrorAction.REPLACE).onUnmappableCharacter(CodingErrorAction.REPLACE);
        CharBuffer out = CharBuffer.allocate(maxBytes);
        decoder.decode(ByteBuffer.wrap(utf8, 0, Math.min(maxBytes, utf8.length)), out, false);
        out.flip();
        return out.toString();
    }

    /** The first {@code maxBytes} of {@code bytes} (itself when short enough). */
    static byte[] bytes(byte[] bytes, int maxBytes) {
        if (bytes == null || bytes.length <= maxBytes) {
            return bytes;
        }
        byte[] cut = new byte[maxBytes];
        System.arraycopy(bytes, 0, cut, 0, maxBytes);
        return cut;
    }
}
