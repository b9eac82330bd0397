import com.sun.tools.attach.VirtualMachine;

import javax.management.MBeanAttributeInfo;
import javax.management.MBeanServerConnection;
import javax.management.ObjectName;
import javax.management.remote.JMXConnector;
import javax.management.remote.JMXConnectorFactory;
import javax.management.remote.JMXServiceURL;

/**
 * Prints "objectName TAB attribute TAB value" for every MBean matching a pattern in a running
 * JVM, through the JDK's attach API (no JMX port needed). Used by the outbox tests to read the
 * sink's metrics from the real Connect worker: java JmxProbe.java PID 'kafka.connect:*'
 */
public class JmxProbe {
    public static void main(String[] args) throws Exception {
        VirtualMachine vm = VirtualMachine.attach(args[0]);
        try (JMXConnector connector = JMXConnectorFactory.connect(new JMXServiceURL(vm.startLocalManagementAgent()))) {
            MBeanServerConnection server = connector.getMBeanServerConnection();
            for (ObjectName name : server.queryNames(new ObjectName(args[1]), null)) {
                for (MBeanAttributeInfo attribute : server.getMBeanInfo(name).getAttributes()) {
                    System.out.println(name + "\t" + attribute.getName() + "\t" + server.getAttribute(name, attribute.getName()));
                }
            }
        } finally {
            vm.detach();
        }
    }
}
