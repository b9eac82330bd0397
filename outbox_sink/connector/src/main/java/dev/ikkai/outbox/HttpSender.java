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
     * How an attempt ended: a response, or the error that stands for one (connection, timeout, no host), and when.
     * Once the status line and headers are in, the answer is a response whatever its body does next (issue 44: a 2xx
     * whose body stalls was applied): {@code bodyProblem} then says what the body did (cut at the byte limit, not
     * ended by the deadline, broken off) and {@code response.body()} holds what was read; null when it ended normally.
     */
    record Answer(HttpResponse<byte[]> response, Throwable error, Instant at, String bodyProblem) {
        Answer(HttpResponse<byte[]> response, Throwable error, Instant at) {
            this(response, error, at, null);
        }
    }

    /**
     * How long an idle connection stays open, and how many idle connections the JVM's HTTP clients keep in all (the
     * least recently used one is closed past it). The JDK's defaults keep every connection 1,200 s with no cap: at
     * 10,000 targets that was 10,022 open descriptors and ~230 MB of heap (issue 44). The JDK reads both once, as the
     * system properties jdk.httpclient.keepalive.timeout and jdk.httpclient.connectionPoolSize, when its first
     * client is built; the sink sets them only when the worker's JVM does not (-D... in KAFKA_OPTS wins). They are
     * JVM-wide: other plugins' java.net.http clients in the worker get the same bounds. Idle connections per host are
     * bounded by the requests in flight to it (outbox.max.in.flight.requests per partition): the JDK has no such cap.
     */
    static final long IDLE_TIMEOUT_SECONDS = 30;
    static final int IDLE_CONNECTIONS = 256;
    static final String KEEPALIVE_PROPERTY = "jdk.httpclient.keepalive.timeout";
    static final String POOL_PROPERTY = "jdk.httpclient.connectionPoolSize";

    static {
        if (System.getProperty(KEEPALIVE_PROPERTY) == null) {
            System.setProperty(KEEPALIVE_PROPERTY, String.valueOf(IDLE_TIMEOUT_SECONDS));
        }
        if (System.getProperty(POOL_PROPERTY) == null) {
            System.setProperty(POOL_PROPERTY, String.valueOf(IDLE_CONNECTIONS));
        }
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
        this(connectTimeout, threadName, clock, maxBodyBytes, null);
    }

    /** {@code ssl}: the TLS context of https URLs (null: the JVM's default CAs). */
    HttpSender(Duration connectTimeout, String threadName, Clock clock, int maxBodyBytes, javax.net.ssl.SSLContext ssl) {
        HttpClient.Builder builder = HttpClient.newBuilder()
            .connectTimeout(connectTimeout)
            .followRedirects(HttpClient.Redirect.NEVER)
            .version(HttpClient.Version.HTTP_1_1);
        if (ssl != null) {
            builder.sslContext(ssl);
        }
        this.http = builder.build();
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
        deadlines.setKeepAliveTime(60, TimeUnit.SECONDS);
        deadlines.allowCoreThreadTimeOut(true);  // a sender nobody closes (the registry's) leaves no thread behind
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
            HttpResponse<byte[]> response = http.send(request, info -> exchange.body(new LimitedBody(maxBodyBytes), info));
            LimitedBody body = exchange.body();
            return new Answer(response, null, clock.instant(), body != null && body.cut()
                ? "the body was cut at " + maxBodyBytes + " bytes (the rest was not read)" : null);
        } catch (InterruptedException e) {
            if (exchange.expired()) {  // our own deadline, not a close(): a timeout like any other
                return answered(request, exchange, timeout(deadline), "the body did not end within " + deadline.toMillis() + " ms");
            }
            Thread.currentThread().interrupt();  // closed: nobody waits for this answer any more
            return new Answer(null, e, clock.instant());
        } catch (Exception e) {  // IOException (connection refused or reset, HttpTimeoutException), or anything else
            if (exchange.expired()) {
                return answered(request, exchange, timeout(deadline), "the body did not end within " + deadline.toMillis() + " ms");
            }
            return answered(request, exchange, named(request, e), "the body broke off: " + Bounded.quoted(String.valueOf(e)));
        } finally {
            if (timer != null) {
                timer.cancel(false);
            }
            if (exchange.finish()) {
                Thread.interrupted();  // the deadline's interrupt came after the answer: not this thread's next attempt's
            }
        }
    }

    /**
     * An attempt that failed: a response all the same when its status line and headers came (what was read of the body,
     * and what went wrong with it), else the error.
     */
    private Answer answered(HttpRequest request, Exchange exchange, Throwable error, String bodyProblem) {
        HttpResponse.ResponseInfo info = exchange.info();
        if (info == null) {
            return new Answer(null, error, clock.instant());
        }
        byte[] read = exchange.body() == null ? new byte[0] : exchange.body().kept();
        return new Answer(new Received(info, request, read), null, clock.instant(),
            bodyProblem + " (" + read.length + " bytes read)");
    }

    /**
     * A failure that says what failed: a host that does not resolve is named (the JDK's ConnectException carries no
     * message, only an UnresolvedAddressException).
     */
    static Throwable named(HttpRequest request, Throwable e) {
        for (Throwable cause = e; cause != null; cause = cause.getCause()) {
            if (cause instanceof java.nio.channels.UnresolvedAddressException || cause instanceof java.net.UnknownHostException) {
                java.net.ConnectException named = new java.net.ConnectException("cannot resolve host '"
                    + Bounded.quoted(request.uri().getHost()) + "' (DNS): check the target's URL and the worker's resolver");
                named.initCause(e);
                return named;
            }
        }
        return e;
    }

    /** A response whose status line and headers came, with what was read of its body. */
    record Received(HttpResponse.ResponseInfo info, HttpRequest request, byte[] body) implements HttpResponse<byte[]> {
        @Override
        public int statusCode() {
            return info.statusCode();
        }

        @Override
        public java.net.http.HttpHeaders headers() {
            return info.headers();
        }

        @Override
        public java.util.Optional<HttpResponse<byte[]>> previousResponse() {
            return java.util.Optional.empty();
        }

        @Override
        public java.util.Optional<javax.net.ssl.SSLSession> sslSession() {
            return java.util.Optional.empty();
        }

        @Override
        public java.net.URI uri() {
            return request.uri();
        }

        @Override
        public HttpClient.Version version() {
            return info.version();
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
        private HttpResponse.ResponseInfo info;
        private boolean expired;
        private boolean finished;

        Exchange(Thread sender) {
            this.sender = sender;
        }

        synchronized LimitedBody body(LimitedBody body, HttpResponse.ResponseInfo info) {
            this.body = body;
            this.info = info;
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

        synchronized LimitedBody body() {
            return body;
        }

        synchronized HttpResponse.ResponseInfo info() {
            return info;
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
        private boolean cut;

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
                        cut = true;
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

        /** Whether the body went on past the limit (the rest was not read). */
        synchronized boolean cut() {
            return cut;
        }

        /** What was read so far. */
        synchronized byte[] kept() {
            return kept.toByteArray();
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
