package dev.ikkai.outbox;

import java.net.URI;
import java.net.URISyntaxException;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;

import javax.net.ssl.SSLContext;

import org.apache.kafka.common.config.AbstractConfig;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigDef.Importance;
import org.apache.kafka.common.config.ConfigDef.Type;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.config.types.Password;

/**
 * The connector's settings. Targets are dynamic keys ({@code outbox.target.<alias>.*}) and are
 * parsed by {@link Targets}; everything else is declared here.
 */
public final class OutboxSinkConfig extends AbstractConfig {
    /** Connect's setting of a sink's dead-letter topic (the sink writes its dead letters there itself). */
    static final String DLQ_TOPIC = "errors.deadletterqueue.topic.name";

    public static final String TARGETS = Targets.ALIASES;
    public static final String RECEIPTS_TOPIC = "outbox.receipts.topic";
    public static final String RECEIPTS_BOOTSTRAP = "outbox.receipts.bootstrap.servers";
    public static final String RECEIPTS_PRODUCER_PREFIX = "outbox.receipts.producer.";
    public static final String HTTP_CONNECT_TIMEOUT = "outbox.http.connect.timeout.ms";
    public static final String HTTP_REQUEST_TIMEOUT = "outbox.http.request.timeout.ms";
    public static final String BACKOFF_INITIAL = "outbox.retry.backoff.initial.ms";
    public static final String BACKOFF_MAX = "outbox.retry.backoff.max.ms";
    public static final String RETRY_MAX_DURATION = "outbox.retry.max.duration.ms";
    public static final String PUT_MAX_DURATION = "outbox.put.max.duration.ms";
    public static final String EXCERPT_BYTES = "outbox.dlq.response.excerpt.bytes";
    public static final String MAX_IN_FLIGHT = "outbox.max.in.flight.requests";
    public static final String RECEIPTS_FORMAT = "outbox.receipts.format";
    public static final String RESPONSE_MAX_BYTES = "outbox.http.response.max.bytes";
    public static final String IDEMPOTENCY_KEY_FORMAT = "outbox.idempotency.key.format";
    public static final String KEY_FORMAT_STRUCTURED = "structured";
    public static final String KEY_FORMAT_TOKEN = "token";
    public static final String IDEMPOTENCY_KEY_VERSION = "outbox.idempotency.key.version";
    /** How long put() or preCommit() waits for the DLQ to confirm a dead letter before the task fails. */
    static final Duration DLQ_WRITE_TIMEOUT = Duration.ofSeconds(60);
    // The schema registry's keys are named as Confluent's serializers and converters name them.
    public static final String REGISTRY_URL = "schema.registry.url";
    public static final String REGISTRY_USER_INFO = "schema.registry.basic.auth.user.info";
    public static final String REGISTRY_TRUSTSTORE = "schema.registry.ssl.truststore.location";
    public static final String REGISTRY_TRUSTSTORE_PASSWORD = "schema.registry.ssl.truststore.password";
    public static final String SINGLE_OBJECT = "single-object";
    public static final String CONFLUENT = "confluent";
    /** Time limit of one call to the schema registry; a timeout is retried like the registry being down. */
    static final Duration REGISTRY_TIMEOUT = Duration.ofSeconds(10);

    public static final ConfigDef DEFINITION = new ConfigDef()
        .define(TARGETS, Type.LIST, ConfigDef.NO_DEFAULT_VALUE, Importance.HIGH,
            "Allow-listed target aliases. Each alias needs outbox.target.<alias>.url and may set "
                + ".method (default POST), .auth.header and .auth.secret (a config-provider placeholder).")
        .define(RECEIPTS_TOPIC, Type.STRING, "outbox.receipts", Importance.HIGH,
            "Topic for receipts, keyed by decision_id.")
        .define(RECEIPTS_BOOTSTRAP, Type.STRING, ConfigDef.NO_DEFAULT_VALUE, Importance.HIGH,
            "Bootstrap servers of the cluster the receipts topic lives on.")
        .define(HTTP_CONNECT_TIMEOUT, Type.LONG, 5_000L, ConfigDef.Range.atLeast(1), Importance.MEDIUM,
            "TCP connect timeout of one HTTP attempt.")
        .define(HTTP_REQUEST_TIMEOUT, Type.LONG, 30_000L, ConfigDef.Range.atLeast(1), Importance.MEDIUM,
            "Time limit of one HTTP attempt, from sending to the last byte of the response body (headers and body: "
                + "a server that sends its headers and stalls is timed out too); a timeout is retried like a connection error.")
        .define(RESPONSE_MAX_BYTES, Type.INT, 64 * 1024, ConfigDef.Range.between(0, 16 * 1024 * 1024), Importance.LOW,
            "How much of a response body is read: the status decides the outcome, the body is only digested (receipt) "
                + "and quoted (dead letter). A longer body is cut here: the rest is not read and the connection closed.")
        .define(IDEMPOTENCY_KEY_FORMAT, Type.STRING, KEY_FORMAT_STRUCTURED,
            ConfigDef.ValidString.in(KEY_FORMAT_STRUCTURED, KEY_FORMAT_TOKEN), Importance.MEDIUM,
            "How the Idempotency-Key header is written: structured (an RFC 8941 sf-string, \"<hex>\", as the IETF "
                + "Idempotency-Key draft specifies) or token (the bare <hex>, for APIs that expect it).")
        // v1 stays the default of a config that names no version, so upgrading the plugin alone never changes a key
        // an API has already seen; the shipped bundle sets v2 (docs/outbox.md, "Idempotency-Key v2").
        .define(IDEMPOTENCY_KEY_VERSION, Type.STRING, IdempotencyKey.Version.V1.setting(),
            ConfigDef.ValidString.in(IdempotencyKey.Version.V1.setting(), IdempotencyKey.Version.V2.setting()),
            Importance.HIGH, "How the Idempotency-Key is derived: v2 (tells an explicit effect from target + path, "
                + "length-prefixed; the shipped bundle's value) or v1 (decision_id U+001F effect name, where an "
                + "explicit effect api/ok/1 and target api + path /ok/1 share a key). Keep v1 only while an API that "
                + "saw v1 keys still has requests in flight (docs/outbox.md).")
        .define(BACKOFF_INITIAL, Type.LONG, 500L, ConfigDef.Range.atLeast(1), Importance.MEDIUM,
            "Backoff before the second attempt; doubles per attempt, with jitter.")
        .define(BACKOFF_MAX, Type.LONG, 30_000L, ConfigDef.Range.atLeast(1), Importance.MEDIUM,
            "Upper bound of the exponential backoff (a Retry-After header may ask for longer).")
        .define(RETRY_MAX_DURATION, Type.LONG, 600_000L, ConfigDef.Range.atLeast(0), Importance.HIGH,
            "A record still failing transiently this long after its first attempt is dead-lettered.")
        .define(PUT_MAX_DURATION, Type.LONG, 60_000L, ConfigDef.Range.atLeast(1), Importance.LOW,
            "How long one put() may send before handing control back to the worker (keeps the consumer polling).")
        .define(MAX_IN_FLIGHT, Type.INT, 8, ConfigDef.Range.between(1, 256), Importance.MEDIUM,
            "HTTP requests one task has in flight at once per partition, each for a different key (a key's requests "
                + "never overlap): a stalled target holds at most its own partitions' slots.")
        .define(EXCERPT_BYTES, Type.INT, 512, ConfigDef.Range.atLeast(0), Importance.LOW,
            "How much of a rejecting response body goes into the dead-letter headers.")
        .define(RECEIPTS_FORMAT, Type.STRING, SINGLE_OBJECT, ConfigDef.ValidString.in(SINGLE_OBJECT, CONFLUENT),
            Importance.MEDIUM, "How receipts are framed: single-object (C3 01 + the schema's fingerprint) or confluent "
                + "(00 + the registry's schema id, the receipt schema registered under <receipts topic>-value; needs "
                + REGISTRY_URL + "). Requests are read in either framing whatever this says.")
        .define(REGISTRY_URL, Type.STRING, "", Importance.MEDIUM,
            "The schema registry's Confluent-compatible API (e.g. https://registry:8081, or Apicurio's "
                + "http://host:port/apis/ccompat/v7): where the writer schema of a request in the Confluent wire "
                + "format (00 + schema id) is found. Empty: such requests are dead-lettered. No credentials in the URL.")
        .define(REGISTRY_USER_INFO, Type.PASSWORD, null, Importance.MEDIUM,
            "user:password for the registry's HTTP basic authentication (a config-provider placeholder).")
        .define(REGISTRY_TRUSTSTORE, Type.STRING, "", Importance.LOW,
            "A truststore file (JKS or PKCS12) with the CA of an https registry; empty: the JVM's default CAs.")
        .define(REGISTRY_TRUSTSTORE_PASSWORD, Type.PASSWORD, null, Importance.LOW,
            "The truststore's password (a config-provider placeholder).");

    private final Map<String, Target> targets;

    public OutboxSinkConfig(Map<String, String> originals) {
        super(DEFINITION, originals);
        this.targets = Targets.parse(getList(TARGETS), originals);
        checkRegistry(this);
    }

    /** The schema registry settings that only make sense together; a ConfigException names the key to fix. */
    static void checkRegistry(AbstractConfig config) {
        String url = config.getString(REGISTRY_URL).strip();
        if (!url.isEmpty()) {
            URI uri;
            try {
                uri = new URI(url);
            } catch (URISyntaxException e) {
                throw new ConfigException(REGISTRY_URL, Targets.shown(url), "not a URL: " + e.getReason() + " at index "
                    + e.getIndex());
            }
            if (!("http".equals(uri.getScheme()) || "https".equals(uri.getScheme())) || uri.getHost() == null) {
                throw new ConfigException(REGISTRY_URL, Targets.shown(url), "not an http(s) URL with a host: name the registry's "
                    + "Confluent-compatible API, e.g. https://registry:8081");
            }
            if (uri.getUserInfo() != null) {
                throw new ConfigException(REGISTRY_URL, "(hidden: it holds credentials)", "credentials do not belong in "
                    + "the URL (it is shown in logs): put them in " + REGISTRY_USER_INFO + " as a config-provider placeholder");
            }
        }
        String needsUrl = CONFLUENT.equals(config.getString(RECEIPTS_FORMAT)) ? RECEIPTS_FORMAT + "=" + CONFLUENT
            : config.getPassword(REGISTRY_USER_INFO) != null ? REGISTRY_USER_INFO
            : !config.getString(REGISTRY_TRUSTSTORE).isBlank() ? REGISTRY_TRUSTSTORE : null;
        if (url.isEmpty() && needsUrl != null) {
            throw new ConfigException(REGISTRY_URL, "", needsUrl + " is set, so the sink needs the schema registry: set "
                + REGISTRY_URL + " to its Confluent-compatible API");
        }
        Password userInfo = config.getPassword(REGISTRY_USER_INFO);
        if (userInfo != null && !userInfo.value().contains(":")) {
            throw new ConfigException(REGISTRY_USER_INFO, userInfo, "expected user:password (the value is not shown)");
        }
    }

    /** A client of the configured schema registry, or null when none is configured. */
    SchemaRegistryClient schemaRegistry() {
        String url = getString(REGISTRY_URL).strip();
        if (url.isEmpty()) {
            return null;
        }
        Password userInfo = getPassword(REGISTRY_USER_INFO);
        Password trustPassword = getPassword(REGISTRY_TRUSTSTORE_PASSWORD);
        String truststore = getString(REGISTRY_TRUSTSTORE);
        SSLContext ssl = truststore.isBlank() ? null : SchemaRegistryClient.trusting(REGISTRY_TRUSTSTORE, truststore,
            trustPassword == null ? null : trustPassword.value());
        return new SchemaRegistryClient(url, userInfo == null ? null : userInfo.value(), ssl, REGISTRY_TIMEOUT);
    }

    /** The codec of this configuration: a registry if one is named, receipts in the chosen framing. */
    OutboxCodec codec() {
        return new OutboxCodec(schemaRegistry(), CONFLUENT.equals(getString(RECEIPTS_FORMAT)),
            getString(RECEIPTS_TOPIC) + "-value");
    }

    HttpRequests.KeyFormat keyFormat() {
        return KEY_FORMAT_TOKEN.equals(getString(IDEMPOTENCY_KEY_FORMAT)) ? HttpRequests.KeyFormat.TOKEN
            : HttpRequests.KeyFormat.STRUCTURED;
    }

    /** The dead-letter topic Connect's own settings name ({@value #DLQ_TOPIC}); empty when unset. */
    String deadLetterTopic() {
        return originalsStrings().getOrDefault(DLQ_TOPIC, "").strip();
    }

    /** The connector's name (Connect puts it in every task's config), as dead letters name their writer. */
    String connectorName() {
        return originalsStrings().getOrDefault("name", "outbox-sink");
    }

    IdempotencyKey.Version keyVersion() {
        return IdempotencyKey.Version.of(getString(IDEMPOTENCY_KEY_VERSION));
    }

    public Map<String, Target> targets() {
        return targets;
    }

    public Duration duration(String key) {
        return Duration.ofMillis(getLong(key));
    }

    /** Producer settings for receipts: our safe defaults, then anything under outbox.receipts.producer.*. */
    public Map<String, Object> receiptProducerConfig() {
        Map<String, Object> config = new HashMap<>();
        config.put("bootstrap.servers", getString(RECEIPTS_BOOTSTRAP));
        config.put("enable.idempotence", "true");
        config.put("acks", "all");
        config.put("max.in.flight.requests.per.connection", "5");
        // Receipts are flushed before every offset commit (preCommit), so a longer linger costs no
        // safety, only up to 20 ms before a receipt is visible; at ~1,000 receipts/s it cut the
        // broker's CPU by about 40% against 5 ms (BENCHMARKS.md, the outbox sink).
        config.put("linger.ms", "20");
        config.putAll(originalsWithPrefix(RECEIPTS_PRODUCER_PREFIX));
        config.put("key.serializer", "org.apache.kafka.common.serialization.ByteArraySerializer");
        config.put("value.serializer", "org.apache.kafka.common.serialization.ByteArraySerializer");
        return config;
    }
}
