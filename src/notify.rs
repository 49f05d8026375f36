//! systemd's notify protocol over `NOTIFY_SOCKET` (a Unix datagram socket; no libsystemd):
//! READY=1, STOPPING=1 and the one-line STATUS= that `systemctl status` shows.

/// Sends `state` (one or more `KEY=value` lines) to systemd, when it asked for notifications.
pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let sock = match std::os::unix::net::UnixDatagram::unbound() {
        Ok(s) => s,
        Err(_) => return,
    };
    let p = path.to_string_lossy();
    let sent = match p.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
                .and_then(|addr| sock.send_to_addr(state.as_bytes(), &addr))
        }
        None => sock.send_to(state.as_bytes(), &*p),
    };
    if let Err(e) = sent {
        crate::log_debug!("sd_notify to {p} failed: {e}");
    }
}

/// The STATUS= line for a data dir that is full, or following again.
pub fn disk_status(full: Option<&str>) {
    match full {
        Some(why) => notify(&format!("STATUS=fetching paused: {why}")),
        None => notify("STATUS=following"),
    }
}
