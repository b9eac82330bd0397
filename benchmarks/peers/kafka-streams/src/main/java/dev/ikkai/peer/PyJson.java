package dev.ikkai.peer;

import java.math.BigDecimal;
import java.math.MathContext;
import java.math.RoundingMode;

/** Python's {@code json.dumps(..., sort_keys=True, separators=(",", ":"))} for the flat documents the outbox bodies are. */
final class PyJson {
    private PyJson() {}

    /** A JSON object of alternating keys and values (String or Double), keys already in sorted order. */
    static String object(Object... keysAndValues) {
        StringBuilder out = new StringBuilder("{");
        for (int i = 0; i < keysAndValues.length; i += 2) {
            if (i > 0) {
                out.append(',');
            }
            string(out, (String) keysAndValues[i]);
            out.append(':');
            Object value = keysAndValues[i + 1];
            if (value instanceof Double) {
                out.append(repr((Double) value));
            } else {
                string(out, (String) value);
            }
        }
        return out.append('}').toString();
    }

    /** A JSON string as Python writes it with ensure_ascii=True. */
    static void string(StringBuilder out, String s) {
        out.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                case '\b' -> out.append("\\b");
                case '\f' -> out.append("\\f");
                default -> {
                    if (c < 0x20 || c > 0x7e) {
                        out.append(String.format("\\u%04x", (int) c));  // UTF-16 units, surrogates as pairs: as Python
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        out.append('"');
    }

    /**
     * Python's {@code repr(float)}: the shortest decimal that reads back as {@code x} (the nearest
     * one when several are as short), positional for exponents -4..15, else like {@code 1e-05}.
     * Java 17's {@code Double.toString} is not always the shortest (JDK-4511638, fixed in 19).
     */
    static String repr(double x) {
        if (Double.isNaN(x) || Double.isInfinite(x)) {
            throw new IllegalArgumentException("JSON has no " + x);  // json.dumps would write NaN/Infinity
        }
        if (x == 0.0) {
            return (1.0 / x < 0) ? "-0.0" : "0.0";
        }
        BigDecimal exact = new BigDecimal(x);
        BigDecimal best = null;
        for (int digits = 1; digits <= 17 && best == null; digits++) {
            for (RoundingMode mode : new RoundingMode[] {RoundingMode.HALF_EVEN, RoundingMode.FLOOR, RoundingMode.CEILING}) {
                BigDecimal candidate = exact.round(new MathContext(digits, mode));
                if (candidate.doubleValue() == x
                        && (best == null || candidate.subtract(exact).abs().compareTo(best.subtract(exact).abs()) < 0)) {
                    best = candidate;
                }
            }
        }
        BigDecimal shortest = best.stripTrailingZeros();
        String digits = shortest.unscaledValue().abs().toString();
        int decpt = digits.length() - shortest.scale();  // value = 0.DIGITS * 10^decpt
        String sign = x < 0 ? "-" : "";
        if (decpt > -4 && decpt <= 16) {
            if (decpt <= 0) {
                return sign + "0." + "0".repeat(-decpt) + digits;
            }
            if (decpt >= digits.length()) {
                return sign + digits + "0".repeat(decpt - digits.length()) + ".0";
            }
            return sign + digits.substring(0, decpt) + "." + digits.substring(decpt);
        }
        int exponent = decpt - 1;
        String mantissa = digits.length() == 1 ? digits : digits.charAt(0) + "." + digits.substring(1);
        return sign + mantissa + "e" + (exponent < 0 ? "-" : "+") + String.format("%02d", Math.abs(exponent));
    }
}
