//! Talking to brokers: one blocking connection per broker ([`connection`]) with version
//! negotiation, and the cluster view a follower needs ([`cluster`]): brokers, partition
//! leaders and their epochs, plus ListOffsets / OffsetForLeaderEpoch helpers; [`sasl`]
//! authenticates a connection; [`admin`] sends the admin, group and transaction requests of
//! an archive and a restore. Their failures are [`ConnectionError`]s ([`error`]); an admin
//! call's are [`admin::AdminError`]s, which keep the code of an error the broker answered.

pub mod admin;
pub mod cluster;
pub mod connection;
pub mod error;
pub mod sasl;

pub use connection::BrokerConnection;
pub use error::{ConnectionError, ConnectionErrorKind};
