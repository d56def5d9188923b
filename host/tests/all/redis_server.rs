//! A real `redis-server` for the tests that need one, shared by the
//! integration tests (`mod redis_server` in main.rs) and the library's unit
//! tests (`stores/parity.rs` includes this file by its path, and
//! `serve/fair/tests.rs` uses it from there).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A `redis-server` on a free port of 127.0.0.1, stopped when dropped.
pub(crate) struct RedisServer {
    child: Child,
    port: u16,
    /// Whether it speaks only TLS (`start_tls`).
    tls: bool,
    dir: tempfile::TempDir,
}

impl RedisServer {
    pub(crate) fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Self::start_on(port)
    }

    /// A `redis-server` on `port` of 127.0.0.1: e.g. one started again
    /// where a stopped one was, for tests of a server coming back.
    pub(crate) fn start_on(port: u16) -> Self {
        let port_text = port.to_string();
        Self::start_with(
            port,
            false,
            tempfile::tempdir().unwrap(),
            &["--port", &port_text],
        )
    }

    /// A `redis-server` that speaks only TLS, on a free port of 127.0.0.1:
    /// its certificate (for 127.0.0.1 and `localhost`) is signed by a CA
    /// made here, whose PEM file is [`Self::ca`]. Clients need not show a
    /// certificate.
    #[allow(dead_code)] // The library's unit tests include this file too.
    pub(crate) fn start_tls() -> Self {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let dir = tempfile::tempdir().unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = KeyPair::generate().unwrap();
        let params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
        let cert = params
            .signed_by(&key, &Issuer::from_params(&ca_params, &ca_key))
            .unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        std::fs::write(dir.path().join("server.pem"), cert.pem()).unwrap();
        std::fs::write(dir.path().join("server.key"), key.serialize_pem()).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let port_text = port.to_string();
        let args = [
            "--port",
            "0",
            "--tls-port",
            &port_text,
            "--tls-cert-file",
            "server.pem",
            "--tls-key-file",
            "server.key",
            "--tls-ca-cert-file",
            "ca.pem",
            "--tls-auth-clients",
            "no",
        ];
        Self::start_with(port, true, dir, &args)
    }

    fn start_with(port: u16, tls: bool, dir: tempfile::TempDir, listen: &[&str]) -> Self {
        let child = Command::new("redis-server")
            .args(listen)
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server runs: install it with `apt-get install redis-server` (scripts/setup.sh does)");
        let server = Self {
            child,
            port,
            tls,
            dir,
        };
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return server;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("redis-server did not start on port {port}");
    }

    pub(crate) fn url(&self) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The PEM file of the CA that signed a TLS server's certificate.
    #[allow(dead_code)] // The library's unit tests include this file too.
    pub(crate) fn ca(&self) -> std::path::PathBuf {
        self.dir.path().join("ca.pem")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
