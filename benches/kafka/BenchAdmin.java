// The Admin calls benches/kafka_driver.py needs and confluent-kafka 2.16.1 lacks
// (AlterPartitionReassignments), and the partition's replicas and ISR as Kafka's own Admin
// sees them. Run as a single-file source program on Kafka's classpath; one command a line on
// stdin, one answer a line on stdout ("ok ..." or "error ...").
//   create TOPIC BROKER          one partition, its only replica on BROKER
//   reassign TOPIC P B1,B2,...   starts a reassignment and returns once the controller took it
//   describe TOPIC P             "ok REPLICAS ISR", each a comma-separated list
//   brokers                      "ok N" brokers registered and unfenced
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.Node;

public class BenchAdmin {
    static String ids(List<Node> nodes) {
        return nodes.stream().map(n -> Integer.toString(n.id())).collect(Collectors.joining(","));
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        try (Admin admin = Admin.create(props)) {
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
            String line;
            while ((line = in.readLine()) != null) {
                String[] w = line.trim().split(" ");
                String answer;
                try {
                    switch (w[0]) {
                        case "create": {
                            Map<Integer, List<Integer>> assignment =
                                Map.of(0, List.of(Integer.parseInt(w[2])));
                            admin.createTopics(List.of(new NewTopic(w[1], assignment))).all().get();
                            answer = "ok";
                            break;
                        }
                        case "reassign": {
                            List<Integer> replicas = new ArrayList<>();
                            for (String id : w[3].split(",")) {
                                replicas.add(Integer.parseInt(id));
                            }
                            TopicPartition tp = new TopicPartition(w[1], Integer.parseInt(w[2]));
                            admin.alterPartitionReassignments(
                                Map.of(tp, Optional.of(new NewPartitionReassignment(replicas))))
                                .all().get();
                            answer = "ok";
                            break;
                        }
                        case "describe": {
                            TopicDescription d =
                                admin.describeTopics(List.of(w[1])).allTopicNames().get().get(w[1]);
                            TopicPartitionInfo p = d.partitions().get(Integer.parseInt(w[2]));
                            answer = "ok " + ids(p.replicas()) + " " + ids(p.isr());
                            break;
                        }
                        case "brokers":
                            answer = "ok " + admin.describeCluster().nodes().get().size();
                            break;
                        default:
                            answer = "error unknown command " + w[0];
                    }
                } catch (Exception e) {
                    answer = "error " + e.toString().replace('\n', ' ');
                }
                System.out.println(answer);
                System.out.flush();
            }
        }
    }
}
