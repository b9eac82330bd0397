package dev.ikkai.outbox;

import java.util.Map;

/** One decoded record of outbox.requests (schemas/outbox_request). */
public record OutboxRequest(
    String decisionId,
    String key,
    String target,
    String path,
    String method,
    String contentType,
    byte[] body,
    Map<String, String> headers,
    long createdAt,
    String modelVersion) {
}
