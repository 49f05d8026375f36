#!/usr/bin/env python3
"""Real Kafka clients (confluent-kafka, librdkafka 2.x) against any bootstrap address: the
leader or the replica's read-only listener. The tests read both with the same code and
compare what they get.

Usage
-----
    python clients.py consume --bootstrap ADDR --topic T --partition P
                              [--isolation read_uncommitted|read_committed] [--timeout S]
    python clients.py metadata --bootstrap ADDR [--timeout S]
    python clients.py tail --bootstrap ADDR --topic T --partition P [--from OFFSET]

``consume`` reads one partition the way a consumer of the replica must: ``assign()`` from
offset 0, a ``group.id`` only because the Python client insists on one, never a commit
(``enable.auto.commit`` and ``enable.auto.offset.store`` false), until
``enable.partition.eof`` reports the end (the high watermark, or the last stable offset
under read_committed). It prints one JSON object:
``{"records": [{"offset", "key", "value", "headers": [[name, value], ...]}, ...],
"errors": ["..."]}`` with bytes as hex (null stays null). ``errors`` holds every
non-fatal error event the consumer saw on the way (the tests assert it is empty).

``metadata`` prints ``{"topics": {"T": [0, 1, 2], ...}, "brokers": ["host:port", ...]}``
from ``AdminClient.list_topics``.

``tail`` is a well-behaved consumer that never stops: ``assign()`` at ``--from`` (default 0),
polling until the process is killed, and prints one line
``{"offset": O}`` (flushed at once) for every record whose offset passes the highest printed
so far, so that the reader can time when each record arrived; an error event prints
``{"error": "..."}``.

Exit status 0 with the JSON on stdout; 1 with the reason on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient


def hexed(b: bytes | None) -> str | None:
    return None if b is None else b.hex()


def consume(args: argparse.Namespace) -> dict[str, Any]:
    errors: list[str] = []
    c = Consumer({
        "bootstrap.servers": args.bootstrap,
        "broker.address.family": "v4",
        "group.id": "replica-reader",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "isolation.level": args.isolation,
        "fetch.wait.max.ms": 50,
        "log_level": 3,
        "error_cb": lambda e: errors.append(str(e)),
        **(json.loads(args.conf) if args.conf else {}),
    })
    out: list[dict[str, Any]] = []
    try:
        c.assign([TopicPartition(args.topic, args.partition, 0)])
        deadline = time.monotonic() + args.timeout
        while True:
            if time.monotonic() > deadline:
                last = out[-1]["offset"] if out else None
                raise RuntimeError(f"{args.topic}[{args.partition}] from {args.bootstrap}: "
                                   f"no end of partition within {args.timeout} s, last "
                                   f"offset read {last}, errors {errors}")
            msg = c.poll(0.2)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    break
                raise RuntimeError(f"{args.topic}[{args.partition}] from "
                                   f"{args.bootstrap}: {err}")
            out.append({"offset": msg.offset(), "key": hexed(msg.key()),
                        "value": hexed(msg.value()),
                        "headers": [[k, hexed(v)] for k, v in (msg.headers() or [])]})
    finally:
        c.close()
    return {"records": out, "errors": errors}


def tail(args: argparse.Namespace) -> None:
    c = Consumer({
        "bootstrap.servers": args.bootstrap,
        "broker.address.family": "v4",
        "group.id": "replica-tail",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "log_level": 0,
        "error_cb": lambda e: print(json.dumps({"error": str(e)}), flush=True),
    })
    highest = -1
    try:
        c.assign([TopicPartition(args.topic, args.partition, args.start)])
        while True:
            msg = c.poll(0.1)
            if msg is None or msg.error() is not None:
                continue
            if msg.offset() > highest:
                highest = msg.offset()
                print(json.dumps({"offset": highest}), flush=True)
    finally:
        c.close()


def metadata(args: argparse.Namespace) -> dict[str, Any]:
    admin = AdminClient({"bootstrap.servers": args.bootstrap,
                         "broker.address.family": "v4", "log_level": 3})
    md = admin.list_topics(timeout=args.timeout)
    return {
        "topics": {name: sorted(t.partitions) for name, t in md.topics.items()
                   if t.error is None},
        "brokers": sorted(f"{b.host}:{b.port}" for b in md.brokers.values()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("consume")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, required=True)
    p.add_argument("--isolation", default="read_uncommitted",
                   choices=("read_uncommitted", "read_committed"))
    p.add_argument("--timeout", type=float, default=30)
    p.add_argument("--conf", default=None,
                   help="JSON object of more librdkafka settings (security.protocol, ...)")
    t = sub.add_parser("tail")
    t.add_argument("--bootstrap", required=True)
    t.add_argument("--topic", required=True)
    t.add_argument("--partition", type=int, required=True)
    t.add_argument("--from", dest="start", type=int, default=0)
    m = sub.add_parser("metadata")
    m.add_argument("--bootstrap", required=True)
    m.add_argument("--timeout", type=float, default=15)
    args = parser.parse_args()
    if args.command == "tail":
        try:
            tail(args)
        except (KeyboardInterrupt, BrokenPipeError):
            pass
        return 0
    try:
        result = consume(args) if args.command == "consume" else metadata(args)
    except Exception as e:  # noqa: BLE001 - the test prints the reason
        print(f"clients.py {args.command}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
