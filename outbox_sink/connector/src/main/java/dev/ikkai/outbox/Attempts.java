package dev.ikkai.outbox;

import java.time.Instant;

/** What is known about one record's deliveries so far: what its receipt and dead-letter headers report. */
final class Attempts {
    final Instant firstAttemptAt;
    Instant lastAttemptAt;
    /** When the next attempt is due, after a transient failure. */
    Instant nextAttemptAt;
    int attempts;
    Integer lastStatus;
    String lastDigest;

    Attempts(Instant first) {
        this.firstAttemptAt = first;
        this.lastAttemptAt = first;
        this.nextAttemptAt = first;
    }
}
