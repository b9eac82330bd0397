package dev.ikkai.outbox;

/**
 * Why a record goes to the dead-letter queue instead of (or after) being sent. {@code kind} is
 * machine-readable (the {@code ikkai.dlq.error_class} header); the message is for people, and shows no card
 * number (it becomes the dead letter's {@code ikkai.dlq.reason}, the receipt's reason and a log line).
 */
public final class RejectedRequest extends Exception {
    private static final long serialVersionUID = 1L;

    public static final String UNDECODABLE = "undecodable";
    /** In the Confluent wire format with a schema id the registry does not hold (or not as an Avro schema). */
    public static final String UNKNOWN_SCHEMA = "unknown-schema";
    public static final String UNKNOWN_TARGET = "unknown-target";
    public static final String BAD_PATH = "bad-path";
    public static final String BAD_METHOD = "bad-method";
    public static final String RESERVED_HEADER = "reserved-header";
    /** A header value (the record's own, or one the sink derives from its fields) HTTP cannot carry. */
    public static final String BAD_HEADER = "bad-header";
    /** Anything else that kept one record's request from being built (never the task's failure). */
    public static final String UNSENDABLE = "unsendable";
    public static final String REJECTED_BY_TARGET = "rejected-by-target";
    public static final String RETRIES_EXHAUSTED = "retries-exhausted";

    /**
     * The most a reason may hold, in UTF-8 bytes: it becomes a dead-letter header and a receipt's reason. Each piece a
     * message quotes from a record or a server is cut first ({@link Bounded#quoted}); this is the backstop.
     */
    public static final int MESSAGE_BYTES = 2048;

    private final String kind;

    /** {@code message}, its card numbers masked ({@link CardNumbers}: a path or a server's answer may quote one), then bounded. */
    public RejectedRequest(String kind, String message) {
        super(Bounded.text(CardNumbers.mask(message), MESSAGE_BYTES), null, false, false);
        this.kind = kind;
    }

    public String kind() {
        return kind;
    }
}
