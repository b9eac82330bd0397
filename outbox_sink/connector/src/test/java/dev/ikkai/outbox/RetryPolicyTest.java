package dev.ikkai.outbox;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.time.Instant;
import java.util.Optional;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

class RetryPolicyTest {
    private static final Instant NOW = Instant.parse("2026-11-22T10:00:00Z");
    private final RetryPolicy policy = new RetryPolicy(Duration.ofMillis(500), Duration.ofSeconds(30), Duration.ofMinutes(10));

    @ParameterizedTest
    @ValueSource(ints = {200, 201, 202, 204, 299, 303})  // 303 See Other: the usual answer of an applied POST
    void twoHundredsAreDelivered(int status) {
        assertEquals(RetryPolicy.Verdict.DELIVERED, RetryPolicy.classify(status));
    }

    @ParameterizedTest
    @ValueSource(ints = {408, 409, 429, 500, 502, 503, 504, 599})
    void transientStatusesAreRetried(int status) {
        assertEquals(RetryPolicy.Verdict.RETRY, RetryPolicy.classify(status));
    }

    @ParameterizedTest
    @ValueSource(ints = {100, 301, 302, 304, 307, 308, 400, 401, 403, 404, 410, 413, 422, 451})
    void everythingElseIsRejected(int status) {
        assertEquals(RetryPolicy.Verdict.REJECT, RetryPolicy.classify(status));
    }

    @Test
    void retryAfterInSeconds() {
        assertEquals(Optional.of(Duration.ofSeconds(3)), RetryPolicy.parseRetryAfter(" 3 ", NOW));
        assertEquals(Optional.of(Duration.ZERO), RetryPolicy.parseRetryAfter("0", NOW));
    }

    @Test
    void retryAfterAsHttpDate() {
        assertEquals(Optional.of(Duration.ofSeconds(90)), RetryPolicy.parseRetryAfter("Sun, 22 Nov 2026 10:01:30 GMT", NOW));
        assertEquals(Optional.of(Duration.ZERO), RetryPolicy.parseRetryAfter("Sun, 22 Nov 2026 09:00:00 GMT", NOW));
    }

    @Test
    void retryAfterInTheObsoleteDateFormsARecipientMustAccept() {  // RFC 9110 5.6.7
        assertEquals(Optional.of(Duration.ofSeconds(90)), RetryPolicy.parseRetryAfter("Sunday, 22-Nov-26 10:01:30 GMT", NOW));
        assertEquals(Optional.of(Duration.ofSeconds(90)), RetryPolicy.parseRetryAfter("Sun Nov 22 10:01:30 2026", NOW));
        assertEquals(Optional.of(Duration.ofDays(9).plusSeconds(90)),
            RetryPolicy.parseRetryAfter("Tue Dec  1 10:01:30 2026", NOW), "asctime pads a one-digit day with a space");
        assertEquals(Optional.of(Duration.ZERO), RetryPolicy.parseRetryAfter("Sunday, 06-Nov-94 08:49:37 GMT", NOW),
            "a two-digit year more than 50 years ahead is the past century's");
        assertEquals(Optional.empty(), RetryPolicy.parseRetryAfter("Monday, 31-Feb-26 10:00:00 GMT", NOW), "no such day");
        assertEquals(Optional.empty(), RetryPolicy.parseRetryAfter("Sun Nov 22 10:01:30", NOW), "no year");
    }

    @ParameterizedTest
    @ValueSource(strings = {"99999999999999999", "9000000000000000000", "99999999999999999999999", "31536000000",
        "Fri, 31 Dec 9999 23:59:59 GMT"})
    void anAbsurdRetryAfterIsCappedAndTheBudgetSaysNoWithoutOverflow(String value) {
        Optional<Duration> parsed = RetryPolicy.parseRetryAfter(value, NOW);
        assertEquals(Optional.of(RetryPolicy.MAX_RETRY_AFTER), parsed);
        Duration wait = policy.backoff(1, parsed, 0.5);
        assertFalse(policy.withinBudget(NOW, NOW, wait));
        assertFalse(policy.withinBudget(NOW, NOW, Duration.ofSeconds(Long.MAX_VALUE)));  // no DateTimeException
    }

    @ParameterizedTest
    @ValueSource(strings = {"", "soon", "-5", "1.5", "22 Nov 2026", "\u0663"})
    void malformedRetryAfterIsIgnored(String value) {
        assertEquals(Optional.empty(), RetryPolicy.parseRetryAfter(value, NOW));
    }

    @Test
    void backoffDoublesWithEqualJitterAndIsCapped() {
        assertEquals(Duration.ofMillis(250), policy.backoff(1, Optional.empty(), 0.0));
        assertEquals(Duration.ofMillis(499), policy.backoff(1, Optional.empty(), 0.999));
        assertEquals(Duration.ofMillis(1000), policy.backoff(3, Optional.empty(), 0.0));
        assertEquals(Duration.ofMillis(15_000), policy.backoff(20, Optional.empty(), 0.0));
        assertEquals(Duration.ofMillis(30_000), policy.backoff(500, Optional.empty(), 1.0));
    }

    @Test
    void retryAfterWinsWhenLongerThanTheBackoff() {
        assertEquals(Duration.ofSeconds(4), policy.backoff(1, Optional.of(Duration.ofSeconds(4)), 0.5));
        assertEquals(Duration.ofMillis(375), policy.backoff(1, Optional.of(Duration.ofMillis(10)), 0.5));
    }

    @Test
    void budgetCountsFromTheFirstAttemptIncludingTheNextWait() {
        Instant first = NOW.minus(Duration.ofMinutes(9));
        assertTrue(policy.withinBudget(first, NOW, Duration.ofSeconds(60)));
        assertFalse(policy.withinBudget(first, NOW, Duration.ofSeconds(61)));
    }
}
