//! A real OCI registry for the tests that need one: Debian's
//! `docker-registry` (CNCF distribution 2.8) on a free port of 127.0.0.1,
//! its storage in a temporary directory, stopped when dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The test user's password, and its bcrypt hash for the registry's
/// htpasswd file (distribution reads bcrypt only; made once with Python's
/// `crypt.crypt(PASSWORD, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=32))`).
pub(crate) const PASSWORD: &str = "toolhost-test-pw";
const HTPASSWD: &str = "toolhost:$2b$05$LMPQJe9t5PTKIhERzUvL2.TtFrxESAmmjcCL6Ag6yENSt.ktvdLai\n";

/// A `docker-registry` on 127.0.0.1.
pub(crate) struct RegistryServer {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl RegistryServer {
    /// A registry anyone may pull from and push to.
    pub(crate) fn start() -> Self {
        Self::start_with(false)
    }

    /// A registry that wants user `toolhost` with [`PASSWORD`] (HTTP Basic).
    pub(crate) fn start_with_password() -> Self {
        Self::start_with(true)
    }

    fn start_with(password: bool) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let auth = if password {
            std::fs::write(dir.path().join("htpasswd"), HTPASSWD).unwrap();
            format!(
                "auth:\n  htpasswd:\n    realm: toolhost-test\n    path: {}\n",
                dir.path().join("htpasswd").display()
            )
        } else {
            String::new()
        };
        let config = format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n\
             storage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n  \
             maintenance:\n    uploadpurging:\n      enabled: false\n\
             http:\n  addr: 127.0.0.1:{port}\n  secret: toolhost-test-secret\n{auth}",
            dir.path().join("data").display()
        );
        std::fs::write(dir.path().join("config.yml"), config).unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(dir.path().join("config.yml"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("docker-registry runs: install it with `apt-get install docker-registry` (scripts/setup.sh does)");
        let server = Self { child, port, dir };
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return server;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("docker-registry did not start on port {port}");
    }

    /// `127.0.0.1:PORT`, as references write it.
    pub(crate) fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Where the registry keeps blob `hex` (a sha256 in hex).
    pub(crate) fn blob_file(&self, hex: &str) -> PathBuf {
        self.storage()
            .join("docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    /// The registry's storage root.
    fn storage(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Stop it (as a registry that went away).
    pub(crate) fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RegistryServer {
    fn drop(&mut self) {
        self.stop();
    }
}
