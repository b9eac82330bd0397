package dev.ikkai.outbox;

import java.nio.charset.StandardCharsets;
import java.util.Map;

/** One decoded record of outbox.requests (schemas/outbox_request). */
public record OutboxRequest(
    String decisionId,
    String key,
    String target,
    String path,
    String method,
    String contentType,
    byte[] body,
    Map<String, String> headers,
    long createdAt,
    String modelVersion,
    String effect) {

    /** A request without an effect name (schema v1, or v2 with effect null). */
    public OutboxRequest(String decisionId, String key, String target, String path, String method, String contentType,
                         byte[] body, Map<String, String> headers, long createdAt, String modelVersion) {
        this(decisionId, key, target, path, method, contentType, body, headers, createdAt, modelVersion, null);
    }

    /**
     * Which side effect of its decision this is: the request's {@code effect} name, or, when it has
     * none, {@code target + path} (e.g. {@code payments-api/payments/p-1/hold}; unambiguous, since an
     * alias has no '/' and a path starts with one). ikkai/contract/outbox.py derives the same.
     */
    public String effectName() {
        return effect != null && !effect.isEmpty() ? effect : target + path;
    }

    /**
     * The Idempotency-Key: sha-256 hex of (decision_id, effect) joined by U+001F. One key per side
     * effect, never shared by two effects of one decision (an API gateway keeps one key space for
     * all paths), and the same for every attempt and replay of this effect.
     */
    public String idempotencyKey() {
        return Sha256.hex((decisionId + "\u001f" + effectName()).getBytes(StandardCharsets.UTF_8));
    }
}
