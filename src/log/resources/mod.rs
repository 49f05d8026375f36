//! What the process spends on its logs and must keep within limits: file descriptors
//! ([`descriptors`]), the bounded cache of open segment files ([`open_files`]) and the data
//! dir's free space ([`disk`]).

pub mod descriptors;
pub mod disk;
pub mod open_files;

/// The resource a local operation ran out of: what callers branch on, since each is handled
/// apart from a partition's own storage failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exhausted {
    /// The data dir's filesystem (ENOSPC): every partition pauses.
    Disk,
    /// The process's file descriptors (EMFILE, ENFILE): said once a minute, retried.
    Descriptors,
}

impl Exhausted {
    /// Which resource the operating system's error under `e` says ran out, if any: the one
    /// place a log error is classified, where the log hands it out.
    /// A full disk anywhere in the chain counts before the descriptor limit.
    pub fn of(e: &anyhow::Error) -> Option<Exhausted> {
        let io = || e.chain().filter_map(|c| c.downcast_ref::<std::io::Error>());
        if io()
            .any(|io| io.kind() == std::io::ErrorKind::StorageFull || io.raw_os_error() == Some(28))
        {
            Some(Exhausted::Disk)
        } else if io().any(open_files::is_exhausted_io) {
            Some(Exhausted::Descriptors)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enospc_emfile_and_enfile_are_told_apart_from_other_errors() {
        let of = |code| {
            Exhausted::of(
                &anyhow::Error::from(std::io::Error::from_raw_os_error(code)).context("writing"),
            )
        };
        assert_eq!(of(28), Some(Exhausted::Disk));
        assert_eq!(of(24), Some(Exhausted::Descriptors));
        assert_eq!(of(23), Some(Exhausted::Descriptors));
        assert_eq!(of(5), None);
        assert_eq!(Exhausted::of(&anyhow::anyhow!("no io error")), None);
    }

    #[test]
    fn a_failed_append_says_which_resource_ran_out_or_that_storage_failed() {
        use crate::log::AppendError;
        let failed = |code| {
            AppendError::from(
                anyhow::Error::from(std::io::Error::from_raw_os_error(code)).context("appending"),
            )
        };
        assert!(matches!(failed(28), AppendError::DiskFull(m) if m.starts_with("appending: ")));
        assert!(matches!(failed(24), AppendError::Exhausted(m) if m.starts_with("appending: ")));
        assert!(matches!(failed(5), AppendError::Storage(_)));
    }
}
