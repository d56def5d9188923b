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
    _dir: tempfile::TempDir,
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
        let dir = tempfile::tempdir().unwrap();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server runs: install it with `apt-get install redis-server` (scripts/setup.sh does)");
        let server = Self {
            child,
            port,
            _dir: dir,
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
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
