package dev.ikkai.outbox;

import java.util.Locale;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

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
    private static final String PLACEHOLDER = "\\$\\{[^}]*\\}";
    private static final Pattern URL = Pattern.compile("[A-Za-z][A-Za-z0-9+.:-]*://\\S*");
    private static final Pattern USER_INFO = Pattern.compile("^([^/]*://)((?:" + PLACEHOLDER + "|[^/?#\\s])*)@");
    /** A path that starts with an authority ({@code //user:pass@host/...}), as a URL without its scheme. */
    private static final Pattern PATH_USER_INFO = Pattern.compile("^(//)((?:" + PLACEHOLDER + "|[^/?#\\s])*)@");
    private static final Pattern PARAMETER = Pattern.compile("([?&;])([^=&;#?/\\s]+)=([^&;#\\s]*)");
    private static final Pattern ONLY_PLACEHOLDERS = Pattern.compile("(?:" + PLACEHOLDER + "|:)*");

    private Urls() {
    }

    /** {@code text} with the credentials of every URL in it redacted; null stays null. */
    static String redact(String text) {
        if (text == null || !text.contains("://")) {
            return text;
        }
        return URL.matcher(text).replaceAll(match -> Matcher.quoteReplacement(redactUrl(match.group())));
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
        return hideUserInfo(PATH_USER_INFO, hideParameters(redact(path)));
    }

    private static String redactUrl(String url) {
        return hideUserInfo(USER_INFO, hideParameters(url));
    }

    private static String hideParameters(String text) {
        return PARAMETER.matcher(text).replaceAll(match -> Matcher.quoteReplacement(
            redactParameter(match.group(), match.group(1), match.group(2), match.group(3))));
    }

    private static String hideUserInfo(Pattern userInfo, String text) {
        Matcher info = userInfo.matcher(text);
        if (!info.find() || ONLY_PLACEHOLDERS.matcher(info.group(2)).matches()) {
            return text;
        }
        return info.group(1) + REDACTED + "@" + text.substring(info.end());
    }

    private static String redactParameter(String whole, String lead, String name, String value) {
        if (value.isEmpty() || value.equals(REDACTED) || value.matches(PLACEHOLDER) || !isSecret(name)) {
            return whole;
        }
        return lead + name + "=" + REDACTED;
    }

    private static boolean isSecret(String name) {
        String[] parts = name.toLowerCase(Locale.ROOT).split("[_.-]", -1);
        String last = parts[parts.length - 1];
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
