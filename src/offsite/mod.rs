//! The offsite tier: the replica copied to S3-compatible object storage, encrypted, and
//! restorable from there when the local disk is lost.

pub mod bucket;
pub mod envelope;
pub mod manifest;
pub mod restore;
pub mod settings;
pub mod store;
pub mod upload;
pub mod verify;
