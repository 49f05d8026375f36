//! What a certificate or key mistake says, made with the openssl CLI ([`support::tls`]):
//! each message names the config key and the file, and blames the file at fault. An X.509
//! version 1 certificate — our client's, the listener's, a broker's — is called that, with
//! how to re-issue it as version 3 (it used to read as a key that does not fit the
//! certificate); a version 1 CA in `ssl_ca_file` is accepted, as webpki takes it as a trust
//! anchor. Encrypted keys, swapped files and keys rustls cannot sign with are named as such.

use crate::support;
use crate::support::tls::{Pki, Terminator, openssl_in};
use crate::support::{free_port, wait_until};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// `check-config` on a config following from port 1 with `set` applied: (exit code, stderr).
fn check(
    dir: &Path,
    set: impl FnOnce(support::Config) -> support::Config,
) -> (Option<i32>, String) {
    let cfg = support::Config::new(&dir.join("data"), "127.0.0.1:1")
        .follow("t")
        .set("security.protocol", "SSL")
        .apply(set)
        .write(dir);
    let out = Command::new(support::bin())
        .args(["check-config", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn client_files(
    pki: &Pki,
    cert: &str,
    key: &str,
) -> impl FnOnce(support::Config) -> support::Config {
    let ca = pki.path("ca.pem").display().to_string();
    let cert = pki.path(cert).display().to_string();
    let key = pki.path(key).display().to_string();
    move |c| {
        c.set("security.ssl_ca_file", ca)
            .set("security.ssl_cert_file", cert)
            .set("security.ssl_key_file", key)
    }
}

#[test]
fn certificate_and_key_mistakes_name_the_file_at_fault_and_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::make(&tmp.path().join("pki"));
    pki.make_v1();
    let path = |n: &str| pki.path(n).display().to_string();

    // Our client certificate is version 1: said so, with how to re-issue it; the key is not
    // blamed.
    let (code, err) = check(
        tmp.path(),
        client_files(&pki, "client-v1.pem", "client-v1.key"),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "key `security.ssl_cert_file`: the certificate in `{}` (subject CN=replica-follower, issued by CN=Test CA) is an X.509 version 1 certificate; rustls accepts only version 3 certificates: re-issue it as version 3",
            path("client-v1.pem")
        )) && err.contains("openssl x509 -req")
            && err.contains("-extfile <(printf 'basicConstraints=CA:FALSE\\nextendedKeyUsage=clientAuth')")
            && !err.contains("UnsupportedCertVersion")
            && !err.contains("cannot be used with"),
        "{err}"
    );
    // Re-issued as the message says (the extension file given), it is accepted.
    let dir = pki.path("").to_path_buf();
    openssl_in(
        &dir,
        &[
            "x509",
            "-req",
            "-in",
            "client-v1.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-days",
            "365",
            "-extfile",
            "client.ext",
            "-out",
            "client-reissued.pem",
        ],
    );
    let (code, err) = check(
        tmp.path(),
        client_files(&pki, "client-reissued.pem", "client-v1.key"),
    );
    assert_eq!(code, Some(0), "{err}");

    // The listener's certificate is version 1.
    let (code, err) = check(tmp.path(), |c| {
        c.set("security.protocol", "PLAINTEXT")
            .set("serve.protocol", "SSL")
            .set("serve.listen", "127.0.0.1:0")
            .set("serve.ssl_cert_file", path("server-v1.pem"))
            .set("serve.ssl_key_file", path("server-v1.key"))
    });
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "key `serve.ssl_cert_file`: the certificate in `{}` (subject CN=localhost, issued by CN=Test CA) is an X.509 version 1 certificate",
            path("server-v1.pem")
        )) && err.contains("extendedKeyUsage=serverAuth"),
        "{err}"
    );

    // A version 1 CA in ssl_ca_file is a trust anchor: accepted.
    let (code, err) = check(tmp.path(), |c| {
        c.set("security.ssl_ca_file", path("ca-v1.pem"))
            .set("security.ssl_cert_file", path("by-v1-ca.pem"))
            .set("security.ssl_key_file", path("by-v1-ca.key"))
    });
    assert_eq!(code, Some(0), "{err}");

    // An encrypted key.
    openssl_in(
        &dir,
        &[
            "pkey",
            "-in",
            "client.key",
            "-aes256",
            "-passout",
            "pass:secret",
            "-out",
            "client-encrypted.key",
        ],
    );
    let (code, err) = check(
        tmp.path(),
        client_files(&pki, "client.pem", "client-encrypted.key"),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "key `security.ssl_key_file`: the private key in `{}` is encrypted with a passphrase, which is not supported",
            path("client-encrypted.key")
        )),
        "{err}"
    );

    // The two files swapped: the certificate's key names a key, and the other way round.
    let (code, err) = check(tmp.path(), client_files(&pki, "client.key", "client.pem"));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "key `security.ssl_cert_file`: no PEM certificate (-----BEGIN CERTIFICATE-----) found in `{}` (it holds a private key instead: are the certificate and key files swapped?)",
            path("client.key")
        )),
        "{err}"
    );
    let (code, err) = check(tmp.path(), client_files(&pki, "client.pem", "client.pem"));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "key `security.ssl_key_file`: `{}` holds a certificate, not a private key",
            path("client.pem")
        )),
        "{err}"
    );

    // A key and certificate that do not belong together: the key is named.
    let (code, err) = check(tmp.path(), client_files(&pki, "client.pem", "server.key"));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "key `security.ssl_key_file`: the key in `{}` does not match the certificate in `{}`",
            path("server.key"),
            path("client.pem")
        )),
        "{err}"
    );

    // A key rustls cannot sign with (RSA of 1024 bits), with its certificate.
    openssl_in(
        &dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:1024",
            "-nodes",
            "-subj",
            "/CN=small",
            "-days",
            "30",
            "-addext",
            "basicConstraints=CA:FALSE",
            "-keyout",
            "small.key",
            "-out",
            "small.pem",
        ],
    );
    let (code, err) = check(tmp.path(), client_files(&pki, "small.pem", "small.key"));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "key `security.ssl_key_file`: rustls cannot sign with the key in `{}`",
            path("small.key")
        )) && err.contains("RSA of 2048 to 4096 bits"),
        "{err}"
    );
}

/// The log of a daemon whose broker presents the certificate `cert` of `pki`, once it said
/// `said`; and the broker's address.
fn refused_by(pki: &Pki, tmp: &Path, cert: &str, said: &str) -> (String, String) {
    let nowhere = format!("127.0.0.1:{}", free_port());
    let broker = Terminator::start(pki, cert, free_port(), &nowhere, false);
    let data = tmp.join("data");
    let cfg = support::Config::new(&data, &broker.addr)
        .follow("t")
        .apply(|c| pki.security(c))
        .apply(super::tls::quick)
        .write(tmp);
    let mut d = support::Daemon::start(&cfg);
    wait_until(Duration::from_secs(20), "the refusal", || {
        d.log_text().contains(said)
    });
    let _ = d.wait(Duration::from_secs(20));
    (d.log_text(), broker.addr.clone())
}

#[test]
fn a_broker_presenting_a_version_1_certificate_is_told_as_that() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::make(&tmp.path().join("pki"));
    pki.make_v1();
    let (log, addr) = refused_by(&pki, tmp.path(), "server-v1", "X.509 version");
    assert!(
        log.contains(&format!("broker {addr}: "))
            && log.contains(
                "its certificate (subject CN=localhost, issued by CN=Test CA) is an X.509 version 1 certificate; rustls accepts only version 3 certificates: the broker's certificate must be re-issued as version 3"
            ),
        "{log}"
    );
}

/// A broker whose certificate is a CA's (basicConstraints CA:TRUE, otherwise fit for it) is
/// told as that, not as an unknown issuer or a bad key.
#[test]
fn a_broker_presenting_a_ca_certificate_is_told_as_that() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::make(&tmp.path().join("pki"));
    pki.make_ca_as_server();
    let (log, addr) = refused_by(&pki, tmp.path(), "server-ca", "CA:TRUE");
    assert!(
        log.contains(&format!("broker {addr}: "))
            && log.contains("is a CA certificate (basicConstraints CA:TRUE), which rustls refuses as a broker's certificate")
            && log.contains("basicConstraints CA:FALSE"),
        "{log}"
    );
}
