//! The one scripted leader of the unit tests (Kafka's `MockLeaderEndPoint`): the fetch loop's
//! tests and the manager's run the real code against it, without sockets.
//!
//! It serves `log` (whole batches, two at most per answer) to the first partition a request
//! names, or to every one with `every_partition`, and can be told to fail, answer errors,
//! corrupt a batch, keep a KIP-227 session, or report another identity. Its answers go
//! through the real codec, as a broker's would.

use crate::checkpoint::TopicPartition;
use crate::client::error::{FailedContext, fail};
use crate::client::{ConnectionError, ConnectionErrorKind};
use crate::fetcher::leader_endpoint::{FetchFrame, Identity, LeaderEndPoint};
use crate::protocol::error::ErrorCode;
use crate::protocol::fetch::{FetchPartition, FetchPartitionResponse, FetchRequest, FetchResponse};
use crate::record::records::{NewRecord, build_v2_batch};
use anyhow::anyhow;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type Result<T> = std::result::Result<T, ConnectionError>;

/// The error a leader answers every partition with while it is set (none: no error).
pub type StandingError = Box<dyn Fn() -> Option<ErrorCode> + Send>;

/// Told of every request sent.
pub type OnSend = Box<dyn FnMut(&FetchRequest) + Send>;

pub struct MockLeader {
    /// What `describe` says.
    pub name: String,
    /// (first offset, last offset, batch bytes).
    pub log: Vec<(i64, i64, Vec<u8>)>,
    pub start: i64,
    pub hw: i64,
    /// Receives that fail as a dropped connection does.
    pub fail_next: usize,
    /// Answered (to every partition answered), one per receive, before `standing_error`.
    pub errors: VecDeque<ErrorCode>,
    pub standing_error: Option<StandingError>,
    /// Answers whose last byte is flipped.
    pub corrupt_next: usize,
    /// Every request sent, with when.
    pub requests: Arc<Mutex<Vec<(Instant, FetchRequest)>>>,
    pub on_send: Option<OnSend>,
    /// Sent and not yet received.
    sent: VecDeque<FetchRequest>,
    pub identity: Identity,
    /// Reported instead of `hw`, without OFFSET_OUT_OF_RANGE (as Tansu answers a fetch
    /// past its end).
    pub reported_hw: Option<i64>,
    /// The next receive fails as a connection to another cluster does.
    pub wrong_cluster: bool,
    /// The thread each response was received on.
    pub receivers: Arc<Mutex<Vec<std::thread::ThreadId>>>,
    /// Non-zero: the session id a full fetch opens; the session then remembers the
    /// partition last named, and an answer with nothing new lists no partition.
    pub session_id: i32,
    session_part: Option<(String, FetchPartition)>,
    /// Answer every partition a request names, not only the first.
    pub every_partition: bool,
    /// How long each receive takes (a leader waiting its max wait).
    pub latency: Duration,
}

impl MockLeader {
    pub fn new(batches: usize) -> Self {
        Self::with_values(batches, 20)
    }

    /// `batches` batches of 5 records with values of `value_len` bytes.
    pub fn with_values(batches: usize, value_len: usize) -> Self {
        let mut log = Vec::new();
        for i in 0..batches as i64 {
            let v = vec![b'x'; value_len];
            let recs: Vec<NewRecord<'_>> = (0..5)
                .map(|j| NewRecord {
                    key: None,
                    value: Some(&v),
                    timestamp: i * 5 + j,
                })
                .collect();
            log.push((i * 5, i * 5 + 4, build_v2_batch(i * 5, 0, &recs)));
        }
        let hw = batches as i64 * 5;
        MockLeader {
            name: "mock leader".into(),
            log,
            start: 0,
            hw,
            fail_next: 0,
            errors: VecDeque::new(),
            standing_error: None,
            corrupt_next: 0,
            requests: Arc::default(),
            on_send: None,
            sent: VecDeque::new(),
            identity: Identity::default(),
            reported_hw: None,
            wrong_cluster: false,
            receivers: Arc::default(),
            session_id: 0,
            session_part: None,
            every_partition: false,
            latency: Duration::ZERO,
        }
    }

    /// The partitions an answer to `req` covers.
    fn answered(&mut self, req: &FetchRequest) -> Vec<(String, FetchPartition)> {
        if self.every_partition {
            return req
                .topics
                .iter()
                .flat_map(|(t, ps)| ps.iter().map(move |p| (t.clone(), p.clone())))
                .collect();
        }
        let named = req
            .topics
            .first()
            .and_then(|(t, ps)| Some((t.clone(), ps.first()?.clone())));
        if named.is_some() {
            self.session_part = named.clone();
        }
        let part = if self.session_id != 0 {
            self.session_part.clone()
        } else {
            named
        };
        part.into_iter().collect()
    }

    /// The bytes served at `fetch_offset` (two batches at most), or OFFSET_OUT_OF_RANGE.
    fn serve(&mut self, fetch_offset: i64, error: ErrorCode) -> (ErrorCode, Vec<u8>) {
        let oor =
            self.reported_hw.is_none() && (fetch_offset < self.start || fetch_offset > self.hw);
        if oor {
            return (ErrorCode::OFFSET_OUT_OF_RANGE, Vec::new());
        }
        let mut buf = Vec::new();
        if error.is_ok() {
            for (_, _, b) in self
                .log
                .iter()
                .filter(|(_, l, _)| *l >= fetch_offset)
                .take(2)
            {
                buf.extend_from_slice(b);
            }
            if self.corrupt_next > 0 && !buf.is_empty() {
                self.corrupt_next -= 1;
                let n = buf.len() - 1;
                buf[n] ^= 1;
            }
        }
        (error, buf)
    }
}

impl LeaderEndPoint for MockLeader {
    fn describe(&self) -> String {
        self.name.clone()
    }
    fn send_fetch(&mut self, req: &FetchRequest) -> Result<()> {
        self.requests
            .lock()
            .unwrap()
            .push((Instant::now(), req.clone()));
        if let Some(f) = &mut self.on_send {
            f(req);
        }
        self.sent.push_back(req.clone());
        Ok(())
    }
    fn recycle(&mut self, _frame: FetchFrame) {}
    fn receive_fetch(&mut self) -> Result<FetchFrame> {
        let req = self.sent.pop_front().failed_with(|| "no fetch in flight")?;
        if !self.latency.is_zero() {
            std::thread::sleep(self.latency);
        }
        self.receivers
            .lock()
            .unwrap()
            .push(std::thread::current().id());
        if std::mem::take(&mut self.wrong_cluster) {
            return Err(ConnectionError::new(
                ConnectionErrorKind::IdentityMismatch,
                anyhow!("broker 1 reports cluster id b"),
            ));
        }
        if self.fail_next > 0 {
            self.fail_next -= 1;
            fail!("connection reset");
        }
        let error = self
            .errors
            .pop_front()
            .or_else(|| self.standing_error.as_ref().and_then(|f| f()))
            .unwrap_or(ErrorCode::NONE);
        let answered = self.answered(&req);
        if answered.is_empty() && !self.every_partition {
            fail!("a fetch of nothing");
        }
        let served: Vec<(String, i32, ErrorCode, Vec<u8>)> = answered
            .into_iter()
            .map(|(t, p)| {
                let (e, b) = self.serve(p.fetch_offset, error);
                (t, p.partition, e, b)
            })
            .collect();
        let nothing_new = !self.every_partition
            && self.session_id != 0
            && req.session_epoch > 0
            && served.iter().all(|(_, _, e, b)| e.is_ok() && b.is_empty());
        let hw = self.reported_hw.unwrap_or(self.hw);
        let mut topics: Vec<(String, Vec<FetchPartitionResponse<'_>>)> = Vec::new();
        for (t, partition, error, bytes) in served.iter().filter(|_| !nothing_new) {
            let p = FetchPartitionResponse {
                partition: *partition,
                error: *error,
                high_watermark: hw,
                last_stable_offset: hw,
                log_start_offset: self.start,
                aborted_transactions: None,
                diverging_epoch: None,
                current_leader: None,
                records: bytes,
            };
            match topics.last_mut() {
                Some((last, ps)) if last == t => ps.push(p),
                _ => topics.push((t.clone(), vec![p])),
            }
        }
        let resp = FetchResponse {
            error: ErrorCode::NONE,
            topics,
            session_id: self.session_id,
        };
        let mut w = crate::protocol::codec::Writer::new();
        crate::protocol::fetch::encode_response(&mut w, 12, &resp);
        let len = w.buf.len();
        Ok(FetchFrame {
            buf: w.buf,
            body: 0..len,
            version: 12,
            topic_names: BTreeMap::new(),
        })
    }
    fn fetch_earliest_offset(
        &mut self,
        _: &TopicPartition,
        _: i32,
    ) -> Result<std::result::Result<i64, ErrorCode>> {
        Ok(Ok(self.start))
    }
    fn fetch_latest_offset(
        &mut self,
        _: &TopicPartition,
        _: i32,
    ) -> Result<std::result::Result<i64, ErrorCode>> {
        Ok(Ok(self.hw))
    }
    fn fetch_epoch_end_offset(
        &mut self,
        _: &TopicPartition,
        _: i32,
        _: i32,
    ) -> Result<Option<(ErrorCode, i32, i64)>> {
        Ok(None)
    }
    fn supports_diverging_epoch(&mut self) -> Result<bool> {
        Ok(true)
    }
    fn identity(&mut self, _: &str) -> Result<Identity> {
        Ok(self.identity.clone())
    }
    fn close(&mut self) {
        self.sent.clear();
    }
}
