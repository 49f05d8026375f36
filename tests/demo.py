"""Drives the demo (see demo.sh): a Tansu leader, a producer, and replica-follower."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    binary, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    leader = subprocess.Popen([sys.executable, os.path.join(HERE, "support", "leaders.py"), "serve", "--kind", "tansu"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def cmd(**c):
        leader.stdin.write(json.dumps(c) + "\n")
        leader.stdin.flush()
        reply = json.loads(leader.stdout.readline())
        if not reply.get("ok"):
            sys.exit(f"leader command {c} failed: {reply}")
        return reply

    bootstrap = json.loads(leader.stdout.readline())["bootstrap"]
    print(f"== Tansu leader at {bootstrap}")
    cmd(cmd="create_topic", topic="demo", partitions=3)
    codecs = ["none", "gzip", "snappy", "lz4", "zstd"]
    for i, codec in enumerate(codecs):
        for p in range(3):
            cmd(cmd="produce", topic="demo", partition=p, count=2000, codec=codec, seed=i * 10 + p, batch_records=100)
    print("== produced 10,000 records to each of 3 partitions, 2,000 per codec")

    data = os.path.join(work, "data")
    config = os.path.join(work, "follower.toml")
    with open(config, "w") as f:
        f.write(f'data_dir = "{data}"\nbootstrap_servers = ["{bootstrap}"]\n\n[[follow]]\ntopic = "demo"\n\n'
                "[log]\nsegment_bytes = 1048576\n\n[checkpoint]\ninterval_ms = 1000\n")
    log = open(os.path.join(work, "daemon.log"), "a")

    def start():
        return subprocess.Popen([binary, "run", "--config", config], stderr=log)

    def show(*args):
        out = subprocess.run([binary, *args], capture_output=True, text=True)
        print(out.stdout + out.stderr, end="")
        return out.returncode

    def wait_for(target):
        deadline = time.time() + 60
        while time.time() < deadline:
            out = subprocess.run([binary, "status", "--json", "--data-dir", data], capture_output=True, text=True)
            if out.returncode == 0:
                parts = json.loads(out.stdout)["partitions"]
                if len(parts) == 3 and all(p["log_end_offset"] >= target for p in parts):
                    return
            time.sleep(0.2)
        sys.exit("the follower did not catch up in 60 s; see " + log.name)

    print(f"== starting replica-follower (log: {log.name})")
    daemon = start()
    wait_for(10000)
    for p in range(3):
        cmd(cmd="produce", topic="demo", partition=p, count=3000, codec="zstd", seed=99 + p, batch_records=100)
    wait_for(13000)
    # The daemon publishes its live state (lag, state, high watermark) every second.
    time.sleep(1.5)
    print("== caught up with 13,000 records a partition; status while running:")
    show("status", "--data-dir", data)
    daemon.send_signal(signal.SIGTERM)
    print(f"== SIGTERM: exit code {daemon.wait(timeout=30)}")
    for p in range(3):
        cmd(cmd="produce", topic="demo", partition=p, count=1000, codec="lz4", seed=500 + p, batch_records=100)
    print("== produced 1,000 more a partition while stopped; restarting")
    daemon = start()
    wait_for(14000)
    daemon.send_signal(signal.SIGTERM)
    print(f"== caught up again; SIGTERM: exit code {daemon.wait(timeout=30)}")
    show("status", "--data-dir", data)
    print("== verify:")
    show("verify", "--data-dir", data)
    print("== first records of demo-0:")
    out = subprocess.run([binary, "dump", "--data-dir", data, "--topic", "demo", "--partition", "0"], capture_output=True, text=True)
    print("\n".join(out.stdout.splitlines()[:6]))
    print("== offsets before now on demo-0 (newest first, at most 5):")
    show("offsets", "--data-dir", data, "--topic", "demo", "--partition", "0", "--time", str(int(time.time() * 1000)), "--max", "5")
    print("== checkpoint files:")
    for name in ["replication-offset-checkpoint", "recovery-point-offset-checkpoint", "log-start-offset-checkpoint"]:
        with open(os.path.join(data, name)) as f:
            print(f"-- {name}\n{f.read()}", end="")
    leader.stdin.close()
    leader.wait(timeout=15)
    print(f"== done; the replica is in {data}")


if __name__ == "__main__":
    main()
