package dev.ikkai.outbox;

import java.time.Duration;
import java.time.Instant;
import java.time.ZonedDateTime;
import java.time.format.DateTimeFormatter;
import java.time.format.DateTimeParseException;
import java.util.Optional;

/**
 * What a response means and how long to wait before trying again. Pure: the caller passes the
 * clock and the random draw, so every branch is unit-tested.
 */
public final class RetryPolicy {
    public enum Verdict { DELIVERED, RETRY, REJECT }

    private final Duration initial;
    private final Duration max;
    private final Duration maxRetryDuration;

    public RetryPolicy(Duration initial, Duration max, Duration maxRetryDuration) {
        this.initial = initial;
        this.max = max;
        this.maxRetryDuration = maxRetryDuration;
    }

    /**
     * 2xx: delivered. 408, 429 and 5xx: worth another try (the receiver may recover). Anything
     * else (1xx, 3xx because redirects are never followed, other 4xx): the request itself is
     * wrong, so sending it again cannot help.
     */
    public static Verdict classify(int status) {
        if (status >= 200 && status < 300) {
            return Verdict.DELIVERED;
        }
        if (status == 408 || status == 429 || (status >= 500 && status < 600)) {
            return Verdict.RETRY;
        }
        return Verdict.REJECT;
    }

    /** Retry-After as delta-seconds or an HTTP-date (RFC 9110 10.2.3); empty when absent or malformed. */
    public static Optional<Duration> parseRetryAfter(String value, Instant now) {
        if (value == null || value.isBlank()) {
            return Optional.empty();
        }
        String v = value.strip();
        if (v.chars().allMatch(Character::isDigit)) {
            try {
                return Optional.of(Duration.ofSeconds(Long.parseLong(v)));
            } catch (NumberFormatException e) {  // more digits than a long holds
                return Optional.empty();
            }
        }
        try {
            Instant at = ZonedDateTime.parse(v, DateTimeFormatter.RFC_1123_DATE_TIME).toInstant();
            Duration wait = Duration.between(now, at);
            return Optional.of(wait.isNegative() ? Duration.ZERO : wait);
        } catch (DateTimeParseException e) {
            return Optional.empty();
        }
    }

    /**
     * Wait before attempt {@code attempts + 1}: exponential (initial * 2^(attempts-1), capped at max)
     * with "equal jitter" (half fixed, half uniform from {@code random} in [0, 1)), and never less
     * than the server's Retry-After.
     */
    public Duration backoff(int attempts, Optional<Duration> retryAfter, double random) {
        long cap = max.toMillis();
        long exp = initial.toMillis();
        for (int i = 1; i < attempts && exp < cap; i++) {
            exp = Math.min(cap, exp * 2);
        }
        exp = Math.min(cap, exp);
        long jittered = exp / 2 + (long) (random * (exp - exp / 2));
        Duration wait = Duration.ofMillis(Math.max(1, jittered));
        return retryAfter.filter(ra -> ra.compareTo(wait) > 0).orElse(wait);
    }

    /** May we wait {@code wait} and try again, given when the first attempt was? */
    public boolean withinBudget(Instant firstAttempt, Instant now, Duration wait) {
        return Duration.between(firstAttempt, now.plus(wait)).compareTo(maxRetryDuration) <= 0;
    }
}
