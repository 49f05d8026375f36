//! What the process spends on its logs and must keep within limits: file descriptors
//! ([`descriptors`]), the bounded cache of open segment files ([`open_files`]) and the data
//! dir's free space ([`disk`]).

pub mod descriptors;
pub mod disk;
pub mod open_files;
