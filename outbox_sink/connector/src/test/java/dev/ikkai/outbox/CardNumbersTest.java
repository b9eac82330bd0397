package dev.ikkai.outbox;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.header.Header;
import org.apache.kafka.connect.sink.SinkRecord;
import org.junit.jupiter.api.Test;

/**
 * Issue 46 item 5: card numbers are masked whatever separates their digits, in the sink as in Python (the shared
 * cases of tests/ikkai/contract/card_number_vectors.json), and the sink's dead letters quote none: not in a reason
 * (a request path), not in the target's response excerpt.
 */
class CardNumbersTest {
    /** The vector file, relative to this module (outbox_sink/connector) as Maven runs the tests. */
    static final Path VECTORS = Path.of("..", "..", "tests", "ikkai", "contract", "card_number_vectors.json");
    static final String PAN = "4111111111111111";

    @Test
    void everySharedCaseMasksAsPythonDoes() throws IOException {
        JsonNode doc = new ObjectMapper().readTree(Files.readString(VECTORS));
        int checked = 0;
        for (JsonNode v : doc.path("vectors")) {
            String masked = v.path("masked").asText();
            assertEquals(masked, CardNumbers.mask(v.path("text").asText()), v.path("name").asText());
            assertEquals(masked, CardNumbers.mask(masked), "masking twice changes nothing: " + v.path("name").asText());
            checked++;
        }
        assertTrue(checked >= 20, "the vector file holds the cases: " + checked);
    }

    /** Every Unicode space and dash this JDK knows, and the rest of the rule's separators. */
    static List<String> separators() {
        List<String> all = new ArrayList<>();
        for (int c = 0; c <= Character.MAX_CODE_POINT; c++) {
            int type = Character.getType(c);
            if (type == Character.SPACE_SEPARATOR || type == Character.DASH_PUNCTUATION) {
                all.add(Character.toString(c));
            }
        }
        for (String s : List.of("\t", "\n", "\u00ad", "\u200b", "\u2060", "\ufeff", "\u2212", ".", "\u00b7", "\u2022",
                "\uff0e", "/", "\\", "\u2044", "\u2215", "\uff0f", "_", " - ", "\u00a0\u2013\u00a0")) {
            all.add(s);
        }
        return all;
    }

    @Test
    void aCardIsMaskedWhateverSeparatesItsGroups() {
        for (String sep : separators()) {
            String text = "card 4111" + sep + "1111" + sep + "1111" + sep + "1111 refused";
            assertEquals("card ************1111 refused", CardNumbers.mask(text),
                "separator U+" + Integer.toHexString(sep.codePointAt(0)));
        }
    }

    /** {@code body} and the digit that makes it pass the Luhn check. */
    static String withCheckDigit(String body) {
        for (int d = 0; d < 10; d++) {
            if (CardNumbers.luhnValid(body + d)) {
                return body + d;
            }
        }
        throw new AssertionError("some digit always completes a Luhn number");
    }

    @Test
    void generatedCardsInGeneratedGroupsAreMaskedAndEpochMillisFailingLuhnStay() {
        Random random = new Random(46);
        List<String> separators = separators();
        for (int n = 0; n < 2000; n++) {
            StringBuilder body = new StringBuilder();
            int length = 13 + random.nextInt(7);
            for (int i = 0; i < length - 1; i++) {
                body.append(random.nextInt(10));
            }
            String pan = withCheckDigit(body.toString());
            StringBuilder written = new StringBuilder();
            for (int i = 0; i < pan.length(); i++) {
                if (i > 0 && random.nextInt(4) == 0) {
                    written.append(separators.get(random.nextInt(separators.size())));
                }
                written.append(pan.charAt(i));
            }
            String expected = "x" + "*".repeat(pan.length() - 4) + pan.substring(pan.length() - 4) + "x";
            assertEquals(expected, CardNumbers.mask("x" + written + "x"), written.toString());
            long millis = 1_000_000_000_000L + (long) (random.nextDouble() * 9e12);
            String time = "event_time " + millis + " is behind";
            if (!CardNumbers.luhnValid(Long.toString(millis))) {
                assertEquals(time, CardNumbers.mask(time));
            }
        }
    }

    private static SinkRecord record() {
        return new SinkRecord("outbox.requests", 0, Schema.STRING_SCHEMA, "k", Schema.BYTES_SCHEMA, new byte[] {1}, 7);
    }

    private static String header(SinkRecord copy, String name) {
        Header h = copy.headers().lastWithName(name);
        return h == null ? null : String.valueOf(h.value());
    }

    @Test
    void aDeadLetterQuotesNoCardNumberInItsReasonOrItsResponseExcerpt() {
        String path = "/v1/cards/4111\u00a01111\u00a01111\u00a01111/confirm";
        RejectedRequest why = new RejectedRequest(RejectedRequest.REJECTED_BY_TARGET,
            "POST payments-api" + Targets.shownPath(path) + " returned 422");
        byte[] body = ("{\"error\": \"card 4111\u20131111\u20131111\u20131111 declined\", \"at\": 1795884189781}")
            .getBytes(StandardCharsets.UTF_8);
        SinkRecord copy = DeadLetterCopy.of(record(), null, why, null, HttpRequests.excerpt(body, 1024));
        String reason = header(copy, "ikkai.dlq.reason");
        String excerpt = header(copy, "ikkai.dlq.response_excerpt");
        assertEquals("POST payments-api/v1/cards/************1111/confirm returned 422", reason);
        assertEquals("{\"error\": \"card ************1111 declined\", \"at\": 1795884189781}", excerpt);
    }

    @Test
    void anExcerptIsMaskedBeforeItIsCut() {
        byte[] body = ("x".repeat(20) + PAN + " and more").getBytes(StandardCharsets.UTF_8);
        String cut = HttpRequests.excerpt(body, 30);  // the cut falls inside the card number
        assertFalse(cut.matches(".*\\d.*"), cut);
        assertEquals("x".repeat(20) + "**********…", cut);
    }
}
