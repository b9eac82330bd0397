package dev.ikkai.outbox;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.junit.jupiter.api.Test;

/**
 * Issue 44, case 6: the Idempotency-Key never joins two effects. The vectors are shared with the Python contract
 * (tests/outbox_sink/idempotency_key_vectors.json, read from the repository); the property is checked over generated
 * effects of the request grammar, sharp ones first.
 */
class IdempotencyKeyTest {
    /** The vector file, relative to this module (outbox_sink/connector) as Maven runs the tests. */
    static final Path VECTORS = Path.of("..", "..", "tests", "outbox_sink", "idempotency_key_vectors.json");

    @Test
    void everySharedVectorIsDerivedByteForByte() throws IOException {
        JsonNode doc = new ObjectMapper().readTree(Files.readString(VECTORS));
        int checked = 0;
        for (JsonNode v : doc.path("vectors")) {
            String effect = v.path("effect").isNull() ? null : v.path("effect").asText();
            IdempotencyKey.Version version = IdempotencyKey.Version.of(v.path("version").asText());
            assertEquals(v.path("key").asText(), IdempotencyKey.derive(version, v.path("decision_id").asText(),
                v.path("target").asText(), v.path("path").asText(), effect), v.path("name").asText() + " " + version);
            checked++;
        }
        assertTrue(checked >= 20, "the vector file holds the cases: " + checked);
    }

    @Test
    void anExplicitEffectNeverTakesTheKeyOfADefaultOne() {
        // The collision issue 44 found: explicit api/ok/1 against target api + path /ok/1.
        String explicit = IdempotencyKey.derive(IdempotencyKey.Version.V2, "d-1", "api", "/ok/1", "api/ok/1");
        String byDefault = IdempotencyKey.derive(IdempotencyKey.Version.V2, "d-1", "api", "/ok/1", null);
        assertNotEquals(explicit, byDefault);
        // v1 (kept for the migration only) is the derivation that collides.
        assertEquals(IdempotencyKey.derive(IdempotencyKey.Version.V1, "d-1", "api", "/ok/1", "api/ok/1"),
            IdempotencyKey.derive(IdempotencyKey.Version.V1, "d-1", "api", "/ok/1", null));
    }

    /** One effect's identity: what the key must tell apart (an empty effect is the default one). */
    private record Effect(String decisionId, boolean explicit, String effect, String target, String path) {
        static Effect of(String decisionId, String target, String path, String effect) {
            boolean explicit = effect != null && !effect.isEmpty();
            return explicit ? new Effect(decisionId, true, effect, null, null) : new Effect(decisionId, false, null, target, path);
        }
    }

    /**
     * Injective over the effect grammar: ids and paths of printable ASCII (the emitter's rule) and of any character
     * the sink may meet before it validates one (U+001F, ':' and digits, which a length prefix must survive), built
     * so that many inputs share their concatenations. No two different effects share a key.
     */
    @Test
    void noTwoDifferentEffectsShareAKey() {
        SplittableRandom random = new SplittableRandom(44);
        String[] atoms = {"", "a", "b", "/", "api", "/ok", "/1", "ok/1", "api/ok/1", "\u001f", ":", "1:", "2:v2", "e", "d",
            "1:e", "1:d", "3:api", "é", "客", "\uD83D\uDE00", "0", "10:", "%2e", ";"};
        Map<String, Effect> byKey = new HashMap<>();
        List<String[]> inputs = new ArrayList<>();
        for (int i = 0; i < 40_000; i++) {
            String effect = random.nextInt(3) == 0 ? null : join(random, atoms);
            inputs.add(new String[] {join(random, atoms), join(random, atoms), join(random, atoms), effect});
        }
        for (String[] in : inputs) {
            Effect effect = Effect.of(in[0], in[1], in[2], in[3]);
            String key = IdempotencyKey.derive(IdempotencyKey.Version.V2, in[0], in[1], in[2], in[3]);
            Effect before = byKey.putIfAbsent(key, effect);
            assertTrue(before == null || before.equals(effect), "two effects share the key " + key + ": " + before + " and " + effect);
        }
        assertTrue(byKey.size() > 10_000, "the generator made distinct effects: " + byKey.size());
    }

    private static String join(SplittableRandom random, String[] atoms) {
        StringBuilder text = new StringBuilder();
        for (int n = random.nextInt(4); n > 0; n--) {
            text.append(atoms[random.nextInt(atoms.length)]);
        }
        return text.toString();
    }
}
