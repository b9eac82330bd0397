package dev.ikkai.peer;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.processor.api.RecordMetadata;

/**
 * The peer: events.payments → decisions + outbox requests (+ dead letters), one Kafka Streams processor.
 *
 * <pre>
 *   java --add-modules jdk.incubator.foreign --enable-native-access=ALL-UNNAMED -cp JAR:DEPS/* dev.ikkai.peer.PeerApp \
 *     --bootstrap HOST:PORT --application-id ID --input T --decisions T --outbox T --dlq T \
 *     --model model.json --features customer_features.csv --schemas ikkai/contract/schemas \
 *     [--guarantee exactly_once_v2|at_least_once] [--threads 2] [--math libm|java]
 * </pre>
 *
 * Prints "peer: model VERSION, guarantee G" once the topology is built and "peer: running" when Kafka Streams
 * reaches RUNNING (partitions assigned, about to fetch) on stderr; stops cleanly on SIGTERM.
 */
public final class PeerApp {
    private PeerApp() {}

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = parse(argv);
        Libm.use(args.getOrDefault("math", "libm"));
        FraudModel model = FraudModel.load(Path.of(args.get("model")));
        FraudDecisions decisions = new FraudDecisions(
                model, FeatureSnapshots.load(Path.of(args.get("features"))), new Codec(Path.of(args.get("schemas"))));
        String guarantee = args.getOrDefault("guarantee", StreamsConfig.EXACTLY_ONCE_V2);

        Topology topology = new Topology();
        topology.addSource("events", Serdes.ByteArray().deserializer(), Serdes.ByteArray().deserializer(),
                args.get("input"));
        topology.addProcessor("infer", () -> new Infer(decisions), "events");
        for (String sink : new String[] {"decisions", "outbox", "dlq"}) {
            topology.addSink(sink, args.get(sink), Serdes.ByteArray().serializer(), Serdes.ByteArray().serializer(),
                    "infer");
        }

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args.get("application-id"));
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("bootstrap"));
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, args.getOrDefault("threads", "2"));
        props.put(StreamsConfig.STATE_DIR_CONFIG, args.getOrDefault("state-dir", "/tmp/ikkai-peer-state"));
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        // ikkai's rule 3 in both modes (exactly_once_v2 sets read_committed itself; at_least_once would not)
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.ISOLATION_LEVEL_CONFIG), "read_committed");
        props.put(StreamsConfig.producerPrefix(ProducerConfig.ACKS_CONFIG), "all");
        props.put(StreamsConfig.producerPrefix(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG), "true");
        if (args.containsKey("commit-interval-ms")) {
            props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, args.get("commit-interval-ms"));
        }

        KafkaStreams streams = new KafkaStreams(topology, props);
        CountDownLatch stopped = new CountDownLatch(1);
        AtomicBoolean failed = new AtomicBoolean(false);
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING && before == KafkaStreams.State.REBALANCING) {
                System.err.println("peer: running");
            }
            if (now == KafkaStreams.State.ERROR) {
                failed.set(true);
                stopped.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(e -> {
            System.err.println("peer: failed: " + e);
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse
                    .SHUTDOWN_CLIENT;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(15));
            stopped.countDown();
        }, "peer-shutdown"));
        System.err.println("peer: model " + model.version + ", guarantee " + guarantee);
        streams.start();
        stopped.await();
        streams.close(Duration.ofSeconds(15));
        System.exit(failed.get() ? 1 : 0);
    }

    /** The one processor: every input record → its outputs, to the sink named by each. */
    static final class Infer implements Processor<byte[], byte[], byte[], byte[]> {
        private final FraudDecisions decisions;
        private ProcessorContext<byte[], byte[]> context;

        Infer(FraudDecisions decisions) {
            this.decisions = decisions;
        }

        @Override
        public void init(ProcessorContext<byte[], byte[]> context) {
            this.context = context;
        }

        @Override
        public void process(Record<byte[], byte[]> record) {
            RecordMetadata where = context.recordMetadata().orElseThrow();
            try {
                for (FraudDecisions.Output out : decisions.decide(
                        record.key(), record.value(), where.topic(), where.partition(), where.offset())) {
                    RecordHeaders headers = new RecordHeaders();
                    if (out.headers() != null) {
                        out.headers().forEach((k, v) -> headers.add(k, v.getBytes(StandardCharsets.UTF_8)));
                    }
                    context.forward(new Record<>(out.key(), out.value(), record.timestamp(), headers), out.sink());
                }
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
    }

    private static Map<String, String> parse(String[] argv) {
        Map<String, String> args = new HashMap<>();
        for (int i = 0; i < argv.length; i++) {
            if (!argv[i].startsWith("--") || i + 1 == argv.length) {
                throw new IllegalArgumentException("expected --name value pairs, got " + argv[i]);
            }
            args.put(argv[i].substring(2), argv[++i]);
        }
        for (String required : new String[] {"bootstrap", "application-id", "input", "decisions", "outbox", "dlq",
                "model", "features", "schemas"}) {
            if (!args.containsKey(required)) {
                throw new IllegalArgumentException("missing --" + required);
            }
        }
        return args;
    }
}
