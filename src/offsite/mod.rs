//! Offsite copies of the replica in S3-compatible storage, encrypted, restorable when the
//! local disk is lost: [`envelope`] is the byte format of every object in the bucket (plain
//! with a checksum, or encrypted and authenticated), [`store`] the blocking S3 client that
//! puts, gets and lists them, [`bucket`] objects as the rest sees them, [`manifest`] the
//! object layout and each partition's manifest, [`settings`] `[offsite]` made ready,
//! [`upload`] the daemon's uploader thread (with [`local`], the local log as a round
//! sees it, and [`reconcile`], the manifest kept in line with it), [`restore`] and [`verify`] the commands.

pub mod bucket;
pub mod envelope;
pub mod local;
pub mod manifest;
pub mod reconcile;
pub mod restore;
pub mod settings;
pub mod store;
pub mod upload;
pub mod verify;
