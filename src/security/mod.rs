//! Security of connections: TLS (rustls) and SASL, for the client side (`[security]`, every
//! connection to the cluster) and for the serve listener (`[serve] protocol`).

use anyhow::{Context, Result, bail};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Refuses a secret file that is not a regular file or that its group or others may read
/// or write (mode & 0o077), naming it and its mode.
pub fn check_secret_file(path: &Path) -> Result<()> {
    let md =
        std::fs::metadata(path).with_context(|| format!("cannot read `{}`", path.display()))?;
    if !md.is_file() {
        bail!("`{}` is not a regular file", path.display());
    }
    let mode = md.mode() & 0o777;
    if mode & 0o077 != 0 {
        bail!(
            "`{}` has mode {mode:04o}: a secret must not be readable by group or others (chmod 600 it)",
            path.display()
        );
    }
    Ok(())
}

/// The secret in `path` (checked as [`check_secret_file`] does): its first line, without the
/// line end. An empty secret is an error.
pub fn read_secret(path: &Path) -> Result<String> {
    check_secret_file(path)?;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read `{}`", path.display()))?;
    let line = text.lines().next().unwrap_or("");
    if line.is_empty() {
        bail!("`{}` is empty", path.display());
    }
    Ok(line.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_secret_readable_by_others_is_refused_naming_the_file_and_mode() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pw");
        std::fs::write(&f, "s3cret\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = format!("{:#}", read_secret(&f).unwrap_err());
        assert!(e.contains("pw") && e.contains("0644"), "{e}");
        assert!(!e.contains("s3cret"), "{e}");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_secret(&f).unwrap(), "s3cret");
        std::fs::write(&f, "\n").unwrap();
        assert!(read_secret(&f).is_err());
    }
}
