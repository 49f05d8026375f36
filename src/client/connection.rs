//! A blocking connection to one broker.
//!
//! On connect it negotiates versions with ApiVersions: it asks at v3; a broker that does not
//! know v3 answers a v0 body with UNSUPPORTED_VERSION and its own range, and the request is
//! sent again at the highest version both know. Every other API is then used at
//! min(our max, broker max), and refused if that is below either side's minimum (a broker
//! closes the connection on a version it does not speak).
//!
//! Security ([`ClientSecurity`]): the TCP socket is connected (and handed to the caller's
//! `register`, so a shutdown can interrupt everything after), TLS is negotiated over it when
//! the protocol uses TLS, then ApiVersions. SASL, when integrated, authenticates right after
//! ApiVersions (Kafka's order: it needs the negotiated SaslHandshake/SaslAuthenticate
//! versions), before any other request.
//!
//! Requests are sent one at a time; responses are matched by correlation id. The receive
//! buffer is reused across requests, so a fetch response's records are borrowed from it
//! without a copy. Frame sizes are bounded; a bad frame is an error, never a panic.

use super::error::{ConnectionError, FailedContext, IoContext, fail};
use crate::protocol::codec::{Reader, Writer};
use crate::protocol::error::ErrorCode;
use crate::protocol::{ApiKey, api_versions, decode_response_header, encode_request_header};
use crate::security::{ClientSecurity, Stream, TlsFailure};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::ops::Range;
use std::time::{Duration, Instant};

type Result<T> = std::result::Result<T, ConnectionError>;

/// Short enough that a shutdown waiting on a connect attempt still ends in seconds.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest a TLS handshake with a broker may take (Kafka's
/// `socket.connection.setup.timeout.ms`).
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How much a receive buffer grows by at a time, beyond what it already has.
const RECV_CHUNK: usize = 1 << 20;

#[derive(Debug)]
pub struct BrokerConnection {
    addr: String,
    /// How messages name the broker: `broker ADDR`, or `broker ID (ADDR)` when the caller
    /// knows the id, so an error names it once.
    name: String,
    stream: Stream,
    client_id: String,
    next_correlation_id: i32,
    versions: HashMap<ApiKey, i16>,
    send_buf: Vec<u8>,
    recv_buf: Vec<u8>,
    request_timeout: Duration,
    max_response_bytes: usize,
    /// Who the connection authenticated as (SASL protocols).
    sasl: Option<crate::security::SaslCredentials>,
    /// When to authenticate again (KIP-368): 85–95 % into the session the broker granted.
    reauthenticate_at: Option<Instant>,
    /// Requests sent whose responses have not been read: a re-authentication waits until
    /// none is outstanding, so that no response is in the way of its exchange.
    awaiting: usize,
}

/// The same I/O error (its kind kept, so callers still tell connection failures apart by it)
/// with a message as people write it: "Connection refused", not "Connection refused (os
/// error 111)".
fn plain(e: std::io::Error) -> std::io::Error {
    // Out of descriptors keeps its OS error, which the descriptor budget looks for.
    // A TLS failure keeps its inner error, which says whether retrying can help.
    if crate::log::resources::open_files::is_exhausted_io(&e) || TlsFailure::of(&e).is_some() {
        return e;
    }
    std::io::Error::new(e.kind(), crate::logging::plain_io_error(&e))
}

impl BrokerConnection {
    /// Connects to `addr` (`host:port`) and negotiates API versions.
    pub fn connect(addr: &str, client_id: &str, max_response_bytes: usize) -> Result<Self> {
        Self::connect_registering(
            addr,
            client_id,
            max_response_bytes,
            DEFAULT_REQUEST_TIMEOUT,
            |_| {},
        )
    }

    /// Connects with `request_timeout` as the deadline of every response, the version
    /// handshake's included: a broker that accepts the connection and never answers holds
    /// the caller no longer than that.
    pub fn connect_with_timeout(
        addr: &str,
        client_id: &str,
        max_response_bytes: usize,
        request_timeout: Duration,
    ) -> Result<Self> {
        Self::connect_registering(addr, client_id, max_response_bytes, request_timeout, |_| {})
    }

    /// Connects, hands the TCP socket to `register` before the version handshake (so another
    /// thread can shut it down while the handshake waits), then negotiates versions, every
    /// response (the handshake's included) within `request_timeout`.
    pub fn connect_registering(
        addr: &str,
        client_id: &str,
        max_response_bytes: usize,
        request_timeout: Duration,
        register: impl FnOnce(&TcpStream),
    ) -> Result<Self> {
        let name = format!("broker {addr}");
        Self::connect_named(
            addr,
            &name,
            client_id,
            max_response_bytes,
            request_timeout,
            register,
        )
    }

    /// [`Self::connect_registering`], with every error of this connection naming the broker
    /// as `name` (`broker 2 (10.0.0.5:9092)`) instead of by its address alone.
    pub fn connect_named(
        addr: &str,
        name: &str,
        client_id: &str,
        max_response_bytes: usize,
        request_timeout: Duration,
        register: impl FnOnce(&TcpStream),
    ) -> Result<Self> {
        Self::connect_secured(
            addr,
            name,
            &ClientSecurity::PLAINTEXT,
            client_id,
            max_response_bytes,
            request_timeout,
            register,
        )
    }

    /// [`Self::connect_named`] with `security`: TLS after the TCP connect when the protocol
    /// uses it, its handshake within `request_timeout` (a TLS failure says what to check, and
    /// its kind whether retrying can help).
    pub fn connect_secured(
        addr: &str,
        name: &str,
        security: &ClientSecurity,
        client_id: &str,
        max_response_bytes: usize,
        request_timeout: Duration,
        register: impl FnOnce(&TcpStream),
    ) -> Result<Self> {
        let connect_timeout = DEFAULT_CONNECT_TIMEOUT.min(request_timeout);
        let addrs: Vec<_> = addr
            .to_socket_addrs()
            .io_with(|| format!("{name}: cannot resolve address"))?
            .collect();
        let mut last_err = None;
        let mut stream = None;
        for a in &addrs {
            crate::live::live().beat_current();
            match TcpStream::connect_timeout(a, connect_timeout) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last_err = Some(e),
            }
        }
        let stream = match (stream, last_err) {
            (Some(s), _) => s,
            (None, Some(e)) => {
                return Err(plain(e)).io_with(|| format!("{name}: connect failed"));
            }
            (None, None) => fail!("{name}: address resolves to nothing"),
        };
        stream
            .set_nodelay(true)
            .io_with(|| format!("{name}: set_nodelay"))?;
        stream
            .set_write_timeout(Some(request_timeout))
            .io_with(|| format!("{name}: set timeout"))?;
        register(&stream);
        let stream = match security.tls() {
            None => Stream::Plain(stream),
            Some(tls) => {
                let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
                // Kafka's socket.connection.setup.timeout.ms (10 s) bounds the handshake: a
                // PLAINTEXT listener reads the ClientHello as a huge frame and never answers.
                let within = request_timeout.min(TLS_HANDSHAKE_TIMEOUT);
                Stream::client(stream, tls, host, within)
                    .map_err(|e| {
                        if e.kind() == std::io::ErrorKind::TimedOut {
                            std::io::Error::new(
                                e.kind(),
                                format!(
                                    "no TLS answer within {} ms: is it a PLAINTEXT listener? (check security.protocol and the port)",
                                    within.as_millis()
                                ),
                            )
                        } else {
                            plain(e)
                        }
                    })
                    .io_with(|| format!("{name}: TLS handshake failed"))?
            }
        };
        let mut conn = BrokerConnection {
            addr: addr.to_string(),
            name: name.to_string(),
            stream,
            client_id: client_id.to_string(),
            next_correlation_id: 1,
            versions: HashMap::new(),
            send_buf: Vec::with_capacity(4096),
            recv_buf: Vec::new(),
            request_timeout,
            max_response_bytes,
            sasl: None,
            reauthenticate_at: None,
            awaiting: 0,
        };
        conn.negotiate()?;
        if let Some(creds) = security.sasl() {
            conn.sasl = Some(creds.clone());
            conn.authenticate()?;
        }
        Ok(conn)
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// How this connection's errors name the broker (`broker ADDR` or `broker ID (ADDR)`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A second handle on the socket, so another thread can shut it down.
    pub fn try_clone_socket(&self) -> std::io::Result<TcpStream> {
        self.stream.tcp().try_clone()
    }

    fn negotiate(&mut self) -> Result<()> {
        let (_, our_max) = ApiKey::ApiVersions.supported();
        let mut version = our_max;
        let resp = loop {
            let body = self.send(ApiKey::ApiVersions, version, Duration::ZERO, |w| {
                api_versions::encode_request(w, version)
            })?;
            let unsupported =
                body.get(..2) == Some(&ErrorCode::UNSUPPORTED_VERSION.0.to_be_bytes()[..]);
            if unsupported && version > 0 {
                // Kafka answers a v0 body naming its range; some brokers' bodies are not
                // readable as v0. Take the range if it can be read, else step down by one.
                let theirs = api_versions::decode_response(body, version)
                    .ok()
                    .and_then(|r| r.api_keys.iter().find(|k| k.api_key == 18).map(|k| k.max));
                let next = theirs.map_or(version - 1, |m| m.min(version - 1)).max(0);
                crate::log_debug!(
                    "{}: ApiVersions v{version} unsupported, retrying at v{next}",
                    self.name
                );
                version = next;
                continue;
            }
            let resp = api_versions::decode_response(body, version)
                .failed_with(|| format!("{}: bad ApiVersions v{version} response", self.name))?;
            if !resp.error.is_ok() {
                fail!("{}: ApiVersions failed with {}", self.name, resp.error);
            }
            break resp;
        };
        for api in ApiKey::ALL {
            let (our_min, our_max) = api.supported();
            if let Some(r) = resp.api_keys.iter().find(|k| k.api_key == api.key()) {
                let v = our_max.min(r.max);
                if v >= our_min.max(r.min) {
                    self.versions.insert(api, v);
                }
            }
        }
        Ok(())
    }

    /// The negotiated version of `api`, or `None` when the broker and we share none.
    pub fn version(&self, api: ApiKey) -> Option<i16> {
        self.versions.get(&api).copied()
    }

    /// The negotiated version, or an error naming the broker and API.
    pub fn require_version(&self, api: ApiKey) -> Result<i16> {
        self.version(api).failed_with(|| {
            format!(
                "{}: no common version of {} (we speak v{}–v{})",
                self.name,
                api.name(),
                api.supported().0,
                api.supported().1
            )
        })
    }

    /// Sends one request and returns the response body (borrowed from the receive buffer).
    /// `extra_wait` is added to the read timeout (a fetch's max wait).
    pub fn send(
        &mut self,
        api: ApiKey,
        version: i16,
        extra_wait: Duration,
        encode: impl FnOnce(&mut Writer),
    ) -> Result<&[u8]> {
        let correlation_id = self.send_request(api, version, encode)?;
        let body = self.receive_response(api, version, correlation_id, extra_wait)?;
        Ok(self.recv_buf.get(body).unwrap_or_default())
    }

    /// Sends a request without waiting for its response; returns its correlation id.
    /// Responses come back in the order requests were sent (pipelining).
    pub fn send_request(
        &mut self,
        api: ApiKey,
        version: i16,
        encode: impl FnOnce(&mut Writer),
    ) -> Result<i32> {
        if self.awaiting == 0
            && self
                .reauthenticate_at
                .is_some_and(|at| Instant::now() >= at)
            && !matches!(api, ApiKey::SaslHandshake | ApiKey::SaslAuthenticate)
        {
            self.authenticate()?;
        }
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1).max(1);
        let mut w = Writer {
            buf: std::mem::take(&mut self.send_buf),
        };
        w.buf.clear();
        w.buf.extend_from_slice(&[0; 4]);
        encode_request_header(&mut w, api, version, correlation_id, &self.client_id);
        encode(&mut w);
        let len = crate::protocol::codec::len_i32(w.buf.len().saturating_sub(4));
        if let Some(s) = w.buf.get_mut(..4) {
            s.copy_from_slice(&len.to_be_bytes());
        }
        let sent = self.stream.write_all(&w.buf);
        self.send_buf = w.buf;
        sent.map_err(plain)
            .io_with(|| format!("{}: sending {} failed", self.name, api.name()))?;
        self.awaiting += 1;
        Ok(correlation_id)
    }

    /// SASL authentication (again, when the session is running out), as `[security]` says.
    fn authenticate(&mut self) -> Result<()> {
        let Some(creds) = self.sasl.clone() else {
            return Ok(());
        };
        let again = self.reauthenticate_at.is_some();
        let lifetime = super::sasl::authenticate(self, &creds)?;
        if again {
            crate::log_debug!(
                "{}: re-authenticated with {} as `{}`",
                self.name,
                creds.mechanism.name(),
                creds.username
            );
        }
        self.reauthenticate_at =
            lifetime.map(|l| Instant::now() + super::sasl::reauthenticate_after(l));
        Ok(())
    }

    /// Reads the response to request `correlation_id` into the receive buffer and returns
    /// where its body lies in [`Self::recv_buffer`].
    pub fn receive_response(
        &mut self,
        api: ApiKey,
        version: i16,
        correlation_id: i32,
        extra_wait: Duration,
    ) -> Result<Range<usize>> {
        let got = self.receive_response_within(api, version, correlation_id, extra_wait);
        self.stream.set_deadline(None);
        got
    }

    fn receive_response_within(
        &mut self,
        api: ApiKey,
        version: i16,
        correlation_id: i32,
        extra_wait: Duration,
    ) -> Result<Range<usize>> {
        // A request that ends, answered or not, is progress for the watchdog: a round of
        // several slow requests is not a stuck thread.
        let _beat = crate::live::BeatOnDrop;
        // Answered or failed (which ends the connection), it is no longer outstanding.
        self.awaiting = self.awaiting.saturating_sub(1);
        // One deadline for the whole response (Kafka's request.timeout.ms), not one per read:
        // a broker that drips a byte at a time cannot hold the connection past it.
        let wait = self.request_timeout + extra_wait;
        let deadline = Instant::now() + wait;
        // Over TLS, every socket read under one read of the stream honours it too.
        self.stream.set_deadline(Some(deadline));
        let mut timeout = wait;
        self.stream
            .tcp()
            .set_read_timeout(Some(timeout))
            .io_with(|| format!("{}: set timeout", self.name))?;
        let mut size = [0u8; 4];
        let mut got = 0;
        while let Some(rest) = size.get_mut(got..).filter(|rest| !rest.is_empty()) {
            got += self.read_before(deadline, &mut timeout, rest, api, wait, got, 4)?;
        }
        if !self.stream.is_tls() && matches!(size, [0x15 | 0x16, 0x03, 0..=0x04, _]) {
            // A TLS record header (an alert or a handshake) where a response size should be.
            let tls = std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "the broker answered with TLS",
            );
            return Err(tls).io_with(|| format!(
                "{}: {} answered with TLS: it is a TLS listener (set security.protocol to SSL or SASL_SSL)",
                self.name,
                api.name()
            ));
        }
        let size = i32::from_be_bytes(size);
        if size < 4 || size as usize > self.max_response_bytes {
            fail!(
                "{}: {} response frame of {size} bytes is out of bounds (limit {})",
                self.name,
                api.name(),
                self.max_response_bytes
            );
        }
        // The buffer only grows, and only as bytes arrive (a chunk at a time): a broker that
        // announces a huge frame and sends little pins little memory. A response is read into
        // memory that is already there, without zero-filling it again.
        let size = size as usize;
        let mut filled = 0;
        while filled < size {
            // Up to what the buffer already holds, or one chunk past it.
            let upto = if self.recv_buf.len() > filled {
                size.min(self.recv_buf.len())
            } else {
                size.min(filled + RECV_CHUNK)
            };
            if self.recv_buf.len() < upto {
                self.recv_buf.resize(upto, 0);
            }
            let mut buf = std::mem::take(&mut self.recv_buf);
            let read = self.read_before(
                deadline,
                &mut timeout,
                buf.get_mut(filled..upto).unwrap_or_default(),
                api,
                wait,
                filled,
                size,
            );
            self.recv_buf = buf;
            filled += read?;
        }
        let frame = self.recv_buf.get(..size).unwrap_or_default();
        let mut r = Reader::new(frame);
        let got = decode_response_header(&mut r, api, version)
            .failed_with(|| format!("{}: bad {} response header", self.name, api.name()))?;
        if got != correlation_id {
            fail!(
                "{}: {} response has correlation id {got}, expected {correlation_id}",
                self.name,
                api.name()
            );
        }
        Ok(r.position()..size)
    }

    /// One read into `buf` that ends by `deadline`: the socket timeout is lowered as the
    /// deadline nears (a setsockopt only then). `got` of `total` bytes are in so far.
    #[allow(clippy::too_many_arguments)]
    fn read_before(
        &mut self,
        deadline: Instant,
        timeout: &mut Duration,
        buf: &mut [u8],
        api: ApiKey,
        wait: Duration,
        got: usize,
        total: usize,
    ) -> Result<usize> {
        let left = deadline.saturating_duration_since(Instant::now());
        // Before the first byte of the frame there is no response at all yet.
        let what = || {
            if total == 4 && got == 0 {
                format!("no response to {}", api.name())
            } else {
                format!(
                    "{} response cut short ({got} of {total} bytes arrived)",
                    api.name()
                )
            }
        };
        // A transport failure, worded for people: not "Resource temporarily unavailable (os
        // error 11)".
        let timed_out = || {
            ConnectionError::io(
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("{got} of {total} bytes arrived"),
                ),
                format!(
                    "{}: {} response not complete within the request deadline of {} ms",
                    self.name,
                    api.name(),
                    wait.as_millis()
                ),
            )
        };
        if left.is_zero() {
            return Err(timed_out());
        }
        // Lowered only when the deadline is nearer than the current timeout by a margin: a
        // read can overrun the deadline by at most that, and a response does not cost one
        // setsockopt per read.
        let margin = (wait / 100).min(Duration::from_millis(50));
        if left + margin < *timeout {
            *timeout = left;
            self.stream
                .tcp()
                .set_read_timeout(Some(left))
                .io_with(|| format!("{}: set timeout", self.name))?;
        }
        match self.stream.read(buf) {
            // A transport failure, worded for people: not "unexpected end of file".
            Ok(0) => Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "connection closed by the broker",
            ))
            .io_with(|| format!("{}: {}", self.name, what())),
            Ok(n) => Ok(n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Ok(0),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Err(timed_out())
            }
            Err(e) => Err(plain(e)).io_with(|| format!("{}: {}", self.name, what())),
        }
    }

    /// Sets the request timeout (Kafka's `request.timeout.ms`): the deadline for a whole
    /// response, on top of a fetch's max wait.
    pub fn set_request_timeout(&mut self, timeout: Duration) {
        self.request_timeout = timeout;
    }

    pub fn recv_buffer(&self) -> &[u8] {
        &self.recv_buf
    }

    /// Swaps the receive buffer for `buf`, handing the last response out to its caller
    /// (double buffering: one response is processed while the next is read).
    pub fn swap_recv_buffer(&mut self, buf: Vec<u8>) -> Vec<u8> {
        std::mem::replace(&mut self.recv_buf, buf)
    }
}

impl super::sasl::Transport for BrokerConnection {
    fn name(&self) -> &str {
        BrokerConnection::name(self)
    }

    fn version(&self, api: ApiKey) -> Option<i16> {
        BrokerConnection::version(self, api)
    }

    fn require_version(&self, api: ApiKey) -> Result<i16> {
        BrokerConnection::require_version(self, api)
    }

    fn send(
        &mut self,
        api: ApiKey,
        version: i16,
        encode: impl FnOnce(&mut Writer),
    ) -> Result<&[u8]> {
        BrokerConnection::send(self, api, version, Duration::ZERO, encode)
    }
}

#[cfg(test)]
mod tests {
    use super::BrokerConnection;
    use crate::client::ConnectionErrorKind::Transport;
    use std::time::Duration;

    /// The I/O error stays in the chain: the descriptor budget finds running out of
    /// descriptors by it.
    fn io_kind(e: &anyhow::Error) -> Option<std::io::ErrorKind> {
        e.chain()
            .find_map(|c| c.downcast_ref::<std::io::Error>())
            .map(std::io::Error::kind)
    }

    #[test]
    fn a_refused_connect_names_the_broker_once_without_the_os_error_number() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let addr = format!("127.0.0.1:{port}");
        let e = BrokerConnection::connect_named(
            &addr,
            &format!("broker 7 ({addr})"),
            "t",
            1 << 20,
            Duration::from_secs(2),
            |_| {},
        )
        .expect_err("nothing listens there");
        assert_eq!(
            format!("{e:#}"),
            format!("broker 7 ({addr}): connect failed: Connection refused")
        );
        assert_eq!(e.kind(), Transport(std::io::ErrorKind::ConnectionRefused));
        let e = anyhow::Error::new(e);
        assert_eq!(io_kind(&e), Some(std::io::ErrorKind::ConnectionRefused));
    }

    #[test]
    fn a_missed_deadline_reads_plainly_and_stays_an_io_error() {
        // Accepts (the kernel's backlog) and never answers the version handshake.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("address").to_string();
        let e =
            BrokerConnection::connect_with_timeout(&addr, "t", 1 << 20, Duration::from_millis(200))
                .expect_err("no answer");
        assert_eq!(
            format!("{e:#}"),
            format!(
                "broker {addr}: ApiVersions response not complete within the request deadline of 200 ms: 0 of 4 bytes arrived"
            )
        );
        assert_eq!(e.kind(), Transport(std::io::ErrorKind::TimedOut));
        let e = anyhow::Error::new(e);
        assert_eq!(io_kind(&e), Some(std::io::ErrorKind::TimedOut));
    }
}
