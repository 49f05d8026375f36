//! TLS from outside this project for tests: certificates made by the `openssl` CLI and
//! Debian's `socat` (OPENSSL-LISTEN, OpenSSL's TLS) as a terminator in front of a plaintext
//! leader. tests/setup-env.sh installs both (as root).
//!
//! [`Pki::make`] writes, into one folder:
//! - `ca.pem`: the test CA; `server.pem`/`.key` signed by it for `127.0.0.1` and
//!   `localhost` (subject CN=localhost);
//! - `other-ca.pem` and `unknown.pem`/`.key`: a certificate for `127.0.0.1` (CN=rogue)
//!   signed by a second CA the follower does not know;
//! - `wrong.pem`/`.key`: signed by the test CA for `wrong.example` only (CN=wrong.example);
//! - `client.pem`/`.key`: a client certificate (CN=replica-follower) signed by the test CA.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The folder of certificates [`Pki::make`] wrote.
pub struct Pki {
    pub dir: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect(
            "openssl is missing: install Debian's openssl (tests/setup-env.sh does it as root)",
        );
    assert!(
        out.status.success(),
        "openssl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A self-signed CA `name`.pem / `name`.key with subject CN=`cn`.
fn ca(dir: &Path, name: &str, cn: &str) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "3650",
            "-subj",
            &format!("/CN={cn}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
        ],
    );
}

/// A certificate `name`.pem / `name`.key for subject CN=`cn` and subjectAltName `san`
/// (`IP:127.0.0.1,DNS:localhost`), signed by CA `ca`, for `usage` (serverAuth or clientAuth).
fn leaf(dir: &Path, name: &str, cn: &str, san: Option<&str>, ca: &str, usage: &str) {
    let mut ext =
        format!("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage={usage}\n");
    if let Some(san) = san {
        ext.push_str(&format!("subjectAltName={san}\n"));
    }
    leaf_with(dir, name, cn, ca, &ext);
}

/// A certificate `name`.pem / `name`.key for subject CN=`cn`, signed by CA `ca`, with the
/// extensions `ext` (an openssl extension file's text).
fn leaf_with(dir: &Path, name: &str, cn: &str, ca: &str, ext: &str) {
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-subj",
            &format!("/CN={cn}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
        ],
    );
    std::fs::write(dir.join(format!("{name}.ext")), ext).expect("write extensions");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.pem"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-days",
            "365",
            "-extfile",
            &format!("{name}.ext"),
            "-out",
            &format!("{name}.pem"),
        ],
    );
}

/// A certificate `name`.pem / `name`.key for subject CN=`cn`, signed by CA `ca` (itself
/// when `ca` is `None`) with no extension, which makes openssl write an X.509 version 1
/// certificate: what rustls refuses.
pub fn v1_certificate(dir: &Path, name: &str, cn: &str, ca: Option<&str>) {
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-subj",
            &format!("/CN={cn}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
        ],
    );
    let (ca_pem, ca_key) = match ca {
        Some(ca) => (format!("{ca}.pem"), format!("{ca}.key")),
        None => (String::new(), format!("{name}.key")),
    };
    let mut args = vec!["x509", "-req", "-in"];
    let csr = format!("{name}.csr");
    let out = format!("{name}.pem");
    args.push(&csr);
    if ca.is_some() {
        args.extend(["-CA", &ca_pem, "-CAkey", &ca_key, "-CAcreateserial"]);
    } else {
        args.extend(["-signkey", &ca_key]);
    }
    args.extend(["-days", "365", "-out", &out]);
    openssl(dir, &args);
}

/// Runs the `openssl` CLI in `dir` with `args`; fails the test if it fails.
pub fn openssl_in(dir: &Path, args: &[&str]) {
    openssl(dir, args);
}

impl Pki {
    /// Besides [`Pki::make`]'s: `client-v1`, `server-v1` (CN=localhost) signed by the test
    /// CA as X.509 version 1 certificates, and `ca-v1`, a version 1 CA, with `by-v1-ca`, a
    /// version 3 client certificate it signed.
    pub fn make_v1(&self) {
        v1_certificate(&self.dir, "client-v1", "replica-follower", Some("ca"));
        v1_certificate(&self.dir, "server-v1", "localhost", Some("ca"));
        v1_certificate(&self.dir, "ca-v1", "Version 1 CA", None);
        leaf(
            &self.dir,
            "by-v1-ca",
            "replica-follower",
            None,
            "ca-v1",
            "clientAuth",
        );
    }

    /// Besides [`Pki::make`]'s: `server-ca` (CN=localhost, for 127.0.0.1), signed by the test
    /// CA but itself marked a CA (basicConstraints CA:TRUE).
    pub fn make_ca_as_server(&self) {
        leaf_with(
            &self.dir,
            "server-ca",
            "localhost",
            "ca",
            "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,digitalSignature,keyCertSign\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n",
        );
    }

    pub fn make(dir: &Path) -> Pki {
        std::fs::create_dir_all(dir).expect("pki dir");
        ca(dir, "ca", "Test CA");
        ca(dir, "other-ca", "Other CA");
        let here = Some("IP:127.0.0.1,DNS:localhost");
        leaf(dir, "server", "localhost", here, "ca", "serverAuth");
        leaf(dir, "unknown", "rogue", here, "other-ca", "serverAuth");
        leaf(
            dir,
            "wrong",
            "wrong.example",
            Some("DNS:wrong.example"),
            "ca",
            "serverAuth",
        );
        leaf(dir, "client", "replica-follower", None, "ca", "clientAuth");
        Pki {
            dir: dir.to_path_buf(),
        }
    }

    /// `name` in the folder: `ca.pem`, `server.key`, ...
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The serve listener's certificate and key: `server`.pem/.key.
    pub fn server_files(&self, c: super::Config) -> super::Config {
        c.set(
            "serve.ssl_cert_file",
            self.path("server.pem").display().to_string(),
        )
        .set(
            "serve.ssl_key_file",
            self.path("server.key").display().to_string(),
        )
    }

    /// `[security]` for protocol SSL with the test CA.
    pub fn security(&self, c: super::Config) -> super::Config {
        c.set("security.protocol", "SSL").set(
            "security.ssl_ca_file",
            self.path("ca.pem").display().to_string(),
        )
    }

    /// librdkafka settings for TLS with the test CA, as JSON.
    pub fn librdkafka_conf(&self) -> String {
        serde_json::json!({
            "security.protocol": "SSL",
            "ssl.ca.location": self.path("ca.pem"),
        })
        .to_string()
    }
}

/// `socat OPENSSL-LISTEN:port,fork,... TCP:upstream`: TLS on 127.0.0.1:`port` in front of
/// `upstream`, with the certificate `name`.pem/.key of the [`Pki`]; with `require_client`,
/// clients must present a certificate signed by the test CA (`verify=1,cafile=ca.pem`).
/// Its own process group: dropping it ends socat and every connection it forked.
pub struct Terminator {
    child: Child,
    pub addr: String,
}

impl Terminator {
    pub fn start(pki: &Pki, name: &str, port: u16, upstream: &str, require_client: bool) -> Self {
        use std::os::unix::process::CommandExt;
        let mut listen = format!(
            "OPENSSL-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork,cert={},key={}",
            pki.path(&format!("{name}.pem")).display(),
            pki.path(&format!("{name}.key")).display()
        );
        if require_client {
            listen.push_str(&format!(
                ",verify=1,cafile={}",
                pki.path("ca.pem").display()
            ));
        } else {
            listen.push_str(",verify=0");
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(pki.path(&format!("socat-{port}.log")))
            .expect("socat log");
        let child = Command::new("socat")
            .arg(listen)
            .arg(format!("TCP:{upstream}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect(
                "socat is missing: install Debian's socat (tests/setup-env.sh does it as root)",
            );
        let addr = format!("127.0.0.1:{port}");
        let t = Terminator { child, addr };
        super::wait_until(Duration::from_secs(10), "socat to listen", || {
            std::net::TcpStream::connect(&t.addr).is_ok()
        });
        t
    }
}

impl Drop for Terminator {
    fn drop(&mut self) {
        // The whole group: the forked children hold the open connections.
        let _ = Command::new("kill")
            .args(["-TERM", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.wait();
    }
}
