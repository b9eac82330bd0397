package dev.ikkai.outbox;

import java.util.Locale;
import java.util.Set;

/**
 * Credentials inside URLs, hidden wherever the sink prints one (config errors that reach Connect's
 * validation output and ikkai's plan, registry errors, dead-letter reasons). The same rule as ikkai's
 * Python side ({@code ikkai/redaction.py}): inside every {@code scheme://} URL of a text, the user info
 * and the values of password-like query or {@code ;} parameters become {@value #REDACTED}; a value that
 * is one config-provider placeholder ({@code ${file:...}}) is a reference and stays. A record's request
 * path has no scheme ({@code /v1/x?token=...}): {@link #redactPath} applies the same rule to it. Pure.
 */
final class Urls {
    static final String REDACTED = "<redacted>";
    /** A parameter is secret when the last part of its name (split on _ - .) is one of these, any case. */
    static final Set<String> SECRET_PARAMETERS = Set.of("password", "passwd", "pwd", "secret", "token", "apikey",
        "key", "sig", "signature", "credential", "credentials");
    private static final String[] SECRET_ENDINGS = {"password", "passwd", "secret", "token", "apikey"};
    private Urls() {
    }

    // No regular expression below: java.util.regex recurses once per repetition of a group with alternatives,
    // which overflowed the stack near 2,000 characters (issue 44). Each scan is one pass, linear in the text.

    /** {@code text} with the credentials of every URL in it redacted; null stays null. */
    static String redact(String text) {
        if (text == null || !text.contains("://")) {
            return text;
        }
        StringBuilder out = new StringBuilder(text.length());
        int n = text.length();
        int i = 0;
        while (i < n) {
            if (!isSchemeChar(text.charAt(i))) {
                out.append(text.charAt(i++));
                continue;
            }
            // A run of scheme characters [i, end): a URL starts at its first letter if the run ends in ':' and "//" follows.
            int end = i;
            while (end < n && isSchemeChar(text.charAt(end))) {
                end++;
            }
            int letter = i;
            while (letter < end && !isLetter(text.charAt(letter))) {
                letter++;
            }
            if (letter <= end - 2 && text.charAt(end - 1) == ':' && text.startsWith("//", end)) {
                int stop = end + 2;
                while (stop < n && !isSpace(text.charAt(stop))) {
                    stop++;
                }
                out.append(text, i, letter).append(redactUrl(text.substring(letter, stop)));
                i = stop;
            } else {
                out.append(text, i, end);
                i = end;
            }
        }
        return out.toString();
    }

    /**
     * A record's request path ({@code /v1/x?token=...}, meant to have no scheme) as it may be printed: the
     * values of password-like query or {@code ;} parameters redacted, and the user info of a path that
     * starts with an authority ({@code //user:pass@host}) or of a URL given as the path; null stays null.
     */
    static String redactPath(String path) {
        if (path == null) {
            return null;
        }
        String text = hideParameters(redact(path));
        return text.startsWith("//") ? hideUserInfo(text, 2) : text;
    }

    private static String redactUrl(String url) {
        String text = hideParameters(url);
        int slash = text.indexOf('/');
        // "scheme://": the first '/' is the first of "//", right after a ':'.
        return slash > 0 && text.charAt(slash - 1) == ':' && text.startsWith("//", slash) ? hideUserInfo(text, slash + 2) : text;
    }

    /** Every {@code [?&;]name=value} whose name is password-like gets {@value #REDACTED} for its value. */
    private static String hideParameters(String text) {
        StringBuilder out = null;
        int copied = 0;
        int n = text.length();
        int i = 0;
        while (i < n) {
            char lead = text.charAt(i);
            if (lead != '?' && lead != '&' && lead != ';') {
                i++;
                continue;
            }
            int name = i + 1;
            int eq = name;
            while (eq < n && isNameChar(text.charAt(eq))) {
                eq++;
            }
            if (eq == name || eq >= n || text.charAt(eq) != '=') {
                i = Math.max(i + 1, eq);
                continue;
            }
            int end = eq + 1;
            while (end < n && isValueChar(text.charAt(end))) {
                end++;
            }
            String value = text.substring(eq + 1, end);
            if (!value.isEmpty() && !value.equals(REDACTED) && !isPlaceholder(value, 0, value.length())
                && isSecret(text.substring(name, eq))) {
                if (out == null) {
                    out = new StringBuilder(n);
                }
                out.append(text, copied, eq + 1).append(REDACTED);
                copied = end;
            }
            i = end;
        }
        return out == null ? text : out.append(text, copied, n).toString();
    }

    /**
     * The user info that ends at an '@' after {@code from} ({@code user:pass@}) replaced by {@value #REDACTED}, unless
     * it is only config-provider placeholders and ':'. The user info is made of characters other than '/', '?', '#'
     * and space, and of placeholders (which may hold those); the last '@' it can reach ends it.
     */
    private static String hideUserInfo(String text, int from) {
        int n = text.length();
        int[] nextBrace = new int[n + 1];  // the index of the first '}' at or after each position, n when none
        nextBrace[n] = n;
        for (int k = n - 1; k >= from; k--) {
            nextBrace[k] = text.charAt(k) == '}' ? k : nextBrace[k + 1];
        }
        boolean[] reachable = new boolean[n + 1];
        reachable[from] = true;
        int at = -1;
        int furthest = from;
        for (int k = from; k < n && k <= furthest; k++) {
            if (!reachable[k]) {
                continue;
            }
            char c = text.charAt(k);
            if (c == '@') {
                at = k;
            }
            if (c != '/' && c != '?' && c != '#' && !isSpace(c)) {
                reachable[k + 1] = true;
                furthest = Math.max(furthest, k + 1);
            }
            if (text.startsWith("${", k) && nextBrace[k + 2 > n ? n : k + 2] < n) {
                int close = nextBrace[k + 2];
                reachable[close + 1] = true;
                furthest = Math.max(furthest, close + 1);
            }
        }
        if (at < 0 || onlyPlaceholders(text, from, at)) {
            return text;
        }
        return text.substring(0, from) + REDACTED + text.substring(at);
    }

    /** Whether text[from, to) is nothing but placeholders and ':'. */
    private static boolean onlyPlaceholders(String text, int from, int to) {
        int k = from;
        while (k < to) {
            if (text.charAt(k) == ':') {
                k++;
            } else if (text.startsWith("${", k)) {
                int close = text.indexOf('}', k + 2);
                if (close < 0 || close >= to) {
                    return false;
                }
                k = close + 1;
            } else {
                return false;
            }
        }
        return true;
    }

    /** Whether text[from, to) is one placeholder: {@code ${...}} without a '}' inside. */
    private static boolean isPlaceholder(String text, int from, int to) {
        return to - from >= 3 && text.startsWith("${", from) && text.charAt(to - 1) == '}' && text.indexOf('}', from + 2) == to - 1;
    }

    private static boolean isLetter(char c) {
        return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z';
    }

    private static boolean isSchemeChar(char c) {
        return isLetter(c) || c >= '0' && c <= '9' || c == '+' || c == '.' || c == ':' || c == '-';
    }

    /** {@code \s} of java.util.regex: space, tab, line feed, vertical tab, form feed, carriage return. */
    private static boolean isSpace(char c) {
        return c == ' ' || c == '\t' || c == '\n' || c == '\u000b' || c == '\f' || c == '\r';
    }

    private static boolean isNameChar(char c) {
        return c != '=' && c != '&' && c != ';' && c != '#' && c != '?' && c != '/' && !isSpace(c);
    }

    private static boolean isValueChar(char c) {
        return c != '&' && c != ';' && c != '#' && !isSpace(c);
    }

    private static boolean isSecret(String name) {
        String lower = name.toLowerCase(Locale.ROOT);
        int cut = Math.max(lower.lastIndexOf('_'), Math.max(lower.lastIndexOf('.'), lower.lastIndexOf('-')));
        String last = lower.substring(cut + 1);
        if (SECRET_PARAMETERS.contains(last)) {
            return true;
        }
        for (String ending : SECRET_ENDINGS) {
            if (last.endsWith(ending)) {
                return true;
            }
        }
        return false;
    }
}
