package dev.ikkai.outbox;

import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Sends the task's HTTP requests, each on a thread of its own that is reused for later requests,
 * and hands back a future of its {@link Answer} that never completes exceptionally.
 *
 * <p>Why not {@code HttpClient.sendAsync}: the JDK completes those futures on the default
 * asynchronous pool of {@link CompletableFuture}, which on a machine with two cores or fewer
 * (common-pool parallelism below 2) starts a new thread for every task: one thread per answer.
 * The outbox benchmark measured that at about 40% of the worker's CPU per request, JIT aside
 * (BENCHMARKS.md); a blocking {@code send} on pooled threads costs a wake-up instead. The requests
 * are the same: one client, HTTP/1.1 with keep-alive, redirects never followed. How many are in
 * flight is the caller's to bound (the task's in-flight slots); the pool never queues a request
 * behind another, so an attempt still hanging for a partition the task no longer owns delays nobody.
 */
final class HttpSender implements AutoCloseable {
    /** How an attempt ended: a response, or the error that stands for one (connection, timeout), and when. */
    record Answer(HttpResponse<byte[]> response, Throwable error, Instant at) {
    }

    private final HttpClient http;
    private final ExecutorService threads;
    private final Clock clock;

    HttpSender(Duration connectTimeout, String threadName, Clock clock) {
        this.http = HttpClient.newBuilder()
            .connectTimeout(connectTimeout)
            .followRedirects(HttpClient.Redirect.NEVER)
            .version(HttpClient.Version.HTTP_1_1)
            .build();
        AtomicInteger n = new AtomicInteger();
        this.threads = Executors.newCachedThreadPool(runnable -> {
            Thread thread = new Thread(runnable, threadName + "-" + n.incrementAndGet());
            thread.setDaemon(true);
            return thread;
        });
        this.clock = clock;
    }

    /** Starts the request; its answer, with the time it came, whatever happens (an error is an answer too). */
    CompletableFuture<Answer> send(HttpRequest request) {
        return CompletableFuture.supplyAsync(() -> attempt(request), threads);
    }

    private Answer attempt(HttpRequest request) {
        try {
            return new Answer(http.send(request, HttpResponse.BodyHandlers.ofByteArray()), null, clock.instant());
        } catch (InterruptedException e) {  // closed: nobody waits for this answer any more
            Thread.currentThread().interrupt();
            return new Answer(null, e, clock.instant());
        } catch (Exception e) {  // IOException (connection refused or reset, HttpTimeoutException), or anything else
            return new Answer(null, e, clock.instant());
        }
    }

    /** Interrupts the attempts still in flight (their answers are errors) and takes no new ones. */
    @Override
    public void close() {
        threads.shutdownNow();
    }
}
