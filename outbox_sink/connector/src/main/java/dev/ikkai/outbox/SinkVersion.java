package dev.ikkai.outbox;

/** The outbox sink's version: what Connect reports for the connector and its tasks, and the User-Agent it sends. */
final class SinkVersion {
    static final String NUMBER = "0.1.0";

    private SinkVersion() {
    }
}
