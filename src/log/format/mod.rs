//! The files of one partition directory in Kafka's on-disk formats. Each module opens with
//! its layout, says what a crash leaves and who may touch it. Nothing here knows about the
//! partition engine above it; open descriptors come from [`super::resources`].

pub mod diverged;
pub mod epoch_cache;
pub mod index_file;
pub mod offset_index;
pub mod producer_state;
pub mod segment;
pub mod segment_reader;
pub mod time_index;
pub mod txn_index;
