use super::*;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::thread::{self, JoinHandle};

/// A request as the fake server received it.
struct Seen {
    head: String,
    body: Vec<u8>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }
}

/// An HTTP server on loopback answering the n-th connection with `responses[n]` (then closing
/// it), handing back the requests it read.
fn fake(responses: Vec<String>) -> (String, JoinHandle<Vec<Seen>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let handle = thread::spawn(move || {
        let mut seen = Vec::new();
        for response in responses {
            let (mut conn, _) = listener.accept().unwrap();
            seen.push(read_request(&mut conn));
            conn.write_all(response.as_bytes()).unwrap();
        }
        seen
    });
    (endpoint, handle)
}

fn read_request(conn: &mut std::net::TcpStream) -> Seen {
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = conn.read(&mut buf).unwrap();
        assert!(n > 0, "connection closed before the request's head");
        bytes.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&bytes[..head_end]).into_owned();
    let mut seen = Seen {
        head,
        body: Vec::new(),
    };
    let length: usize = seen
        .header("content-length")
        .map_or(0, |v| v.parse().unwrap());
    while bytes.len() < head_end + length {
        let n = conn.read(&mut buf).unwrap();
        assert!(n > 0, "connection closed before the request's body");
        bytes.extend_from_slice(&buf[..n]);
    }
    seen.body = bytes[head_end..head_end + length].to_vec();
    seen
}

fn reply(status: &str, headers: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n{headers}\r\n{body}",
        body.len()
    )
}

fn s3_error(status: &str, code: &str, message: &str) -> String {
    reply(
        status,
        "Content-Type: application/xml\r\n",
        &format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>\
             <Message>{message}</Message><RequestId>4442587FB7D0A2F9</RequestId></Error>"
        ),
    )
}

fn store_at(endpoint: &str, timeout: Duration) -> Store {
    Store::new(StoreSettings {
        endpoint: endpoint.to_string(),
        bucket: "archive".to_string(),
        region: "us-east-1".to_string(),
        access_key: "AKIDEXAMPLE".to_string(),
        secret_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".to_string(),
        session_token: None,
        timeout,
    })
    .unwrap()
}

/// The error of one GET answered with `response`.
fn get_error(response: String) -> StoreError {
    let (endpoint, server) = fake(vec![response]);
    let e = store_at(&endpoint, Duration::from_secs(5))
        .get("orders-0/00000000000000000000.log")
        .unwrap_err();
    server.join().unwrap();
    e
}

#[test]
fn store_is_send_and_sync() {
    fn shared<T: Send + Sync>() {}
    shared::<Store>();
}

#[test]
fn a_missing_bucket_is_named_with_endpoint_key_status_code_and_message() {
    let e = get_error(s3_error(
        "404 Not Found",
        "NoSuchBucket",
        "The specified bucket does not exist",
    ));
    assert_eq!(e.kind, Kind::NoSuchBucket);
    assert!(!e.is_transient());
    let line = e.to_string();
    for part in [
        "GET",
        "`orders-0/00000000000000000000.log`",
        "bucket `archive`",
        "http://127.0.0.1:",
        "HTTP 404 NoSuchBucket: The specified bucket does not exist",
    ] {
        assert!(line.contains(part), "{part} missing from: {line}");
    }
    assert!(!line.contains('\n'), "{line}");
    assert!(!line.contains("X-Amz-Credential"), "no signed URL: {line}");
    assert!(
        e.advice()
            .contains("bucket `archive` does not exist at http://127.0.0.1:")
    );
}

#[test]
fn refused_credentials_are_bad_credentials() {
    // The advice names the setting to check.
    for (code, setting) in [
        ("InvalidAccessKeyId", "offsite.access_key_file"),
        ("SignatureDoesNotMatch", "offsite.secret_key_file"),
        ("InvalidToken", "AWS_SESSION_TOKEN"),
        ("ExpiredToken", "AWS_SESSION_TOKEN"),
    ] {
        let e = get_error(s3_error("403 Forbidden", code, "nope"));
        assert_eq!(e.kind, Kind::BadCredentials, "{code}");
        assert_eq!(e.code.as_deref(), Some(code));
        assert!(!e.is_transient());
        let advice = e.advice();
        assert!(
            advice.contains(code) && advice.contains(setting),
            "{advice}"
        );
    }
}

#[test]
fn clock_skew_is_told_apart_from_other_refusals() {
    let e = get_error(s3_error(
        "403 Forbidden",
        "RequestTimeTooSkewed",
        "The difference between the request time and the current time is too large.",
    ));
    assert_eq!(e.kind, Kind::ClockSkew);
    assert!(e.advice().contains("clock"), "{}", e.advice());
    let e = get_error(s3_error(
        "403 Forbidden",
        "AccessDenied",
        "Request has expired",
    ));
    assert_eq!(e.kind, Kind::ClockSkew);
    // A plain AccessDenied from a server whose clock is far from ours.
    let far = s3_error("403 Forbidden", "AccessDenied", "Access Denied").replacen(
        "Connection: close\r\n",
        "Connection: close\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n",
        1,
    );
    let e = get_error(far);
    assert_eq!(e.kind, Kind::ClockSkew);
    assert!(e.detail.contains("clock"), "{}", e.detail);
    let e = get_error(s3_error("403 Forbidden", "AccessDenied", "Access Denied"));
    assert_eq!(e.kind, Kind::AccessDenied);
    assert!(!e.is_transient());
}

#[test]
fn slow_down_and_server_errors_are_transient() {
    let e = get_error(s3_error(
        "503 Slow Down",
        "SlowDown",
        "Please reduce your request rate.",
    ));
    assert_eq!(e.kind, Kind::SlowDown);
    assert!(e.is_transient());
    let e = get_error(reply("429 Too Many Requests", "", ""));
    assert_eq!(e.kind, Kind::SlowDown);
    let e = get_error(s3_error(
        "500 Internal Server Error",
        "InternalError",
        "We encountered an internal error. Please try again.",
    ));
    assert_eq!(e.kind, Kind::Server);
    assert!(e.is_transient());
    assert_eq!(e.status, Some(500));
    // Without conditional writes, a server would refuse every PUT: not worth retrying.
    let e = get_error(s3_error("501 Not Implemented", "NotImplemented", "x"));
    assert_eq!(e.kind, Kind::Other);
    assert!(e.advice().contains("If-None-Match"), "{}", e.advice());
}

#[test]
fn a_404_without_an_s3_code_is_an_error_not_a_missing_key() {
    let e = get_error(reply("404 Not Found", "", "<html>nginx</html>"));
    assert_eq!(e.kind, Kind::Other);
    assert!(e.detail.contains("no S3 error code"), "{}", e.detail);
    assert!(e.advice().contains("S3 endpoint"), "{}", e.advice());
}

#[test]
fn get_reads_an_object_or_none_on_no_such_key() {
    let (endpoint, server) = fake(vec![
        reply("200 OK", "", "sealed bytes"),
        s3_error(
            "404 Not Found",
            "NoSuchKey",
            "The specified key does not exist.",
        ),
    ]);
    let store = store_at(&endpoint, Duration::from_secs(5));
    assert_eq!(store.get("a/b").unwrap().unwrap(), b"sealed bytes");
    assert_eq!(store.get("a/c").unwrap(), None);
    let seen = server.join().unwrap();
    assert!(
        seen[0].head.starts_with("GET /archive/a/b?"),
        "{}",
        seen[0].head
    );
    assert!(
        seen[0].head.contains("X-Amz-Signature="),
        "{}",
        seen[0].head
    );
}

#[test]
fn put_new_sends_if_none_match_and_the_body_checksum() {
    let body = b"an object's sealed bytes".to_vec();
    let (endpoint, server) = fake(vec![
        s3_error(
            "404 Not Found",
            "NoSuchKey",
            "The specified key does not exist.",
        ),
        reply("200 OK", "ETag: \"x\"\r\n", ""),
        s3_error(
            "404 Not Found",
            "NoSuchKey",
            "The specified key does not exist.",
        ),
        s3_error(
            "412 Precondition Failed",
            "PreconditionFailed",
            "At least one of the pre-conditions you specified did not hold",
        ),
        reply(
            "206 Partial Content",
            "Content-Range: bytes 0-0/24\r\n",
            "a",
        ),
    ]);
    let store = store_at(&endpoint, Duration::from_secs(5));
    assert_eq!(store.put_new("p/1", &body).unwrap(), Put::Created);
    assert_eq!(store.put_new("p/1", &body).unwrap(), Put::Existed);
    assert_eq!(store.put_new("p/1", &body).unwrap(), Put::Existed);
    let seen = server.join().unwrap();
    assert_eq!(
        seen.len(),
        5,
        "the last put_new found the key and sent no PUT"
    );
    assert!(seen[0].head.starts_with("GET /archive/p/1?"));
    assert_eq!(seen[0].header("range").as_deref(), Some("bytes=0-0"));
    let put = &seen[1];
    assert!(put.head.starts_with("PUT /archive/p/1?"), "{}", put.head);
    assert_eq!(put.header("if-none-match").as_deref(), Some("*"));
    // SHA-256 of the body, base64, as computed independently of the client.
    let expected = crate::security::base64::encode(&Sha256::digest(&body));
    assert_eq!(put.header("x-amz-checksum-sha256"), Some(expected));
    assert!(
        put.head
            .contains("X-Amz-SignedHeaders=host%3Bx-amz-checksum-sha256"),
        "the checksum header is signed: {}",
        put.head
    );
    assert_eq!(put.body, body);
    assert!(seen[3].head.starts_with("PUT "));
}

#[test]
fn list_follows_continuation_tokens_and_sorts() {
    let page = |keys: &[(&str, u64)], prefixes: &[&str], next: Option<&str>| {
        let mut xml = String::from(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult \
             xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>archive</Name>\
             <Prefix>p/</Prefix><KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys>\
             <EncodingType>url</EncodingType>",
        );
        xml.push_str(&format!("<IsTruncated>{}</IsTruncated>", next.is_some()));
        for (k, size) in keys {
            xml.push_str(&format!(
                "<Contents><Key>{k}</Key><Size>{size}</Size><StorageClass>STANDARD</StorageClass></Contents>"
            ));
        }
        for p in prefixes {
            xml.push_str(&format!(
                "<CommonPrefixes><Prefix>{p}</Prefix></CommonPrefixes>"
            ));
        }
        if let Some(t) = next {
            xml.push_str(&format!(
                "<NextContinuationToken>{t}</NextContinuationToken>"
            ));
        }
        xml.push_str("</ListBucketResult>");
        reply("200 OK", "Content-Type: application/xml\r\n", &xml)
    };
    let (endpoint, server) = fake(vec![
        page(&[("p/b", 20), ("p/c%2Bd", 30)], &["p/x/"], Some("tok/1+")),
        page(&[("p/a", 10)], &["p/w/"], None),
    ]);
    let store = store_at(&endpoint, Duration::from_secs(5));
    let listing = store.list("p/", Some("/")).unwrap();
    assert_eq!(
        listing.objects,
        vec![
            ("p/a".to_string(), 10),
            ("p/b".to_string(), 20),
            ("p/c+d".to_string(), 30)
        ]
    );
    assert_eq!(listing.prefixes, vec!["p/w/", "p/x/"]);
    let seen = server.join().unwrap();
    assert!(seen[0].head.contains("prefix=p%2F"), "{}", seen[0].head);
    assert!(seen[0].head.contains("delimiter=%2F"), "{}", seen[0].head);
    assert!(!seen[0].head.contains("continuation-token"));
    assert!(
        seen[1].head.contains("continuation-token=tok%2F1%2B"),
        "{}",
        seen[1].head
    );
}

#[test]
fn check_proves_the_bucket_with_one_small_listing() {
    let (endpoint, server) = fake(vec![
        reply(
            "200 OK",
            "",
            "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
             <IsTruncated>false</IsTruncated></ListBucketResult>",
        ),
        reply("200 OK", "", "<html>a web server</html>"),
    ]);
    let store = store_at(&endpoint, Duration::from_secs(5));
    store.check().unwrap();
    let e = store.check().unwrap_err();
    assert_eq!(e.kind, Kind::Other);
    assert!(
        e.detail.contains("not a ListObjectsV2 result"),
        "{}",
        e.detail
    );
    assert!(
        e.to_string().starts_with("S3 LIST in bucket `archive`"),
        "{e}"
    );
    let seen = server.join().unwrap();
    assert!(seen[0].head.contains("max-keys=1"), "{}", seen[0].head);
}

#[test]
fn a_refused_connection_is_unreachable_and_transient() {
    // A port just bound and released: nothing listens on it.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let store = store_at(&format!("http://127.0.0.1:{port}"), Duration::from_secs(5));
    let e = store.get("k").unwrap_err();
    assert_eq!(e.kind, Kind::Unreachable, "{e}");
    assert!(e.is_transient());
    assert_eq!(e.status, None);
    assert!(e.advice().contains("cannot reach"), "{}", e.advice());
}

#[test]
fn a_server_that_never_answers_times_out() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let silent = thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        // Read the request, then say nothing until the client gives up and closes.
        let mut buf = [0u8; 4096];
        while conn.read(&mut buf).is_ok_and(|n| n > 0) {}
    });
    let started = std::time::Instant::now();
    let e = store_at(&endpoint, Duration::from_millis(300))
        .get("k")
        .unwrap_err();
    assert_eq!(e.kind, Kind::Timeout, "{e}");
    assert!(e.is_transient());
    assert!(started.elapsed() < Duration::from_secs(5));
    silent.join().unwrap();
}

#[test]
fn an_object_over_the_read_limit_is_refused() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let server = thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        read_request(&mut conn);
        let total = MAX_OBJECT_BYTES + 1;
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {total}\r\n\r\n");
        conn.write_all(head.as_bytes()).unwrap();
        // Until the client hangs up, having read its limit.
        let chunk = vec![0u8; 1 << 20];
        let mut sent = 0u64;
        while sent < total {
            let n = chunk.len().min((total - sent) as usize);
            if conn.write_all(&chunk[..n]).is_err() {
                break;
            }
            sent += n as u64;
        }
    });
    let e = store_at(&endpoint, Duration::from_secs(20))
        .get("k")
        .unwrap_err();
    server.join().unwrap();
    assert_eq!(e.kind, Kind::Other, "{e}");
    assert!(e.detail.contains("over 68157440 bytes"), "{e}");
}

#[test]
fn bad_endpoints_are_refused_naming_them() {
    let settings = |endpoint: &str| StoreSettings {
        endpoint: endpoint.to_string(),
        bucket: "b".to_string(),
        region: "us-east-1".to_string(),
        access_key: "a".to_string(),
        secret_key: "s".to_string(),
        session_token: Some("t".to_string()),
        timeout: Duration::from_secs(1),
    };
    for bad in [
        "not a url",
        "ftp://host/",
        "http://user:pw@host/",
        "http://host/?x=1",
        "http://",
    ] {
        let e = format!("{:#}", Store::new(settings(bad)).unwrap_err());
        assert!(e.contains(&format!("`{bad}`")), "{e}");
    }
    assert!(!format!("{:?}", settings("http://h")).contains("\"s\""));
    let store = Store::new(settings("https://s3.example.com:9000/base/")).unwrap();
    assert_eq!(store.place.endpoint, "https://s3.example.com:9000/base");
}

#[test]
fn http_dates_parse_to_epoch_seconds() {
    assert_eq!(
        parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
        Some(784_111_777)
    );
    assert_eq!(
        parse_http_date("Thu, 29 Feb 2024 23:59:59 GMT"),
        Some(1_709_251_199)
    );
    assert_eq!(parse_http_date("Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
    assert_eq!(parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"), None);
    assert_eq!(parse_http_date("Sun, 06 Nov 1994 08:49:37 PST"), None);
    assert_eq!(parse_http_date("Sun, 06 Foo 1994 08:49:37 GMT"), None);
    assert_eq!(parse_http_date(""), None);
}

#[test]
fn xml_error_fields_are_unescaped() {
    let body = "<Error><Code>AccessDenied</Code><Message>a &lt;b&gt; &amp; c</Message></Error>";
    assert_eq!(xml_text(body, "Code").as_deref(), Some("AccessDenied"));
    assert_eq!(xml_text(body, "Message").as_deref(), Some("a <b> & c"));
    assert_eq!(xml_text(body, "Resource"), None);
    assert_eq!(xml_text("<Code>unterminated", "Code"), None);
}
