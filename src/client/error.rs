//! Why a request to a broker failed, as its callers branch on it: [`ConnectionError`], made
//! where the failure is first seen (connecting, TLS, SASL, a request sent or its response
//! read, an answer that could not be used, a broker of another cluster).

use crate::security::TlsFailure;
use std::io;

/// What kind of failure a [`ConnectionError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionErrorKind {
    /// An I/O failure (its kind): the broker unreachable, the connection broken, a deadline
    /// missed, TLS failing in a way a retry may mend.
    Transport(io::ErrorKind),
    /// TLS failed in a way retrying cannot mend without a change of certificate or
    /// configuration: a certificate refused either way, a peer that does not speak TLS.
    TlsRefused,
    /// The broker refused our SASL credentials, or cannot authenticate them as configured
    /// (it does not offer the mechanism, or is not a SASL listener).
    AuthenticationRefused,
    /// The broker belongs to another cluster than the data dir it would fill.
    IdentityMismatch,
    /// Anything else: an answer that could not be used, no common version, shutting down.
    Failed,
}

impl ConnectionErrorKind {
    /// Whether the connection failed (an I/O failure, TLS's included) rather than what the
    /// broker said.
    pub fn is_transport(self) -> bool {
        matches!(self, Self::Transport(_) | Self::TlsRefused)
    }

    /// Whether the broker refused our security settings, which retrying cannot mend: an
    /// ERROR, and at start-up fatal once every bootstrap broker refused.
    pub fn is_refusal(self) -> bool {
        matches!(self, Self::TlsRefused | Self::AuthenticationRefused)
    }
}

/// A failed connection or request: its kind, and the message as it reads (`{e}` the
/// outermost context, `{e:#}` the whole chain; the chain stays walkable through `source`).
#[derive(Debug)]
pub struct ConnectionError {
    kind: ConnectionErrorKind,
    error: anyhow::Error,
}

impl ConnectionError {
    pub fn new(kind: ConnectionErrorKind, error: anyhow::Error) -> Self {
        ConnectionError { kind, error }
    }

    /// An error of kind [`ConnectionErrorKind::Failed`].
    pub fn failed(error: impl Into<anyhow::Error>) -> Self {
        Self::new(ConnectionErrorKind::Failed, error.into())
    }

    /// An I/O error seen on the connection, under `context`: a TLS failure keeps what its
    /// [`TlsFailure`] says of retrying; any other is [`ConnectionErrorKind::Transport`].
    pub fn io(e: io::Error, context: String) -> Self {
        let kind = match TlsFailure::of(&e) {
            Some(f) if f.fatal => ConnectionErrorKind::TlsRefused,
            _ => ConnectionErrorKind::Transport(e.kind()),
        };
        Self::new(kind, anyhow::Error::new(e).context(context))
    }

    pub fn kind(&self) -> ConnectionErrorKind {
        self.kind
    }
}

impl std::fmt::Display for ConnectionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if f.alternate() {
            write!(f, "{:#}", self.error)
        } else {
            write!(f, "{}", self.error)
        }
    }
}

impl std::error::Error for ConnectionError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

/// `bail!` for a failure that is not the connection's: a [`ConnectionError`] of kind
/// [`ConnectionErrorKind::Failed`].
macro_rules! fail {
    ($($arg:tt)*) => {
        return Err($crate::client::ConnectionError::failed(anyhow::anyhow!($($arg)*)))
    };
}
pub(crate) use fail;

/// `with_context` for a failure that is not the connection's (the broker's answer could not
/// be used, or what the request needs is missing): kind [`ConnectionErrorKind::Failed`].
pub trait FailedContext<T> {
    fn failed_with<C>(self, context: impl FnOnce() -> C) -> Result<T, ConnectionError>
    where
        C: std::fmt::Display + Send + Sync + 'static;
}

impl<T, E: Into<anyhow::Error>> FailedContext<T> for Result<T, E> {
    fn failed_with<C>(self, context: impl FnOnce() -> C) -> Result<T, ConnectionError>
    where
        C: std::fmt::Display + Send + Sync + 'static,
    {
        self.map_err(|e| ConnectionError::failed(e.into().context(context())))
    }
}

impl<T> FailedContext<T> for Option<T> {
    fn failed_with<C>(self, context: impl FnOnce() -> C) -> Result<T, ConnectionError>
    where
        C: std::fmt::Display + Send + Sync + 'static,
    {
        self.ok_or_else(|| ConnectionError::failed(anyhow::anyhow!("{}", context())))
    }
}

/// `with_context` for an I/O error seen on the connection (see [`ConnectionError::io`]).
pub trait IoContext<T> {
    fn io_with(self, context: impl FnOnce() -> String) -> Result<T, ConnectionError>;
}

impl<T> IoContext<T> for Result<T, io::Error> {
    fn io_with(self, context: impl FnOnce() -> String) -> Result<T, ConnectionError> {
        self.map_err(|e| ConnectionError::io(e, context()))
    }
}
