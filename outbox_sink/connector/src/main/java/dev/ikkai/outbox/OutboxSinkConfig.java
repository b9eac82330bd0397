package dev.ikkai.outbox;

import java.time.Duration;
import java.util.HashMap;
import java.util.Map;

import org.apache.kafka.common.config.AbstractConfig;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigDef.Importance;
import org.apache.kafka.common.config.ConfigDef.Type;

/**
 * The connector's settings. Targets are dynamic keys ({@code outbox.target.<alias>.*}) and are
 * parsed by {@link Targets}; everything else is declared here.
 */
public final class OutboxSinkConfig extends AbstractConfig {
    public static final String TARGETS = "outbox.targets";
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
            "Time limit of one HTTP attempt; a timeout is retried like a connection error.")
        .define(BACKOFF_INITIAL, Type.LONG, 500L, ConfigDef.Range.atLeast(1), Importance.MEDIUM,
            "Backoff before the second attempt; doubles per attempt, with jitter.")
        .define(BACKOFF_MAX, Type.LONG, 30_000L, ConfigDef.Range.atLeast(1), Importance.MEDIUM,
            "Upper bound of the exponential backoff (a Retry-After header may ask for longer).")
        .define(RETRY_MAX_DURATION, Type.LONG, 600_000L, ConfigDef.Range.atLeast(0), Importance.HIGH,
            "A record still failing transiently this long after its first attempt is dead-lettered.")
        .define(PUT_MAX_DURATION, Type.LONG, 60_000L, ConfigDef.Range.atLeast(1), Importance.LOW,
            "How long one put() may send before handing control back to the worker (keeps the consumer polling).")
        .define(MAX_IN_FLIGHT, Type.INT, 8, ConfigDef.Range.between(1, 256), Importance.MEDIUM,
            "HTTP requests one task has in flight at once, each for a different key (a key's requests never overlap).")
        .define(EXCERPT_BYTES, Type.INT, 512, ConfigDef.Range.atLeast(0), Importance.LOW,
            "How much of a rejecting response body goes into the dead-letter headers.");

    private final Map<String, Target> targets;

    public OutboxSinkConfig(Map<String, String> originals) {
        super(DEFINITION, originals);
        this.targets = Targets.parse(getList(TARGETS), originals);
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
