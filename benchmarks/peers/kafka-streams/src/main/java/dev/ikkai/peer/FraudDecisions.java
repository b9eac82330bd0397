package dev.ikkai.peer;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.avro.AvroRuntimeException;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;

/**
 * spark_jobs/infer/fraud_decisions.py's decide() for one Kafka record: the decision and the outbox requests
 * its action asks for, or a dead letter for a value that does not decode. Pure: no Kafka here.
 */
final class FraudDecisions {
    /** One output record: which sink (decisions, outbox, dlq), key, value, and Kafka headers (dead letters). */
    record Output(String sink, byte[] key, byte[] value, Map<String, String> headers) {}

    private final FraudModel model;
    private final FeatureSnapshots snapshots;
    private final Codec codec;

    FraudDecisions(FraudModel model, FeatureSnapshots snapshots, Codec codec) {
        this.model = model;
        this.snapshots = snapshots;
        this.codec = codec;
    }

    List<Output> decide(byte[] key, byte[] value, String topic, int partition, long offset) throws IOException {
        GenericRecord payment;
        try {
            payment = codec.decodePayment(value);
        } catch (IOException | AvroRuntimeException | NullPointerException e) {
            return List.of(deadLetter(key, value, topic, partition, offset, e));
        }
        String paymentId = payment.get("payment_id").toString();
        String eventId = payment.get("event_id").toString();
        String customerId = payment.get("customer_id").toString();
        String country = payment.get("country").toString();
        long eventTime = (Long) payment.get("event_time");
        double amount = (double) (long) (Long) payment.get("amount_minor");
        boolean cardPresent = (Boolean) payment.get("card_present");

        // fraud_model.feature_frame, value by value
        FeatureSnapshots.Snapshot snap = snapshots.asOf(customerId, eventTime);
        double habit = snap == null || Double.isNaN(snap.avgAmount30d()) ? amount : snap.avgAmount30d();
        String home = snap == null || snap.homeCountry() == null ? country : snap.homeCountry();
        long hour = Math.floorMod(Math.floorDiv(eventTime, 3_600_000L), 24L);
        double[] features = {
            Libm.log1p(amount),
            amount / Math.max(habit, 1.0),
            country.equals(home) ? 0.0 : 1.0,
            cardPresent ? 0.0 : 1.0,
            hour < 5 ? 1.0 : 0.0,
            orZero(snap == null ? Double.NaN : snap.chargebacks365d()),
            Libm.log1p(orZero(snap == null ? Double.NaN : snap.txnCount30d())),
            Libm.log1p(orZero(snap == null ? Double.NaN : snap.accountAgeDays())),
        };
        double score = model.score(features);
        String action = model.action(score);
        String decisionId = Ids.decisionId(paymentId, eventId, model.version);

        Map<String, Double> featureMap = new LinkedHashMap<>();  // the artifact's order, as the Python dict
        for (int i = 0; i < features.length; i++) {
            featureMap.put(FraudModel.FEATURES.get(i), features[i]);
        }
        GenericRecord decision = new GenericData.Record(codec.fraudDecision);
        decision.put("decision_id", decisionId);
        decision.put("payment_id", paymentId);
        decision.put("event_id", eventId);
        decision.put("model_version", model.version);
        decision.put("score", score);
        decision.put("action", action);
        decision.put("features", featureMap);
        decision.put("features_as_of", snap == null ? null : snap.validFrom());
        decision.put("event_time", eventTime);
        decision.put("input_topic", topic);
        decision.put("input_partition", partition);
        decision.put("input_offset", offset);

        byte[] outKey = paymentId.getBytes(StandardCharsets.UTF_8);
        List<Output> out = new ArrayList<>(3);
        out.add(new Output("decisions", outKey, codec.encodeDecision(decision), null));
        for (GenericRecord request : outboxRequests(decisionId, paymentId, customerId, action, score, eventTime)) {
            out.add(new Output("outbox", outKey, codec.encodeRequest(request), null));
        }
        return out;
    }

    private static double orZero(double value) {
        return Double.isNaN(value) ? 0.0 : value;
    }

    /** fraud_decisions.outbox_requests: hold → hold + notify, review → review, approve → none. */
    private List<GenericRecord> outboxRequests(String decisionId, String paymentId, String customerId, String action,
                                               double score, long eventTime) {
        return switch (action) {
            case "hold" -> List.of(
                    request(decisionId, paymentId, eventTime, "payments-api", "/payments/" + paymentId + "/hold",
                            "hold-payment", PyJson.object("decision_id", decisionId, "payment_id", paymentId,
                                    "reason", "fraud-score", "score", score)),
                    request(decisionId, paymentId, eventTime, "notifications-api", "/notifications", "notify-customer",
                            PyJson.object("customer_id", customerId, "payment_id", paymentId,
                                    "template", "payment-held")));
            case "review" -> List.of(
                    request(decisionId, paymentId, eventTime, "payments-api", "/payments/" + paymentId + "/review",
                            "review-payment", PyJson.object("decision_id", decisionId, "payment_id", paymentId)));
            default -> List.of();
        };
    }

    private GenericRecord request(String decisionId, String paymentId, long eventTime, String target, String path,
                                  String effect, String body) {
        GenericRecord r = new GenericData.Record(codec.outboxRequest);
        r.put("decision_id", decisionId);
        r.put("key", paymentId);
        r.put("target", target);
        r.put("path", path);
        r.put("method", "POST");
        r.put("content_type", "application/json");
        r.put("body", ByteBuffer.wrap(body.getBytes(StandardCharsets.UTF_8)));
        r.put("headers", Map.of());
        r.put("created_at", eventTime);
        r.put("model_version", model.version);
        r.put("effect", effect);
        return r;
    }

    /** fraud_decisions._dead_letter; the reason is Java's exception text, not Python's. */
    private Output deadLetter(byte[] key, byte[] value, String topic, int partition, long offset, Exception error)
            throws IOException {
        String reason = String.valueOf(error.getMessage());
        Map<String, String> headers = new LinkedHashMap<>();
        headers.put("ikkai.dlq.stage", "infer");
        headers.put("ikkai.dlq.error_class", "SchemaError");
        headers.put("ikkai.dlq.reason", reason);
        GenericRecord r = new GenericData.Record(codec.deadLetter);
        r.put("stage", "infer");
        r.put("source_topic", topic);
        r.put("source_partition", partition);
        r.put("source_offset", offset);
        r.put("key", key == null ? null : ByteBuffer.wrap(key));
        r.put("value", value == null ? null : ByteBuffer.wrap(value));
        r.put("reason", reason);
        r.put("error_class", "SchemaError");
        r.put("source_timestamp", 0L);
        r.put("headers", headers);
        byte[] outKey = key != null ? key : (topic + "-" + partition + "-" + offset).getBytes(StandardCharsets.UTF_8);
        return new Output("dlq", outKey, codec.encodeDeadLetter(r), headers);
    }
}
