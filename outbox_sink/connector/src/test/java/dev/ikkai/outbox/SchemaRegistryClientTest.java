package dev.ikkai.outbox;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import com.sun.net.httpserver.HttpServer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** Issue 44, case 3: a registry answer has a deadline that covers its body, and a size cap. */
class SchemaRegistryClientTest {
    private HttpServer server;
    private final CountDownLatch release = new CountDownLatch(1);

    @BeforeEach
    void start() throws IOException {
        server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
        server.setExecutor(Executors.newCachedThreadPool());
        server.createContext("/stall/", exchange -> {  // headers and 3 bytes of a 1,000-byte body, then nothing
            exchange.sendResponseHeaders(200, 1000);
            exchange.getResponseBody().write("{\"s".getBytes(StandardCharsets.UTF_8));
            exchange.getResponseBody().flush();
            await(release);
            exchange.close();
        });
        server.createContext("/huge/", exchange -> {  // a 200 whose body never ends
            exchange.sendResponseHeaders(200, 0);
            byte[] chunk = new byte[64 * 1024];
            java.util.Arrays.fill(chunk, (byte) ' ');
            try (OutputStream out = exchange.getResponseBody()) {
                for (int i = 0; i < 1024 && release.getCount() > 0; i++) {  // 64 MiB at most
                    out.write(chunk);
                }
            } catch (IOException e) {  // the client hung up: what the test wants
            }
        });
        server.start();
    }

    @AfterEach
    void stop() {
        release.countDown();
        server.stop(0);
    }

    private SchemaRegistryClient client(String prefix) {
        return new SchemaRegistryClient("http://127.0.0.1:" + server.getAddress().getPort() + prefix, null, null,
            Duration.ofSeconds(3));  // a loaded machine connects within it
    }

    @Test
    void aRegistryThatStallsItsBodyIsUnavailableWithinTheTimeout() {
        long start = System.nanoTime();
        SchemaRegistryClient.Unavailable e = assertThrows(SchemaRegistryClient.Unavailable.class, () -> client("/stall").schemaById(7));
        long tookMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
        assertTrue(tookMs < 20_000, "answered in " + tookMs + " ms, not held by the stalled body");
        assertTrue(e.getMessage().contains("within 3000 ms"), e.getMessage());  // the body, or (a loaded machine) the headers
    }

    @Test
    void aRegistryAnswerLongerThanTheCapIsRefusedNotRead() {
        SchemaRegistryClient.Refused e = assertThrows(SchemaRegistryClient.Refused.class, () -> client("/huge").schemaById(7));
        assertTrue(e.getMessage().contains("cut at " + SchemaRegistryClient.MAX_ANSWER_BYTES), e.getMessage());
    }

    private static void await(CountDownLatch latch) {
        try {
            latch.await(60, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
