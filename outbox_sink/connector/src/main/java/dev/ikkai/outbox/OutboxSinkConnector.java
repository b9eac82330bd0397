package dev.ikkai.outbox;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.apache.kafka.common.config.AbstractConfig;
import org.apache.kafka.common.config.Config;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.config.ConfigValue;
import org.apache.kafka.connect.connector.Task;
import org.apache.kafka.connect.sink.SinkConnector;

/**
 * Delivers outbox.requests to allow-listed HTTP targets with Idempotency-Key = decision_id and
 * writes a receipt for every final outcome. See {@link OutboxSinkTask} for the delivery rules.
 */
public final class OutboxSinkConnector extends SinkConnector {
    static final String TOLERANCE = "errors.tolerance";

    private Map<String, String> config;

    @Override
    public String version() {
        return SinkVersion.NUMBER;
    }

    @Override
    public void start(Map<String, String> props) {
        new OutboxSinkConfig(props);  // fail the connector at once on a bad config, not each task later
        this.config = Map.copyOf(props);
    }

    @Override
    public Class<? extends Task> taskClass() {
        return OutboxSinkTask.class;
    }

    @Override
    public List<Map<String, String>> taskConfigs(int maxTasks) {
        List<Map<String, String>> tasks = new ArrayList<>();
        for (int i = 0; i < maxTasks; i++) {
            tasks.add(config);
        }
        return tasks;
    }

    @Override
    public void stop() {
    }

    @Override
    public ConfigDef config() {
        return OutboxSinkConfig.DEFINITION;
    }

    /** Besides the declared keys: the targets, and a dead-letter queue the task can report to. */
    @Override
    public Config validate(Map<String, String> props) {
        Config result = super.validate(props);
        ConfigValue targets = result.configValues().stream()
            .filter(v -> v.name().equals(OutboxSinkConfig.TARGETS)).findFirst().orElseThrow();
        if (targets.errorMessages().isEmpty()) {
            try {
                Targets.parse(ConfigDef.parseType(OutboxSinkConfig.TARGETS, props.get(OutboxSinkConfig.TARGETS), ConfigDef.Type.LIST)
                    instanceof List<?> l ? l.stream().map(String::valueOf).toList() : List.of(), props);
            } catch (ConfigException e) {
                targets.addErrorMessage(e.getMessage());
            }
        }
        ConfigValue registry = result.configValues().stream()
            .filter(v -> v.name().equals(OutboxSinkConfig.REGISTRY_URL)).findFirst().orElseThrow();
        if (result.configValues().stream().allMatch(v -> v.errorMessages().isEmpty())) {
            try {
                OutboxSinkConfig.checkRegistry(new AbstractConfig(OutboxSinkConfig.DEFINITION, props, false));
            } catch (ConfigException e) {
                registry.addErrorMessage(e.getMessage());
            }
        }
        if (!"all".equals(props.get(TOLERANCE))) {
            targets.addErrorMessage("the outbox sink needs " + TOLERANCE + "=all and a dead-letter queue ("
                + OutboxSinkConfig.DLQ_TOPIC + "), so a rejected request is parked there instead of failing the task");
        } else if (props.getOrDefault(OutboxSinkConfig.DLQ_TOPIC, "").isBlank()) {
            targets.addErrorMessage("set " + OutboxSinkConfig.DLQ_TOPIC + " (e.g. dlq.outbox): rejected requests are parked there");
        }
        return result;
    }
}
