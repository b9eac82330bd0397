package dev.ikkai.outbox;

import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Card numbers in text the sink writes about a record (a dead letter's reason and response excerpt, a receipt's
 * reason) show their last four digits only: the rule of ikkai/contract/masking.py, on the same shared cases
 * (tests/ikkai/contract/card_number_vectors.json, read by {@code CardNumbersTest}). Pure.
 *
 * <p>A <em>run</em> is digits (of any script) joined by at most {@link #MAX_SEPARATORS} separators in a row: any
 * white space (no-break and thin spaces too), invisible format characters, any dash, dots, slashes, underscores;
 * never commas or colons. A <em>group</em> is digits with nothing between them. A card number is consecutive whole
 * groups of a run holding 13 to 19 digits that pass the Luhn check; a single group over 19 digits is masked whole.
 * Each (overlapping ones merged) becomes one {@code *} per digit but the last four, its separators dropped. Other
 * numbers (epoch milliseconds, amounts, dates) stay readable.
 */
final class CardNumbers {
    static final int MIN_PAN_DIGITS = 13;
    static final int MAX_PAN_DIGITS = 19;
    static final int SHOWN_DIGITS = 4;
    static final int MAX_SEPARATORS = 3;
    /** The most UTF-8 bytes one card number spans: its digits and the separators between them, 4 bytes each at most. */
    static final int LONGEST_CARD_BYTES = 4 * (MAX_PAN_DIGITS + (MAX_PAN_DIGITS - 1) * MAX_SEPARATORS);
    /** Besides white space ({@code \s}, plus the information separators Python counts as space). */
    private static final String SEPARATORS = "\\x1c-\\x1f"
        + "\\u00ad\\u200b\\u200c\\u200d\\u2060\\ufeff"  // soft hyphen, zero-width space/non-joiner/joiner, word joiner, BOM
        + "\\-\\u058a\\u05be\\u1400\\u1806\\u2010-\\u2015\\u2e17\\u2e1a\\u2e3a\\u2e3b\\u2e40\\u2e5d\\u301c\\u3030\\u30a0"
        + "\\ufe31\\ufe32\\ufe58\\ufe63\\uff0d\\x{10EAD}\\u2212\\u2043"  // the dashes (Pd), minus sign, hyphen bullet
        + ".\\u00b7\\u2022\\u2024\\u2027\\u2219\\u22c5\\u30fb\\uff0e\\uff65\\u3002\\ufe52"  // dots
        + "/\\\\\\u2044\\u2215\\u29f8\\uff0f\\uff3c_";  // slashes and the underscore
    private static final Pattern RUN = Pattern.compile(
        "\\d+(?:[\\s" + SEPARATORS + "]{1," + MAX_SEPARATORS + "}\\d+)*", Pattern.UNICODE_CHARACTER_CLASS);
    private static final Pattern GROUP = Pattern.compile("\\d+", Pattern.UNICODE_CHARACTER_CLASS);

    private CardNumbers() {
    }

    /** {@code text} with every card number masked to its last four digits (see the class); null stays null. */
    static String mask(String text) {
        if (text == null) {
            return null;
        }
        Matcher run = RUN.matcher(text);
        StringBuilder out = new StringBuilder(text.length());
        int at = 0;
        while (run.find()) {
            out.append(text, at, run.start()).append(maskedRun(run.group()));
            at = run.end();
        }
        return out.append(text, at, text.length()).toString();
    }

    /** The Luhn check: from the right, every second digit doubled (minus 9 when over 9); the sum ends in 0. */
    static boolean luhnValid(String digits) {
        return luhnSum(digits, 0) % 10 == 0;
    }

    /** The Luhn sum of {@code digits} when {@code rightOf} digits follow them (they decide which are doubled). */
    private static int luhnSum(String digits, int rightOf) {
        int[] values = digits.codePoints().map(c -> Character.digit(c, 10)).toArray();
        int total = 0;
        for (int i = 0; i < values.length; i++) {
            int value = values[values.length - 1 - i] * ((i + rightOf) % 2 == 1 ? 2 : 1);
            total += value > 9 ? value - 9 : value;
        }
        return total;
    }

    private static String maskedRun(String text) {
        List<int[]> groups = new ArrayList<>();  // {start, end, digits}
        Matcher group = GROUP.matcher(text);
        while (group.find()) {
            groups.add(new int[] {group.start(), group.end(), text.codePointCount(group.start(), group.end())});
        }
        StringBuilder out = new StringBuilder();
        int at = 0;
        for (int[] span : cardSpans(text, groups)) {
            StringBuilder digits = new StringBuilder();
            for (int g = span[0]; g <= span[1]; g++) {
                digits.append(text, groups.get(g)[0], groups.get(g)[1]);
            }
            int count = digits.codePointCount(0, digits.length());
            int lastFour = digits.offsetByCodePoints(0, count - SHOWN_DIGITS);
            out.append(text, at, groups.get(span[0])[0]).append("*".repeat(count - SHOWN_DIGITS))
                .append(digits, lastFour, digits.length());
            at = groups.get(span[1])[1];
        }
        return out.append(text, at, text.length()).toString();
    }

    /** {first, last} group indices of each card number among the groups, overlapping ones merged. */
    private static List<int[]> cardSpans(String text, List<int[]> groups) {
        List<int[]> spans = new ArrayList<>();
        for (int last = 0; last < groups.size(); last++) {
            int total = 0;
            int count = 0;
            for (int first = last; first >= 0; first--) {
                int[] g = groups.get(first);
                if (count + g[2] > MAX_PAN_DIGITS) {
                    if (first == last) {  // one group longer than a PAN: masked whole
                        spans.add(new int[] {first, last});
                    }
                    break;
                }
                total += luhnSum(text.substring(g[0], g[1]), count);
                count += g[2];
                if (count >= MIN_PAN_DIGITS && total % 10 == 0) {
                    spans.add(new int[] {first, last});
                }
            }
        }
        spans.sort((a, b) -> a[0] != b[0] ? Integer.compare(a[0], b[0]) : Integer.compare(a[1], b[1]));
        List<int[]> merged = new ArrayList<>();
        for (int[] span : spans) {
            int[] previous = merged.isEmpty() ? null : merged.get(merged.size() - 1);
            if (previous != null && span[0] <= previous[1]) {
                previous[1] = Math.max(previous[1], span[1]);
            } else {
                merged.add(new int[] {span[0], span[1]});
            }
        }
        return merged;
    }
}
