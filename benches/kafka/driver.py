"""Apache Kafka for benches/kafka.rs: a 2-node KRaft cluster (tests/support/kafka_cluster.py)
whose nodes run with Kafka's own JVM settings, and the steps the bench times on it.

The bench starts this with the cluster's settings as arguments, reads one JSON line with the
cluster's description, then sends one JSON command a line and reads one JSON answer a line:

- ``{"cmd": "produce", "topic": T, "records": N, "record_size": S, "producer_props": [...]}``:
  creates T with one partition on node 1 only and runs Kafka's ProducerPerformance (acks=1).
- ``{"cmd": "node_config", "node": 2, "config": {...}}``: restarts the node with these broker
  settings on top of the cluster's.
- ``{"cmd": "follow", "topic": T, "follower": 2}``: reassigns T-0 to [1, follower] and times it
  until the follower is in the ISR; the follower's CPU (utime + stime) over that time.
- ``{"cmd": "unfollow", "topic": T, "follower": 2}``: reassigns T-0 back to [1] and waits until
  the follower has deleted its copy.

Admin calls go through benches/kafka/BenchAdmin.java, started once on Kafka's classpath.
The cluster stops when stdin closes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "support"))
import kafka_cluster  # noqa: E402

# What bin/kafka-run-class.sh and bin/kafka-server-start.sh give a broker by default, with a
# 1 GB heap (theirs too).
KAFKA_JVM = ["-Xmx1G", "-Xms1G", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
             "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
             "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true"]


# The test clusters log every request (kafka.request.logger at DEBUG, for the tests that read
# what a client sent): a cost on each node per request that a shipped broker does not pay.
kafka_cluster.LOG4J2_CONFIG = kafka_cluster.LOG4J2_CONFIG.replace(
    "logger.requests.level = DEBUG", "logger.requests.level = INFO")


class BenchCluster(kafka_cluster.KafkaCluster):
    def _jvm_args(self, log: str, requests: str) -> list[str]:
        args = super()._jvm_args(log, requests)
        # The test clusters' small-machine flags (heap, serial GC, C1 only) give way to
        # Kafka's own: the follower is measured as Kafka ships it.
        args = [a for a in args if not a.startswith(("-Xm", "-XX:"))]
        return args[:1] + KAFKA_JVM + args[1:]

    def reconfigure(self, node_id: int, extra: dict[str, str]) -> None:
        voters = ",".join(f"{n.id}@127.0.0.1:{n.controller_port}" for n in self.nodes.values())
        rf = min(3, len(self.nodes))
        self.stop_node(node_id)
        self._write_properties(self.nodes[node_id], voters, rf, extra)
        self.start_node(node_id)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Driver:
    def __init__(self, cluster: BenchCluster) -> None:
        self.cluster = cluster
        self.admin = subprocess.Popen(
            ["java", "-Xmx256m", "-cp", cluster.classpath,
             f"-Dlog4j2.configurationFile={cluster.log_config}",
             f"-Dkafka.node.log={os.path.join(cluster.workdir, 'admin.log')}",
             f"-Dkafka.requests.log={os.path.join(cluster.workdir, 'admin-requests.log')}",
             os.path.join(HERE, "BenchAdmin.java"), cluster.bootstrap()],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
            preexec_fn=kafka_cluster._pdeathsig)

    def call(self, line: str) -> list[str]:
        assert self.admin.stdin is not None and self.admin.stdout is not None
        self.admin.stdin.write(line + "\n")
        self.admin.stdin.flush()
        answer = self.admin.stdout.readline().split()
        if not answer or answer[0] != "ok":
            raise RuntimeError(f"Admin {line!r}: {' '.join(answer) or 'no answer'}")
        return answer[1:]

    def describe(self, topic: str) -> tuple[list[int], list[int]]:
        words = self.call(f"describe {topic} 0") + ["", ""]
        ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
        return ints(words[0]), ints(words[1])

    def wait_brokers(self, n: int) -> None:
        deadline = time.monotonic() + 60
        while int(self.call("brokers")[0]) < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"fewer than {n} brokers registered after 60 s")
            time.sleep(0.2)

    def produce(self, cmd: dict) -> dict:
        topic = cmd["topic"]
        self.call(f"create {topic} 1")
        t0 = time.monotonic()
        out = self.cluster.run_tool(
            "org.apache.kafka.tools.ProducerPerformance",
            ["--topic", topic, "--num-records", str(cmd["records"]),
             "--record-size", str(cmd["record_size"]), "--throughput", "-1",
             "--producer-props", f"bootstrap.servers={self.cluster.bootstrap()}", "acks=1",
             *cmd.get("producer_props", [])],
            timeout_s=900)
        return {"ok": True, "seconds": time.monotonic() - t0,
                "summary": out.strip().splitlines()[-1] if out.strip() else ""}

    def follow(self, cmd: dict) -> dict:
        topic, follower = cmd["topic"], int(cmd["follower"])
        pid = self.cluster.nodes[follower].proc.pid
        cpu0 = cpu_seconds(pid)
        t0 = time.monotonic()
        self.call(f"reassign {topic} 0 1,{follower}")
        polls = 0
        while True:
            _, isr = self.describe(topic)
            polls += 1
            if follower in isr:
                break
            if time.monotonic() - t0 > 600:
                raise RuntimeError(f"node {follower} not in the ISR of {topic}-0 after 600 s")
            time.sleep(0.01)
        wall = time.monotonic() - t0
        return {"ok": True, "wall": wall, "cpu": cpu_seconds(pid) - cpu0, "polls": polls}

    def unfollow(self, cmd: dict) -> dict:
        topic, follower = cmd["topic"], int(cmd["follower"])
        self.call(f"reassign {topic} 0 1")
        log_dir = self.cluster.nodes[follower].log_dir
        deadline = time.monotonic() + 120
        while True:
            replicas, _ = self.describe(topic)
            left = [d for d in os.listdir(log_dir) if d.startswith(f"{topic}-0")]
            if replicas == [1] and not left:
                return {"ok": True}
            if time.monotonic() > deadline:
                raise RuntimeError(f"node {follower} still holds {left} of {topic} "
                                   f"(replicas {replicas}) after 120 s")
            time.sleep(0.1)

    def handle(self, cmd: dict) -> dict:
        name = cmd.get("cmd")
        if name == "produce":
            return self.produce(cmd)
        if name == "follow":
            return self.follow(cmd)
        if name == "unfollow":
            return self.unfollow(cmd)
        if name == "node_config":
            node = int(cmd["node"])
            self.cluster.reconfigure(node, {str(k): str(v) for k, v in cmd["config"].items()})
            self.wait_brokers(len(self.cluster.nodes))
            return {"ok": True, "pid": self.cluster.nodes[node].proc.pid}
        raise RuntimeError(f"unknown command {name!r}")


def main() -> int:
    config = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    cluster = BenchCluster(kafka_cluster.KAFKA_4, 2, broker_config=config)
    try:
        driver = Driver(cluster)
        driver.wait_brokers(2)
        info = {"ok": True, "bootstrap": cluster.bootstrap(), "workdir": cluster.workdir,
                "classpath": cluster.classpath, "log_config": cluster.log_config,
                "nodes": {str(i): {"broker": f"127.0.0.1:{n.broker_port}",
                                   "log_dir": n.log_dir, "pid": n.proc.pid}
                          for i, n in cluster.nodes.items()}}
        print(json.dumps(info), flush=True)
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                answer = driver.handle(json.loads(line))
            except Exception as e:  # noqa: BLE001 - every failure is answered, not fatal
                answer = {"ok": False, "error": str(e)}
            print(json.dumps(answer), flush=True)
    finally:
        cluster.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
