package dev.ikkai.outbox;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.ConnectException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.URI;
import java.net.http.HttpRequest;
import java.nio.charset.StandardCharsets;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneOffset;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import com.sun.net.httpserver.HttpServer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** Every attempt ends in an answer, on the sender's own reused threads, never queued behind another. */
class HttpSenderTest {
    private static final Instant NOW = Instant.parse("2026-01-01T00:00:00Z");

    private HttpServer server;
    /** Counted down by /hang requests when they arrive; they then hang until {@link #release}. */
    private final CountDownLatch hanging = new CountDownLatch(2);
    private final CountDownLatch release = new CountDownLatch(1);
    private HttpSender sender;

    @BeforeEach
    void start() throws IOException {
        server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
        server.setExecutor(Executors.newCachedThreadPool());
        server.createContext("/", exchange -> {
            String path = exchange.getRequestURI().getPath();
            if (path.startsWith("/hang")) {
                hanging.countDown();
                await(release);
            }
            if (path.startsWith("/moved")) {
                exchange.getResponseHeaders().add("Location", "/elsewhere");
                exchange.sendResponseHeaders(301, -1);
            } else {
                byte[] body = path.getBytes(StandardCharsets.UTF_8);
                exchange.sendResponseHeaders(201, body.length);
                exchange.getResponseBody().write(body);
            }
            exchange.close();
        });
        server.start();
        sender = new HttpSender(Duration.ofSeconds(5), "test-http", Clock.fixed(NOW, ZoneOffset.UTC));
    }

    @AfterEach
    void stop() {
        release.countDown();
        sender.close();
        server.stop(0);
        ((ExecutorService) server.getExecutor()).shutdownNow();
    }

    private HttpRequest post(String path) {
        return HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + server.getAddress().getPort() + path))
            .timeout(Duration.ofSeconds(10)).POST(HttpRequest.BodyPublishers.ofString("{}")).build();
    }

    private static void await(CountDownLatch latch) {
        try {
            latch.await(10, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    @Test
    void aResponseIsAnAnswerWithItsBodyAndTime() {
        HttpSender.Answer answer = sender.send(post("/payments/1")).join();

        assertEquals(201, answer.response().statusCode());
        assertEquals("/payments/1", new String(answer.response().body(), StandardCharsets.UTF_8));
        assertNull(answer.error());
        assertEquals(NOW, answer.at());
    }

    @Test
    void aRedirectIsAnsweredAsItIsNeverFollowed() {
        assertEquals(301, sender.send(post("/moved")).join().response().statusCode());
    }

    @Test
    void aRefusedConnectionIsAnAnswerNotAFailedFuture() throws IOException {
        int closedPort;
        try (ServerSocket socket = new ServerSocket(0)) {
            closedPort = socket.getLocalPort();
        }
        HttpRequest request = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + closedPort + "/x"))
            .POST(HttpRequest.BodyPublishers.noBody()).build();

        CompletableFuture<HttpSender.Answer> future = sender.send(request);
        HttpSender.Answer answer = future.join();

        assertFalse(future.isCompletedExceptionally());
        assertNull(answer.response());
        assertInstanceOf(ConnectException.class, answer.error());
    }

    @Test
    void hangingAttemptsDoNotQueueTheNextOnes() {
        List<CompletableFuture<HttpSender.Answer>> hung = List.of(sender.send(post("/hang/1")), sender.send(post("/hang/2")));
        await(hanging);

        HttpSender.Answer next = sender.send(post("/payments/3")).orTimeout(5, TimeUnit.SECONDS).join();

        assertEquals(201, next.response().statusCode(), "answered while two attempts still hang");
        assertTrue(hung.stream().noneMatch(CompletableFuture::isDone));
        release.countDown();
        hung.forEach(f -> assertEquals(201, f.orTimeout(5, TimeUnit.SECONDS).join().response().statusCode()));
    }

    @Test
    void closingInterruptsAHangingAttemptWhichThenEndsInAnError() {
        CompletableFuture<HttpSender.Answer> hung = sender.send(post("/hang/1"));
        sender.send(post("/hang/2"));
        await(hanging);

        sender.close();

        HttpSender.Answer answer = hung.orTimeout(5, TimeUnit.SECONDS).join();
        assertNull(answer.response());
        assertInstanceOf(InterruptedException.class, answer.error());
    }
}
