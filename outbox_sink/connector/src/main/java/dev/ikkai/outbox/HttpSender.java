package dev.ikkai.outbox;

import java.io.ByteArrayOutputStream;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.HttpTimeoutException;
import java.nio.ByteBuffer;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Flow;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
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
 *
 * <p>Bounded in time and size: the request's timeout is the deadline of the whole exchange, headers
 * AND body (the JDK's own request timeout ends when the headers arrive, JDK-8208693), enforced by a
 * timer that stops the body and interrupts the wait, so a server that sends headers and stalls is a
 * timeout like any other; and at most {@code maxBodyBytes} of a body are read ({@link LimitedBody}).
 */
final class HttpSender implements AutoCloseable {
    /**
     * How an attempt ended: a response (its body cut at the byte limit), or the error that stands for one
     * (connection, timeout), and when.
     */
    record Answer(HttpResponse<byte[]> response, Throwable error, Instant at) {
    }

    private final HttpClient http;
    private final ExecutorService threads;
    private final ScheduledThreadPoolExecutor deadlines;
    private final Clock clock;
    private final int maxBodyBytes;

    HttpSender(Duration connectTimeout, String threadName, Clock clock) {
        this(connectTimeout, threadName, clock, 64 * 1024);
    }

    HttpSender(Duration connectTimeout, String threadName, Clock clock, int maxBodyBytes) {
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
        this.deadlines = new ScheduledThreadPoolExecutor(1, runnable -> {
            Thread thread = new Thread(runnable, threadName + "-deadlines");
            thread.setDaemon(true);
            return thread;
        });
        deadlines.setRemoveOnCancelPolicy(true);
        this.clock = clock;
        this.maxBodyBytes = maxBodyBytes;
    }

    /**
     * Starts the request; its answer, with the time it came, whatever happens (an error is an answer too).
     * The request's timeout is the deadline of the whole exchange, headers and body.
     */
    CompletableFuture<Answer> send(HttpRequest request) {
        return CompletableFuture.supplyAsync(() -> attempt(request), threads);
    }

    private Answer attempt(HttpRequest request) {
        Exchange exchange = new Exchange(Thread.currentThread());
        Duration deadline = request.timeout().orElse(null);
        ScheduledFuture<?> timer = deadline == null ? null
            : deadlines.schedule(exchange::expire, deadline.toNanos(), TimeUnit.NANOSECONDS);
        try {
            HttpResponse<byte[]> response = http.send(request, info -> exchange.body(new LimitedBody(maxBodyBytes)));
            return new Answer(response, null, clock.instant());
        } catch (InterruptedException e) {
            if (exchange.expired()) {  // our own deadline, not a close(): a timeout like any other
                return new Answer(null, timeout(deadline), clock.instant());
            }
            Thread.currentThread().interrupt();  // closed: nobody waits for this answer any more
            return new Answer(null, e, clock.instant());
        } catch (Exception e) {  // IOException (connection refused or reset, HttpTimeoutException), or anything else
            return new Answer(null, exchange.expired() ? timeout(deadline) : e, clock.instant());
        } finally {
            if (timer != null) {
                timer.cancel(false);
            }
            if (exchange.finish()) {
                Thread.interrupted();  // the deadline's interrupt came after the answer: not this thread's next attempt's
            }
        }
    }

    private static HttpTimeoutException timeout(Duration deadline) {
        return new HttpTimeoutException("no complete answer (headers and body) within " + deadline.toMillis() + " ms");
    }

    /** Interrupts the attempts still in flight (their answers are errors) and takes no new ones. */
    @Override
    public void close() {
        threads.shutdownNow();
        deadlines.shutdownNow();
    }

    /** One attempt's state shared with its deadline timer. */
    private static final class Exchange {
        private final Thread sender;
        private LimitedBody body;
        private boolean expired;
        private boolean finished;

        Exchange(Thread sender) {
            this.sender = sender;
        }

        synchronized LimitedBody body(LimitedBody body) {
            this.body = body;
            if (expired) {
                body.abort();
            }
            return body;
        }

        /** The deadline passed: the body stops (the JDK's own timeout ends with the headers), the wait too. */
        synchronized void expire() {
            if (finished) {
                return;
            }
            expired = true;
            if (body != null) {
                body.abort();
            }
            sender.interrupt();
        }

        synchronized boolean expired() {
            return expired;
        }

        /** The attempt is over; true if the deadline interrupted the thread (so the flag may still be set). */
        synchronized boolean finish() {
            finished = true;
            return expired;
        }
    }

    /**
     * A body read up to {@code limit} bytes: the first ones are kept, then the subscription is cancelled
     * (the rest is never read, the connection closed) and the body is what was kept.
     */
    static final class LimitedBody implements HttpResponse.BodySubscriber<byte[]> {
        private final int limit;
        private final CompletableFuture<byte[]> result = new CompletableFuture<>();
        private final ByteArrayOutputStream kept = new ByteArrayOutputStream();
        private Flow.Subscription subscription;
        private boolean aborted;

        LimitedBody(int limit) {
            this.limit = limit;
        }

        @Override
        public CompletionStage<byte[]> getBody() {
            return result;
        }

        @Override
        public synchronized void onSubscribe(Flow.Subscription subscription) {
            this.subscription = subscription;
            if (aborted) {
                subscription.cancel();
            } else {
                subscription.request(1);
            }
        }

        @Override
        public void onNext(List<ByteBuffer> buffers) {
            Flow.Subscription s;
            synchronized (this) {
                if (result.isDone()) {
                    return;
                }
                for (ByteBuffer buffer : buffers) {
                    int take = Math.min(buffer.remaining(), limit - kept.size());
                    byte[] bytes = new byte[take];
                    buffer.get(bytes);
                    kept.writeBytes(bytes);
                    if (kept.size() >= limit && buffer.hasRemaining()) {
                        subscription.cancel();
                        result.complete(kept.toByteArray());
                        return;
                    }
                }
                s = subscription;
            }
            s.request(1);
        }

        @Override
        public synchronized void onError(Throwable throwable) {
            result.completeExceptionally(throwable);
        }

        @Override
        public synchronized void onComplete() {
            result.complete(kept.toByteArray());
        }

        /** The deadline passed: stop reading, the body is a timeout. */
        synchronized void abort() {
            aborted = true;
            if (subscription != null) {
                subscription.cancel();
            }
            result.completeExceptionally(new HttpTimeoutException("the response body did not end in time"));
        }
    }
}
