package dev.ikkai.outbox;

import java.io.IOException;
import java.io.InputStream;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.time.Duration;
import java.util.Base64;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.avro.Schema;
import org.apache.avro.SchemaParseException;
import org.apache.kafka.common.config.ConfigException;

/**
 * The two calls of the Confluent Schema Registry REST API the sink makes (Confluent Schema
 * Registry, Apicurio's {@code /apis/ccompat/v7}, Karapace): the writer schema of an id, and the id
 * of a schema registered under a subject. Both are cached: an id never changes its schema.
 *
 * <p>Failures are classified for the caller: {@link Unavailable} when the registry could not answer
 * for this record (connection, timeout, 5xx, 429, and 401/403, which a fixed credential cures) -
 * retry later; {@link Refused} when its answer is about the request itself (404 for an id, a schema
 * that is not Avro, 409/422 on registration) - retrying would give the same answer.
 */
final class SchemaRegistryClient {
    static final String CONTENT_TYPE = "application/vnd.schemaregistry.v1+json";
    private static final ObjectMapper JSON = new ObjectMapper();

    /** The registry did not answer usefully now; the same call may succeed later. */
    static final class Unavailable extends Exception {
        private static final long serialVersionUID = 1L;

        Unavailable(String message, Throwable cause) {
            super(message, cause);
        }
    }

    /** The registry's answer is final for this call: retrying gives the same. */
    static final class Refused extends Exception {
        private static final long serialVersionUID = 1L;
        private final int status;

        Refused(String message, int status) {
            super(message);
            this.status = status;
        }

        int status() {
            return status;
        }
    }

    private final String url;
    private final String shown;  // the URL as printed: credentials redacted (Urls)
    private final String authorization;
    /**
     * The most of a registry answer that is read: a schema is kilobytes; a body past this is not read (the connection
     * closed) and the answer refused.
     */
    static final int MAX_ANSWER_BYTES = 1024 * 1024;
    private final HttpSender http;
    private final Duration timeout;
    private final Map<Integer, Schema> byId = new ConcurrentHashMap<>();

    SchemaRegistryClient(String url, String userInfo, SSLContext ssl, Duration timeout) {
        this.url = url.endsWith("/") ? url.substring(0, url.length() - 1) : url;
        this.shown = Urls.redact(this.url);
        this.authorization = userInfo == null || userInfo.isEmpty() ? null
            : "Basic " + Base64.getEncoder().encodeToString(userInfo.getBytes(StandardCharsets.UTF_8));
        // HttpSender: the timeout covers the whole answer, headers and body (the JDK's own ends with the headers).
        this.http = new HttpSender(timeout, "outbox-registry", java.time.Clock.systemUTC(), MAX_ANSWER_BYTES, ssl);
        this.timeout = timeout;
    }

    /** The registry's URL as printed: credentials in it redacted. */
    String url() {
        return shown;
    }

    /** An SSL context trusting the certificates of a truststore file (JKS or PKCS12). */
    static SSLContext trusting(String key, String location, String password) {
        try (InputStream in = Files.newInputStream(Path.of(location))) {
            KeyStore store = KeyStore.getInstance(KeyStore.getDefaultType());
            store.load(in, password == null ? null : password.toCharArray());
            TrustManagerFactory trust = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
            trust.init(store);
            SSLContext context = SSLContext.getInstance("TLS");
            context.init(null, trust.getTrustManagers(), null);
            return context;
        } catch (IOException | GeneralSecurityException e) {
            throw new ConfigException(key, location, "cannot read the truststore (a JKS or PKCS12 file on every "
                + "Connect worker, with its password in schema.registry.ssl.truststore.password): " + e);
        }
    }

    /** The schema registered with {@code id}: fetched once, then cached. */
    Schema schemaById(int id) throws Unavailable, Refused {
        Schema cached = byId.get(id);
        if (cached != null) {
            return cached;
        }
        JsonNode answer = call("GET", "/schemas/ids/" + id, null, "schema id " + id);
        String type = answer.path("schemaType").asText("AVRO");
        if (!"AVRO".equals(type)) {
            throw new Refused("schema id " + id + " is a " + type + " schema, not Avro", 200);
        }
        Schema schema;
        try {
            schema = new Schema.Parser().parse(answer.path("schema").asText(""));
        } catch (SchemaParseException e) {
            throw new Refused("schema id " + id + " is not a valid Avro schema: " + e.getMessage(), 200);
        }
        byId.put(id, schema);
        return schema;
    }

    /** The id of {@code schema} under {@code subject}, registering it if the subject does not hold it yet. */
    int register(String subject, Schema schema) throws Unavailable, Refused {
        String body;
        try {
            body = JSON.writeValueAsString(Map.of("schema", schema.toString()));
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
        JsonNode answer = call("POST", "/subjects/" + subject + "/versions", body, "register under " + subject);
        if (!answer.path("id").canConvertToInt()) {
            throw new Refused("registering under " + subject + " answered no schema id: " + answer, 200);
        }
        int id = answer.path("id").asInt();
        byId.putIfAbsent(id, schema);
        return id;
    }

    private JsonNode call(String method, String path, String body, String what) throws Unavailable, Refused {
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create(url + path)).timeout(timeout)
            .header("Accept", CONTENT_TYPE)
            .method(method, body == null ? HttpRequest.BodyPublishers.noBody() : HttpRequest.BodyPublishers.ofString(body));
        if (body != null) {
            request.header("Content-Type", CONTENT_TYPE);
        }
        if (authorization != null) {
            request.header("Authorization", authorization);
        }
        HttpSender.Answer answer = http.send(request.build()).join();  // never exceptional; within the timeout
        if (answer.response() == null) {
            if (answer.error() instanceof InterruptedException) {
                Thread.currentThread().interrupt();
                throw new Unavailable("schema registry " + shown + ": " + what + " was interrupted", answer.error());
            }
            throw new Unavailable("schema registry " + shown + ": " + what + " failed: "
                + Bounded.quoted(Urls.redact(String.valueOf(answer.error()))), answer.error());
        }
        HttpResponse<byte[]> response = answer.response();
        int status = response.statusCode();
        if (answer.bodyProblem() != null) {
            String problem = "schema registry " + shown + ": " + what + " returned " + status + ", but " + answer.bodyProblem();
            if (answer.bodyProblem().startsWith("the body was cut")) {
                throw new Refused(problem + ": no schema answer is that long", status);
            }
            throw new Unavailable(problem, null);  // stalled or broken off: the same call may succeed later
        }
        String text = response.body() == null ? "" : new String(response.body(), StandardCharsets.UTF_8);
        String excerpt = text.length() > 300 ? text.substring(0, 300) + "…" : text;
        if (status / 100 == 2) {
            try {
                return JSON.readTree(text);
            } catch (IOException e) {
                throw new Unavailable("schema registry " + shown + ": " + what + " answered " + status + " with no JSON: "
                    + excerpt, e);
            }
        }
        String problem = "schema registry " + shown + ": " + what + " returned " + status + ": " + excerpt;
        // A 404 is about the id only with the API's "not found" code (40403 schema, 40401 subject); a bare 404 is a
        // URL that names no registry API, which a fixed config cures.
        int code = errorCode(text);
        if ((status == 404 && (code == 40403 || code == 40401)) || status == 409 || status == 422) {
            throw new Refused(problem, status);
        }
        throw new Unavailable(problem, null);  // 5xx, 408, 429, 401/403 (a credential to fix), anything else
    }

    private static int errorCode(String text) {
        try {
            return JSON.readTree(text).path("error_code").asInt(0);
        } catch (IOException e) {
            return 0;
        }
    }
}
