//! Talking to brokers: one blocking connection per broker ([`connection`]) with version
//! negotiation, and the cluster view a follower needs ([`cluster`]): brokers, partition
//! leaders and their epochs, plus ListOffsets / OffsetForLeaderEpoch helpers.

pub mod cluster;
pub mod connection;

pub use connection::BrokerConnection;
