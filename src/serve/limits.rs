//! What the listener may take from the process, whatever its clients do: memory
//! ([`MemoryPool`]), descriptors ([`Descriptors`]), and work for clients that are gone
//! ([`peer_gone`]).
//!
//! # Memory
//! Every connection has [`CONNECTION_ALLOWANCE`] for itself: its thread, its buffers, and a
//! request whose [`request_charge`] fits in what is left of it. A larger request is read only
//! once the shared pool (`serve.max_memory_bytes`) holds its charge; until then the
//! connection is muted (its bytes wait in the kernel), and the charge is held until the
//! response is written. So, whatever the clients send and however slowly they read, the
//! listener holds at most `serve.max_memory_bytes + serve.max_connections ×
//! CONNECTION_ALLOWANCE` beyond the daemon's own memory.
//!
//! The charge of a request is its size times [`AMPLIFICATION`]: no request this listener
//! answers costs more than that while it is decoded and answered (the answers of the many
//! items a small request may name are deduplicated, as Kafka's are, and a Metadata answer
//! about the local topics is charged before it is built: [`MemoryPool`] `grow`).
//!
//! # Descriptors
//! The listener's connections and the segment files its responses send from share what the
//! log's open-file budget (`log.max_open_files`) and the daemon's own reserve
//! ([`crate::log::resources::descriptors::RESERVE`]: flushes, checkpoints, accept, the live status,
//! metrics, broker connections) leave of the open-file limit read at start. A connection
//! that finds none is closed at once; a response that finds none sends what it has. The
//! files of a response beyond its first leave [`Descriptors::reserve`] free: a response's
//! first file and a new connection may take the last descriptors, so clients whose
//! responses hold many files unread delay no other client's first batch.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// What each connection may hold without drawing on the shared pool: its thread's stack in
/// use, its buffers, and a request of [`SMALL_REQUEST`] bytes at most.
pub const CONNECTION_ALLOWANCE: usize = 256 << 10;

/// The most memory answering a request may take per byte of the request: decoding its
/// items, and the answer about each. The worst shape measured takes 80 times its size (a
/// DeleteTopics naming 524,256 one-character topics, each refused with a message); checked
/// by `tests/serve_request_memory.rs` on the worst shapes of every API, and by the fuzzer
/// (`tests/fuzz/`) on whatever it finds.
pub const AMPLIFICATION: usize = 96;

/// What a connection holds whatever its request: buffers, the TLS state, a chunk of a file
/// range on its way through TLS.
pub const CONNECTION_BASE: usize = 160 << 10;

/// The largest request a connection answers from its own allowance.
pub const SMALL_REQUEST: usize = (CONNECTION_ALLOWANCE - CONNECTION_BASE) / AMPLIFICATION;

/// What reading and answering a request of `size` bytes is charged.
pub fn request_charge(size: usize) -> usize {
    size.saturating_mul(AMPLIFICATION)
}

/// The largest charge a pool of `capacity` bytes can hold.
pub fn largest_charge(capacity: usize) -> usize {
    capacity.saturating_add(CONNECTION_ALLOWANCE - CONNECTION_BASE)
}

/// The part of a charge the shared pool must hold (the rest is the connection's allowance).
fn beyond_allowance(charge: usize) -> usize {
    charge.saturating_sub(CONNECTION_ALLOWANCE - CONNECTION_BASE)
}

/// The memory shared by every connection of a listener beyond their allowances.
#[derive(Debug)]
pub struct MemoryPool {
    capacity: usize,
    used: Mutex<usize>,
    freed: Condvar,
    /// Connections that waited for memory since start (a metric of pressure).
    muted: AtomicUsize,
}

/// Why memory was not given.
#[derive(Debug, PartialEq, Eq)]
pub enum NoMemory {
    /// The wait ended: its deadline passed, the client left, or the listener stops.
    GaveUp,
    /// More than the whole pool.
    TooLarge { wanted: usize, capacity: usize },
}

impl MemoryPool {
    pub fn new(capacity: usize) -> Arc<MemoryPool> {
        Arc::new(MemoryPool {
            capacity,
            used: Mutex::new(0),
            freed: Condvar::new(),
            muted: AtomicUsize::new(0),
        })
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes held now.
    pub fn used(&self) -> usize {
        *self.lock()
    }

    /// Times a connection had to wait for memory.
    pub fn muted(&self) -> usize {
        self.muted.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, usize> {
        self.used
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A lease of the pool's share of `charge` (nothing when the connection's allowance
    /// covers it), waiting while the pool is short, until `deadline` or `give_up()`.
    pub fn lease(
        self: &Arc<Self>,
        charge: usize,
        deadline: Instant,
        give_up: &dyn Fn() -> bool,
    ) -> Result<Lease, NoMemory> {
        let mut lease = Lease {
            pool: self.clone(),
            bytes: 0,
        };
        lease.grow_to(charge, deadline, give_up)?;
        Ok(lease)
    }

    fn take(
        &self,
        bytes: usize,
        deadline: Instant,
        give_up: &dyn Fn() -> bool,
    ) -> Result<(), NoMemory> {
        if bytes == 0 {
            return Ok(());
        }
        if bytes > self.capacity {
            return Err(NoMemory::TooLarge {
                wanted: bytes,
                capacity: self.capacity,
            });
        }
        let mut used = self.lock();
        let mut waited = false;
        while used.saturating_add(bytes) > self.capacity {
            if !waited {
                waited = true;
                self.muted.fetch_add(1, Ordering::Relaxed);
            }
            let now = Instant::now();
            if now >= deadline || give_up() {
                return Err(NoMemory::GaveUp);
            }
            // Woken by every release; looks at the client and the deadline at least this often.
            let slice = (deadline - now).min(Duration::from_millis(200));
            used = self
                .freed
                .wait_timeout(used, slice)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        *used += bytes;
        Ok(())
    }

    fn give_back(&self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        let mut used = self.lock();
        *used = used.saturating_sub(bytes);
        drop(used);
        self.freed.notify_all();
    }
}

/// Memory held from a [`MemoryPool`] until dropped.
#[derive(Debug)]
pub struct Lease {
    pool: Arc<MemoryPool>,
    /// What the pool holds for it (the charge beyond the connection's allowance).
    bytes: usize,
}

impl Lease {
    /// Makes the lease cover a charge of `charge` bytes in all, waiting as [`MemoryPool::lease`].
    pub fn grow_to(
        &mut self,
        charge: usize,
        deadline: Instant,
        give_up: &dyn Fn() -> bool,
    ) -> Result<(), NoMemory> {
        let want = beyond_allowance(charge);
        if want > self.bytes {
            self.pool.take(want - self.bytes, deadline, give_up)?;
            self.bytes = want;
        }
        Ok(())
    }

    /// Makes the lease cover a charge of `charge` bytes, giving back what it held beyond.
    pub fn shrink_to(&mut self, charge: usize) {
        let want = beyond_allowance(charge);
        if want < self.bytes {
            self.pool.give_back(self.bytes - want);
            self.bytes = want;
        }
    }

    /// What the pool holds for it.
    pub fn pooled(&self) -> usize {
        self.bytes
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.pool.give_back(self.bytes);
    }
}

/// The descriptors the listener may hold at once: its connections' sockets and the segment
/// files its responses send from.
#[derive(Debug)]
pub struct Descriptors {
    capacity: usize,
    used: AtomicUsize,
}

/// Descriptors a connection holds for its whole life: its socket, the copy kept to shut it
/// down on stop, and one opened for a moment while a response is built (an offset index).
pub const PER_CONNECTION: usize = 3;

impl Descriptors {
    pub fn new(capacity: usize) -> Arc<Descriptors> {
        Arc::new(Descriptors {
            capacity,
            used: AtomicUsize::new(0),
        })
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn used(&self) -> usize {
        self.used.load(Ordering::SeqCst)
    }

    /// What files beyond the first of a response leave free: a quarter of the capacity,
    /// kept for the first file of every other response and for new connections, so that
    /// clients whose responses send from many files and are never read cannot starve the
    /// others.
    pub fn reserve(&self) -> usize {
        self.capacity / 4
    }

    /// `n` descriptors, if that many are free.
    pub fn take(self: &Arc<Self>, n: usize) -> Option<DescriptorPermit> {
        self.take_leaving(n, 0)
    }

    /// `n` descriptors, if that many are free with `keep` more still free after them.
    pub fn take_leaving(self: &Arc<Self>, n: usize, keep: usize) -> Option<DescriptorPermit> {
        let mut used = self.used.load(Ordering::SeqCst);
        loop {
            if used.saturating_add(n).saturating_add(keep) > self.capacity {
                return None;
            }
            match self
                .used
                .compare_exchange(used, used + n, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => {
                    return Some(DescriptorPermit {
                        budget: self.clone(),
                        n,
                    });
                }
                Err(now) => used = now,
            }
        }
    }
}

/// Descriptors held from [`Descriptors`] until dropped (with the file or socket they are for).
#[derive(Debug)]
pub struct DescriptorPermit {
    budget: Arc<Descriptors>,
    n: usize,
}

impl Drop for DescriptorPermit {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.n, Ordering::SeqCst);
    }
}

/// What the listener's descriptors are, from the open-file limit read at start (`limit`),
/// the log's open-file budget (`log_files`), the descriptors open when it starts (`open`),
/// and the daemon's reserve: what is left of the limit, or, when the log's budget leaves
/// nothing, a floor of [`PER_CONNECTION`] × 8 + 16 (said at start).
pub fn descriptor_share(limit: Option<u64>, log_files: usize, open: u64) -> usize {
    let floor = PER_CONNECTION * 8 + 16;
    let Some(limit) = limit else {
        return usize::MAX / 2;
    };
    let left = limit
        .saturating_sub(log_files as u64)
        .saturating_sub(open)
        .saturating_sub(crate::log::resources::descriptors::RESERVE);
    usize::try_from(left).unwrap_or(usize::MAX / 2).max(floor)
}

/// Whether the client at the other end of `tcp` is gone: it closed or reset the connection.
/// Bytes it sent and we have not read (a next request) do not count; neither does a socket
/// that cannot be asked.
pub fn peer_gone(tcp: &std::net::TcpStream) -> bool {
    use rustix::event::{PollFd, PollFlags, poll};
    let mut fds = [PollFd::new(tcp, PollFlags::RDHUP)];
    match poll(&mut fds, Some(&rustix::event::Timespec::default())) {
        Ok(n) if n > 0 => fds[0]
            .revents()
            .intersects(PollFlags::RDHUP | PollFlags::HUP | PollFlags::ERR),
        _ => false,
    }
}

/// An address or a network (`10.0.0.0/8`, `::1`), as `serve.follower_addresses` names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cidr {
    net: std::net::IpAddr,
    prefix: u8,
}

impl Cidr {
    /// `ADDR` or `ADDR/PREFIX`; an error says what is wrong.
    pub fn parse(text: &str) -> anyhow::Result<Cidr> {
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let net: std::net::IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| anyhow::anyhow!("not an IP address or network (ADDR or ADDR/BITS)"))?;
        let bits = if net.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => bits,
            Some(p) => match p.trim().parse::<u8>() {
                Ok(p) if p <= bits => p,
                _ => anyhow::bail!("the prefix after `/` must be 0 to {bits}"),
            },
        };
        // Clients are matched as IPv4 when they are IPv4-mapped: so are networks.
        if let std::net::IpAddr::V6(v6) = net
            && let Some(v4) = v6.to_ipv4_mapped()
            && prefix >= 96
        {
            return Ok(Cidr {
                net: v4.into(),
                prefix: prefix - 96,
            });
        }
        Ok(Cidr { net, prefix })
    }

    /// Whether `ip` is in it (an IPv4-mapped IPv6 address as the IPv4 one).
    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        use std::net::IpAddr;
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        let (a, b, bits) = match (self.net, ip) {
            (IpAddr::V4(n), IpAddr::V4(i)) => (
                u128::from(u32::from(n)) << 96,
                u128::from(u32::from(i)) << 96,
                self.prefix,
            ),
            (IpAddr::V6(n), IpAddr::V6(i)) => (u128::from(n), u128::from(i), self.prefix),
            _ => return false,
        };
        let mask = if bits == 0 {
            0
        } else {
            u128::MAX << (128 - u32::from(bits))
        };
        a & mask == b & mask
    }
}

/// What the process's listener holds and has refused, for `/metrics`.
#[derive(Debug, Default)]
pub struct ListenerStats {
    /// The running listener's memory pool and descriptor share (none before it starts).
    held: Mutex<Option<(Arc<MemoryPool>, Arc<Descriptors>)>>,
    pub connections: AtomicUsize,
    pub refused_max_connections: AtomicUsize,
    pub refused_per_ip: AtomicUsize,
    pub refused_descriptors: AtomicUsize,
}

/// The process's [`ListenerStats`].
pub fn listener_stats() -> &'static ListenerStats {
    static STATS: std::sync::OnceLock<ListenerStats> = std::sync::OnceLock::new();
    STATS.get_or_init(ListenerStats::default)
}

/// A snapshot for `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenerFigures {
    pub memory_bytes: usize,
    pub memory_limit_bytes: usize,
    pub muted: usize,
    pub descriptors: usize,
    pub descriptors_limit: usize,
    pub connections: usize,
    /// Connections refused, by the limit that refused them.
    pub refused: [(&'static str, usize); 3],
}

impl ListenerStats {
    /// The listener now started with `memory` and `fds`.
    pub fn started(&self, memory: Arc<MemoryPool>, fds: Arc<Descriptors>) {
        *self
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some((memory, fds));
    }

    /// What the listener holds now; `None` when none runs in this process.
    pub fn figures(&self) -> Option<ListenerFigures> {
        let held = self
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (memory, fds) = held.as_ref()?;
        Some(ListenerFigures {
            memory_bytes: memory.used(),
            memory_limit_bytes: memory.capacity(),
            muted: memory.muted(),
            descriptors: fds.used(),
            descriptors_limit: fds.capacity(),
            connections: self.connections.load(Ordering::Relaxed),
            refused: [
                (
                    "max_connections",
                    self.refused_max_connections.load(Ordering::Relaxed),
                ),
                (
                    "max_connections_per_ip",
                    self.refused_per_ip.load(Ordering::Relaxed),
                ),
                (
                    "descriptors",
                    self.refused_descriptors.load(Ordering::Relaxed),
                ),
            ],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_waits_for_memory_and_gives_it_back() {
        let pool = MemoryPool::new(1 << 20);
        let never = || false;
        let soon = || Instant::now() + Duration::from_millis(300);
        // A small request takes nothing from the pool.
        let small = pool
            .lease(request_charge(SMALL_REQUEST), soon(), &never)
            .unwrap();
        assert_eq!(small.pooled(), 0);
        let big_charge = (1 << 20) + CONNECTION_ALLOWANCE - CONNECTION_BASE;
        let big = pool.lease(big_charge, soon(), &never).unwrap();
        assert_eq!(pool.used(), 1 << 20);
        // The pool is full: the next large one waits and gives up at its deadline.
        let t = Instant::now();
        assert_eq!(
            pool.lease(big_charge, soon(), &never).unwrap_err(),
            NoMemory::GaveUp
        );
        assert!(t.elapsed() >= Duration::from_millis(250));
        assert_eq!(pool.muted(), 1);
        // ... or as soon as its client is gone.
        let t = Instant::now();
        let gone = || true;
        assert_eq!(
            pool.lease(big_charge, Instant::now() + Duration::from_secs(30), &gone)
                .unwrap_err(),
            NoMemory::GaveUp
        );
        assert!(t.elapsed() < Duration::from_secs(1));
        // More than the whole pool is never given.
        assert!(matches!(
            pool.lease(big_charge + 1, soon(), &never),
            Err(NoMemory::TooLarge { .. })
        ));
        // A waiter gets the memory once it is given back.
        let p2 = pool.clone();
        let waiter = std::thread::spawn(move || {
            p2.lease(
                big_charge,
                Instant::now() + Duration::from_secs(10),
                &|| false,
            )
            .map(|l| l.pooled())
        });
        std::thread::sleep(Duration::from_millis(100));
        drop(big);
        assert_eq!(waiter.join().unwrap(), Ok(1 << 20));
        assert_eq!(
            pool.used(),
            0,
            "the waiter's lease is dropped with its thread"
        );
        let mut l = pool.lease(big_charge, soon(), &never).unwrap();
        l.shrink_to(CONNECTION_ALLOWANCE - CONNECTION_BASE + 10);
        assert_eq!(pool.used(), 10);
        drop(l);
        assert_eq!(pool.used(), 0);
        drop(small);
    }

    #[test]
    fn descriptors_are_counted_and_given_back() {
        let d = Descriptors::new(5);
        let a = d.take(3).unwrap();
        assert!(d.take(3).is_none());
        let b = d.take(2).unwrap();
        assert_eq!(d.used(), 5);
        drop(a);
        assert_eq!(d.used(), 2);
        drop(b);
        assert_eq!(d.used(), 0);
        let d = Descriptors::new(12);
        assert_eq!(d.reserve(), 3);
        let greedy = d.take_leaving(9, d.reserve()).unwrap();
        assert!(
            d.take_leaving(1, d.reserve()).is_none(),
            "the reserve stays free"
        );
        let first = d.take(3).unwrap();
        assert!(d.take(1).is_none());
        drop((greedy, first));
        assert_eq!(d.used(), 0);
        assert_eq!(
            descriptor_share(Some(20_000), 15_000, 10),
            20_000 - 15_000 - 10 - 64
        );
        assert_eq!(
            descriptor_share(Some(1_000), 15_000, 10),
            PER_CONNECTION * 8 + 16
        );
    }

    #[test]
    fn networks_contain_their_addresses() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        let net = Cidr::parse("10.0.0.0/8").unwrap();
        assert!(net.contains(ip("10.200.3.4")));
        assert!(!net.contains(ip("11.0.0.1")));
        assert!(net.contains(ip("::ffff:10.1.2.3")), "IPv4-mapped");
        let one = Cidr::parse("127.0.0.1").unwrap();
        assert!(one.contains(ip("127.0.0.1")) && !one.contains(ip("127.0.0.2")));
        assert!(Cidr::parse("::1").unwrap().contains(ip("::1")));
        assert!(Cidr::parse("fe80::/10").unwrap().contains(ip("fe80::1")));
        assert!(Cidr::parse("0.0.0.0/0").unwrap().contains(ip("8.8.8.8")));
        let mapped = Cidr::parse("::ffff:10.1.0.0/112").unwrap();
        assert!(mapped.contains(ip("10.1.2.3")) && !mapped.contains(ip("10.2.0.1")));
        for bad in ["", "10.0.0.0/33", "host.example", "10.0.0.0/x", "::1/129"] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_peer_that_closed_is_gone_and_one_that_sent_more_is_not() {
        use std::io::Write;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        assert!(!peer_gone(&server));
        client.write_all(b"next request").unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert!(!peer_gone(&server), "unread bytes are not a departure");
        drop(client);
        std::thread::sleep(Duration::from_millis(50));
        assert!(peer_gone(&server));
    }
}
