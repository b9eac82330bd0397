package dev.ikkai.outbox;

import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;

/** SHA-256 in lowercase hex: the Idempotency-Key, a response's digest, the digest that ends a cut text. Pure. */
final class Sha256 {
    private Sha256() {
    }

    /** The digest of {@code bytes} (null: of no bytes) as 64 lowercase hex digits. */
    static String hex(byte[] bytes) {
        try {
            return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(bytes == null ? new byte[0] : bytes));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("every JDK has SHA-256", e);
        }
    }
}
