package dev.ikkai.peer;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.message.BinaryMessageDecoder;
import org.apache.avro.message.BinaryMessageEncoder;

/**
 * ikkai/contract/codec.py's single-object encoding with the same catalog folder: C3 01, the CRC-64-AVRO
 * fingerprint of the writer schema, the Avro binary body. Records are written with each schema's latest
 * version (as the codec's encode without a version); payments are read from any catalogued version.
 */
final class Codec {
    private static final Pattern VERSION_FILE = Pattern.compile("v([1-9][0-9]*)\\.avsc");

    final Schema paymentEvent;
    final Schema fraudDecision;
    final Schema outboxRequest;
    final Schema deadLetter;
    private final BinaryMessageDecoder<GenericRecord> payments;
    private final BinaryMessageEncoder<GenericRecord> decisions;
    private final BinaryMessageEncoder<GenericRecord> requests;
    private final BinaryMessageEncoder<GenericRecord> deadLetters;

    Codec(Path schemas) throws IOException {
        List<Schema> paymentVersions = versions(schemas, "payment_event");
        paymentEvent = paymentVersions.get(paymentVersions.size() - 1);
        fraudDecision = latest(schemas, "fraud_decision");
        outboxRequest = latest(schemas, "outbox_request");
        deadLetter = latest(schemas, "dead_letter");
        payments = new BinaryMessageDecoder<>(GenericData.get(), paymentEvent);
        for (Schema writer : paymentVersions) {
            payments.addSchema(writer);
        }
        decisions = new BinaryMessageEncoder<>(GenericData.get(), fraudDecision);
        requests = new BinaryMessageEncoder<>(GenericData.get(), outboxRequest);
        deadLetters = new BinaryMessageEncoder<>(GenericData.get(), deadLetter);
    }

    private static Schema latest(Path schemas, String name) throws IOException {
        List<Schema> all = versions(schemas, name);
        return all.get(all.size() - 1);
    }

    /** schemas/<name>/v<N>.avsc in version order, each parsed on its own (the versions share one full name). */
    private static List<Schema> versions(Path schemas, String name) throws IOException {
        try (Stream<Path> files = Files.list(schemas.resolve(name))) {
            return files.filter(p -> VERSION_FILE.matcher(p.getFileName().toString()).matches())
                    .sorted((a, b) -> Integer.compare(version(a), version(b)))
                    .map(p -> {
                        try {
                            return new Schema.Parser().parse(p.toFile());
                        } catch (IOException e) {
                            throw new IllegalStateException(p + ": " + e.getMessage(), e);
                        }
                    })
                    .toList();
        }
    }

    private static int version(Path file) {
        Matcher m = VERSION_FILE.matcher(file.getFileName().toString());
        if (!m.matches()) {
            throw new IllegalArgumentException(file.toString());
        }
        return Integer.parseInt(m.group(1));
    }

    GenericRecord decodePayment(byte[] data) throws IOException {
        return payments.decode(data);
    }

    byte[] encodeDecision(GenericRecord record) throws IOException {
        return bytes(decisions.encode(record));
    }

    byte[] encodeRequest(GenericRecord record) throws IOException {
        return bytes(requests.encode(record));
    }

    byte[] encodeDeadLetter(GenericRecord record) throws IOException {
        return bytes(deadLetters.encode(record));
    }

    private static byte[] bytes(ByteBuffer buffer) {
        byte[] out = new byte[buffer.remaining()];
        buffer.get(out);
        return out;
    }
}
