//! What the fuzz targets share: the listener they feed (a stopped replica built at start,
//! [`replica_follower::serve::fuzzing`]), the checks made on every answer, and the
//! measurement of memory amplification.
//!
//! # One input
//! The bytes one client sends on one connection: size-prefixed request frames
//! ([`fuzzing::frames`]), answered in order until the listener would close the connection.
//! Each answer must echo the request's correlation id and, for the APIs the crate also
//! speaks as a client, decode with the crate's own response decoder.
//!
//! # Amplification
//! A counting global allocator tracks the bytes allocated. For each frame, the peak above what
//! was allocated before it, while the listener answers it (decoding the request and building
//! the response, not writing it: file ranges are sent from the files by `sendfile`), is set
//! against the frame's length on the wire (with its size). The worst ratio and the worst
//! peak per API key are printed when the run ends (and the frames that reached them are
//! kept under `$RF_FUZZ_OUT/amplification/`).

use replica_follower::protocol::codec::Reader;
use replica_follower::protocol::{
    ApiKey, RefusedApi, api_versions, create_topics, describe_configs, describe_producers, fetch,
    find_coordinator, incremental_alter_configs, init_producer_id, list_groups, list_offsets,
    metadata, offset_commit, offset_fetch, offset_for_leader_epoch, sasl, write_txn_markers,
};
use replica_follower::serve::fuzzing::{self, Listener};
use replica_follower::serve::limits;
use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Counts the bytes held and the most held since [`Counting::mark`].
pub struct Counting;

static HELD: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

impl Counting {
    /// Starts a measurement: the bytes held now.
    fn mark() -> usize {
        let now = HELD.load(Ordering::Relaxed);
        PEAK.store(now, Ordering::Relaxed);
        now
    }

    /// The most bytes held above `mark` since it was taken.
    fn peak_since(mark: usize) -> usize {
        PEAK.load(Ordering::Relaxed).saturating_sub(mark)
    }

    fn grew(n: usize) {
        let now = HELD.fetch_add(n, Ordering::Relaxed) + n;
        PEAK.fetch_max(now, Ordering::Relaxed);
    }
}

// SAFETY: every call goes to the system allocator unchanged; only counters are updated.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            Counting::grew(chunk(layout.size()));
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            Counting::grew(chunk(layout.size()));
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) };
        HELD.fetch_sub(chunk(layout.size()), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            Counting::grew(chunk(new_size));
            HELD.fetch_sub(chunk(layout.size()), Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// What glibc's malloc takes for `n` bytes: an 8-byte header, 16-byte steps, 32 at least
/// (RSS counts these, not the sizes asked for).
fn chunk(n: usize) -> usize {
    ((n + 8 + 15) & !15).max(32)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A PLAINTEXT connection.
    Request,
    /// A SASL_PLAINTEXT connection (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512).
    Sasl,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Request => "request",
            Target::Sasl => "sasl",
        }
    }
}

/// Frames at least this long (on the wire) give the ratio: below it the fixed cost of any
/// answer (an error's message, the response's head; about 3 KB) dominates.
const RATIO_FROM: usize = 1024;

/// The worst frames of one API key.
#[derive(Default)]
struct Worst {
    frames: u64,
    /// Frames the listener answered (the others close the connection).
    answered: u64,
    /// The most allocated for a frame under [`RATIO_FROM`] bytes: (peak, the frame).
    fixed: (usize, Vec<u8>),
    /// Among frames of [`RATIO_FROM`] bytes or more: (peak / wire length, peak, the frame).
    ratio: (f64, usize, Vec<u8>),
    /// (peak, the frame).
    peak: (usize, Vec<u8>),
}

struct State {
    target: Target,
    listener: Listener,
    /// Keeps the data dir until the run ends.
    data: Option<tempfile::TempDir>,
    out: PathBuf,
    worst: BTreeMap<i16, Worst>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn state() -> std::sync::MutexGuard<'static, Option<State>> {
    STATE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

unsafe extern "C" {
    fn atexit(callback: extern "C" fn()) -> std::ffi::c_int;
}

/// Builds the replica and the listener, writes the seed inputs into the corpus directory
/// (the first directory among the arguments), and arranges the summary at exit.
/// `RF_FUZZ_WORK` is where the replica is built (default: the temp dir), `RF_FUZZ_OUT` where
/// the summary and worst frames go (default: the current directory).
pub fn init(target: Target) {
    if std::env::var_os("RF_LOG").is_none() {
        // SAFETY: libFuzzer calls this before any thread of ours exists.
        unsafe { std::env::set_var("RF_LOG", "error") };
    }
    replica_follower::logging::init_from_env();
    let work = std::env::var_os("RF_FUZZ_WORK").map_or_else(std::env::temp_dir, PathBuf::from);
    std::fs::create_dir_all(&work).expect("create RF_FUZZ_WORK");
    let data = tempfile::Builder::new()
        .prefix("rf-fuzz-")
        .tempdir_in(&work)
        .expect("a data dir for the fuzzed listener");
    fuzzing::build_data_dir(data.path()).expect("build the fuzzed replica");
    let sasl = match target {
        Target::Request => None,
        Target::Sasl => Some(fuzzing::sasl_config(data.path()).expect("write the users file")),
    };
    let listener = Listener::open(data.path(), sasl).expect("open the fuzzed listener");
    let seeds = match target {
        Target::Request => fuzzing::plaintext_seeds(),
        Target::Sasl => fuzzing::sasl_seeds(),
    };
    if let Some(corpus) = std::env::args()
        .skip(1)
        .map(PathBuf::from)
        .find(|a| !a.to_string_lossy().starts_with('-') && a.is_dir())
    {
        for (name, input) in seeds {
            std::fs::write(corpus.join(format!("seed-{name}")), input).expect("write a seed");
        }
    }
    let out = std::env::var_os("RF_FUZZ_OUT").map_or_else(|| PathBuf::from("."), PathBuf::from);
    *state() = Some(State {
        target,
        listener,
        data: Some(data),
        out,
        worst: BTreeMap::new(),
    });
    // SAFETY: `summary` is an extern "C" fn that lives for the whole program.
    unsafe { atexit(summary) };
}

/// Answers one input; panics (a crash for libFuzzer) when an answer breaks a check.
pub fn run(input: &[u8]) {
    let mut guard = state();
    let Some(st) = guard.as_mut() else {
        return;
    };
    let max = st.listener.max_request_bytes();
    // (bucket, peak, the frame, answered).
    let mut measured: Vec<(i16, usize, &[u8], bool)> = Vec::new();
    {
        let mut conn = st.listener.connect();
        for frame in fuzzing::frames(input, max) {
            let mark = Counting::mark();
            let answered = conn.answer(frame);
            let peak = Counting::peak_since(mark);
            // What the listener charges before it reads a frame bounds what answering it
            // may take (the frame's own buffer included): a shape that takes more would
            // let clients that never read push the daemon past its documented memory bound.
            let charge = limits::request_charge(frame.len()) + limits::CONNECTION_BASE;
            assert!(
                peak + chunk(frame.len()) <= charge,
                "answering a frame of {} bytes took {peak} bytes, more than its charge of {charge}",
                frame.len()
            );
            measured.push((bucket(frame), peak, frame, answered.is_ok()));
            let response = match answered {
                Ok(Some(r)) => r,
                Ok(None) => continue,
                // The listener closes the connection.
                Err(_) => break,
            };
            let out = conn.write(response).expect("a response is written whole");
            check(frame, &out);
            if conn.closing() {
                break;
            }
        }
    }
    for (key, peak, frame, answered) in measured {
        let w = st.worst.entry(key).or_default();
        w.frames += 1;
        w.answered += u64::from(answered);
        let wire = frame.len() + 4;
        let ratio = peak as f64 / wire as f64;
        if wire < RATIO_FROM {
            if peak > w.fixed.0 {
                w.fixed = (peak, frame.to_vec());
            }
        } else if ratio > w.ratio.0 {
            w.ratio = (ratio, peak, frame.to_vec());
        }
        if peak > w.peak.0 {
            w.peak = (peak, frame.to_vec());
        }
    }
}

/// The request's (key, version, correlation id) and the offset of its body.
fn header(frame: &[u8]) -> Option<(i16, i16, i32, usize)> {
    let mut r = Reader::new(frame);
    let key = r.i16("api_key").ok()?;
    let version = r.i16("api_version").ok()?;
    let correlation_id = r.i32("correlation_id").ok()?;
    r.nullable_string(false, "client_id").ok()?;
    let flexible = ApiKey::ALL
        .iter()
        .find(|a| a.key() == key)
        .map(|a| a.is_flexible(version))
        .or_else(|| RefusedApi::from_key(key).map(|a| a.is_flexible(version)))
        .unwrap_or(false);
    if flexible && key != ApiKey::ApiVersions.key() {
        r.skip_tagged_fields("header tags").ok()?;
    }
    Some((key, version, correlation_id, r.position()))
}

/// The checks every answer passes: its size is its length, it echoes the correlation id,
/// and the APIs the crate speaks as a client decode with its own decoder.
fn check(request: &[u8], response: &[u8]) {
    let Some((key, version, correlation_id, _)) = header(request) else {
        panic!("a request without a whole header was answered");
    };
    let size = response
        .get(..4)
        .map(|s| i32::from_be_bytes([s[0], s[1], s[2], s[3]]));
    assert_eq!(size, Some(response.len() as i32 - 4), "the size prefix");
    let mut r = Reader::new(&response[4..]);
    assert_eq!(
        r.i32("correlation id").ok(),
        Some(correlation_id),
        "the correlation id"
    );
    let Some(api) = ApiKey::ALL.into_iter().find(|a| a.key() == key) else {
        return;
    };
    let (min, max) = api.supported();
    if !(min..=max).contains(&version) {
        // ApiVersions at a version it does not know is answered in v0's shape.
        return;
    }
    if api != ApiKey::ApiVersions && api.is_flexible(version) {
        r.skip_tagged_fields("response header tags")
            .expect("response header tags");
    }
    let body = &response[4 + r.position()..];
    let decoded = match api {
        ApiKey::Fetch => fetch::decode_response(body, version).map(drop),
        ApiKey::ListOffsets => list_offsets::decode_response(body, version).map(drop),
        ApiKey::Metadata => metadata::decode_response(body, version).map(drop),
        ApiKey::OffsetForLeaderEpoch => {
            offset_for_leader_epoch::decode_response(body, version).map(drop)
        }
        ApiKey::ApiVersions => api_versions::decode_response(body, version).map(drop),
        ApiKey::SaslHandshake => sasl::decode_handshake_response(body).map(drop),
        ApiKey::SaslAuthenticate => sasl::decode_authenticate_response(body, version).map(drop),
        // The refusals of the listener (DescribeProducers and WriteTxnMarkers are not answered
        // at all).
        ApiKey::OffsetCommit => offset_commit::decode_response(body, version).map(drop),
        ApiKey::OffsetFetch => offset_fetch::decode_response(body, version).map(drop),
        ApiKey::FindCoordinator => find_coordinator::decode_response(body, version).map(drop),
        ApiKey::ListGroups => list_groups::decode_response(body, version).map(drop),
        ApiKey::CreateTopics => create_topics::decode_response(body, version).map(drop),
        ApiKey::InitProducerId => init_producer_id::decode_response(body, version).map(drop),
        ApiKey::DescribeConfigs => describe_configs::decode_response(body, version).map(drop),
        ApiKey::IncrementalAlterConfigs => {
            incremental_alter_configs::decode_response(body, version).map(drop)
        }
        ApiKey::DescribeProducers => describe_producers::decode_response(body).map(drop),
        ApiKey::WriteTxnMarkers => write_txn_markers::decode_response(body).map(drop),
    };
    if let Err(e) = decoded {
        panic!("{} v{version}: the answer does not decode: {e}", api.name());
    }
}

/// Where a frame's figures are kept: its API key when the listener knows it, else
/// [`OTHER`].
fn bucket(frame: &[u8]) -> i16 {
    let key = frame
        .get(..2)
        .map_or(OTHER, |k| i16::from_be_bytes([k[0], k[1]]));
    let known = ApiKey::ALL.iter().any(|a| a.key() == key) || RefusedApi::from_key(key).is_some();
    if known { key } else { OTHER }
}

/// The bucket of frames of API keys the listener does not know, and of frames too short to
/// name one: it closes the connection.
const OTHER: i16 = i16::MIN;

fn api_name(key: i16) -> String {
    if key == OTHER {
        return "unknown API keys".to_string();
    }
    ApiKey::ALL
        .iter()
        .find(|a| a.key() == key)
        .map(|a| a.name().to_string())
        .or_else(|| RefusedApi::from_key(key).map(|a| a.name().to_string()))
        .unwrap_or_else(|| format!("key {key}"))
}

/// What a frame asks for, in a few words: its API and version and, for the APIs that name
/// topics and partitions, how many and how long their names are.
pub fn describe(frame: &[u8]) -> String {
    let Some((key, version, _, at)) = header(frame) else {
        return format!("{} bytes, no whole header", frame.len());
    };
    let body = frame.get(at..).unwrap_or_default();
    let named = |topics: Vec<(String, usize)>| {
        let parts: usize = topics.iter().map(|(_, n)| n).sum();
        let lens = topics.iter().map(|(t, _)| t.len());
        let (min, max) = (lens.clone().min().unwrap_or(0), lens.max().unwrap_or(0));
        let distinct: std::collections::BTreeSet<&String> = topics.iter().map(|(t, _)| t).collect();
        format!(
            "{} topics ({} distinct, names of {min}–{max} bytes), {parts} partitions",
            topics.len(),
            distinct.len()
        )
    };
    let what = if key == ApiKey::Metadata.key() {
        match metadata::decode_request(body, version) {
            Ok(None) => "every topic (a null list)".to_string(),
            Ok(Some(t)) => named(
                t.into_iter()
                    .map(|t| (t.name.unwrap_or_default(), 0))
                    .collect(),
            ),
            Err(e) => format!("undecodable: {e}"),
        }
    } else if key == ApiKey::Fetch.key() {
        match fetch::decode_request(body, version) {
            Ok(req) => format!(
                "{}; session {} epoch {}; {} forgotten",
                named(
                    req.topics
                        .iter()
                        .map(|(t, p)| (t.clone(), p.len()))
                        .collect()
                ),
                req.session_id,
                req.session_epoch,
                req.forgotten.iter().map(|(_, p)| p.len()).sum::<usize>()
            ),
            Err(e) => format!("undecodable: {e}"),
        }
    } else if key == ApiKey::ListOffsets.key() {
        match list_offsets::decode_request(body, version) {
            Ok(req) => named(
                req.topics
                    .iter()
                    .map(|(t, p)| (t.clone(), p.len()))
                    .collect(),
            ),
            Err(e) => format!("undecodable: {e}"),
        }
    } else if key == ApiKey::OffsetForLeaderEpoch.key() {
        match offset_for_leader_epoch::decode_request(body, version) {
            Ok(t) => named(t.iter().map(|(t, p)| (t.clone(), p.len())).collect()),
            Err(e) => format!("undecodable: {e}"),
        }
    } else {
        format!("a body of {} bytes", body.len())
    };
    format!(
        "{} v{version}, {} bytes: {what}",
        api_name(key),
        frame.len() + 4
    )
}

extern "C" fn summary() {
    let Some(mut st) = state().take() else {
        return;
    };
    let dir = st.out.join("amplification");
    let _ = std::fs::create_dir_all(&dir);
    let mut text = format!(
        "Memory amplification, {} target: per API key, the most bytes allocated while the \
         listener answered one frame (decoding it and building the answer), against the frame's \
         length on the wire (its size included).\n",
        st.target.name()
    );
    for (key, w) in &st.worst {
        let name = api_name(*key);
        let (ratio, ratio_peak, ratio_frame) = &w.ratio;
        let (peak, peak_frame) = &w.peak;
        text.push_str(&format!(
            "{name}, {} frames ({} answered):\n",
            w.frames, w.answered
        ));
        if !w.fixed.1.is_empty() {
            text.push_str(&format!(
                "  under {RATIO_FROM} bytes, at most {} bytes — {}\n",
                w.fixed.0,
                describe(&w.fixed.1)
            ));
        }
        if !ratio_frame.is_empty() {
            text.push_str(&format!(
                "  worst ratio {ratio:.1}× ({ratio_peak} bytes for {} bytes) — {}\n",
                ratio_frame.len() + 4,
                describe(ratio_frame)
            ));
        }
        text.push_str(&format!(
            "  worst peak {peak} bytes — {}\n",
            describe(peak_frame)
        ));
        let slug = name.to_lowercase().replace(' ', "-");
        for (kind, frame) in [("ratio", ratio_frame), ("peak", peak_frame)] {
            if frame.is_empty() {
                continue;
            }
            let mut framed = (frame.len() as i32).to_be_bytes().to_vec();
            framed.extend_from_slice(frame);
            let _ = std::fs::write(
                dir.join(format!("{}-{slug}-{kind}.bin", st.target.name())),
                framed,
            );
        }
    }
    eprint!("{text}");
    let _ = std::fs::write(
        st.out
            .join(format!("amplification-{}.txt", st.target.name())),
        &text,
    );
    drop(st.data.take());
}
