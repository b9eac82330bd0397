package dev.ikkai.peer;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

/**
 * spark_jobs/model/fraud_model.py's FraudModel: the same artifact, version and arithmetic.
 * The score accumulates feature by feature in the artifact's order, z = z + w * ((x - mean) / scale),
 * then 1 / (1 + exp(-z)): the same IEEE operations in the same order as numpy's, so the same bits.
 */
final class FraudModel {
    static final List<String> FEATURES = List.of(
            "log_amount", "amount_ratio", "foreign", "card_not_present", "night", "chargebacks_365d",
            "log_txn_count_30d", "log_account_age_days");

    final String version;
    final double[] mean;
    final double[] scale;
    final double[] coef;
    final double intercept;
    final double reviewAt;
    final double holdAt;

    private FraudModel(String version, double[] mean, double[] scale, double[] coef, double intercept,
                       double reviewAt, double holdAt) {
        this.version = version;
        this.mean = mean;
        this.scale = scale;
        this.coef = coef;
        this.intercept = intercept;
        this.reviewAt = reviewAt;
        this.holdAt = holdAt;
    }

    static FraudModel load(Path path) throws IOException {
        byte[] data = Files.readAllBytes(path);
        // numbers as BigDecimal, then the nearest double: what Python's float() of the same text gives
        ObjectMapper mapper = new ObjectMapper().enable(DeserializationFeature.USE_BIG_DECIMAL_FOR_FLOATS);
        JsonNode doc = mapper.readTree(data);
        for (int i = 0; i < FEATURES.size(); i++) {
            if (!doc.get("features").get(i).asText().equals(FEATURES.get(i))) {
                throw new IOException(path + ": expects features " + doc.get("features") + ", this code computes " + FEATURES);
            }
        }
        return new FraudModel(
                "fraud-lr-" + Ids.sha256Hex(data).substring(0, 16),
                doubles(doc.get("mean")), doubles(doc.get("scale")), doubles(doc.get("coef")),
                doc.get("intercept").decimalValue().doubleValue(),
                doc.get("thresholds").get("review").decimalValue().doubleValue(),
                doc.get("thresholds").get("hold").decimalValue().doubleValue());
    }

    private static double[] doubles(JsonNode array) {
        double[] out = new double[array.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = array.get(i).decimalValue().doubleValue();
        }
        return out;
    }

    double score(double[] features) {
        double z = intercept;
        for (int i = 0; i < features.length; i++) {
            z = z + coef[i] * ((features[i] - mean[i]) / scale[i]);
        }
        return 1.0 / (1.0 + Libm.exp(-z));
    }

    String action(double score) {
        return score >= holdAt ? "hold" : score >= reviewAt ? "review" : "approve";
    }
}
