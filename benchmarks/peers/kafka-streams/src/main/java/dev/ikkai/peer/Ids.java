package dev.ikkai.peer;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;

/** ikkai/contract/ids.py: sha-256 hex of the parts joined by U+001F. */
final class Ids {
    private Ids() {}

    static String decisionId(String key, String eventId, String modelVersion) {
        return sha256Hex((key + '\u001f' + eventId + '\u001f' + modelVersion).getBytes(StandardCharsets.UTF_8));
    }

    static String sha256Hex(byte[] data) {
        try {
            return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(data));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }
}
