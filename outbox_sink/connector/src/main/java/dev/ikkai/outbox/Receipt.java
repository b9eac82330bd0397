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
    String idempotencyKey) {

    /** A receipt that does not name its effect (as the first version of the sink wrote them). */
    public Receipt(String decisionId, String key, String target, Outcome outcome, Integer statusCode, int attempts,
                   long firstAttemptAt, long lastAttemptAt, String responseDigest, String reason) {
        this(decisionId, key, target, outcome, statusCode, attempts, firstAttemptAt, lastAttemptAt, responseDigest, reason,
            null, null);
    }

    public enum Outcome { DELIVERED, DEAD_LETTERED }
}
