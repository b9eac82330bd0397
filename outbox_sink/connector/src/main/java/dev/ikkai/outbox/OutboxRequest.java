package dev.ikkai.outbox;

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
     * none, {@code target + path} (e.g. {@code payments-api/payments/p-1/hold}), as headers, receipts and dead
     * letters show it. The Idempotency-Key does not hash this name: it tells an explicit effect from a default one
     * ({@link IdempotencyKey}). ikkai/contract/outbox.py derives the same.
     */
    public String effectName() {
        return effectKind() == Receipt.EffectKind.EXPLICIT ? effect : target + path;
    }

    /** Whether the request names its effect, or its effect is the default one (target + path): the receipt says. */
    public Receipt.EffectKind effectKind() {
        return effect != null && !effect.isEmpty() ? Receipt.EffectKind.EXPLICIT : Receipt.EffectKind.DEFAULT;
    }

    /**
     * The Idempotency-Key of this side effect in the key derivation {@code version} ({@link IdempotencyKey}):
     * one key per side effect, the same for every attempt and replay of it.
     */
    public String idempotencyKey(IdempotencyKey.Version version) {
        return IdempotencyKey.derive(version, decisionId, target, path, effect);
    }
}
