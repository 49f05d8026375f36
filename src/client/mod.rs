//! Talking to brokers: one blocking connection per broker ([`connection`]) with version
//! negotiation, and the cluster view a follower needs ([`cluster`]): brokers, partition
//! leaders and their epochs, plus ListOffsets / OffsetForLeaderEpoch helpers; [`sasl`]
//! authenticates a connection. Their failures are [`ConnectionError`]s ([`error`]).

pub mod cluster;
pub mod connection;
pub mod error;
pub mod sasl;

pub use connection::BrokerConnection;
pub use error::{ConnectionError, ConnectionErrorKind};
