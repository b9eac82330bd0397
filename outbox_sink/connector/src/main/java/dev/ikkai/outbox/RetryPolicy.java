package dev.ikkai.outbox;

import java.time.DateTimeException;
import java.time.Duration;
import java.time.Instant;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.time.ZonedDateTime;
import java.time.format.DateTimeFormatter;
import java.time.format.DateTimeParseException;
import java.util.Optional;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * What a response means and how long to wait before trying again. Pure: the caller passes the
 * clock and the random draw, so every branch is unit-tested.
 */
public final class RetryPolicy {
    public enum Verdict { DELIVERED, RETRY, REJECT }

    /**
     * The longest Retry-After taken at its word: anything longer (a server may send 19 digits) is
     * read as this, which is far beyond any retry budget, so the request is dead-lettered at once
     * instead of the wait overflowing {@code Instant} arithmetic.
     */
    static final Duration MAX_RETRY_AFTER = Duration.ofDays(366);

    private final Duration initial;
    private final Duration max;
    private final Duration maxRetryDuration;

    public RetryPolicy(Duration initial, Duration max, Duration maxRetryDuration) {
        this.initial = initial;
        this.max = max;
        this.maxRetryDuration = maxRetryDuration;
    }

    /**
     * 2xx, and 303 See Other (RFC 9110 15.4.4: the normal answer of a POST that was applied, pointing at
     * its result, which the sink does not fetch): delivered. 408, 409, 429 and 5xx: worth another try (the receiver may recover; 409 is
     * the IETF Idempotency-Key draft's "a request with this key is still being processed", e.g.
     * an earlier attempt that timed out on our side but is being applied). Anything else (1xx,
     * 3xx because redirects are never followed, other 4xx): the request itself is wrong, so
     * sending it again cannot help.
     */
    public static Verdict classify(int status) {
        if (status >= 200 && status < 300 || status == 303) {
            return Verdict.DELIVERED;
        }
        if (status == 408 || status == 409 || status == 429 || (status >= 500 && status < 600)) {
            return Verdict.RETRY;
        }
        return Verdict.REJECT;
    }

    /**
     * Retry-After as delta-seconds or an HTTP-date (RFC 9110 10.2.3) in any of its three forms, which a
     * recipient must accept (5.6.7): IMF-fixdate, RFC 850 (two-digit year: the most recent year with those
     * digits that is not more than 50 years ahead) and asctime; at most {@link #MAX_RETRY_AFTER}; empty when
     * absent or malformed (then only the backoff applies).
     */
    public static Optional<Duration> parseRetryAfter(String value, Instant now) {
        if (value == null || value.isBlank()) {
            return Optional.empty();
        }
        String v = value.strip();
        if (v.chars().allMatch(c -> c >= '0' && c <= '9')) {
            // Any number of digits: more than the cap's worth is the cap (no long overflow either).
            String significant = v.replaceFirst("^0+(?=.)", "");
            if (significant.length() > 12) {
                return Optional.of(MAX_RETRY_AFTER);
            }
            return Optional.of(capped(Duration.ofSeconds(Long.parseLong(significant))));
        }
        try {
            Instant at = httpDate(v, now);
            if (at == null) {
                return Optional.empty();
            }
            if (at.isBefore(now)) {
                return Optional.of(Duration.ZERO);
            }
            return Optional.of(capped(Duration.between(now, at)));
        } catch (DateTimeParseException e) {
            return Optional.empty();
        } catch (DateTimeException | ArithmeticException e) {  // a date too far out to compute with, or no such day
            // RFC 850 and asctime years have at most 4 digits: there it is a day that does not exist (31-Feb).
            return RFC_850.matcher(v).matches() || ASCTIME.matcher(v).matches() ? Optional.empty()
                : Optional.of(MAX_RETRY_AFTER);
        }
    }

    private static final String MONTHS = "Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec";
    private static final Pattern RFC_850 = Pattern.compile(
        "(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday), (\\d{2})-(" + MONTHS + ")-(\\d{2}) "
            + "(\\d{2}):(\\d{2}):(\\d{2}) GMT");
    private static final Pattern ASCTIME = Pattern.compile(
        "(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (" + MONTHS + ") ([ \\d]\\d) (\\d{2}):(\\d{2}):(\\d{2}) (\\d{4})");

    /** An HTTP-date in any of its three forms; null when it is none of them. */
    private static Instant httpDate(String v, Instant now) {
        Matcher m = RFC_850.matcher(v);
        if (m.matches()) {
            int yy = Integer.parseInt(m.group(3));
            int thisYear = now.atZone(ZoneOffset.UTC).getYear();
            int year = thisYear - Math.floorMod(thisYear, 100) + yy;
            if (year > thisYear + 50) {
                year -= 100;
            }
            return utc(year, m.group(2), Integer.parseInt(m.group(1)), m.group(4), m.group(5), m.group(6));
        }
        m = ASCTIME.matcher(v);
        if (m.matches()) {
            return utc(Integer.parseInt(m.group(6)), m.group(1), Integer.parseInt(m.group(2).strip()), m.group(3), m.group(4),
                m.group(5));
        }
        return ZonedDateTime.parse(v, DateTimeFormatter.RFC_1123_DATE_TIME).toInstant();
    }

    private static Instant utc(int year, String month, int day, String hour, String minute, String second) {
        int monthNumber = MONTHS.indexOf(month) / 4 + 1;
        return LocalDateTime.of(year, monthNumber, day, Integer.parseInt(hour), Integer.parseInt(minute),
            Integer.parseInt(second)).toInstant(ZoneOffset.UTC);
    }


    private static Duration capped(Duration wait) {
        return wait.compareTo(MAX_RETRY_AFTER) > 0 ? MAX_RETRY_AFTER : wait;
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

    /** May we wait {@code wait} and try again, given when the first attempt was? (No overflow for any wait.) */
    public boolean withinBudget(Instant firstAttempt, Instant now, Duration wait) {
        Duration left = maxRetryDuration.minus(Duration.between(firstAttempt, now));
        return !left.isNegative() && wait.compareTo(left) <= 0;
    }

}
