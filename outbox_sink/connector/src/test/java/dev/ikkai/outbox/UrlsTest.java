package dev.ikkai.outbox;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;

import org.apache.kafka.common.config.ConfigException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

/** The rule of ikkai/redaction.py, in the sink: the same cases as tests/ikkai/test_redaction.py. */
class UrlsTest {
    @ParameterizedTest
    @CsvSource(delimiter = '|', value = {
        "jdbc:postgresql://db/x?user=a&password=secret | jdbc:postgresql://db/x?user=a&password=<redacted>",
        "http://user:pass@host/ | http://<redacted>@host/",
        "https://tok3n@host/v1 | https://<redacted>@host/v1",
        "jdbc:sqlserver://h;user=a;password=p@ss;db=x | jdbc:sqlserver://h;user=a;password=<redacted>;db=x",
        "mongodb://u:p@ss@h1,h2/db?authSource=admin | mongodb://<redacted>@h1,h2/db?authSource=admin",
        "https://s3/o?X-Amz-Credential=AK&X-Amz-Signature=ab&X-Amz-Date=1"
            + " | https://s3/o?X-Amz-Credential=<redacted>&X-Amz-Signature=<redacted>&X-Amz-Date=1",
        "https://h/?api_key=1&apikey=2&access_token=3&key=4&sig=5&PWD=6&Token=7&client.secret=8&sslpassword=9"
            + " | https://h/?api_key=<redacted>&apikey=<redacted>&access_token=<redacted>&key=<redacted>&sig=<redacted>"
            + "&PWD=<redacted>&Token=<redacted>&client.secret=<redacted>&sslpassword=<redacted>",
        "Invalid value http://u:p@h/x?token=t for configuration url: bad; see https://docs/x"
            + " | Invalid value http://<redacted>@h/x?token=<redacted> for configuration url: bad; see https://docs/x",
    })
    void userInfoAndPasswordLikeParametersAreRedacted(String text, String shown) {
        assertEquals(shown, Urls.redact(text));
        assertEquals(shown, Urls.redact(shown), "redacting twice changes nothing");
    }

    @ParameterizedTest
    @ValueSource(strings = {
        "https://payments.prod.ikkai.internal/v1",
        "http://127.0.0.1:8099",
        "jdbc:postgresql://db/x?password=${file:/etc/ikkai/db.properties:password}",
        "http://${env:REGISTRY_USER}:${env:REGISTRY_PASSWORD}@registry:8081",
        "https://h/?keyword=fraud&sslkey=/etc/ssl/key.pem&page=2",
        "http://h/p@x?email=a@b.example",
        "not a URL: ?password=x",
        "",
    })
    void whatIsNotACredentialIsLeftAsItWas(String text) {
        assertEquals(text, Urls.redact(text));
    }

    @ParameterizedTest
    @ValueSource(strings = {
        "ftp://svc:s3cret@payments.internal/v1",  // not http(s)
        "https://svc:s3cret@payments.internal/v1",  // user info
        "https://payments.internal/v1?token=s3cret",  // a query
        "svc:s3cret@payments.internal",  // no scheme at all
        "https://svc:s3cret@payments.internal/v 1",  // not a URL: URISyntaxException quotes its input
    })
    void aTargetUrlThatIsRefusedIsNeverPrintedWithItsCredentials(String url) {
        ConfigException e = assertThrows(ConfigException.class,
            () -> Targets.parse(List.of("a"), Map.of("outbox.target.a.url", url)));
        assertFalse(e.getMessage().contains("s3cret"), e.getMessage());
        assertTrue(e.getMessage().contains("outbox.target.a.url"), e.getMessage());
    }

    @ParameterizedTest
    @ValueSource(strings = {"ftp://svc:s3cret@registry:8081", "https://svc:s3cret@registry:8081/v 1",
        "svc:s3cret@registry:8081"})
    void aRegistryUrlThatIsRefusedIsNeverPrintedWithItsCredentials(String url) {
        ConfigException e = assertThrows(ConfigException.class, () -> new OutboxSinkConfig(Map.of(
            "topics", "outbox.requests", "outbox.targets", "a", "outbox.target.a.url", "http://x",
            "outbox.receipts.bootstrap.servers", "localhost:9092", "schema.registry.url", url)));
        assertFalse(e.getMessage().contains("s3cret"), e.getMessage());
        assertTrue(e.getMessage().contains("schema.registry.url"), e.getMessage());
    }

    @Test
    void aRegistryClientPrintsItsUrlWithoutCredentials() {
        SchemaRegistryClient client = new SchemaRegistryClient("https://registry:8081/?api_key=s3cret", null, null,
            java.time.Duration.ofSeconds(1));
        assertEquals("https://registry:8081/?api_key=<redacted>", client.url());
    }

    @ParameterizedTest
    @CsvSource(delimiter = '|', value = {
        "/v1/charges?token=t0k | /v1/charges?token=<redacted>",
        "/holds/p-1?page=2&access_token=t0k&sig=ab | /holds/p-1?page=2&access_token=<redacted>&sig=<redacted>",
        "/a;jsessionid=1;password=p;x=1 | /a;jsessionid=1;password=<redacted>;x=1",
        "//svc:s3cret@evil.example/x?api_key=k | //<redacted>@evil.example/x?api_key=<redacted>",
        "https://svc:s3cret@evil.example/x | https://<redacted>@evil.example/x",
        "x y?token=t0k | x y?token=<redacted>",
    })
    void aRecordsPathLosesItsPasswordLikeParametersAndUserInfo(String path, String shown) {
        assertEquals(shown, Urls.redactPath(path));
        assertEquals(shown, Urls.redactPath(shown), "redacting twice changes nothing");
    }

    @ParameterizedTest
    @ValueSource(strings = {"/holds/pay-1", "/search?keyword=fraud&page=2", "/p?token=${env:TOKEN}", "/users/a@b.example",
        "/p?token=", ""})
    void aPathWithoutACredentialIsLeftAsItWas(String path) {
        assertEquals(path, Urls.redactPath(path));
        assertNull(Urls.redactPath(null));
    }

    @ParameterizedTest
    @ValueSource(strings = {"holds?token=s3cret", "//svc:s3cret@evil.example/x", "/a b?token=s3cret",
        "/a?token=s3cret#frag", "/a/../b?token=s3cret", "/a%2Fb?access_token=s3cret", "/a?token=s3cret&x=%zz"})
    void aRefusedPathIsNeverPrintedWithItsCredentials(String path) {
        RejectedRequest e = assertThrows(RejectedRequest.class, () -> Targets.resolve(TargetsTest.TARGETS,
            TargetsTest.request("payments-api", path, null, Map.of())));
        assertEquals(RejectedRequest.BAD_PATH, e.kind());
        assertFalse(e.getMessage().contains("s3cret"), e.getMessage());
        assertTrue(e.getMessage().contains(Urls.REDACTED), e.getMessage());
    }
}
