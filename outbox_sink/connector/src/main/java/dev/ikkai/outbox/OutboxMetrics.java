package dev.ikkai.outbox;

import java.util.LinkedHashMap;

import org.apache.kafka.common.metrics.PluginMetrics;
import org.apache.kafka.common.metrics.Sensor;
import org.apache.kafka.common.metrics.stats.Avg;
import org.apache.kafka.common.metrics.stats.CumulativeCount;
import org.apache.kafka.common.metrics.stats.Max;
import org.apache.kafka.common.metrics.stats.Rate;

/**
 * The task's metrics, registered through Connect's plugin metrics (KIP-877), so they appear in
 * the worker's JMX next to Connect's own, tagged with the connector and task:
 * delivered-total, delivered-rate, retried-total, dead-lettered-total,
 * request-latency-avg-ms, request-latency-max-ms.
 */
final class OutboxMetrics {
    private final Sensor delivered;
    private final Sensor retried;
    private final Sensor deadLettered;
    private final Sensor latency;

    OutboxMetrics(PluginMetrics metrics) {
        LinkedHashMap<String, String> tags = new LinkedHashMap<>();
        delivered = metrics.addSensor("outbox-delivered");
        delivered.add(metrics.metricName("delivered-total", "Requests delivered (2xx).", tags), new CumulativeCount());
        delivered.add(metrics.metricName("delivered-rate", "Requests delivered per second.", tags), new Rate());
        retried = metrics.addSensor("outbox-retried");
        retried.add(metrics.metricName("retried-total", "Attempts that failed transiently and will be retried.", tags),
            new CumulativeCount());
        deadLettered = metrics.addSensor("outbox-dead-lettered");
        deadLettered.add(metrics.metricName("dead-lettered-total", "Requests sent to the dead-letter queue.", tags),
            new CumulativeCount());
        latency = metrics.addSensor("outbox-request-latency");
        latency.add(metrics.metricName("request-latency-avg-ms", "Average HTTP attempt latency.", tags), new Avg());
        latency.add(metrics.metricName("request-latency-max-ms", "Maximum HTTP attempt latency.", tags), new Max());
    }

    void delivered() {
        delivered.record();
    }

    void retried() {
        retried.record();
    }

    void deadLettered() {
        deadLettered.record();
    }

    void latency(long millis) {
        latency.record(millis);
    }
}
