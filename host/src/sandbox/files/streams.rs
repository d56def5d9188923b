//! A granted file's streams: each keeps its file counted as open while it
//! lives, and a writer charges its grant's quota before each write.

use std::sync::Arc;

use bytes::Bytes;
use wasmtime_wasi::p2::{
    DynInputStream, DynOutputStream, InputStream, OutputStream, Pollable, StreamError,
};

use super::{GrantedDir, OpenFile, charge};
use crate::sandbox::refusal::Refusals;

/// A file's output stream: it keeps its file counted as open while it
/// lives, and charges its grant's quota before each write.
pub(super) struct FileWriter {
    pub(super) inner: DynOutputStream,
    /// For a read-write grant with a quota.
    pub(super) quota: Option<Arc<GrantedDir>>,
    pub(super) refusals: Refusals,
    pub(super) _file: Option<Arc<OpenFile>>,
}

#[wasmtime_wasi::async_trait]
impl Pollable for FileWriter {
    async fn ready(&mut self) {
        self.inner.ready().await;
    }
}

impl FileWriter {
    fn charge(&self, bytes: usize) -> Result<(), StreamError> {
        match &self.quota {
            Some(dir) => {
                charge(dir, bytes as u64, "writing a file", &self.refusals).map_err(|_| {
                    StreamError::LastOperationFailed(
                        std::io::Error::from_raw_os_error(libc::EDQUOT).into(),
                    )
                })
            }
            None => Ok(()),
        }
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for FileWriter {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.charge(bytes.len())?;
        self.inner.write(bytes)
    }

    async fn blocking_write_and_flush(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.charge(bytes.len())?;
        self.inner.blocking_write_and_flush(bytes).await
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        self.inner.flush()
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        self.inner.check_write()
    }

    async fn cancel(&mut self) {
        self.inner.cancel().await;
    }
}

/// A file's input stream: it keeps its file counted as open while it lives.
pub(super) struct FileReader {
    pub(super) inner: DynInputStream,
    pub(super) _file: Option<Arc<OpenFile>>,
}

#[wasmtime_wasi::async_trait]
impl Pollable for FileReader {
    async fn ready(&mut self) {
        self.inner.ready().await;
    }
}

#[wasmtime_wasi::async_trait]
impl InputStream for FileReader {
    fn read(&mut self, size: usize) -> Result<Bytes, StreamError> {
        self.inner.read(size)
    }

    async fn blocking_read(&mut self, size: usize) -> Result<Bytes, StreamError> {
        self.inner.blocking_read(size).await
    }

    fn skip(&mut self, nelem: usize) -> Result<usize, StreamError> {
        self.inner.skip(nelem)
    }

    async fn cancel(&mut self) {
        self.inner.cancel().await;
    }
}

/// Stands in for an input stream for the instant it is being wrapped.
pub(super) struct Ended;

#[wasmtime_wasi::async_trait]
impl Pollable for Ended {
    async fn ready(&mut self) {}
}

impl InputStream for Ended {
    fn read(&mut self, _: usize) -> Result<Bytes, StreamError> {
        Err(StreamError::Closed)
    }
}

/// Stands in for an output stream for the instant it is being wrapped.
pub(super) struct Closed;

#[wasmtime_wasi::async_trait]
impl Pollable for Closed {
    async fn ready(&mut self) {}
}

impl OutputStream for Closed {
    fn write(&mut self, _: Bytes) -> Result<(), StreamError> {
        Err(StreamError::Closed)
    }
    fn flush(&mut self) -> Result<(), StreamError> {
        Err(StreamError::Closed)
    }
    fn check_write(&mut self) -> Result<usize, StreamError> {
        Err(StreamError::Closed)
    }
}
