package dev.ikkai.outbox;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;

/**
 * The Idempotency-Key of one side effect: one key per (decision, effect), the same for every attempt
 * and replay, never shared by two effects (an API gateway keeps one key space for all paths). Pure.
 *
 * <p>{@link Version#V2} (issue 44) hashes a length-prefixed sequence, so no two different inputs share a
 * preimage whatever characters they hold: {@code part(s) = <decimal UTF-8 length of s> ":" s}, and
 * <ul>
 *   <li>explicit effect (non-null, non-empty): {@code part("v2") part(decision_id) part("e") part(effect)}</li>
 *   <li>default effect: {@code part("v2") part(decision_id) part("d") part(target) part(path)}</li>
 * </ul>
 * key = lowercase hex sha-256 of that. {@link Version#V1}, the key before, is kept only for a migration:
 * sha-256 of {@code decision_id U+001F (effect or target + path)}, where the explicit effect {@code api/ok/1}
 * and target {@code api} with path {@code /ok/1} share a key. tests/outbox_sink/idempotency_key_vectors.json
 * pins both, for this class and ikkai/contract (Python) alike.
 */
public final class IdempotencyKey {
    /** Which derivation the sink sends ({@code outbox.idempotency.key.version}). */
    public enum Version {
        V1("v1"), V2("v2");

        private final String setting;

        Version(String setting) {
            this.setting = setting;
        }

        String setting() {
            return setting;
        }

        static Version of(String setting) {
            for (Version v : values()) {
                if (v.setting.equals(setting)) {
                    return v;
                }
            }
            throw new IllegalArgumentException("no Idempotency-Key version '" + Bounded.text(setting, 40) + "' (v1 or v2)");
        }
    }

    private IdempotencyKey() {
    }

    /** The key of the effect {@code effect} (null or empty: the default effect, target + path) of a decision. */
    static String derive(Version version, String decisionId, String target, String path, String effect) {
        boolean explicit = effect != null && !effect.isEmpty();
        if (version == Version.V1) {
            String name = explicit ? effect : orEmpty(target) + orEmpty(path);
            return Sha256.hex((orEmpty(decisionId) + "\u001f" + name).getBytes(StandardCharsets.UTF_8));
        }
        ByteArrayOutputStream preimage = new ByteArrayOutputStream();
        part(preimage, "v2");
        part(preimage, decisionId);
        if (explicit) {
            part(preimage, "e");
            part(preimage, effect);
        } else {
            part(preimage, "d");
            part(preimage, target);
            part(preimage, path);
        }
        return Sha256.hex(preimage.toByteArray());
    }

    /** {@code <decimal length in UTF-8 bytes>:<the bytes>}; null is written as the empty text. */
    private static void part(ByteArrayOutputStream out, String text) {
        byte[] bytes = orEmpty(text).getBytes(StandardCharsets.UTF_8);
        out.writeBytes(Integer.toString(bytes.length).getBytes(StandardCharsets.US_ASCII));
        out.write(':');
        out.writeBytes(bytes);
    }

    private static String orEmpty(String text) {
        return text == null ? "" : text;
    }
}
