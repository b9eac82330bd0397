package dev.ikkai.outbox;

/** The final outcome of one request, as written to outbox.receipts (schemas/outbox_receipt). */
public record Receipt(
    String decisionId,
    String key,
    String target,
    Outcome outcome,
    Integer statusCode,
    int attempts,
    long firstAttemptAt,
    long lastAttemptAt,
    String responseDigest,
    String reason,
    String effect,
    String idempotencyKey,
    EffectKind effectKind) {

    /** A receipt that does not name its effect (as the first version of the sink wrote them). */
    public Receipt(String decisionId, String key, String target, Outcome outcome, Integer statusCode, int attempts,
                   long firstAttemptAt, long lastAttemptAt, String responseDigest, String reason) {
        this(decisionId, key, target, outcome, statusCode, attempts, firstAttemptAt, lastAttemptAt, responseDigest, reason,
            null, null);
    }

    /** A receipt that names its effect but not its kind (as outbox_receipt v2 receipts were written). */
    public Receipt(String decisionId, String key, String target, Outcome outcome, Integer statusCode, int attempts,
                   long firstAttemptAt, long lastAttemptAt, String responseDigest, String reason, String effect,
                   String idempotencyKey) {
        this(decisionId, key, target, outcome, statusCode, attempts, firstAttemptAt, lastAttemptAt, responseDigest, reason,
            effect, idempotencyKey, null);
    }

    public enum Outcome { DELIVERED, DEAD_LETTERED }

    /**
     * Whether the request named its effect ({@code EXPLICIT}) or its effect is the default one, target + path
     * ({@code DEFAULT}). Two effects can share a name (an explicit {@code api/ok/1}, target {@code api} with path
     * {@code /ok/1}); with the kind, a reader tells them apart as the Idempotency-Key does ({@link IdempotencyKey}).
     */
    public enum EffectKind { EXPLICIT, DEFAULT }
}
