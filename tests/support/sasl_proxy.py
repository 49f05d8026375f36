#!/usr/bin/env python3
"""A SASL-terminating Kafka proxy for tests: a real SCRAM server (scramp) in front of a leader.

    sasl_proxy.py --upstream HOST:PORT [--listen HOST:PORT] [--user NAME:PASSWORD]...
                  [--users-json FILE] [--mechanisms PLAIN,SCRAM-SHA-256,SCRAM-SHA-512]
                  [--session-lifetime-ms N] [--no-rewrite-metadata]
    sasl_proxy.py --self-test

Prints one JSON line on stdout once it listens: {"listen": "127.0.0.1:PORT"}.

Per client connection, as a Kafka broker with a SASL listener behaves:
- ApiVersions is forwarded to the upstream and its answer (v0-v3; v3 flexible) gets
  SaslHandshake v0-1 and SaslAuthenticate v0-2 added to the list.
- SaslHandshake and SaslAuthenticate are answered here: SCRAM-SHA-256/512 by scramp's
  ScramMechanism server side, PLAIN by comparing with the configured password. After a v0
  handshake the tokens come as bare size-prefixed frames, after v1 in SaslAuthenticate.
  SaslAuthenticate v1+ answers carry --session-lifetime-ms (KIP-368; 0: no limit).
- Any other request before authentication closes the connection (as Kafka does). After it,
  every frame goes to the upstream unchanged and its response comes back (Metadata answers
  name this proxy instead of the upstream's brokers, unless --no-rewrite-metadata, so that a
  client's leader connections come through here too). A request after the session lifetime
  has run out without re-authentication closes the connection. A SaslHandshake after
  authentication starts a re-authentication; it must name the same user.
- Each outcome goes to stderr as one line: `auth ok user=U mechanism=M` or
  `auth failed user=U mechanism=M reason=R` (never a password); tests count the latter.

Produce with acks=0 (no response) is not supported: each request waits for one response.
"""

import argparse
import json
import socket
import struct
import sys
import threading
import time

from scramp import ScramClient, ScramMechanism

SASL_HANDSHAKE, SASL_AUTHENTICATE, API_VERSIONS, METADATA = 17, 36, 18, 3
UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED = 33, 34, 58
ALL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def log(msg):
    print(f"sasl_proxy: {msg}", file=sys.stderr, flush=True)


# --- wire primitives ---------------------------------------------------------------------

class Reader:
    def __init__(self, buf, pos=0):
        self.buf, self.pos = buf, pos

    def take(self, n):
        if n < 0 or self.pos + n > len(self.buf):
            raise ValueError("truncated")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def i16(self):
        return struct.unpack(">h", self.take(2))[0]

    def i32(self):
        return struct.unpack(">i", self.take(4))[0]

    def uvarint(self):
        v, shift = 0, 0
        while True:
            b = self.take(1)[0]
            v |= (b & 0x7F) << shift
            if not b & 0x80:
                return v
            shift += 7
            if shift > 28:
                raise ValueError("varint too long")

    def string(self, compact):
        n = self.uvarint() - 1 if compact else self.i16()
        return None if n < 0 else self.take(n).decode()

    def bytes_(self, compact):
        n = self.uvarint() - 1 if compact else self.i32()
        return None if n < 0 else self.take(n)

    def array_len(self, compact):
        return self.uvarint() - 1 if compact else self.i32()

    def skip_tags(self):
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


def uvarint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def w_string(s, compact):
    if s is None:
        return uvarint(0) if compact else struct.pack(">h", -1)
    b = s.encode()
    return (uvarint(len(b) + 1) if compact else struct.pack(">h", len(b))) + b


def w_bytes(b, compact):
    return (uvarint(len(b) + 1) if compact else struct.pack(">i", len(b))) + b


def w_array_len(n, compact):
    return uvarint(n + 1) if compact else struct.pack(">i", n)


def read_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError("connection closed")
        buf += chunk
    return bytes(buf)


def read_frame(sock):
    (size,) = struct.unpack(">i", read_exact(sock, 4))
    if size < 0 or size > 100 * 1024 * 1024:
        raise ValueError(f"frame size {size}")
    return read_exact(sock, size)


def write_frame(sock, payload):
    sock.sendall(struct.pack(">i", len(payload)) + payload)


def request_header(frame):
    """(api_key, version, correlation_id, offset of the body after the header)."""
    r = Reader(frame)
    key, version, corr = r.i16(), r.i16(), r.i32()
    r.string(False)  # client_id: INT16 string in every header version
    flexible = (key == SASL_AUTHENTICATE and version >= 2) or (key == API_VERSIONS and version >= 3)
    if flexible:
        r.skip_tags()
    return key, version, corr, r.pos


# --- answers -----------------------------------------------------------------------------

def add_sasl_to_api_versions(body, version):
    """The upstream's ApiVersions body with the two SASL APIs added (replacing any)."""
    r = Reader(body)
    error = r.i16()
    if error != 0:
        return body
    compact = version >= 3
    entries = []
    for _ in range(r.array_len(compact)):
        key, lo, hi = r.i16(), r.i16(), r.i16()
        if compact:
            r.skip_tags()
        if key not in (SASL_HANDSHAKE, SASL_AUTHENTICATE):
            entries.append((key, lo, hi))
    rest = body[r.pos:]  # throttle time (v1+) and the top-level tags (v3) as they were
    entries += [(SASL_HANDSHAKE, 0, 1), (SASL_AUTHENTICATE, 0, 2)]
    entries.sort()
    out = struct.pack(">h", 0) + w_array_len(len(entries), compact)
    for key, lo, hi in entries:
        out += struct.pack(">hhh", key, lo, hi) + (uvarint(0) if compact else b"")
    return out + rest


def rewrite_metadata(body, version, host, port):
    """A Metadata response body whose brokers all name host:port."""
    compact = version >= 9
    r = Reader(body)
    head = r.take(4) if version >= 3 else b""  # throttle_time_ms
    out = bytearray(head)
    n = r.array_len(compact)
    out += w_array_len(n, compact)
    for _ in range(n):
        node = r.i32()
        r.string(compact)
        r.i32()
        rack = r.string(compact) if version >= 1 else None
        out += struct.pack(">i", node) + w_string(host, compact) + struct.pack(">i", port)
        if version >= 1:
            out += w_string(rack, compact)
        if compact:
            start = r.pos
            r.skip_tags()
            out += body[start:r.pos]
    return bytes(out) + body[r.pos:]


def sasl_authenticate_response(version, error, message, auth_bytes, lifetime_ms):
    compact = version >= 2
    out = struct.pack(">h", error) + w_string(message, compact) + w_bytes(auth_bytes, compact)
    if version >= 1:
        out += struct.pack(">q", lifetime_ms)
    if compact:
        out += uvarint(0)
    return out


class AuthFailed(Exception):
    pass


class Exchange:
    """One SASL exchange for one mechanism: feed tokens, get (reply, done, user)."""

    def __init__(self, mechanism, users, scram_mechs):
        self.mechanism = mechanism
        self.users = users
        self.user = None
        self.server = None
        if mechanism != "PLAIN":
            mech = scram_mechs[mechanism]

            def auth_fn(username):
                self.user = username
                info = mech.make_auth_info(users[username], iteration_count=4096) \
                    if username in users else None
                if info is None:
                    raise AuthFailed("unknown user")
                return info
            self.server = mech.make_server(auth_fn)
            self.step = 0

    def feed(self, token):
        if self.mechanism == "PLAIN":
            parts = token.split(b"\0")
            if len(parts) != 3:
                raise AuthFailed("malformed PLAIN token")
            authzid, user, password = (p.decode("utf-8", "replace") for p in parts)
            self.user = user
            if authzid and authzid != user:
                raise AuthFailed("authorization id differs from the user")
            if user not in self.users or self.users[user] != password:
                raise AuthFailed("invalid credentials")
            return b"", True
        try:
            if self.step == 0:
                self.server.set_client_first(token.decode())
                self.step = 1
                return self.server.get_server_first().encode(), False
            self.server.set_client_final(token.decode())
            return self.server.get_server_final().encode(), True
        except AuthFailed:
            raise
        except Exception as e:  # scramp's ScramException and decoding errors
            raise AuthFailed(type(e).__name__ + ": " + str(e).split("\n")[0]) from None


class Connection:
    def __init__(self, proxy, client, peer):
        self.p = proxy
        self.client = client
        self.peer = peer
        self.upstream = None
        self.authenticated_user = None
        self.expires_at = None
        self.exchange = None
        self.v0_tokens = False

    def up(self):
        if self.upstream is None:
            self.upstream = socket.create_connection(self.p.upstream, timeout=120)
        return self.upstream

    def forward(self, frame):
        write_frame(self.up(), frame)
        return read_frame(self.up())

    def answer(self, corr, body, header_tags=False):
        write_frame(self.client, struct.pack(">i", corr) + (uvarint(0) if header_tags else b"") + body)

    def fail(self, reason):
        log(f"auth failed user={self.exchange.user if self.exchange else None} "
            f"mechanism={self.exchange.mechanism if self.exchange else None} reason={reason}")
        self.p.count_failure()

    def token(self, token):
        """One SASL token in; (reply, ok) out; raises AuthFailed."""
        if self.exchange is None:
            raise AuthFailed("SaslAuthenticate before SaslHandshake")
        reply, done = self.exchange.feed(token)
        if done:
            user = self.exchange.user
            if self.authenticated_user is not None and user != self.authenticated_user:
                raise AuthFailed("re-authentication as another user")
            self.authenticated_user = user
            lifetime = self.p.session_lifetime_ms
            self.expires_at = time.monotonic() + lifetime / 1000 if lifetime > 0 else None
            log(f"auth ok user={user} mechanism={self.exchange.mechanism} peer={self.peer}")
            self.exchange = None
        return reply

    def run(self):
        try:
            while True:
                frame = read_frame(self.client)
                if self.v0_tokens:
                    try:
                        reply = self.token(frame)
                    except AuthFailed as e:
                        self.fail(e)
                        return
                    write_frame(self.client, reply)
                    self.v0_tokens = self.exchange is not None
                    continue
                key, version, corr, at = request_header(frame)
                body = frame[at:]
                if key == API_VERSIONS:
                    resp = self.forward(frame)
                    ucorr = resp[:4]
                    try:
                        resp = ucorr + add_sasl_to_api_versions(resp[4:], version)
                    except ValueError:
                        pass
                    write_frame(self.client, resp)
                elif key == SASL_HANDSHAKE:
                    mech = Reader(body).string(False)
                    ok = mech in self.p.mechanisms
                    out = struct.pack(">h", 0 if ok else UNSUPPORTED_SASL_MECHANISM)
                    out += w_array_len(len(self.p.mechanisms), False)
                    for m in self.p.mechanisms:
                        out += w_string(m, False)
                    self.answer(corr, out)
                    if not ok:
                        log(f"auth failed user=None mechanism={mech} reason=mechanism not enabled")
                        self.p.count_failure()
                        return
                    self.exchange = Exchange(mech, self.p.users, self.p.scram)
                    self.v0_tokens = version == 0
                elif key == SASL_AUTHENTICATE:
                    token = Reader(body).bytes_(version >= 2) or b""
                    try:
                        reply = self.token(token)
                    except AuthFailed as e:
                        mech = self.exchange.mechanism if self.exchange else "?"
                        self.fail(e)
                        msg = ("Authentication failed during authentication due to invalid "
                               f"credentials with SASL mechanism {mech}")
                        self.answer(corr, sasl_authenticate_response(
                            version, SASL_AUTHENTICATION_FAILED, msg, b"", 0), version >= 2)
                        return
                    lifetime = self.p.session_lifetime_ms if self.exchange is None else 0
                    self.answer(corr, sasl_authenticate_response(version, 0, None, reply, lifetime),
                                version >= 2)
                elif self.authenticated_user is None or self.exchange is not None:
                    log(f"closed {self.peer}: API key {key} before authentication")
                    return
                elif self.expires_at is not None and time.monotonic() > self.expires_at:
                    log(f"closed {self.peer}: session of {self.authenticated_user} expired "
                        f"(API key {key} without re-authentication)")
                    return
                else:
                    resp = self.forward(frame)
                    if key == METADATA and self.p.rewrite:
                        try:
                            head = Reader(resp, 4)
                            if version >= 9:
                                head.skip_tags()
                            resp = resp[:head.pos] + rewrite_metadata(
                                resp[head.pos:], version, *self.p.advertised)
                        except ValueError as e:
                            log(f"Metadata v{version} answer not rewritten: {e}")
                    write_frame(self.client, resp)
        except (EOFError, ConnectionError, OSError, ValueError) as e:
            if not isinstance(e, EOFError):
                log(f"connection {self.peer} ended: {e}")
        finally:
            for s in (self.client, self.upstream):
                if s is not None:
                    try:
                        s.close()
                    except OSError:
                        pass


class Proxy:
    def __init__(self, upstream, listen, users, mechanisms, session_lifetime_ms, rewrite):
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.users = users
        self.mechanisms = mechanisms
        self.session_lifetime_ms = session_lifetime_ms
        self.rewrite = rewrite
        self.scram = {m: ScramMechanism(m) for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")}
        self.failures = 0
        self.lock = threading.Lock()
        lhost, lport = listen.rsplit(":", 1)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((lhost, int(lport)))
        self.sock.listen(64)
        self.advertised = (lhost, self.sock.getsockname()[1])

    def count_failure(self):
        with self.lock:
            self.failures += 1

    @property
    def address(self):
        return f"{self.advertised[0]}:{self.advertised[1]}"

    def serve_forever(self):
        while True:
            try:
                client, peer = self.sock.accept()
            except OSError:
                return
            conn = Connection(self, client, f"{peer[0]}:{peer[1]}")
            threading.Thread(target=conn.run, daemon=True).start()

    def start(self):
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self


# --- self-test -------------------------------------------------------------------------------

def fake_upstream():
    """A broker that answers ApiVersions v0-3 and Metadata v1 (one broker), nothing else."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)

    def handle(c):
        try:
            while True:
                frame = read_frame(c)
                key, version, corr, _ = request_header(frame)
                if key == API_VERSIONS:
                    compact = version >= 3
                    body = struct.pack(">h", 0) + w_array_len(2, compact)
                    for k, lo, hi in ((METADATA, 0, 12), (API_VERSIONS, 0, 3)):
                        body += struct.pack(">hhh", k, lo, hi) + (uvarint(0) if compact else b"")
                    body += struct.pack(">i", 0) + (uvarint(0) if compact else b"")
                    write_frame(c, struct.pack(">i", corr) + body)
                elif key == METADATA and version == 1:
                    body = struct.pack(">i", 1) + struct.pack(">i", 7) + w_string("upstream", False)
                    body += struct.pack(">i", 1234) + w_string(None, False)
                    body += struct.pack(">i", 7) + struct.pack(">i", 0)  # controller, no topics
                    write_frame(c, struct.pack(">i", corr) + body)
                else:
                    return
        except (EOFError, OSError, ValueError):
            pass
        finally:
            c.close()

    def loop():
        while True:
            c, _ = sock.accept()
            threading.Thread(target=handle, args=(c,), daemon=True).start()
    threading.Thread(target=loop, daemon=True).start()
    return f"127.0.0.1:{sock.getsockname()[1]}"


def request(key, version, corr, body):
    flexible = (key == SASL_AUTHENTICATE and version >= 2) or (key == API_VERSIONS and version >= 3)
    head = struct.pack(">hhi", key, version, corr) + w_string("self-test", False)
    return head + (uvarint(0) if flexible else b"") + body


def call(sock, key, version, corr, body):
    write_frame(sock, request(key, version, corr, body))
    resp = read_frame(sock)
    r = Reader(resp)
    assert r.i32() == corr
    if (key == SASL_AUTHENTICATE and version >= 2):
        r.skip_tags()
    return Reader(resp, r.pos)


def authenticate(address, mechanism, user, password, version=2):
    """(connected socket or None, error code, session lifetime)."""
    host, port = address.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=10)
    r = call(s, SASL_HANDSHAKE, 1, 1, w_string(mechanism, False))
    assert r.i16() == 0
    compact = version >= 2

    def step(corr, token):
        r = call(s, SASL_AUTHENTICATE, version, corr, w_bytes(token, compact) + (uvarint(0) if compact else b""))
        err, _msg, data = r.i16(), r.string(compact), r.bytes_(compact)
        life = struct.unpack(">q", r.take(8))[0] if version >= 1 else 0
        return err, data, life

    if mechanism == "PLAIN":
        err, _, life = step(2, b"\0" + user.encode() + b"\0" + password.encode())
        return s, err, life
    c = ScramClient([mechanism], user, password)
    err, data, _ = step(2, c.get_client_first().encode())
    if err != 0:  # an unknown user is refused at once, as Kafka does
        return s, err, 0
    c.set_server_first(data.decode())
    err, data, life = step(3, c.get_client_final().encode())
    if err == 0:
        c.set_server_final(data.decode())
    return s, err, life


def self_test():
    upstream = fake_upstream()
    proxy = Proxy(upstream, "127.0.0.1:0", {"alice": "pw-a", "bob,=x": "pw-b"},
                  list(ALL_MECHANISMS), 60000, True).start()
    addr = proxy.address
    host, port = addr.rsplit(":", 1)
    for v in (0, 1, 3):
        s = socket.create_connection((host, int(port)), timeout=10)
        r = call(s, API_VERSIONS, v, 9, b"" if v < 3 else w_string("t", True) + w_string("1", True) + uvarint(0))
        assert r.i16() == 0
        keys = {}
        for _ in range(r.array_len(v >= 3)):
            k, lo, hi = r.i16(), r.i16(), r.i16()
            if v >= 3:
                r.skip_tags()
            keys[k] = (lo, hi)
        assert keys[SASL_HANDSHAKE] == (0, 1) and keys[SASL_AUTHENTICATE] == (0, 2), keys
        assert keys[METADATA] == (0, 12)
        # Anything else before authentication closes the connection.
        write_frame(s, request(METADATA, 1, 10, struct.pack(">i", -1)))
        try:
            assert read_exact(s, 1) == b"", "answered before authentication"
        except (EOFError, ConnectionError):
            pass
        s.close()
    for mech in ALL_MECHANISMS:
        for v in (0, 1, 2):
            s, err, life = authenticate(addr, mech, "alice", "pw-a", v)
            assert err == 0, (mech, v, err)
            assert life == (60000 if v >= 1 else 0), life
            r = call(s, METADATA, 1, 11, struct.pack(">i", -1))
            assert r.i32() == 1 and r.i32() == 7 and r.string(False) == "127.0.0.1"
            assert r.i32() == int(port)
            # Re-authentication on the same connection.
            r = call(s, SASL_HANDSHAKE, 1, 12, w_string(mech, False))
            assert r.i16() == 0
            s.close()
    before = proxy.failures
    for mech in ALL_MECHANISMS:
        s, err, _ = authenticate(addr, mech, "alice", "wrong")
        assert err == SASL_AUTHENTICATION_FAILED, (mech, err)
        s.close()
        s, err, _ = authenticate(addr, mech, "nobody", "pw-a")
        assert err == SASL_AUTHENTICATION_FAILED, (mech, err)
        s.close()
    s, err, _ = authenticate(addr, "SCRAM-SHA-256", "bob,=x", "pw-b")
    assert err == 0
    assert proxy.failures == before + 6, proxy.failures
    print("self-test ok")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--upstream")
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--user", action="append", default=[], help="NAME:PASSWORD")
    ap.add_argument("--users-json", help='a JSON object {"user": "password", ...}')
    ap.add_argument("--mechanisms", default=",".join(ALL_MECHANISMS))
    ap.add_argument("--session-lifetime-ms", type=int, default=0)
    ap.add_argument("--no-rewrite-metadata", action="store_true")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if not a.upstream:
        ap.error("--upstream is required")
    users = {}
    if a.users_json:
        with open(a.users_json) as f:
            users.update(json.load(f))
    for u in a.user:
        name, _, password = u.partition(":")
        users[name] = password
    mechanisms = [m for m in a.mechanisms.split(",") if m]
    for m in mechanisms:
        if m not in ALL_MECHANISMS:
            ap.error(f"unknown mechanism {m}")
    proxy = Proxy(a.upstream, a.listen, users, mechanisms, a.session_lifetime_ms,
                  not a.no_rewrite_metadata)
    log(f"listening on {proxy.address}, upstream {a.upstream}, mechanisms {','.join(mechanisms)}, "
        f"users {','.join(sorted(users))}, session lifetime {a.session_lifetime_ms} ms")
    print(json.dumps({"listen": proxy.address}), flush=True)
    try:
        proxy.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
