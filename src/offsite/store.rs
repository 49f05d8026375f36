//! A blocking client for the few S3 calls the offsite copies need: create an object unless it
//! exists, read one, list keys under a prefix, and a cheap check of bucket, credentials and
//! clock.
//!
//! Requests are SigV4 presigned URLs (rusty-s3, path style: `ENDPOINT/BUCKET/KEY`, which MinIO,
//! moto, s3s and AWS all accept) valid for [`PRESIGN_VALIDITY`], sent with one `ureq` agent
//! (rustls) that follows no redirects, gives up after the configured timeout and reads at most
//! [`MAX_OBJECT_BYTES`] of an object. Error responses are parsed for S3's `<Code>` and
//! `<Message>` and classified ([`Kind`]) so that the caller knows what to retry
//! ([`StoreError::is_transient`]) and what to tell the operator ([`StoreError::advice`]).
//! There are no retries here: the caller retries transient errors with backoff.
//!
//! A `Store` is `Send + Sync`: threads share one and its agent's connection pool.

use anyhow::{Context, Result, bail};
use rusty_s3::{Bucket, BucketError, Credentials, S3Action, UrlStyle, actions::ListObjectsV2};
use sha2::{Digest, Sha256};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long a signed URL stays valid: longer than any one request, short enough that a logged
/// URL is soon useless.
pub const PRESIGN_VALIDITY: Duration = Duration::from_secs(15 * 60);
/// The largest object a GET reads: 64 MiB of plaintext and its envelope.
pub const MAX_OBJECT_BYTES: u64 = 65 * 1024 * 1024;
/// The largest ListObjectsV2 page read (1,000 keys of up to 1 KiB, URL-encoded, and markup).
const MAX_LISTING_BYTES: u64 = 16 * 1024 * 1024;
/// The largest error body read: S3's are a few hundred bytes.
const MAX_ERROR_BYTES: u64 = 64 * 1024;
/// A 403 whose `Date` is further than this from our clock is put down to the clock.
const MAX_CLOCK_SKEW_SECS: u64 = 5 * 60;

/// Where the bucket is and who we are.
#[derive(Clone)]
pub struct StoreSettings {
    /// `http(s)://host[:port][/path]`; a path is kept as a prefix of every URL.
    pub endpoint: String,
    pub bucket: String,
    pub region: String,
    pub access_key: String,
    pub secret_key: String,
    pub session_token: Option<String>,
    /// For a whole request: connecting, sending, and reading the whole response.
    pub timeout: Duration,
}

impl fmt::Debug for StoreSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreSettings")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .field("access_key", &self.access_key)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// What [`Store::put_new`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Put {
    Created,
    /// The key was there already (found first, or the conditional PUT was refused): nothing
    /// was written.
    Existed,
}

/// Keys under a prefix with their sizes, and the common prefixes when listed with a delimiter;
/// both sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    pub objects: Vec<(String, u64)>,
    pub prefixes: Vec<String>,
}

/// What kind of failure a [`StoreError`] is: what the caller branches on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// No connection: DNS, refused, reset, or an unreadable response.
    Unreachable,
    /// The request did not finish within the timeout (or S3's 408 RequestTimeout).
    Timeout,
    /// 5xx, a conflicting concurrent conditional write (409), or a body damaged on the way
    /// (BadDigest).
    Server,
    /// 503 SlowDown or 429.
    SlowDown,
    NoSuchBucket,
    /// InvalidAccessKeyId, SignatureDoesNotMatch, InvalidToken, ExpiredToken.
    BadCredentials,
    /// Any other 403.
    AccessDenied,
    /// RequestTimeTooSkewed, an expired or not yet valid signature, or a 403 whose `Date`
    /// is more than 5 minutes from our clock.
    ClockSkew,
    Other,
}

/// A failed S3 request. Its `Display` is one line: operation, key, bucket, endpoint, HTTP
/// status, S3 code and message.
#[derive(Debug, Clone)]
pub struct StoreError {
    pub kind: Kind,
    /// What went wrong: `HTTP 404 NoSuchBucket: The specified bucket does not exist`, or the
    /// transport error.
    pub detail: String,
    /// `GET` (an object, or its first byte to see whether it exists), `PUT`, `LIST`.
    pub op: &'static str,
    /// The object key, or the listed prefix.
    pub key: Option<String>,
    pub status: Option<u16>,
    /// S3's `<Code>`, when the response had one.
    pub code: Option<String>,
    /// The store's bucket, endpoint and region (shared: an error stays small).
    place: Arc<Place>,
}

/// Where a store's requests go, for its errors' messages.
#[derive(Debug)]
struct Place {
    bucket: String,
    /// As configured, without a trailing `/` (never a signed URL: those carry the access key
    /// id).
    endpoint: String,
    region: String,
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "S3 {}", self.op)?;
        if let Some(key) = &self.key {
            write!(f, " `{key}`")?;
        }
        write!(
            f,
            " in bucket `{}` at {}: {}",
            self.place.bucket, self.place.endpoint, self.detail
        )
    }
}

impl std::error::Error for StoreError {}

impl StoreError {
    /// Whether the same request may succeed later: the caller retries these with backoff.
    pub fn is_transient(&self) -> bool {
        matches!(
            self.kind,
            Kind::Unreachable | Kind::Timeout | Kind::Server | Kind::SlowDown
        )
    }

    pub fn bucket(&self) -> &str {
        &self.place.bucket
    }

    pub fn endpoint(&self) -> &str {
        &self.place.endpoint
    }

    /// What the operator should check, for a one-line ERROR after the error itself.
    pub fn advice(&self) -> String {
        let (b, e) = (&self.place.bucket, &self.place.endpoint);
        match self.kind {
            Kind::NoSuchBucket => {
                format!("bucket `{b}` does not exist at {e}: create it or fix offsite.bucket")
            }
            Kind::BadCredentials => {
                let code = self.code.as_deref().unwrap_or("no code");
                let check = match code {
                    "InvalidAccessKeyId" => {
                        "it knows no such access key id: check offsite.access_key_file (or AWS_ACCESS_KEY_ID)"
                    }
                    "SignatureDoesNotMatch" => {
                        "the secret key is not the access key id's: check offsite.secret_key_file (or AWS_SECRET_ACCESS_KEY)"
                    }
                    _ => {
                        "the session token is invalid or has expired: renew AWS_SESSION_TOKEN, or use offsite.access_key_file and offsite.secret_key_file"
                    }
                };
                format!("{e} refused the credentials ({code}): {check}")
            }
            Kind::AccessDenied => format!(
                "the credentials may not {} in bucket `{b}`: grant them s3:ListBucket, s3:GetObject and s3:PutObject on it",
                self.op
            ),
            Kind::ClockSkew => format!(
                "this host's clock and {e}'s differ too much for S3 signatures: synchronise the clock (NTP)"
            ),
            Kind::Unreachable => {
                format!("cannot reach {e}: check offsite.endpoint, DNS and the network path to it")
            }
            Kind::Timeout => format!(
                "{e} did not answer in time: check the network, or raise the offsite timeout"
            ),
            Kind::Server => format!("{e} failed the request: retried with backoff"),
            Kind::SlowDown => format!("{e} asks for fewer requests: retried with backoff"),
            Kind::Other => match self.code.as_deref() {
                Some(
                    "PermanentRedirect"
                    | "AuthorizationHeaderMalformed"
                    | "IllegalLocationConstraintException",
                ) => format!(
                    "bucket `{b}` is not in region `{}` at {e}: fix offsite.region or offsite.endpoint",
                    self.place.region
                ),
                Some("NotImplemented") => format!(
                    "{e} does not implement this request (conditional PUT with If-None-Match, or x-amz-checksum-sha256): use an S3 service that does"
                ),
                _ if self.status.is_none() => {
                    format!("check offsite.endpoint ({e}) and its TLS certificate")
                }
                _ if self.code.is_none() => format!(
                    "{e} did not answer as S3 does: check that offsite.endpoint is the S3 endpoint"
                ),
                _ => format!("{e} refused the request: see the S3 message"),
            },
        }
    }
}

/// A blocking S3 client for one bucket.
pub struct Store {
    bucket: Bucket,
    credentials: Credentials,
    agent: ureq::Agent,
    place: Arc<Place>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("endpoint", &self.place.endpoint)
            .field("bucket", &self.place.bucket)
            .finish_non_exhaustive()
    }
}

/// A response read whole: its status, `Date` header and (bounded) body.
struct Reply {
    status: u16,
    date: Option<String>,
    body: Vec<u8>,
}

impl Store {
    /// A client for `s.bucket` at `s.endpoint`; an endpoint that is not an `http(s)://host`
    /// URL is refused, naming it.
    pub fn new(s: StoreSettings) -> Result<Store> {
        let endpoint = s.endpoint.trim_end_matches('/').to_string();
        check_endpoint(&s.endpoint)
            .with_context(|| format!("offsite endpoint `{}`", s.endpoint))?;
        let url = parse(&s.endpoint)
            .with_context(|| format!("offsite endpoint `{}` is not a URL", s.endpoint))?;
        if s.bucket.is_empty() || s.bucket.contains('/') {
            bail!("offsite bucket `{}` is not a bucket name", s.bucket);
        }
        if s.region.is_empty() {
            bail!(
                "offsite region is empty (AWS signatures name one; MinIO and moto accept `us-east-1`)"
            );
        }
        let bucket = Bucket::new(url, UrlStyle::Path, s.bucket.clone(), s.region.clone())
            .map_err(|e| match e {
                BucketError::UnsupportedScheme => {
                    anyhow::anyhow!("the scheme must be http or https")
                }
                BucketError::MissingHost => anyhow::anyhow!("it names no host"),
                BucketError::ParseError(e) => anyhow::anyhow!("{e}"),
            })
            .with_context(|| format!("offsite endpoint `{}`", s.endpoint))?;
        let credentials = match s.session_token {
            Some(token) => Credentials::new_with_token(s.access_key, s.secret_key, token),
            None => Credentials::new(s.access_key, s.secret_key),
        };
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(s.timeout))
            .max_redirects(0)
            .user_agent(concat!("replica-follower/", env!("CARGO_PKG_VERSION")))
            .build();
        Ok(Store {
            bucket,
            credentials,
            agent: ureq::Agent::new_with_config(config),
            place: Arc::new(Place {
                bucket: s.bucket,
                endpoint,
                region: s.region,
            }),
        })
    }

    /// Creates `key` with `body` unless it exists: an existence check first, then a PUT with
    /// `If-None-Match: *` (a concurrent writer's object is not replaced) and
    /// `x-amz-checksum-sha256` (S3 refuses a body damaged on the way).
    pub fn put_new(&self, key: &str, body: &[u8]) -> Result<Put, StoreError> {
        if self.exists(key)? {
            return Ok(Put::Existed);
        }
        let checksum = crate::security::base64::encode(&Sha256::digest(body));
        let mut action = self.bucket.put_object(Some(&self.credentials), key);
        // Every x-amz-* header must be signed; If-None-Match need not be.
        action
            .headers_mut()
            .insert("x-amz-checksum-sha256", checksum.clone());
        let url = action.sign(PRESIGN_VALIDITY);
        let sent = self
            .agent
            .put(url.as_str())
            .header("If-None-Match", "*")
            .header("x-amz-checksum-sha256", &checksum)
            .send(body);
        let reply = self.read("PUT", key, sent, MAX_ERROR_BYTES)?;
        match reply.status {
            200..=299 => Ok(Put::Created),
            412 => Ok(Put::Existed),
            _ => Err(self.refused("PUT", key, &reply)),
        }
    }

    /// The object `key`, or `None` when S3 says NoSuchKey.
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.get_at_most(key, MAX_OBJECT_BYTES)
    }

    /// [`Self::get`] of an object known to hold at most `max` bytes (a larger one is an
    /// error, never read whole).
    pub fn get_at_most(&self, key: &str, max: u64) -> Result<Option<Vec<u8>>, StoreError> {
        let url = self
            .bucket
            .get_object(Some(&self.credentials), key)
            .sign(PRESIGN_VALIDITY);
        let sent = self.agent.get(url.as_str()).call();
        let reply = self.read("GET", key, sent, max)?;
        match reply.status {
            200 => Ok(Some(reply.body)),
            404 if s3_code(&reply.body).as_deref() == Some("NoSuchKey") => Ok(None),
            _ => Err(self.refused("GET", key, &reply)),
        }
    }

    /// Whether `key` exists. A ranged GET of its first byte rather than a HEAD: a HEAD's error
    /// has no body, so it could not tell NoSuchKey from NoSuchBucket, nor the reasons of a 403.
    pub fn exists(&self, key: &str) -> Result<bool, StoreError> {
        let url = self
            .bucket
            .get_object(Some(&self.credentials), key)
            .sign(PRESIGN_VALIDITY);
        let sent = self
            .agent
            .get(url.as_str())
            .header("Range", "bytes=0-0")
            .call();
        let reply = self.read("GET", key, sent, MAX_ERROR_BYTES)?;
        match reply.status {
            // 416: the object exists and is empty.
            200 | 206 | 416 => Ok(true),
            404 if s3_code(&reply.body).as_deref() == Some("NoSuchKey") => Ok(false),
            _ => Err(self.refused("GET", key, &reply)),
        }
    }

    /// Every key under `prefix` with its size (ListObjectsV2, following continuation tokens),
    /// sorted; with `delimiter`, the common prefixes too (sorted).
    pub fn list(&self, prefix: &str, delimiter: Option<&str>) -> Result<Listing, StoreError> {
        let mut listing = Listing::default();
        let mut token: Option<String> = None;
        loop {
            let mut action = self.bucket.list_objects_v2(Some(&self.credentials));
            if !prefix.is_empty() {
                action.with_prefix(prefix);
            }
            if let Some(d) = delimiter {
                action.with_delimiter(d);
            }
            if let Some(t) = &token {
                action.with_continuation_token(t.as_str());
            }
            let page = self.list_page(&action, prefix)?;
            listing.objects.extend(
                page.contents
                    .into_iter()
                    .map(|c| (c.key, c.size.unwrap_or(0))),
            );
            listing
                .prefixes
                .extend(page.common_prefixes.into_iter().map(|p| p.prefix));
            match page.next_continuation_token {
                None => break,
                // A server handing back the token it was given would list forever.
                Some(next) if token.as_ref() == Some(&next) => {
                    return Err(self.error(
                        "LIST",
                        Some(prefix),
                        Kind::Other,
                        "the listing's continuation token repeats itself".to_string(),
                    ));
                }
                Some(next) => token = Some(next),
            }
        }
        listing.objects.sort();
        listing.objects.dedup();
        listing.prefixes.sort();
        listing.prefixes.dedup();
        Ok(listing)
    }

    /// A cheap signed request (ListObjectsV2 of at most one key) that proves the endpoint,
    /// the bucket, the credentials and the clock.
    pub fn check(&self) -> Result<(), StoreError> {
        let mut action = self.bucket.list_objects_v2(Some(&self.credentials));
        action.with_max_keys(1);
        self.list_page(&action, "").map(|_| ())
    }

    fn list_page(
        &self,
        action: &ListObjectsV2<'_>,
        prefix: &str,
    ) -> Result<rusty_s3::actions::ListObjectsV2Response, StoreError> {
        let url = action.sign(PRESIGN_VALIDITY);
        let sent = self.agent.get(url.as_str()).call();
        let reply = self.read("LIST", prefix, sent, MAX_LISTING_BYTES)?;
        if reply.status != 200 {
            return Err(self.refused("LIST", prefix, &reply));
        }
        let text = String::from_utf8_lossy(&reply.body);
        ListObjectsV2::parse_response(&text).map_err(|e| {
            self.error(
                "LIST",
                Some(prefix),
                Kind::Other,
                format!("HTTP 200 but not a ListObjectsV2 result: {e}"),
            )
        })
    }

    /// The response to a request, its body read up to `limit` bytes when it succeeded (an
    /// error body: up to 64 KiB).
    fn read(
        &self,
        op: &'static str,
        key: &str,
        sent: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
        limit: u64,
    ) -> Result<Reply, StoreError> {
        let mut response = sent.map_err(|e| self.transport(op, key, &e))?;
        let status = response.status().as_u16();
        let date = response
            .headers()
            .get("date")
            .and_then(|v| v.to_str().ok())
            .map(String::from);
        let limit = if (200..300).contains(&status) {
            limit
        } else {
            MAX_ERROR_BYTES
        };
        let body = response
            .body_mut()
            .with_config()
            .limit(limit)
            .read_to_vec()
            .map_err(|e| self.transport(op, key, &e))?;
        Ok(Reply { status, date, body })
    }

    fn error(&self, op: &'static str, key: Option<&str>, kind: Kind, detail: String) -> StoreError {
        StoreError {
            kind,
            detail,
            op,
            // The whole bucket is listed under the empty prefix: no key to name.
            key: key.filter(|k| !k.is_empty()).map(String::from),
            status: None,
            code: None,
            place: Arc::clone(&self.place),
        }
    }

    /// A request that got no (whole) HTTP response.
    fn transport(&self, op: &'static str, key: &str, e: &ureq::Error) -> StoreError {
        let kind = match e {
            ureq::Error::Timeout(_) => Kind::Timeout,
            ureq::Error::Io(io) => match io.kind() {
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => Kind::Timeout,
                _ => Kind::Unreachable,
            },
            ureq::Error::HostNotFound | ureq::Error::ConnectionFailed => Kind::Unreachable,
            ureq::Error::Protocol(_) => Kind::Unreachable,
            _ => Kind::Other,
        };
        let detail = match e {
            ureq::Error::BodyExceedsLimit(n) => format!("the response is over {n} bytes"),
            ureq::Error::Timeout(_) => format!("no whole response in time ({e})"),
            _ => e.to_string(),
        };
        self.error(op, Some(key), kind, detail)
    }

    /// An HTTP response that is not the success `op` wanted.
    fn refused(&self, op: &'static str, key: &str, reply: &Reply) -> StoreError {
        let text = String::from_utf8_lossy(&reply.body);
        let code = xml_text(&text, "Code");
        let message = xml_text(&text, "Message");
        let skew = reply.date.as_deref().and_then(skew_secs);
        let kind = classify(reply.status, code.as_deref(), message.as_deref(), skew);
        let mut detail = format!("HTTP {}", reply.status);
        match &code {
            Some(c) => detail.push_str(&format!(" {c}")),
            None => detail.push_str(" (no S3 error code)"),
        }
        if let Some(m) = &message {
            detail.push_str(&format!(": {m}"));
        }
        if let (Kind::ClockSkew, Some(s)) = (kind, skew) {
            detail.push_str(&format!(" (the server's clock is {s} s from ours)"));
        }
        StoreError {
            status: Some(reply.status),
            code,
            ..self.error(op, Some(key), kind, detail)
        }
    }
}

/// Refuses what `Bucket::new` would silently drop from an endpoint: credentials (they belong
/// in the settings), a query or a fragment.
fn check_endpoint(endpoint: &str) -> Result<()> {
    let authority = endpoint
        .split_once("://")
        .map_or(endpoint, |(_, rest)| rest)
        .split('/')
        .next()
        .unwrap_or("");
    if authority.contains('@') {
        bail!("it must not hold credentials (use the access and secret key settings)");
    }
    if endpoint.contains(['?', '#']) {
        bail!("it must not have a query or a fragment");
    }
    Ok(())
}

/// `text` parsed as `T` (a URL: `Bucket::new` names the type), its error as text.
fn parse<T: std::str::FromStr>(text: &str) -> Result<T>
where
    T::Err: fmt::Display,
{
    text.parse().map_err(|e| anyhow::anyhow!("{e}"))
}

/// The kind of an S3 error response.
fn classify(status: u16, code: Option<&str>, message: Option<&str>, skew: Option<u64>) -> Kind {
    let message = message.unwrap_or("");
    match (status, code) {
        (_, Some("RequestTimeTooSkewed")) => Kind::ClockSkew,
        (404, Some("NoSuchBucket")) => Kind::NoSuchBucket,
        (
            _,
            Some("InvalidAccessKeyId" | "SignatureDoesNotMatch" | "InvalidToken" | "ExpiredToken"),
        ) => Kind::BadCredentials,
        (403, _)
            if message.contains("Request has expired")
                || message.contains("not yet valid")
                || skew.is_some_and(|s| s > MAX_CLOCK_SKEW_SECS) =>
        {
            Kind::ClockSkew
        }
        (403, _) => Kind::AccessDenied,
        (_, Some("SlowDown")) | (429, _) => Kind::SlowDown,
        (_, Some("RequestTimeout")) | (408, _) => Kind::Timeout,
        // A concurrent conditional write to the same key: S3 asks for a retry.
        (409, Some("ConditionalRequestConflict" | "OperationAborted")) => Kind::Server,
        // The body was damaged on the way: sending it again may succeed.
        (400, Some("BadDigest" | "XAmzContentChecksumMismatch")) => Kind::Server,
        // A server without conditional writes would answer so for ever.
        (501, _) => Kind::Other,
        (500..=599, _) => Kind::Server,
        _ => Kind::Other,
    }
}

/// The unescaped text of the first `<tag>…</tag>` in `xml` (S3 error bodies are flat).
fn xml_text(xml: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let start = xml.find(&open)?.checked_add(open.len())?;
    let rest = xml.get(start..)?;
    let text = rest.get(..rest.find(&close)?)?;
    Some(
        text.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&apos;", "'")
            .replace("&amp;", "&"),
    )
}

fn s3_code(body: &[u8]) -> Option<String> {
    xml_text(&String::from_utf8_lossy(body), "Code")
}

/// How far (seconds, either way) an HTTP `Date` is from our clock.
fn skew_secs(date: &str) -> Option<u64> {
    let theirs = parse_http_date(date)?;
    let ours = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_secs();
    Some(theirs.abs_diff(ours))
}

/// Seconds since the epoch of an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`, RFC 9110), the
/// form S3 services send.
fn parse_http_date(text: &str) -> Option<u64> {
    let mut parts = text.split_ascii_whitespace();
    let (_weekday, day, month, year, time, zone) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    if zone != "GMT" || parts.next().is_some() {
        return None;
    }
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = u64::try_from(MONTHS.iter().position(|m| *m == month)?).ok()? + 1;
    let (day, year): (u64, u64) = (day.parse().ok()?, year.parse().ok()?);
    let mut hms = time.split(':').map(|p| p.parse::<u64>().ok());
    let (h, m, s) = (hms.next()??, hms.next()??, hms.next()??);
    if !(1..=31).contains(&day) || year < 1970 || h > 23 || m > 59 || s > 60 {
        return None;
    }
    // Days since 1970-01-01 of a proleptic Gregorian date (years from March, so the leap day
    // is the last of its year).
    let (y, mp) = if month > 2 {
        (year, month - 3)
    } else {
        (year - 1, month + 9)
    };
    let era = y / 400;
    let yoe = y % 400;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = (era * 146_097 + doe).checked_sub(719_468)?;
    Some(days * 86_400 + h * 3600 + m * 60 + s)
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
