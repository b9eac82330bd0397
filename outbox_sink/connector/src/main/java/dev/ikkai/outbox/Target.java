package dev.ikkai.outbox;

import java.net.URI;

/**
 * One allow-listed HTTP target. {@code authSecret} is already resolved by the worker's config
 * providers and is never logged: {@link #toString()} masks it.
 */
public record Target(String alias, URI baseUrl, String method, String authHeader, String authSecret) {
    @Override
    public String toString() {
        return "Target[" + alias + " " + method + " " + baseUrl + (authHeader == null ? "" : " " + authHeader + ": [hidden]") + "]";
    }
}
