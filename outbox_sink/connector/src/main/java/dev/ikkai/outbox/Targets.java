package dev.ikkai.outbox;

import java.net.URI;
import java.net.URISyntaxException;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.regex.Pattern;

import org.apache.kafka.common.config.ConfigException;

/**
 * The allow-list: target aliases to base URLs, and the rules a record's path, method and
 * headers must follow before anything is sent. Pure: no I/O.
 */
public final class Targets {
    /** The config key that lists the target aliases; each alias's own settings are under {@link #PREFIX}. */
    public static final String ALIASES = "outbox.targets";
    public static final String PREFIX = "outbox.target.";
    public static final Set<String> METHODS = Set.of("POST", "PUT", "PATCH", "DELETE");
    /** Headers the sink sets itself (or the HTTP client owns); a record may not set them. */
    public static final Set<String> RESERVED_HEADERS = Set.of(
        "idempotency-key", "authorization", "content-type", "content-length", "host", "connection",
        "expect", "upgrade", "transfer-encoding", "te", "trailer", "proxy-authorization", "cookie");
    private static final Pattern ALIAS = Pattern.compile("[a-z0-9][a-z0-9-]{0,62}");
    private static final Pattern HEADER_NAME = Pattern.compile("[!#$%&'*+.^_`|~0-9A-Za-z-]+");

    private Targets() {
    }

    public static Map<String, Target> parse(List<String> aliases, Map<String, String> config) {
        Map<String, Target> targets = new TreeMap<>();
        if (aliases.isEmpty()) {
            throw new ConfigException(ALIASES, "", "name at least one target alias");
        }
        for (String alias : aliases) {
            if (!ALIAS.matcher(alias).matches()) {
                throw new ConfigException(ALIASES, alias,
                    "an alias is lower-case letters, digits and '-' (e.g. payments-api)");
            }
            String prefix = PREFIX + alias + ".";
            String url = config.get(prefix + "url");
            if (url == null || url.isBlank()) {
                throw new ConfigException(prefix + "url", url, "every alias in " + ALIASES + " needs a base URL");
            }
            URI base = baseUrl(prefix + "url", url.strip());
            String method = config.getOrDefault(prefix + "method", "POST").strip().toUpperCase(Locale.ROOT);
            if (!METHODS.contains(method)) {
                throw new ConfigException(prefix + "method", method, "one of " + METHODS);
            }
            String authHeader = config.get(prefix + "auth.header");
            String authSecret = config.get(prefix + "auth.secret");
            if ((authHeader == null) != (authSecret == null)) {
                throw new ConfigException(prefix + "auth.header", authHeader, "set both auth.header and auth.secret, or neither");
            }
            if (authHeader != null && !HEADER_NAME.matcher(authHeader).matches()) {
                throw new ConfigException(prefix + "auth.header", authHeader, "not a valid HTTP header name");
            }
            targets.put(alias, new Target(alias, base, method, authHeader, authSecret));
        }
        for (String key : config.keySet()) {
            if (key.startsWith(PREFIX)) {
                String alias = key.substring(PREFIX.length()).split("\\.", 2)[0];
                if (!targets.containsKey(alias)) {
                    throw new ConfigException(key, "(hidden)", "alias '" + alias + "' is not listed in " + ALIASES);
                }
            }
        }
        return Map.copyOf(targets);
    }

    static URI baseUrl(String key, String url) {
        URI uri;
        try {
            uri = new URI(url.endsWith("/") ? url.substring(0, url.length() - 1) : url);
        } catch (URISyntaxException e) {
            throw new ConfigException(key, shown(url), "not a URL: " + e.getReason() + " at index " + e.getIndex());
        }
        String scheme = uri.getScheme() == null ? "" : uri.getScheme().toLowerCase(Locale.ROOT);
        if (!(scheme.equals("http") || scheme.equals("https")) || uri.getHost() == null) {
            throw new ConfigException(key, shown(url), "an absolute http(s) URL with a host, e.g. https://payments.internal/v1");
        }
        if (uri.getRawQuery() != null || uri.getRawFragment() != null || uri.getRawUserInfo() != null) {
            throw new ConfigException(key, shown(url), "a base URL has no query, fragment or user info");
        }
        return uri;
    }

    /**
     * A URL as a config error may print it: Connect's validation output and ikkai's plan show it, so its
     * credentials are redacted; a value that is no {@code scheme://} URL but has an '@' before any '/' is
     * hidden whole (it may be {@code user:password@host}).
     */
    static String shown(String url) {
        if (!url.contains("://") && url.split("/", 2)[0].contains("@")) {
            return "(hidden: it may hold credentials)";
        }
        return Urls.redact(url);
    }

    /** The URL and method for one request, or why it may not be sent. */
    public static Resolved resolve(Map<String, Target> targets, OutboxRequest request) throws RejectedRequest {
        Target target = targets.get(request.target());
        if (target == null) {
            throw new RejectedRequest(RejectedRequest.UNKNOWN_TARGET,
                "target alias '" + Bounded.quoted(request.target()) + "' is not in the allow-list "
                    + Bounded.quoted(targets.keySet().toString()));
        }
        String method = request.method() == null ? target.method() : request.method().toUpperCase(Locale.ROOT);
        if (!METHODS.contains(method)) {
            throw new RejectedRequest(RejectedRequest.BAD_METHOD, "method '" + Bounded.quoted(request.method()) + "' is not one of " + METHODS);
        }
        URI uri = join(target.baseUrl(), request.path());
        for (String name : request.headers().keySet()) {
            String lower = name.toLowerCase(Locale.ROOT);
            if (RESERVED_HEADERS.contains(lower) || lower.equalsIgnoreCase(String.valueOf(target.authHeader()))
                || lower.startsWith("x-ikkai-")) {
                throw new RejectedRequest(RejectedRequest.RESERVED_HEADER, "header '" + Bounded.quoted(name) + "' is set by the outbox sink, not by the record");
            }
            if (!HEADER_NAME.matcher(name).matches()) {
                throw new RejectedRequest(RejectedRequest.RESERVED_HEADER, "header name '" + Bounded.quoted(name) + "' is not a valid HTTP header name");
            }
        }
        return new Resolved(target, uri, method);
    }

    /**
     * base + path, where path must stay under base: no scheme, authority, dot segments or fragment. A path
     * may carry a token in its query: a refusal quotes it redacted ({@link Urls#redactPath}).
     */
    static URI join(URI base, String path) throws RejectedRequest {
        if (path == null || !path.startsWith("/") || path.startsWith("//")) {
            throw new RejectedRequest(RejectedRequest.BAD_PATH, "path '" + shownPath(path) + "' must start with a single '/'");
        }
        for (int i = 0; i < path.length(); i++) {
            char c = path.charAt(i);
            if (c < 0x21 || c > 0x7e || c == '\\' || c == '#') {
                throw new RejectedRequest(RejectedRequest.BAD_PATH,
                    "path '" + shownPath(path) + "' has a character that must be percent-encoded (space, control, non-ASCII, '\\' or '#')");
            }
        }
        URI joined;
        try {
            joined = new URI(base.toString() + path);
        } catch (URISyntaxException e) {
            throw new RejectedRequest(RejectedRequest.BAD_PATH, "path '" + shownPath(path) + "' is not a valid URL path: " + e.getReason());
        }
        String rawPath = joined.getRawPath();
        String lower = rawPath.toLowerCase(Locale.ROOT);
        if (lower.contains("%2f") || lower.contains("%5c")) {
            throw new RejectedRequest(RejectedRequest.BAD_PATH, "path '" + shownPath(path) + "' has an encoded '/' or '\\' (%2F, %5C), "
                + "which some servers decode into a segment boundary");
        }
        boolean dotSegment = List.of(rawPath.split("/", -1)).stream().anyMatch(Targets::leavesBase);
        if (dotSegment || !joined.getRawAuthority().equals(base.getRawAuthority())) {
            throw new RejectedRequest(RejectedRequest.BAD_PATH, "path '" + shownPath(path) + "' would leave the target's base URL");
        }
        return joined;
    }

    /** A record's path as a reason quotes it: redacted (linear: {@link Urls}), then cut. */
    static String shownPath(String path) {
        return Bounded.quoted(Urls.redactPath(path));
    }

    /**
     * A segment a server may read as "." or "..", or as two segments: decoded as often as a chain of servers may
     * decode it ({@code .%252e} is {@code ..} after two decodings), then cut at a path parameter ({@code ..;x},
     * {@code ..%3b}, which servlet containers strip) or a NUL ({@code ..%00}, where C code ends a string); one that
     * still decodes further after {@link #DECODINGS} rounds, or decodes to a '/' or '\', is refused too.
     */
    private static boolean leavesBase(String segment) {
        String name = segment;
        for (int round = 0; ; round++) {
            String decoded = percentDecoded(name);
            if (decoded.equals(name)) {
                break;
            }
            if (round == DECODINGS) {
                return true;
            }
            name = decoded;
        }
        if (name.indexOf('/') >= 0 || name.indexOf('\\') >= 0) {
            return true;
        }
        for (int i = 0; i < name.length(); i++) {
            char c = name.charAt(i);
            if (c == ';' || c == '\0') {
                name = name.substring(0, i);
                break;
            }
        }
        return name.equals(".") || name.equals("..");
    }

    /** How many percent-decodings a segment is checked through (a chain of proxies and a server). */
    static final int DECODINGS = 4;

    /** Every %XX of {@code text} as the character XX (one decoding; a '%' not followed by two hex digits stays). */
    private static String percentDecoded(String text) {
        if (text.indexOf('%') < 0) {
            return text;
        }
        StringBuilder out = new StringBuilder(text.length());
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            int hi = i + 2 < text.length() ? Character.digit(text.charAt(i + 1), 16) : -1;
            int lo = hi >= 0 ? Character.digit(text.charAt(i + 2), 16) : -1;
            if (c == '%' && hi >= 0 && lo >= 0) {
                out.append((char) (hi * 16 + lo));
                i += 2;
            } else {
                out.append(c);
            }
        }
        return out.toString();
    }

    public record Resolved(Target target, URI uri, String method) {
    }
}
