package dev.ikkai.peer;

import java.io.BufferedReader;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The customer feature snapshots CSV and the point-in-time lookup of fraud_model.as_of_snapshots:
 * a customer's latest snapshot with valid_from <= event_time (of equal valid_from, the later line,
 * as pandas' merge_asof over a stable sort), or none. Missing values are what pandas reads as NaN.
 */
final class FeatureSnapshots {
    /** pandas.read_csv's default missing-value strings. */
    private static final Set<String> NA = Set.of(
            "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>", "N/A",
            "NA", "NULL", "NaN", "None", "n/a", "nan", "null");

    record Snapshot(long validFrom, String homeCountry, double avgAmount30d, double txnCount30d,
                    double chargebacks365d, double accountAgeDays) {}

    private final Map<String, long[]> validFrom = new HashMap<>();
    private final Map<String, Snapshot[]> rows = new HashMap<>();

    static FeatureSnapshots load(Path path) throws IOException {
        Map<String, List<Snapshot>> byCustomer = new HashMap<>();
        try (BufferedReader in = Files.newBufferedReader(path, StandardCharsets.UTF_8)) {
            List<String> header = Arrays.asList(in.readLine().split(",", -1));
            int customer = header.indexOf("customer_id");
            int valid = header.indexOf("valid_from");
            int home = header.indexOf("home_country");
            int avg = header.indexOf("avg_amount_30d");
            int txn = header.indexOf("txn_count_30d");
            int cb = header.indexOf("chargebacks_365d");
            int age = header.indexOf("account_age_days");
            for (String line = in.readLine(); line != null; line = in.readLine()) {
                if (line.isEmpty()) {
                    continue;
                }
                String[] f = line.split(",", -1);  // the artifact has no quoted fields
                byCustomer.computeIfAbsent(f[customer], k -> new ArrayList<>()).add(new Snapshot(
                        Long.parseLong(f[valid]), NA.contains(f[home]) ? null : f[home], number(f[avg]),
                        number(f[txn]), number(f[cb]), number(f[age])));
            }
        }
        FeatureSnapshots out = new FeatureSnapshots();
        byCustomer.forEach((id, list) -> {
            list.sort((a, b) -> Long.compare(a.validFrom(), b.validFrom()));  // stable: file order among equals
            out.rows.put(id, list.toArray(new Snapshot[0]));
            out.validFrom.put(id, list.stream().mapToLong(Snapshot::validFrom).toArray());
        });
        return out;
    }

    private static double number(String text) {
        return NA.contains(text) ? Double.NaN : Double.parseDouble(text);
    }

    /** The snapshot in force at eventTime, or null. */
    Snapshot asOf(String customerId, long eventTime) {
        long[] times = validFrom.get(customerId);
        if (times == null) {
            return null;
        }
        int lo = 0;
        int hi = times.length;  // first index with times[i] > eventTime
        while (lo < hi) {
            int mid = (lo + hi) >>> 1;
            if (times[mid] <= eventTime) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        return lo == 0 ? null : rows.get(customerId)[lo - 1];
    }
}
