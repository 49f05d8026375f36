"""Apache Kafka itself for the integration tests: installed from Maven Central, run as KRaft
clusters on loopback.

Installing
----------
``install(version)`` writes a one-dependency-list pom under ``target/kafka/<version>/`` and runs
``mvn dependency:copy-dependencies`` with the Maven repository at ``target/kafka/m2``: the jars
of ``org.apache.kafka:kafka_2.13`` and ``org.apache.kafka:kafka-tools`` (and a logging binding)
land in ``target/kafka/<version>/lib``. A marker file makes later runs download nothing. Several
test binaries may ask at once: a file lock lets one install while the others wait. Without
``java`` or ``mvn``, or when Maven Central cannot be reached, it fails with one line saying
what is missing.

Clusters
--------
``KafkaCluster(version, nodes, security)`` starts ``nodes`` combined broker+controller nodes
with a static quorum (``controller.quorum.voters``), each on free loopback ports with its own
log dir, after formatting every node's storage with Kafka's ``StorageTool``. It waits until
every node logs "Kafka Server started" and Metadata lists every broker. Nodes can be killed
with SIGKILL, stopped (SIGTERM: a controlled shutdown) and started again. Heaps are 512 MB.

With ``security``, each node also has a ``SASL_SSL`` listener (SCRAM-SHA-512; the user is made
by ``StorageTool format --add-scram``) and an ``SSL`` listener that requires a client
certificate (mutual TLS). The CA, server and client certificates are made with the openssl
CLI. Brokers talk to each other over PLAINTEXT.

Each node logs to ``node-<id>.log`` in the cluster's temporary directory; Kafka's request log
(``kafka.request.logger`` at DEBUG: one line per request with its header and body) goes to
``requests-<id>.log``.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from typing import Any

# The newest 4.x that resolves on Maven Central, and the last 3.x line.
KAFKA_4 = "4.4.0"
KAFKA_3 = "3.9.2"
LOG4J2 = "2.25.3"
SCRAM_USER = "replica"
SCRAM_PASSWORD = "replica-scram-secret"


def repo_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def kafka_home() -> str:
    return os.path.join(repo_root(), "target", "kafka")


def _pom(version: str) -> str:
    deps = [("org.apache.kafka", "kafka_2.13", version),
            ("org.apache.kafka", "kafka-tools", version)]
    if version.startswith("4."):
        # Kafka 4 logs through log4j2; it still uses the SLF4J 1.7 API.
        deps += [("org.apache.logging.log4j", "log4j-slf4j-impl", LOG4J2),
                 ("org.apache.logging.log4j", "log4j-core", LOG4J2)]
    # Kafka 3.9 brings its own binding: slf4j-reload4j.
    body = "\n".join(
        f"    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
        f"<version>{v}</version></dependency>" for g, a, v in deps)
    return f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.replica-follower.tests</groupId>
  <artifactId>apache-kafka-{version}</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
{body}
  </dependencies>
</project>
"""


def install(version: str) -> str:
    """The classpath directory of Apache Kafka ``version``, fetched on first use."""
    home = kafka_home()
    os.makedirs(home, exist_ok=True)
    vdir = os.path.join(home, version)
    lib = os.path.join(vdir, "lib")
    marker = os.path.join(vdir, ".installed")
    pom = _pom(version)
    want = hashlib.sha256(pom.encode()).hexdigest()
    with open(os.path.join(home, "install.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(marker) as f:
                if f.read().strip() == want:
                    return lib
        except OSError:
            pass
        for tool in ("java", "mvn"):
            if shutil.which(tool) is None:
                raise RuntimeError(
                    f"Apache Kafka {version} cannot be installed: `{tool}` is not on PATH "
                    "(the Kafka tests need Java 17 and Maven)")
        os.makedirs(vdir, exist_ok=True)
        with open(os.path.join(vdir, "pom.xml"), "w") as f:
            f.write(pom)
        staging = lib + ".partial"
        shutil.rmtree(staging, ignore_errors=True)
        try:
            run = subprocess.run(
                ["mvn", "-B", "-q", f"-Dmaven.repo.local={os.path.join(home, 'm2')}",
                 "-Dmaven.wagon.http.retryHandler.count=2",
                 "-Daether.connector.connectTimeout=30000",
                 "-Daether.connector.requestTimeout=60000",
                 "-f", os.path.join(vdir, "pom.xml"), "dependency:copy-dependencies",
                 f"-DoutputDirectory={staging}", "-DincludeScope=runtime"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
        except subprocess.TimeoutExpired as e:
            raise RuntimeError(f"Apache Kafka {version} could not be fetched from Maven "
                               "Central with mvn within 15 minutes") from e
        if run.returncode != 0:
            text = re.sub(r"\x1b\[[0-9;]*m", "", run.stdout)
            last = [line for line in text.splitlines() if "ERROR" in line][:1]
            raise RuntimeError(
                f"Apache Kafka {version} could not be fetched from Maven Central with mvn "
                f"(exit {run.returncode}): {last[0] if last else text[-300:].strip()}")
        shutil.rmtree(lib, ignore_errors=True)
        os.rename(staging, lib)
        with open(marker, "w") as f:
            f.write(want + "\n")
        return lib


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_taken: set[int] = set()


def free_port() -> int:
    """A free loopback port below the ephemeral range: a node that is down for a while keeps
    its port, which a client's outgoing connection could otherwise take meanwhile."""
    import random
    high = min(_ephemeral_low(), 65536)
    low = max(1024, high - 12000)
    for _ in range(1000):
        port = random.randrange(low, high)
        if port in _taken:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _taken.add(port)
        return port
    raise RuntimeError(f"no free loopback port in {low}..{high}")


# Looked up once here: a child between fork and exec must not load libraries (threads of the
# parent, librdkafka's, may hold the loader's lock).
_prctl = ctypes.CDLL(None).prctl


def _pdeathsig() -> None:
    _prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    # A node keeps a descriptor open per partition's segment: thousands of partitions need
    # more than a 1024 soft limit. Raised to the hard limit.
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def java_major() -> int | None:
    """The major version of `java` on PATH, None when there is none."""
    if shutil.which("java") is None:
        return None
    r = subprocess.run(["java", "-version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=60)
    m = re.search(r'version "(\d+)(?:\.(\d+))?', r.stdout)
    if not m:
        return 0
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


LOG4J2_CONFIG = """status = warn
appender.node.type = File
appender.node.name = NODE
appender.node.fileName = ${sys:kafka.node.log}
appender.node.layout.type = PatternLayout
appender.node.layout.pattern = [%d] %p %m (%c)%n
appender.requests.type = File
appender.requests.name = REQUESTS
appender.requests.fileName = ${sys:kafka.requests.log}
appender.requests.layout.type = PatternLayout
appender.requests.layout.pattern = [%d] %m%n
rootLogger.level = INFO
rootLogger.appenderRef.node.ref = NODE
logger.requests.name = kafka.request.logger
logger.requests.level = DEBUG
logger.requests.additivity = false
logger.requests.appenderRef.requests.ref = REQUESTS
"""

LOG4J1_CONFIG = """log4j.rootLogger=INFO, node
log4j.appender.node=org.apache.log4j.FileAppender
log4j.appender.node.File=${kafka.node.log}
log4j.appender.node.layout=org.apache.log4j.PatternLayout
log4j.appender.node.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.appender.requests=org.apache.log4j.FileAppender
log4j.appender.requests.File=${kafka.requests.log}
log4j.appender.requests.layout=org.apache.log4j.PatternLayout
log4j.appender.requests.layout.ConversionPattern=[%d] %m%n
log4j.logger.kafka.request.logger=DEBUG, requests
log4j.additivity.kafka.request.logger=false
"""

STARTED = "Kafka Server started"


class Node:
    def __init__(self, node_id: int, workdir: str, security: bool) -> None:
        self.id = node_id
        self.broker_port = free_port()
        self.controller_port = free_port()
        self.sasl_port = free_port() if security else None
        self.ssl_port = free_port() if security else None
        self.log_dir = os.path.join(workdir, f"data-{node_id}")
        self.props = os.path.join(workdir, f"node-{node_id}.properties")
        self.log = os.path.join(workdir, f"node-{node_id}.log")
        self.requests = os.path.join(workdir, f"requests-{node_id}.log")
        self.stdout = os.path.join(workdir, f"node-{node_id}.out")
        self.proc: subprocess.Popen | None = None

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"broker": f"127.0.0.1:{self.broker_port}",
                             "log_dir": self.log_dir, "log": self.log,
                             "requests": self.requests}
        if self.sasl_port:
            d["sasl_ssl"] = f"127.0.0.1:{self.sasl_port}"
            d["ssl"] = f"127.0.0.1:{self.ssl_port}"
        return d


class KafkaCluster:
    def __init__(self, version: str, nodes: int, security: bool = False,
                 broker_config: dict[str, str] | None = None,
                 request_log: bool = True) -> None:
        if nodes < 1:
            raise RuntimeError("a cluster needs at least one node")
        self.version = version
        self.lib = install(version)
        major = java_major()
        if major is None:
            raise RuntimeError("Apache Kafka cannot start: `java` is not on PATH "
                               "(the Kafka tests need Java 17 or later)")
        if major < 17:
            raise RuntimeError(f"Apache Kafka cannot start: `java` on PATH is Java {major}; "
                               "the Kafka tests need Java 17 or later")
        self.classpath = os.path.join(self.lib, "*")
        self.workdir = tempfile.mkdtemp(prefix=f"kafka-{version}-")
        self.security = security
        self.nodes = {i: Node(i, self.workdir, security) for i in range(1, nodes + 1)}
        self.tls: dict[str, str] = {}
        if security:
            self._make_certificates()
        # log4j2 tells the format by the extension.
        self.log_config = os.path.join(
            self.workdir, "log4j2.properties" if version.startswith("4.") else "log4j.properties")
        with open(self.log_config, "w") as f:
            config = LOG4J2_CONFIG if version.startswith("4.") else LOG4J1_CONFIG
            if not request_log:
                # Benchmarks: a request log line holds the whole request, which at thousands
                # of partitions costs the broker more than serving it.
                config = (config.replace("logger.requests.level = DEBUG",
                                         "logger.requests.level = WARN")
                          .replace("log4j.logger.kafka.request.logger=DEBUG",
                                   "log4j.logger.kafka.request.logger=WARN"))
            f.write(config)
        voters = ",".join(f"{n.id}@127.0.0.1:{n.controller_port}" for n in self.nodes.values())
        rf = min(3, nodes)
        for n in self.nodes.values():
            self._write_properties(n, voters, rf, broker_config or {})
        try:
            self._format()
            for n in self.nodes.values():
                self.start_node(n.id, wait=False)
            for n in self.nodes.values():
                self._wait_started(n, 0)
        except BaseException:
            self.shutdown()
            raise

    # -- configuration -----------------------------------------------------------------
    def _write_properties(self, n: Node, voters: str, rf: int, extra: dict[str, str]) -> None:
        listeners = [f"PLAINTEXT://127.0.0.1:{n.broker_port}"]
        protocols = ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
        if self.security:
            listeners += [f"SASL_SSL://127.0.0.1:{n.sasl_port}", f"SSL://127.0.0.1:{n.ssl_port}"]
            protocols += ["SASL_SSL:SASL_SSL", "SSL:SSL"]
        props = {
            "process.roles": "broker,controller",
            "node.id": str(n.id),
            "controller.quorum.voters": voters,
            "listeners": ",".join(listeners + [f"CONTROLLER://127.0.0.1:{n.controller_port}"]),
            "advertised.listeners": ",".join(listeners),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": ",".join(protocols),
            "log.dirs": n.log_dir,
            "offsets.topic.replication.factor": str(rf),
            "offsets.topic.num.partitions": "3",
            "transaction.state.log.replication.factor": str(rf),
            "transaction.state.log.min.isr": str(min(2, rf)),
            "transaction.state.log.num.partitions": "3",
            "group.initial.rebalance.delay.ms": "0",
            # The tests move leaders themselves.
            "auto.leader.rebalance.enable": "false",
            # A killed node is fenced, and its partitions get new leaders, within 6 s.
            "broker.session.timeout.ms": "6000",
            "broker.heartbeat.interval.ms": "1000",
            # Log cleaner and retention act within seconds.
            "log.cleaner.backoff.ms": "500",
            "log.retention.check.interval.ms": "1000",
            "log.segment.delete.delay.ms": "1000",
            "file.delete.delay.ms": "1000",
            # Two cores: few threads.
            "num.network.threads": "2",
            "num.io.threads": "2",
            "background.threads": "2",
            "num.replica.fetchers": "1",
            "num.recovery.threads.per.data.dir": "1",
            "log.cleaner.threads": "1",
        }
        if self.security:
            props.update({
                "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;",
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": self.tls["server_pem"],
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": self.tls["ca"],
                "ssl.endpoint.identification.algorithm": "",
                "listener.name.ssl.ssl.client.auth": "required",
            })
        props.update(extra)
        with open(n.props, "w") as f:
            for k, v in props.items():
                f.write(f"{k}={v}\n")

    def _make_certificates(self) -> None:
        d = os.path.join(self.workdir, "tls")
        os.makedirs(d)
        p = lambda name: os.path.join(d, name)  # noqa: E731

        def openssl(*args: str) -> None:
            r = subprocess.run(["openssl", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
            if r.returncode != 0:
                raise RuntimeError(f"openssl {args[0]} failed: {r.stdout[-400:]}")

        if shutil.which("openssl") is None:
            raise RuntimeError("the Kafka security tests need the openssl CLI (Debian: openssl)")
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                "-subj", "/CN=replica-follower test CA", "-keyout", p("ca.key"),
                "-out", p("ca.pem"), "-addext", "basicConstraints=critical,CA:TRUE",
                "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        for name, ext in (("server", "subjectAltName=IP:127.0.0.1,DNS:localhost"),
                          ("client", "extendedKeyUsage=clientAuth")):
            openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
                    "-keyout", p(f"{name}.key.pem"), "-out", p(f"{name}.csr"))
            with open(p(f"{name}.ext"), "w") as f:
                f.write(ext + "\n")
            openssl("x509", "-req", "-in", p(f"{name}.csr"), "-CA", p("ca.pem"),
                    "-CAkey", p("ca.key"), "-CAcreateserial", "-days", "2",
                    "-extfile", p(f"{name}.ext"), "-out", p(f"{name}.pem"))
            # PKCS#8, as Kafka's PEM key store reads it.
            openssl("pkcs8", "-topk8", "-nocrypt", "-in", p(f"{name}.key.pem"),
                    "-out", p(f"{name}.key"))
        with open(p("server-store.pem"), "w") as out:
            for part in ("server.key", "server.pem"):
                with open(p(part)) as f:
                    out.write(f.read())
        self.tls = {"ca": p("ca.pem"), "server_pem": p("server-store.pem"),
                    "client_cert": p("client.pem"), "client_key": p("client.key")}

    def _format(self) -> None:
        cluster_id = self.run_tool("kafka.tools.StorageTool", ["random-uuid"]).strip()
        self.cluster_id = cluster_id.splitlines()[-1]
        procs = []
        for n in self.nodes.values():
            args = ["format", "-t", self.cluster_id, "-c", n.props]
            if self.security:
                args += ["--add-scram",
                         f"SCRAM-SHA-512=[name={SCRAM_USER},password={SCRAM_PASSWORD}]"]
            procs.append((n, self._java("kafka.tools.StorageTool", args,
                                        os.path.join(self.workdir, f"format-{n.id}.out"))))
        for n, proc in procs:
            if proc.wait(120) != 0:
                with open(os.path.join(self.workdir, f"format-{n.id}.out")) as f:
                    raise RuntimeError(f"StorageTool format of node {n.id} failed: "
                                       f"{f.read()[-600:]}")

    # -- processes ---------------------------------------------------------------------
    def _jvm_args(self, log: str, requests: str) -> list[str]:
        args = ["java", "-Xmx512m", "-Xms64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-Djava.awt.headless=true", f"-Dkafka.node.log={log}",
                f"-Dkafka.requests.log={requests}"]
        if self.version.startswith("4."):
            args.append(f"-Dlog4j2.configurationFile={self.log_config}")
        else:
            args.append(f"-Dlog4j.configuration=file:{self.log_config}")
        return args + ["-cp", self.classpath]

    def _java(self, main: str, args: list[str], out_path: str) -> subprocess.Popen:
        with open(out_path, "wb") as out:
            return subprocess.Popen(
                self._jvm_args(os.path.join(self.workdir, "tools.log"),
                               os.path.join(self.workdir, "tools-requests.log"))
                + [main, *args],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                cwd=self.workdir, preexec_fn=_pdeathsig)

    def run_tool(self, main: str, args: list[str], timeout_s: float = 120,
                 check: bool = True) -> str:
        """Runs one of Kafka's main classes to completion; its stdout and stderr."""
        out_path = os.path.join(self.workdir, f"tool-{uuid.uuid4().hex[:8]}.out")
        proc = self._java(main, args, out_path)
        try:
            status = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            status = None
        with open(out_path, errors="replace") as f:
            text = f.read()
        os.unlink(out_path)
        if check and status != 0:
            raise RuntimeError(f"{main} {' '.join(args)} exited with {status}: {text[-1500:]}")
        return text

    def start_node(self, node_id: int, wait: bool = True) -> None:
        n = self.nodes[node_id]
        if n.proc is not None and n.proc.poll() is None:
            raise RuntimeError(f"node {node_id} is already running")
        started_before = self._count_started(n)
        with open(n.stdout, "ab") as out:
            n.proc = subprocess.Popen(
                self._jvm_args(n.log, n.requests) + ["kafka.Kafka", n.props],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                cwd=self.workdir, preexec_fn=_pdeathsig)
        if wait:
            self._wait_started(n, started_before)

    @staticmethod
    def _count_started(n: Node) -> int:
        try:
            with open(n.log, errors="replace") as f:
                return f.read().count(STARTED)
        except OSError:
            return 0

    def _wait_started(self, n: Node, before: int, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while self._count_started(n) <= before:
            if n.proc is None or n.proc.poll() is not None:
                raise RuntimeError(f"Kafka node {n.id} exited while starting: "
                                   f"{self.tail(n.log)}{self.tail(n.stdout)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kafka node {n.id} did not start within {timeout_s} s: "
                                   f"{self.tail(n.log)}")
            time.sleep(0.1)

    def kill9_node(self, node_id: int) -> None:
        n = self.nodes[node_id]
        if n.proc is None or n.proc.poll() is not None:
            raise RuntimeError(f"node {node_id} is not running")
        n.proc.kill()
        n.proc.wait()

    def stop_node(self, node_id: int, timeout_s: float = 60) -> None:
        n = self.nodes[node_id]
        if n.proc is None or n.proc.poll() is not None:
            raise RuntimeError(f"node {node_id} is not running")
        n.proc.terminate()
        try:
            n.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            n.proc.kill()
            n.proc.wait()
            raise RuntimeError(f"node {node_id} did not stop within {timeout_s} s; killed")

    def running(self) -> list[int]:
        return [i for i, n in self.nodes.items() if n.proc is not None and n.proc.poll() is None]

    @staticmethod
    def tail(path: str, size: int = 1500) -> str:
        try:
            with open(path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - size))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.broker_port}" for n in self.nodes.values())

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"version": self.version, "cluster_id": self.cluster_id,
                             "lib": self.lib, "workdir": self.workdir,
                             "nodes": {str(i): n.describe() for i, n in self.nodes.items()}}
        if self.security:
            d["tls"] = {k: v for k, v in self.tls.items() if k != "server_pem"}
            d["scram"] = {"mechanism": "SCRAM-SHA-512", "username": SCRAM_USER,
                          "password": SCRAM_PASSWORD}
        return d

    def shutdown(self) -> None:
        for n in self.nodes.values():
            if n.proc is not None and n.proc.poll() is None:
                n.proc.kill()
                n.proc.wait()
        if os.environ.get("LEADERS_KEEP_LOGS"):
            return
        shutil.rmtree(self.workdir, ignore_errors=True)
