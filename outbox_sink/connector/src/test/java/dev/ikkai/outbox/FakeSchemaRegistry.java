package dev.ikkai.outbox;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.EncoderFactory;

/**
 * A schema registry for unit tests: the two Confluent REST calls the sink makes, in memory, on a
 * loopback port, under {@code /ccompat} (any other path answers a bare 404, as a wrong URL would).
 * {@link #failWith} makes every call answer that status instead; {@link #calls} records them.
 */
final class FakeSchemaRegistry implements AutoCloseable {
    private static final ObjectMapper JSON = new ObjectMapper();

    final List<String> calls = Collections.synchronizedList(new ArrayList<>());
    final Map<String, List<Integer>> subjects = new ConcurrentHashMap<>();
    volatile int failWith;
    volatile String lastAuthorization;
    private final Map<Integer, String> schemas = new ConcurrentHashMap<>();
    private final Map<String, Integer> ids = new ConcurrentHashMap<>();
    private final AtomicInteger nextId = new AtomicInteger(41);
    private final HttpServer server;

    FakeSchemaRegistry() throws IOException {
        server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
        server.createContext("/", this::handle);
        server.start();
    }

    String url() {
        return "http://127.0.0.1:" + server.getAddress().getPort() + "/ccompat";
    }

    /** Registers {@code schema} as a producer would; its id. */
    int register(Schema schema) {
        String text = schema.toString();
        int id = ids.computeIfAbsent(text, t -> nextId.incrementAndGet());
        schemas.put(id, text);
        return id;
    }

    /** {@code record} in the Confluent wire format under {@code id}, written with {@code writer}. */
    static byte[] confluent(int id, Schema writer, GenericRecord record) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        out.write(0);
        out.writeBytes(ByteBuffer.allocate(4).putInt(id).array());
        BinaryEncoder encoder = EncoderFactory.get().binaryEncoder(out, null);
        try {
            new GenericDatumWriter<GenericRecord>(writer).write(record, encoder);
            encoder.flush();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return out.toByteArray();
    }

    Schema schema(int id) {
        return new Schema.Parser().parse(schemas.get(id));
    }

    private void handle(HttpExchange exchange) throws IOException {
        String method = exchange.getRequestMethod();
        String path = exchange.getRequestURI().getPath();
        calls.add(method + " " + path);
        lastAuthorization = exchange.getRequestHeaders().getFirst("Authorization");
        if (failWith != 0) {
            answer(exchange, failWith, "{\"error_code\":" + failWith + "01,\"message\":\"failing on purpose\"}");
            return;
        }
        if (method.equals("GET") && path.startsWith("/ccompat/schemas/ids/")) {
            String text = schemas.get(Integer.parseInt(path.substring("/ccompat/schemas/ids/".length())));
            if (text == null) {
                answer(exchange, 404, "{\"error_code\":40403,\"message\":\"Schema not found\"}");
            } else {
                answer(exchange, 200, JSON.writeValueAsString(Map.of("schema", text)));
            }
        } else if (method.equals("POST") && path.startsWith("/ccompat/subjects/") && path.endsWith("/versions")) {
            String subject = path.substring("/ccompat/subjects/".length(), path.length() - "/versions".length());
            String text = JSON.readTree(exchange.getRequestBody()).path("schema").asText();
            int id = register(new Schema.Parser().parse(text));
            subjects.computeIfAbsent(subject, s -> Collections.synchronizedList(new ArrayList<>())).add(id);
            answer(exchange, 200, "{\"id\":" + id + "}");
        } else {
            answer(exchange, 404, "<html>no such page</html>");
        }
    }

    private static void answer(HttpExchange exchange, int status, String body) throws IOException {
        byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
        exchange.getResponseHeaders().add("Content-Type", SchemaRegistryClient.CONTENT_TYPE);
        exchange.sendResponseHeaders(status, bytes.length);
        exchange.getResponseBody().write(bytes);
        exchange.close();
    }

    @Override
    public void close() {
        server.stop(0);
    }
}
