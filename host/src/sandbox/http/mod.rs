//! Outgoing HTTP (`wasi:http`): the grant (`allow_hosts`), where a granted
//! name may lead, the per-call connection budget, and the host memory behind
//! `wasi:http` objects.
//!
//! The gate (this file) admits a request; `address` says where a name may
//! lead, `send` resolves, connects and sends, and `linker` bounds the
//! `wasi:http` objects a tool can make.
//!
//! # Where a request may go
//!
//! A request is sent only if some `allow_hosts` pattern matches its scheme,
//! host and port (`AllowedHosts::matching`; wildcards never match an IP
//! address in any spelling). The gate then resolves the name itself and
//! screens every address: loopback, private, link-local, shared (CGNAT),
//! multicast, unspecified, broadcast, documentation, benchmarking and
//! reserved addresses, the cloud metadata endpoints, and IPv6 forms that
//! carry any of them (IPv4-mapped, -compatible and -translated, NAT64,
//! 6to4) are `Internal`. A request reaches an internal address only when a
//! matching pattern names that very address (`http://127.0.0.1:8081`,
//! `http://[::1]:8080`, requested by that address), or names `localhost`,
//! which reaches loopback addresses only. So no name and no wildcard leads
//! into the host or its network. Internal addresses among a name's results
//! are skipped; the request is refused only when none is left. The gate
//! connects to the address it checked, never resolving twice, so a DNS
//! answer that changes in between (rebinding) changes nothing.
//!
//! # Connections
//!
//! Each connection holds one of the call's [`MAX_CONNECTIONS`] and one
//! descriptor from the component's share of the process-wide pool (`budget`), from the moment the request
//! is admitted until the connection closes (its response read or dropped,
//! or the call over). Past either, the request is refused.
//!
//! # Host memory
//!
//! Every tool may import the `wasi:http` types, granted hosts or not, and
//! every object it makes is a handle in the call's resource table, at most
//! `MAX_HANDLES` (256) at once. The largest any one handle holds is an
//! outgoing request: its header fields (`FIELD_SIZE_LIMIT`, 32 KiB as
//! wasmtime-wasi-http counts them), method (32 B), path (8 KiB), authority
//! (512 B), scheme (64 B, the `http` crate's limit) and its body's buffer
//! (two chunks of `OUTGOING_BODY_CHUNK_SIZE`, 32 KiB): about 73 KiB. So
//! one call can make the host hold at most 256 × 73 KiB ≈ 18 MiB of
//! `wasi:http` objects, plus what the allocator and the header maps' spare
//! capacity add. (wasmtime-wasi-http's defaults allowed gigabytes: a method
//! of any length per request, 1 MiB body chunks, 128 KiB of fields.) The
//! `network` tests measure it: a probe holding 240 handles filled to these
//! limits grows the host's RSS by about 15 MiB, its own memory included,
//! where the defaults let it grow by 350 MiB. Responses need a grant and a
//! connection: each of the at most 8 buffers at most
//! `MAX_RESPONSE_BUFFER` of the response.

mod address;
mod linker;
mod send;

use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;

use tokio::sync::Semaphore;
use wasmtime_wasi_http::p2::bindings::http::types as wit;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

use self::address::{Reach, Target};
pub(crate) use self::linker::{add_to_linker, context};
use self::send::{Admitted, ConnectionPermit, Sent, send};
use super::budget::FdShare;
use super::refusal::Refusals;
use crate::grants::{Grants, is_ip_spelling};

/// HTTP connections one call may hold open at once. A tool fetching pages
/// in parallel rarely needs more than a handful; each also holds one of the
/// process's descriptors.
pub(crate) const MAX_CONNECTIONS: usize = 8;

/// The most one write to an outgoing body may carry. Together with
/// [`OUTGOING_BODY_BUFFER_CHUNKS`], what an unsent body can make the host
/// buffer (two chunks: the buffer plus the one slot the channel keeps free).
/// wasmtime-wasi-http's default is 1 MiB.
const OUTGOING_BODY_CHUNK_SIZE: usize = 16 << 10;

/// Writes an outgoing body buffers before the guest must wait for the
/// connection to take them.
const OUTGOING_BODY_BUFFER_CHUNKS: usize = 1;

/// Lets an outgoing HTTP request through only to a granted origin, to an
/// address the grant allows, within the call's connection budget. Every hop
/// of a redirect is a new request from the guest, so it comes through here
/// too.
pub(crate) struct HttpGate {
    grants: Arc<Grants>,
    /// Where refused requests are recorded (and logged, masked).
    refusals: Refusals,
    /// The call's connections: [`MAX_CONNECTIONS`] permits.
    connections: Arc<Semaphore>,
    /// The component's share of the process's descriptors.
    descriptors: Arc<FdShare>,
    /// Whether the instance has its call: one made ahead of it sends
    /// nothing (a request would belong to no call).
    pub(crate) for_call: bool,
}

impl HttpGate {
    pub(crate) fn new(grants: Arc<Grants>, refusals: Refusals, descriptors: Arc<FdShare>) -> Self {
        Self {
            grants,
            refusals,
            connections: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
            descriptors,
            for_call: true,
        }
    }

    /// The checks that need no network: the origin is granted and the call
    /// and the host each have a connection to spare.
    fn admit(&self, uri: &http::Uri) -> Result<Admitted, Error> {
        let Some(host) = uri.host() else {
            return Err(Error::HttpRequestUriInvalid);
        };
        let scheme = uri.scheme_str().unwrap_or("https");
        let https = scheme.eq_ignore_ascii_case("https");
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let target = Target {
            origin: format!("{scheme}://{host}:{port}"),
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            https,
            port,
        };
        let hosts = self.grants.hosts();
        let Some(reach) = Reach::of(hosts, scheme, host, port) else {
            let fix = if !is_ip_spelling(host) {
                format!("add \"{}\" to allow it", target.origin)
            } else if target.host.parse::<IpAddr>().is_ok() {
                format!(
                    "add \"{}\" to allow it; wildcards never match an IP address",
                    target.origin
                )
            } else {
                "wildcards never match an IP address, and an entry names one in full, like 127.0.0.1"
                    .to_owned()
            };
            self.refusals.deny(format!(
                "HTTP request to {} refused: not in the tool's allow_hosts ({fix})",
                target.origin
            ));
            return Err(Error::HttpRequestDenied);
        };
        let Ok(call) = self.connections.clone().try_acquire_owned() else {
            self.refusals.deny(format!(
                "HTTP request to {} refused: more than {MAX_CONNECTIONS} HTTP connections at once (per-call limit); read or drop earlier responses first",
                target.origin
            ));
            return Err(Error::ConnectionLimitReached);
        };
        let Some(descriptor) = self.descriptors.try_acquire() else {
            self.refusals.deny(format!(
                "HTTP request to {} refused: the host's descriptor reserve for tools is in use; retry shortly",
                target.origin
            ));
            return Err(Error::ConnectionLimitReached);
        };
        Ok(Admitted {
            target,
            reach,
            permit: Arc::new(ConnectionPermit {
                _call: call,
                _descriptor: descriptor,
            }),
        })
    }
}

impl WasiHttpHooks for HttpGate {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = wasmtime_wasi_http::Result<()>> + Send>,
    ) -> Box<dyn Future<Output = wasmtime_wasi_http::Result<Sent>> + Send> {
        _ = fut;
        let admitted = if self.for_call {
            self.admit(request.uri())
        } else {
            Err(Error::HttpRequestDenied)
        };
        let refusals = self.refusals.clone();
        Box::new(async move { send(request, admitted?, options, refusals).await })
    }

    fn p2_outgoing_body_buffer_chunks(&mut self) -> usize {
        OUTGOING_BODY_BUFFER_CHUNKS
    }

    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        OUTGOING_BODY_CHUNK_SIZE
    }

    fn p2_error_from_hyper(&mut self, err: &hyper::Error) -> wit::ErrorCode {
        tracing::debug!(target: "toolhost::http", error = %err, "HTTP exchange failed");
        if err.is_timeout() {
            wit::ErrorCode::HttpResponseTimeout
        } else if err.is_incomplete_message() {
            wit::ErrorCode::HttpResponseIncomplete
        } else if err.is_closed() || err.is_canceled() {
            wit::ErrorCode::ConnectionTerminated
        } else {
            wit::ErrorCode::HttpProtocolError
        }
    }
}
