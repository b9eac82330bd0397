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
    String reason) {

    public enum Outcome { DELIVERED, DEAD_LETTERED }
}
