//! `serve.socket_send_buffer_bytes` bounds what the kernel holds of a response its client
//! does not read: the server's socket queues at most about twice the setting (the kernel's
//! bookkeeping) and one segment more, however large the response, where the system's
//! autotuned buffer would grow to megabytes. Read from `/proc/net/tcp` (`tx_queue`: bytes
//! written and not yet acknowledged, sent or not).

use crate::support::{fetch_session, hostile};
use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

const TOPIC: &str = "sndbuf";
const SEND_BUFFER: usize = 16 << 10;
/// Twice the setting, and one loopback segment (64 KiB) a `sendfile` may queue past it.
const QUEUED_BOUND: usize = 2 * SEND_BUFFER + (64 << 10);

/// The `tx_queue` of the loopback TCP socket from `local` to `remote` port (`None`: no such
/// socket).
fn tx_queue(local: u16, remote: u16) -> Option<usize> {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("read /proc/net/tcp");
    let (l, r) = (
        format!("0100007F:{local:04X}"),
        format!("0100007F:{remote:04X}"),
    );
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f.get(1) == Some(&l.as_str()) && f.get(2) == Some(&r.as_str())).then(|| {
            let tx = f[4].split(':').next().expect("tx_queue:rx_queue");
            usize::from_str_radix(tx, 16).expect("hex tx_queue")
        })
    })
}

#[test]
fn a_client_that_does_not_read_holds_at_most_the_send_buffer_in_the_kernel() {
    // About 6 MiB in segments of 1 MiB: one response of a few megabytes.
    let leader = fetch_session::leader_of(TOPIC, 1, 200_000, 200);
    let log = leader.log_bytes(0).len();
    assert!(log > 4 << 20, "the partition holds {log} bytes");
    let (_dir, _data, addr, mut d) = fetch_session::serving(&leader, TOPIC, |c| {
        c.set("log.segment_bytes", 1 << 20)
            .set("serve.socket_send_buffer_bytes", SEND_BUFFER as i64)
    });
    let mut conn = fetch_session::connect(&addr);
    fetch_session::wait_for_high_watermarks(&mut conn, &leader, TOPIC, &[0]);

    let mut client = TcpStream::connect(&addr).expect("connect");
    let server_port: u16 = addr.rsplit(':').next().unwrap().parse().unwrap();
    let client_port = client.local_addr().unwrap().port();
    client
        .write_all(&hostile::fetch_repeating(4, TOPIC, 0, 1, i32::MAX, 0))
        .expect("send the Fetch");
    // Watch the server's queue for 2 s while the client reads nothing.
    let mut most = 0;
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        if let Some(q) = tx_queue(server_port, client_port) {
            most = most.max(q);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(most > 0, "the server's socket never queued anything");
    // The response was megabytes (its size comes first), the queue a few dozen KiB.
    client
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let (size, _) = hostile::read_response(&mut client, 0).expect("read the response");
    assert!(size > 2 << 20, "the response is {size} bytes");
    assert!(
        most <= QUEUED_BOUND,
        "the server queued {most} bytes of a {size}-byte response its client did not read, past {QUEUED_BOUND} (serve.socket_send_buffer_bytes = {SEND_BUFFER})"
    );
    eprintln!("queued at most {most} bytes of a {size}-byte response");
    fetch_session::stop_calmly(&mut d);
}
