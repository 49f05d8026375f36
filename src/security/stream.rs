//! A connection's byte stream: plain TCP, or TLS over it (client or listener side).
//!
//! The TCP socket stays reachable ([`Stream::tcp`]) for timeouts, `nodelay` and clones: the
//! fetcher manager and the listener shut a connection down from another thread through a
//! cloned `TcpStream`, and a TLS read blocked in that socket ends as a plain one does.
//! The handshake runs when the stream is made, within a deadline, so a peer that never
//! answers holds the caller no longer than a request would.

use super::tls::{ClientTls, ServerTls, TlsFailure, explain_client};
use rustls::{ClientConnection, ServerConnection, StreamOwned};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub enum Stream {
    Plain(TcpStream),
    /// To a broker; `client_cert` is what we offered, to name it when it is refused.
    Tls {
        tls: Box<StreamOwned<ClientConnection, DeadlineSocket>>,
        client_cert: Option<PathBuf>,
    },
    /// A client of the serve listener.
    TlsServer(Box<StreamOwned<ServerConnection, DeadlineSocket>>),
}

/// The TCP socket under a TLS stream, with a deadline that every read of the socket
/// honours. rustls reads the socket as often as it takes to complete a record (or a
/// handshake flight) within one call, so a peer sending a byte at a time would otherwise
/// hold that call far past any timeout armed before it.
#[derive(Debug)]
pub struct DeadlineSocket {
    tcp: TcpStream,
    deadline: Option<Instant>,
}

impl Read for DeadlineSocket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(d) = self.deadline {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the peer did not send in time",
                ));
            }
            // Armed before every read: the caller's own timeouts may have changed it.
            self.tcp.set_read_timeout(Some(left))?;
        }
        self.tcp.read(buf)
    }
}

impl Write for DeadlineSocket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.tcp.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.tcp.flush()
    }
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stream::Plain(s) => f.debug_tuple("Plain").field(s).finish(),
            Stream::Tls { tls, .. } => f.debug_tuple("Tls").field(&tls.sock).finish(),
            Stream::TlsServer(tls) => f.debug_tuple("TlsServer").field(&tls.sock).finish(),
        }
    }
}

/// Drives `conn`'s handshake over `sock` until it is complete or `deadline` passes (every
/// socket read included: a peer dripping its flight a byte at a time is cut off too).
fn handshake<D>(
    conn: &mut rustls::ConnectionCommon<D>,
    sock: &mut DeadlineSocket,
    within: Duration,
    explain: impl Fn(io::Error) -> io::Error,
) -> io::Result<()> {
    let deadline = Instant::now() + within;
    sock.deadline = Some(deadline);
    let timed_out = || {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "TLS handshake not complete within {} ms",
                within.as_millis()
            ),
        )
    };
    while conn.is_handshaking() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(timed_out());
        }
        match conn.complete_io(sock) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) && e.get_ref().is_none_or(|i| !i.is::<rustls::Error>()) =>
            {
                return Err(timed_out());
            }
            Err(e) => return Err(explain(e)),
        }
    }
    // The last flight (the client's Finished) goes out now, not with the first request.
    while conn.wants_write() {
        conn.write_tls(sock).map_err(&explain)?;
    }
    sock.deadline = None;
    Ok(())
}

impl Stream {
    /// TLS to a broker at `host` over `sock`, the handshake done within `within`.
    pub fn client(
        sock: TcpStream,
        tls: &ClientTls,
        host: &str,
        within: Duration,
    ) -> io::Result<Stream> {
        let mut sock = DeadlineSocket {
            tcp: sock,
            deadline: None,
        };
        let mut conn = tls.connection(host)?;
        let cert = tls.client_cert().map(PathBuf::from);
        handshake(&mut conn, &mut sock, within, |e| {
            explain_client(e, cert.as_deref(), true)
        })?;
        Ok(Stream::Tls {
            tls: Box::new(StreamOwned::new(conn, sock)),
            client_cert: cert,
        })
    }

    /// TLS for a client of the listener, the handshake done within `within`.
    pub fn server(sock: TcpStream, tls: &ServerTls, within: Duration) -> io::Result<Stream> {
        let mut sock = DeadlineSocket {
            tcp: sock,
            deadline: None,
        };
        let mut conn = tls.connection()?;
        handshake(&mut conn, &mut sock, within, |e| e)?;
        Ok(Stream::TlsServer(Box::new(StreamOwned::new(conn, sock))))
    }

    /// The TCP socket under the stream.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls { tls, .. } => &tls.sock.tcp,
            Stream::TlsServer(tls) => &tls.sock.tcp,
        }
    }

    /// A deadline every socket read under TLS honours until it is cleared (`None`); plain
    /// streams are read a socket read at a time by their callers, which check their own.
    pub fn set_deadline(&mut self, deadline: Option<Instant>) {
        match self {
            Stream::Plain(_) => {}
            Stream::Tls { tls, .. } => tls.sock.deadline = deadline,
            Stream::TlsServer(tls) => tls.sock.deadline = deadline,
        }
    }

    pub fn is_tls(&self) -> bool {
        !matches!(self, Stream::Plain(_))
    }
}

/// A peer that closes without TLS's close_notify has still closed: the end of the stream,
/// as on a plain socket, not an error (rustls reports it as `UnexpectedEof`).
fn eof_is_end(r: io::Result<usize>) -> io::Result<usize> {
    match r {
        Err(e)
            if e.kind() == io::ErrorKind::UnexpectedEof
                && e.get_ref()
                    .is_none_or(|i| !i.is::<rustls::Error>() && !i.is::<TlsFailure>()) =>
        {
            Ok(0)
        }
        r => r,
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls { tls, client_cert } => eof_is_end(
                tls.read(buf)
                    .map_err(|e| explain_client(e, client_cert.as_deref(), false)),
            ),
            Stream::TlsServer(tls) => eof_is_end(tls.read(buf)),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls { tls, client_cert } => tls
                .write(buf)
                .map_err(|e| explain_client(e, client_cert.as_deref(), false)),
            Stream::TlsServer(tls) => tls.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls { tls, client_cert } => tls
                .flush()
                .map_err(|e| explain_client(e, client_cert.as_deref(), false)),
            Stream::TlsServer(tls) => tls.flush(),
        }
    }
}
