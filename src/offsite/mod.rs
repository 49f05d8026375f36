//! Offsite copies of the replica in S3-compatible storage: [`envelope`] is the byte format of
//! every object in the bucket (plain with a checksum, or encrypted and authenticated), and
//! [`store`] the blocking S3 client that puts, gets and lists them.

pub mod envelope;
pub mod store;
