//! What answering one request takes in memory stays within what the serve listener charges
//! for it before reading it (`serve::limits::request_charge`, and for Metadata the answer
//! about every local topic): the charge is what bounds the listener's memory under any mix of
//! clients (README, "Serving untrusted clients"). A request shape that took more would let
//! clients that never read push RSS past the documented bound.
//!
//! Measured with a counting allocator on this thread, in glibc's chunk sizes (an 8-byte
//! header, 16-byte steps, 32 bytes at least), from the frame's arrival to the response built:
//! the frame itself, the decoded request, the work, the response. The shapes are the worst
//! a client can send per byte: the most items of the fewest bytes each, distinct (repeats are
//! answered once), for every API the listener decodes item by item.
//!
//! A test binary of its own, not a module of `tests/it`: its counting allocator is the
//! process's global allocator.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::cast_possible_truncation,
    reason = "a test fails by panicking, and indexes its own fixtures freely"
)]
#![allow(unsafe_code, reason = "the counting allocator implements GlobalAlloc")]

use replica_follower::protocol::codec::Writer;
use replica_follower::protocol::{ApiKey, RefusedApi};
use replica_follower::serve::fuzzing::{Listener, build_data_dir};
use replica_follower::serve::limits::{CONNECTION_BASE, request_charge};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

/// What glibc's malloc takes for `n` bytes.
fn chunk(n: usize) -> isize {
    ((n + 8 + 15) & !15).max(32) as isize
}

fn count(delta: isize) {
    let _ = COUNTING.try_with(|on| {
        if on.get() {
            let _ = LIVE.try_with(|live| {
                let now = live.get() + delta;
                live.set(now);
                let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
            });
        }
    });
}

// SAFETY: every call is passed to the system allocator unchanged; only sizes are counted,
// in thread-locals that never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            count(chunk(layout.size()));
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            count(chunk(layout.size()));
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        count(-chunk(layout.size()));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            count(chunk(new_size) - chunk(layout.size()));
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// A request frame (without its size): the header, then `body`.
fn frame(key: i16, version: i16, flexible: bool, body: impl FnOnce(&mut Writer)) -> Vec<u8> {
    let mut w = Writer::new();
    w.i16(key).i16(version).i32(7).string(Some("c"), false);
    if flexible {
        w.empty_tags(true);
    }
    body(&mut w);
    w.buf
}

fn served(api: ApiKey, version: i16, body: impl FnOnce(&mut Writer)) -> Vec<u8> {
    frame(api.key(), version, api.is_flexible(version), body)
}

fn refused(api: RefusedApi, version: i16, body: impl FnOnce(&mut Writer)) -> Vec<u8> {
    frame(api.key(), version, api.is_flexible(version), body)
}

/// The `i`th of many distinct short names: 3 characters.
fn name(i: usize) -> String {
    const A: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let n = A.len();
    [A[i % n], A[i / n % n], A[i / n / n % n]]
        .iter()
        .map(|&b| b as char)
        .collect()
}

/// An array's length: compact (length + 1, varint) when flexible.
fn array(w: &mut Writer, flexible: bool, n: usize) {
    if flexible {
        w.unsigned_varint(n as u32 + 1);
    } else {
        w.i32(n as i32);
    }
}

/// Items that fit a frame of about `bytes`, at `each` bytes an item.
fn items(bytes: usize, each: usize) -> usize {
    bytes / each
}

/// The worst shapes, each about `bytes` long, with what it is.
fn shapes(bytes: usize) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    // Metadata: distinct unknown topics by name (v1, v9 flexible), and by id alone (v12).
    for v in [1i16, 9] {
        let flexible = ApiKey::Metadata.is_flexible(v);
        let n = items(bytes, 5);
        out.push((
            format!("Metadata v{v}, {n} distinct 3-character topics"),
            served(ApiKey::Metadata, v, |w| {
                array(w, flexible, n);
                for i in 0..n {
                    w.string(Some(&name(i)), flexible);
                    if flexible {
                        w.empty_tags(true);
                    }
                }
                if v >= 4 {
                    w.bool(false);
                }
                if (8..=10).contains(&v) {
                    w.bool(false).bool(false);
                }
                if flexible {
                    w.empty_tags(true);
                }
            }),
        ));
    }
    let n = items(bytes, 18);
    out.push((
        format!("Metadata v12, {n} distinct topic ids"),
        served(ApiKey::Metadata, 12, |w| {
            array(w, true, n);
            for i in 0..n {
                let mut id = [1u8; 16];
                id[..8].copy_from_slice(&(i as u64 + 1).to_be_bytes());
                w.uuid(&id).string(None, true).empty_tags(true);
            }
            w.bool(false).bool(false).empty_tags(true);
        }),
    ));
    // Fetch v4: one topic, distinct partitions; and one partition in each of many topics.
    let n = items(bytes, 16);
    out.push((
        format!("Fetch v4, {n} distinct partitions of one topic"),
        served(ApiKey::Fetch, 4, |w| {
            w.i32(-1).i32(0).i32(0).i32(1 << 20).i8(0);
            array(w, false, 1);
            w.string(Some("orders"), false);
            array(w, false, n);
            for p in 0..n {
                w.i32(p as i32 + 10).i64(0).i32(1 << 20);
            }
        }),
    ));
    let n = items(bytes, 25);
    out.push((
        format!("Fetch v4, {n} topics of one partition each"),
        served(ApiKey::Fetch, 4, |w| {
            w.i32(-1).i32(0).i32(0).i32(1 << 20).i8(0);
            array(w, false, n);
            for i in 0..n {
                w.string(Some(&name(i)), false);
                array(w, false, 1);
                w.i32(0).i64(0).i32(1 << 20);
            }
        }),
    ));
    // Fetch v12, opening a session with distinct partitions (the session caches them).
    let n = items(bytes, 33);
    out.push((
        format!("Fetch v12 opening a session, {n} distinct partitions"),
        served(ApiKey::Fetch, 12, |w| {
            w.i32(-1).i32(0).i32(0).i32(1 << 20).i8(0).i32(0).i32(0);
            array(w, true, 1);
            w.string(Some("orders"), true);
            array(w, true, n);
            for p in 0..n {
                w.i32(p as i32 + 10)
                    .i32(-1)
                    .i64(0)
                    .i32(-1)
                    .i64(-1)
                    .i32(1 << 20)
                    .empty_tags(true);
            }
            w.empty_tags(true);
            array(w, true, 0);
            w.string(Some(""), true).empty_tags(true);
        }),
    ));
    // ListOffsets v1 and v7: distinct partitions of one topic.
    for v in [1i16, 7] {
        let flexible = ApiKey::ListOffsets.is_flexible(v);
        let each = if v >= 4 { 16 } else { 12 } + usize::from(flexible);
        let n = items(bytes, each);
        out.push((
            format!("ListOffsets v{v}, {n} distinct partitions"),
            served(ApiKey::ListOffsets, v, |w| {
                w.i32(-1);
                if v >= 2 {
                    w.i8(0);
                }
                array(w, flexible, 1);
                w.string(Some("orders"), flexible);
                array(w, flexible, n);
                for p in 0..n {
                    w.i32(p as i32 + 10);
                    if v >= 4 {
                        w.i32(-1);
                    }
                    w.i64(-3);
                    if flexible {
                        w.empty_tags(true);
                    }
                }
                if flexible {
                    w.empty_tags(true).empty_tags(true);
                }
            }),
        ));
    }
    // OffsetForLeaderEpoch v3: distinct partitions.
    let n = items(bytes, 12);
    out.push((
        format!("OffsetForLeaderEpoch v3, {n} distinct partitions"),
        served(ApiKey::OffsetForLeaderEpoch, 3, |w| {
            w.i32(-1);
            array(w, false, 1);
            w.string(Some("orders"), false);
            array(w, false, n);
            for p in 0..n {
                w.i32(p as i32 + 10).i32(-1).i32(0);
            }
        }),
    ));
    // Refused APIs that answer per item, with a message each where the version has one.
    let n = items(bytes, 19);
    out.push((
        format!("CreateTopics v4, {n} topics"),
        refused(RefusedApi::CreateTopics, 4, |w| {
            array(w, false, n);
            for i in 0..n {
                w.string(Some(&name(i)), false).i32(1).i16(1);
                array(w, false, 0);
                array(w, false, 0);
            }
            w.i32(0).bool(false);
        }),
    ));
    let n = items(bytes, 10);
    out.push((
        format!("DescribeConfigs v1, {n} topic resources"),
        refused(RefusedApi::DescribeConfigs, 1, |w| {
            array(w, false, n);
            for i in 0..n {
                w.i8(2).string(Some(&name(i)), false).i32(-1);
            }
            w.bool(false);
        }),
    ));
    let n = items(bytes, 8);
    out.push((
        format!("Produce v3, {n} partitions without records"),
        refused(RefusedApi::Produce, 3, |w| {
            w.string(None, false).i16(-1).i32(1000);
            array(w, false, 1);
            w.string(Some("orders"), false);
            array(w, false, n);
            for p in 0..n {
                w.i32(p as i32).i32(-1);
            }
        }),
    ));
    // One-character names: refused APIs answer every copy, so repeats are no cheaper.
    let n = items(bytes, 2);
    out.push((
        format!("DeleteTopics v5, {n} one-character names"),
        refused(RefusedApi::DeleteTopics, 5, |w| {
            array(w, true, n);
            for _ in 0..n {
                w.string(Some("a"), true);
            }
            w.i32(1000).empty_tags(true);
        }),
    ));
    let n = items(bytes, 2);
    out.push((
        format!("FindCoordinator v4, {n} one-character keys"),
        refused(RefusedApi::FindCoordinator, 4, |w| {
            w.i8(0);
            array(w, true, n);
            for _ in 0..n {
                w.string(Some("g"), true);
            }
            w.empty_tags(true);
        }),
    ));
    let n = items(bytes, 5);
    out.push((
        format!("DescribeConfigs v4, {n} topic resources"),
        refused(RefusedApi::DescribeConfigs, 4, |w| {
            array(w, true, n);
            for _ in 0..n {
                w.i8(2).string(Some("a"), true);
                w.unsigned_varint(0).empty_tags(true);
            }
            w.bool(false).bool(false).empty_tags(true);
        }),
    ));
    let n = items(bytes, 2);
    out.push((
        format!("DescribeGroups v5, {n} one-character groups"),
        refused(RefusedApi::DescribeGroups, 5, |w| {
            array(w, true, n);
            for _ in 0..n {
                w.string(Some("g"), true);
            }
            w.bool(false).empty_tags(true);
        }),
    ));
    let n = items(bytes, 18);
    out.push((
        format!("OffsetCommit v2, {n} partitions"),
        refused(RefusedApi::OffsetCommit, 2, |w| {
            w.string(Some("g"), false)
                .i32(-1)
                .string(Some("m"), false)
                .i64(-1);
            array(w, false, 1);
            w.string(Some("orders"), false);
            array(w, false, n);
            for p in 0..n {
                w.i32(p as i32).i64(0).string(None, false);
            }
        }),
    ));
    out
}

/// Peak bytes this thread allocated while `f` ran, above what it held before.
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LIVE.with(|l| l.set(0));
    PEAK.with(|p| p.set(0));
    COUNTING.with(|c| c.set(true));
    let out = f();
    COUNTING.with(|c| c.set(false));
    (out, PEAK.with(Cell::get).max(0) as usize)
}

#[test]
fn answering_a_request_takes_no_more_than_its_charge() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    build_data_dir(&data).unwrap();
    let mut listener = Listener::open(&data, None).unwrap();
    let max = listener.max_request_bytes() as usize;
    let mut report = Vec::new();
    let mut over = Vec::new();
    for bytes in [64 << 10, max - 64] {
        for (what, request) in shapes(bytes) {
            assert!(request.len() <= max, "{what}: {} bytes", request.len());
            let mut conn = listener.connect();
            let (answered, peak) = peak_of(|| {
                // The frame as the listener reads it: allocated as its bytes arrive.
                let frame = request.clone();
                let answered = conn.answer(&frame);
                drop(frame);
                answered
            });
            let response = match answered {
                Ok(Some(r)) => r,
                Ok(None) => panic!("{what}: no response"),
                Err(e) => panic!("{what}: refused: {e:#}"),
            };
            assert!(response.held_bytes() > 0, "{what}: an empty response");
            let charge = request_charge(request.len()) + CONNECTION_BASE;
            let ratio = peak as f64 / request.len() as f64;
            report.push(format!(
                "{what}: {} bytes, peak {peak} bytes ({ratio:.1}×), charge {charge}, response {}",
                request.len(),
                response.held_bytes()
            ));
            if peak > charge {
                over.push(report.last().cloned().unwrap_or_default());
            }
        }
    }
    println!("{}", report.join("\n"));
    assert!(
        over.is_empty(),
        "answers that take more than their charge:\n{}",
        over.join("\n")
    );
}
