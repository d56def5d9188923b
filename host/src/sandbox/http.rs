//! Outgoing HTTP (`wasi:http`): the grant (`allow_hosts`), where a granted
//! name may lead, the per-call connection budget, and the host memory behind
//! `wasi:http` objects.
//!
//! # Where a request may go
//!
//! A request is sent only if some `allow_hosts` pattern matches its scheme,
//! host and port ([`AllowedHosts::matching`]; wildcards never match an IP
//! address in any spelling). The gate then resolves the name itself and
//! screens every address: loopback, private, link-local, shared (CGNAT),
//! multicast, unspecified, broadcast, documentation, benchmarking and
//! reserved addresses, the cloud metadata endpoints, and IPv6 forms that
//! carry any of them (IPv4-mapped, -compatible and -translated, NAT64,
//! 6to4) are [`Internal`]. A request reaches an internal address only when a
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
//! outgoing request: its header fields ([`FIELD_SIZE_LIMIT`], 32 KiB as
//! wasmtime-wasi-http counts them), method (32 B), path (8 KiB), authority
//! (512 B), scheme (64 B, the `http` crate's limit) and its body's buffer
//! (two chunks of [`OUTGOING_BODY_CHUNK_SIZE`], 32 KiB): about 73 KiB. So
//! one call can make the host hold at most 256 × 73 KiB ≈ 18 MiB of
//! `wasi:http` objects, plus what the allocator and the header maps' spare
//! capacity add. (wasmtime-wasi-http's defaults allowed gigabytes: a method
//! of any length per request, 1 MiB body chunks, 128 KiB of fields.) The
//! `network` tests measure it: a probe holding 240 handles filled to these
//! limits grows the host's RSS by about 15 MiB, its own memory included,
//! where the defaults let it grow by 350 MiB. Responses need a grant and a
//! connection: each of the at most 8 buffers at most
//! [`MAX_RESPONSE_BUFFER`] of the response.

use std::future::{Future, poll_fn};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::{Pin, pin};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep, timeout_at};
use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi_http::p2::HeaderResult;
use wasmtime_wasi_http::p2::bindings::http::types as wit;
use wasmtime_wasi_http::{
    Error, FieldMapError, RequestOptions, WasiBody, WasiHttpCtx, WasiHttpHooks, WasiHttpView,
};

use super::budget::{FdPermit, FdShare};
use super::refusal::Refusals;
use super::state::State;
use crate::grants::{AllowedHosts, Grants, is_ip_spelling};

/// HTTP connections one call may hold open at once. A tool fetching pages
/// in parallel rarely needs more than a handful; each also holds one of the
/// process's descriptors.
pub(crate) const MAX_CONNECTIONS: usize = 8;

/// The most the header fields of one `fields` handle (or one request's or
/// response's headers) may hold, as wasmtime-wasi-http counts it: name and
/// value bytes plus 72 bytes per field for `HeaderMap`'s own entries.
/// Proxies commonly accept 8 to 16 KiB of request headers on the wire
/// (nginx, Node.js, Apache); 32 KiB leaves room for 16 KiB of them in about
/// 200 fields. wasmtime-wasi-http's default (128 KiB) let one call pin
/// 32 MiB in header maps alone.
const FIELD_SIZE_LIMIT: usize = 32 << 10;

/// The most one write to an outgoing body may carry. Together with
/// [`OUTGOING_BODY_BUFFER_CHUNKS`], what an unsent body can make the host
/// buffer (two chunks: the buffer plus the one slot the channel keeps free).
/// wasmtime-wasi-http's default is 1 MiB.
const OUTGOING_BODY_CHUNK_SIZE: usize = 16 << 10;

/// Writes an outgoing body buffers before the guest must wait for the
/// connection to take them.
const OUTGOING_BODY_BUFFER_CHUNKS: usize = 1;

/// The longest method a request may name. Standard methods are at most 7
/// bytes; the `http` crate accepts extension methods of any length.
const MAX_METHOD: usize = 32;

/// The longest path-with-query a request may carry: what common servers
/// accept in a request line (nginx and Apache, 8 KiB).
const MAX_PATH_WITH_QUERY: usize = 8 << 10;

/// The longest authority (`user@host:port`): a DNS name is at most 253
/// bytes.
const MAX_AUTHORITY: usize = 512;

/// The most of a response one connection buffers (hyper's read buffer,
/// which must hold the response head). hyper's default is about 400 KiB.
const MAX_RESPONSE_BUFFER: usize = 64 << 10;

/// The `wasi:http/types` instance wasmtime-wasi-http registers (its WIT,
/// like `wit/deps/http`, is 0.2.12). Older 0.2 imports resolve to it too.
const TYPES: &str = "wasi:http/types@0.2.12";

/// Timeouts a request did not set: as wasmtime's default sender. The call's
/// own deadline, which ends every connection with the store, comes first
/// in practice.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

type IoFuture = Box<dyn Future<Output = wasmtime_wasi_http::Result<()>> + Send>;
type Sent = (http::Response<WasiBody>, IoFuture);

/// The `wasi:http` context for one call: header fields are bounded by
/// [`FIELD_SIZE_LIMIT`].
pub(crate) fn context() -> WasiHttpCtx {
    let mut ctx = WasiHttpCtx::new();
    ctx.set_field_size_limit(FIELD_SIZE_LIMIT);
    ctx
}

/// Add `wasi:http` to the linker, with the host's bounds on it: the request
/// setters that would store a string of any length refuse long ones, and a
/// `fields` mutation past [`FIELD_SIZE_LIMIT`] is refused with an error
/// instead of a trap (the refusal is what the call reports if it fails).
pub(crate) fn add_to_linker(linker: &mut Linker<State>) -> wasmtime::Result<()> {
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker)?;
    linker.allow_shadowing(true);
    let bounded = bound_types(linker);
    linker.allow_shadowing(false);
    bounded
}

/// Replace the unbounded `wasi:http/types` functions with checked wrappers
/// around wasmtime-wasi-http's own.
fn bound_types(linker: &mut Linker<State>) -> wasmtime::Result<()> {
    let mut types = linker.instance(TYPES)?;
    types.func_wrap(
        "[method]outgoing-request.set-method",
        |mut store: StoreContextMut<'_, State>,
         (request, method): (Resource<wit::OutgoingRequest>, wit::Method)| {
            if let wit::Method::Other(name) = &method
                && name.len() > MAX_METHOD
            {
                too_long(&store, "method", name.len(), MAX_METHOD);
                return Ok((Err(()),));
            }
            let mut view = store.data_mut().http();
            wit::HostOutgoingRequest::set_method(&mut view, request, method).map(|r| (r,))
        },
    )?;
    types.func_wrap(
        "[method]outgoing-request.set-path-with-query",
        |mut store: StoreContextMut<'_, State>,
         (request, path): (Resource<wit::OutgoingRequest>, Option<String>)| {
            let len = path.as_ref().map_or(0, String::len);
            if len > MAX_PATH_WITH_QUERY {
                too_long(&store, "path-with-query", len, MAX_PATH_WITH_QUERY);
                return Ok((Err(()),));
            }
            let mut view = store.data_mut().http();
            wit::HostOutgoingRequest::set_path_with_query(&mut view, request, path).map(|r| (r,))
        },
    )?;
    types.func_wrap(
        "[method]outgoing-request.set-authority",
        |mut store: StoreContextMut<'_, State>,
         (request, authority): (Resource<wit::OutgoingRequest>, Option<String>)| {
            let len = authority.as_ref().map_or(0, String::len);
            if len > MAX_AUTHORITY {
                too_long(&store, "authority", len, MAX_AUTHORITY);
                return Ok((Err(()),));
            }
            let mut view = store.data_mut().http();
            wit::HostOutgoingRequest::set_authority(&mut view, request, authority).map(|r| (r,))
        },
    )?;
    types.func_wrap(
        "[method]fields.append",
        |mut store: StoreContextMut<'_, State>,
         (fields, name, value): (Resource<wit::Fields>, String, Vec<u8>)| {
            let appended =
                wit::HostFields::append(&mut store.data_mut().http(), fields, name, value);
            fields_result(&store, appended).map(|r| (r,))
        },
    )?;
    types.func_wrap(
        "[method]fields.set",
        |mut store: StoreContextMut<'_, State>,
         (fields, name, values): (Resource<wit::Fields>, String, Vec<Vec<u8>>)| {
            let set = wit::HostFields::set(&mut store.data_mut().http(), fields, name, values);
            fields_result(&store, set).map(|r| (r,))
        },
    )?;
    types.func_wrap(
        "[static]fields.from-list",
        |mut store: StoreContextMut<'_, State>, (entries,): (Vec<(String, Vec<u8>)>,)| {
            let made = wit::HostFields::from_list(&mut store.data_mut().http(), entries);
            fields_result(&store, made).map(|r| (r,))
        },
    )?;
    Ok(())
}

/// Record that a request part was refused for its length.
fn too_long(store: &StoreContextMut<'_, State>, what: &str, len: usize, max: usize) {
    store.data().refusals.exhaust(format!(
        "an HTTP request {what} of {len} bytes (the host keeps at most {max})"
    ));
}

/// A `fields` mutation's result for the guest: over the size limit is an
/// ordinary error (wasmtime-wasi-http would trap), recorded as the call's
/// exhausted budget.
fn fields_result<T>(
    store: &StoreContextMut<'_, State>,
    result: HeaderResult<T>,
) -> wasmtime::Result<Result<T, wit::HeaderError>> {
    let error = match result {
        Ok(value) => return Ok(Ok(value)),
        Err(error) => error,
    };
    match error.downcast() {
        Ok(code) => Ok(Err(code)),
        Err(trap) => match trap.downcast_ref::<FieldMapError>() {
            Some(FieldMapError::TotalSizeTooBig | FieldMapError::TooManyFields) => {
                store.data().refusals.exhaust(format!(
                    "HTTP header fields over {} KiB in one set",
                    FIELD_SIZE_LIMIT >> 10
                ));
                Ok(Err(wit::HeaderError::InvalidSyntax))
            }
            _ => Err(trap),
        },
    }
}

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

/// A request that passed the gate's first checks.
struct Admitted {
    target: Target,
    reach: Reach,
    /// Shared with the name lookup, which may outlive the request.
    permit: Arc<ConnectionPermit>,
}

/// Where a request goes.
struct Target {
    /// `scheme://host:port`, for messages.
    origin: String,
    /// The host as resolved and sent as TLS server name: no brackets.
    host: String,
    https: bool,
    port: u16,
}

/// The internal addresses the patterns matching a request open to it.
#[derive(Debug, Default)]
struct Reach {
    /// Addresses a matching pattern names literally.
    addresses: Vec<IpAddr>,
    /// Whether a matching pattern is `localhost`.
    loopback: bool,
}

impl Reach {
    /// What the patterns allowing `scheme://host:port` open, or `None` when
    /// none allows it.
    fn of(hosts: &AllowedHosts, scheme: &str, host: &str, port: u16) -> Option<Self> {
        let mut reach = None::<Reach>;
        for pattern in hosts.matching(scheme, host, port) {
            let reach = reach.get_or_insert_default();
            reach.addresses.extend(pattern.address());
            reach.loopback |= pattern.is_localhost();
        }
        reach
    }

    fn permits(&self, ip: IpAddr, class: Internal) -> bool {
        self.addresses.contains(&ip) || (self.loopback && class == Internal::Loopback)
    }
}

/// A connection's share of the call's and the process's budgets, given back
/// when the connection is dropped.
#[derive(Debug)]
struct ConnectionPermit {
    _call: OwnedSemaphorePermit,
    _descriptor: FdPermit,
}

/// The request's timeouts, defaulted.
#[derive(Debug, Clone, Copy)]
struct Timeouts {
    connect: Duration,
    first_byte: Duration,
    between_bytes: Duration,
}

impl Timeouts {
    fn of(options: Option<RequestOptions>) -> Self {
        let options = options.unwrap_or_default();
        Self {
            connect: options.connect_timeout.unwrap_or(DEFAULT_TIMEOUT),
            first_byte: options.first_byte_timeout.unwrap_or(DEFAULT_TIMEOUT),
            // Zero would fire at once; the smallest wait is "effectively zero".
            between_bytes: options
                .between_bytes_timeout
                .unwrap_or(DEFAULT_TIMEOUT)
                .max(Duration::from_nanos(1)),
        }
    }
}

/// Resolve, screen, connect (with TLS for https) and send: the response and
/// the future that drives the rest of the connection, which owns it and its
/// permit (dropping it closes the connection).
async fn send(
    mut request: http::Request<WasiBody>,
    admitted: Admitted,
    options: Option<RequestOptions>,
    refusals: Refusals,
) -> Result<Sent, Error> {
    let Admitted {
        target,
        reach,
        permit,
    } = admitted;
    let timeouts = Timeouts::of(options);
    // DNS, TCP and TLS together get the connect timeout.
    let deadline = Instant::now() + timeouts.connect;
    let resolved = resolve(&target, deadline, &permit).await?;
    let addresses = match screen(resolved, &reach) {
        Ok(addresses) => addresses,
        Err((ip, class)) => {
            refusals.deny(internal_refusal(&target, ip, class));
            return Err(Error::HttpRequestDenied);
        }
    };
    let tcp = connect(&addresses, deadline).await?;
    // The request names its scheme and authority; on the wire it is
    // origin-form (the Host header carries the authority).
    *request.uri_mut() = origin_form(request.uri());
    if target.https {
        let tls = tls(tcp, &target.host, deadline).await?;
        exchange(tls, request, timeouts, deadline, permit).await
    } else {
        exchange(tcp, request, timeouts, deadline, permit).await
    }
}

/// Name lookups in flight at once, across the process. A lookup holds a
/// blocking thread until the resolver answers, even after its call gave up,
/// so they are bounded apart from any call.
const MAX_LOOKUPS: usize = 32;

/// Every address `target`'s host resolves to, in the resolver's order.
///
/// The lookup runs on a blocking thread that holds the request's connection
/// permit (and a turn among [`MAX_LOOKUPS`]) until the resolver answers: a
/// call that times out, or drops the request, during a slow lookup still
/// has it counted against its budget and the process's.
async fn resolve(
    target: &Target,
    deadline: Instant,
    permit: &Arc<ConnectionPermit>,
) -> Result<Vec<SocketAddr>, Error> {
    static LOOKUPS: OnceLock<Arc<Semaphore>> = OnceLock::new();
    let lookups = LOOKUPS.get_or_init(|| Arc::new(Semaphore::new(MAX_LOOKUPS)));
    let Ok(turn) = lookups.clone().try_acquire_owned() else {
        return Err(Error::DnsError {
            rcode: Some("the host is busy resolving other names; retry shortly".to_owned()),
            info_code: None,
        });
    };
    let (host, port, held) = (target.host.clone(), target.port, permit.clone());
    let lookup = tokio::task::spawn_blocking(move || {
        let _held = (turn, held);
        std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), port))
            .map(Iterator::collect::<Vec<SocketAddr>>)
    });
    match timeout_at(deadline, lookup).await {
        Err(_) => Err(Error::DnsTimeout),
        Ok(Err(_panicked)) => Err(Error::DnsError {
            rcode: Some("the lookup failed".to_owned()),
            info_code: None,
        }),
        Ok(Ok(Err(error))) => Err(Error::DnsError {
            rcode: Some(error.to_string()),
            info_code: None,
        }),
        Ok(Ok(Ok(found))) if found.is_empty() => Err(Error::DnsError {
            rcode: Some("no addresses".to_owned()),
            info_code: None,
        }),
        Ok(Ok(Ok(found))) => Ok(found),
    }
}

/// The addresses the request may reach, in order; or, when none is left,
/// the first one refused.
fn screen(resolved: Vec<SocketAddr>, reach: &Reach) -> Result<Vec<SocketAddr>, (IpAddr, Internal)> {
    let mut refused = None;
    let allowed: Vec<SocketAddr> = resolved
        .into_iter()
        .filter(|addr| match Internal::of(addr.ip()) {
            None => true,
            Some(class) if reach.permits(addr.ip(), class) => true,
            Some(class) => {
                tracing::debug!(target: "toolhost::http", address = %addr.ip(), %class, "skipped an internal address");
                refused.get_or_insert((addr.ip(), class));
                false
            }
        })
        .collect();
    match refused {
        Some(refused) if allowed.is_empty() => Err(refused),
        _ => Ok(allowed),
    }
}

/// What the model is told when a name leads only to internal addresses.
fn internal_refusal(target: &Target, ip: IpAddr, class: Internal) -> String {
    let scheme = if target.https { "https" } else { "http" };
    let literal = match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    };
    let example = format!("\"{scheme}://{literal}:{}\"", target.port);
    let example = if class == Internal::Loopback {
        format!("{example} or \"{scheme}://localhost:{}\"", target.port)
    } else {
        example
    };
    let leads = if target.host.parse::<IpAddr>().ok() == Some(ip) {
        ip.to_string()
    } else {
        format!("{} resolves to {ip}", target.host)
    };
    format!(
        "HTTP request to {} refused: {leads}, a {class} address, which a tool reaches only through an allow_hosts entry naming it, e.g. {example}",
        target.origin
    )
}

/// Connect to the first of `addresses` that answers.
async fn connect(addresses: &[SocketAddr], deadline: Instant) -> Result<TcpStream, Error> {
    let mut last = Error::ConnectionRefused;
    for &addr in addresses {
        match timeout_at(deadline, TcpStream::connect(addr)).await {
            Err(_) => return Err(Error::ConnectionTimeout),
            Ok(Ok(stream)) => {
                // Requests are written whole; do not hold the last segment back.
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(error)) => {
                tracing::debug!(target: "toolhost::http", %addr, %error, "connect failed");
                last = connect_error(error);
            }
        }
    }
    Err(last)
}

fn connect_error(error: io::Error) -> Error {
    match error.kind() {
        io::ErrorKind::ConnectionRefused => Error::ConnectionRefused,
        io::ErrorKind::TimedOut => Error::ConnectionTimeout,
        io::ErrorKind::HostUnreachable | io::ErrorKind::NetworkUnreachable => {
            Error::DestinationUnavailable
        }
        io::ErrorKind::AddrNotAvailable => Error::DestinationIpUnroutable,
        io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted => {
            Error::ConnectionTerminated
        }
        _ => Error::Connect(error),
    }
}

/// TLS over `tcp`, verifying `host`'s certificate against the Web PKI roots.
async fn tls(
    tcp: TcpStream,
    host: &str,
    deadline: Instant,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, Error> {
    let name = rustls::pki_types::ServerName::try_from(host)
        .map_err(|_| Error::DnsError {
            rcode: Some("invalid DNS name".to_owned()),
            info_code: None,
        })?
        .to_owned();
    let connector = tokio_rustls::TlsConnector::from(tls_config());
    match timeout_at(deadline, connector.connect(name, tcp)).await {
        Err(_) => Err(Error::ConnectionTimeout),
        Ok(Err(error)) => Err(tls_error(&error)),
        Ok(Ok(stream)) => Ok(stream),
    }
}

/// One client configuration for the process: building the root store per
/// request would cost more than the handshake.
fn tls_config() -> Arc<rustls::ClientConfig> {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let roots = rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.into(),
            };
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .expect("ring supports the default TLS versions")
                .with_root_certificates(roots)
                .with_no_client_auth();
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            Arc::new(config)
        })
        .clone()
}

fn tls_error(error: &io::Error) -> Error {
    let rustls_error = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    tracing::debug!(target: "toolhost::http", %error, "TLS handshake failed");
    match rustls_error {
        Some(rustls::Error::InvalidCertificate(_)) => Error::TlsCertificateError,
        Some(rustls::Error::AlertReceived(alert)) => Error::TlsAlertReceived {
            alert_id: Some(u8::from(*alert)),
            alert_message: Some(format!("{alert:?}")),
        },
        Some(_) => Error::TlsProtocolError,
        None => match error.kind() {
            io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted => Error::ConnectionTerminated,
            io::ErrorKind::TimedOut => Error::ConnectionTimeout,
            _ => Error::TlsProtocolError,
        },
    }
}

/// `uri`'s path and query alone, as an HTTP/1.1 request line carries it.
fn origin_form(uri: &http::Uri) -> http::Uri {
    uri.path_and_query()
        .map_or_else(|| http::uri::PathAndQuery::from_static("/"), Clone::clone)
        .into()
}

/// Send `request` over `stream` with HTTP/1.1 and wait for the response
/// head. The returned future drives the connection from then on and owns
/// it, with `permit`.
async fn exchange<S>(
    stream: S,
    request: http::Request<WasiBody>,
    timeouts: Timeouts,
    deadline: Instant,
    permit: Arc<ConnectionPermit>,
) -> Result<Sent, Error>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let handshake = hyper::client::conn::http1::Builder::new()
        .max_buf_size(MAX_RESPONSE_BUFFER)
        .handshake(TokioIo::new(stream));
    let (mut sender, connection) = timeout_at(deadline, handshake)
        .await
        .map_err(|_| Error::ConnectionTimeout)??;
    let mut connection = Some(connection);
    let mut sending = pin!(tokio::time::timeout(
        timeouts.first_byte,
        sender.send_request(request)
    ));
    // The connection must make progress for the response to arrive.
    let response = poll_fn(|cx| {
        loop {
            if let Poll::Ready(sent) = sending.as_mut().poll(cx) {
                return Poll::Ready(match sent {
                    Err(_) => Err(Error::ConnectionReadTimeout),
                    Ok(response) => response.map_err(Error::from),
                });
            }
            let Some(driving) = connection.as_mut() else {
                return Poll::Pending;
            };
            let closed = ready!(Pin::new(driving).poll(cx));
            connection = None;
            // Closed cleanly: the response (or its failure) is ready now.
            closed.map_err(Error::from)?;
        }
    })
    .await?;
    let response = response.map(|body| Paced::new(body, timeouts.between_bytes).boxed_unsync());
    let io = async move {
        let _permit = permit;
        match connection {
            None => Ok(()),
            Some(connection) => connection.await.map_err(|error| {
                if error.is_timeout() {
                    Error::HttpResponseTimeout
                } else {
                    Error::from(error)
                }
            }),
        }
    };
    Ok((response, Box::new(io) as IoFuture))
}

/// A response body that fails when the server pauses longer than the
/// request's between-bytes timeout.
struct Paced {
    body: Incoming,
    gap: Duration,
    timer: Pin<Box<Sleep>>,
}

impl Paced {
    fn new(body: Incoming, gap: Duration) -> Self {
        Self {
            body,
            gap,
            timer: Box::pin(tokio::time::sleep(gap)),
        }
    }
}

impl Body for Paced {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                this.timer.as_mut().reset(Instant::now() + this.gap);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(error))) if error.is_timeout() => {
                Poll::Ready(Some(Err(Error::HttpResponseTimeout)))
            }
            Poll::Ready(Some(Err(error))) => Poll::Ready(Some(Err(error.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                ready!(this.timer.as_mut().poll(cx));
                Poll::Ready(Some(Err(Error::ConnectionReadTimeout)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Addresses that lead into the host or its networks rather than to the
/// public internet: a name never reaches them (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Internal {
    Loopback,
    Private,
    LinkLocal,
    /// 100.64.0.0/10, carrier-grade NAT and some clouds' internal services.
    Shared,
    /// Cloud instance metadata, which serves credentials.
    Metadata,
    Multicast,
    Unspecified,
    Broadcast,
    Documentation,
    Benchmarking,
    /// Reserved, deprecated or tunnel ranges no public server uses.
    Reserved,
}

/// Metadata endpoints inside ranges that are internal anyway; named so the
/// refusal says what they are. AWS, GCP, Azure, OpenStack and others;
/// AWS ECS task metadata; Alibaba Cloud.
const METADATA_V4: [Ipv4Addr; 3] = [
    Ipv4Addr::new(169, 254, 169, 254),
    Ipv4Addr::new(169, 254, 170, 2),
    Ipv4Addr::new(100, 100, 100, 200),
];

/// AWS's IPv6 metadata endpoint, `fd00:ec2::254`.
const METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);

impl Internal {
    /// The internal range `ip` is in, or `None` for a public address.
    fn of(ip: IpAddr) -> Option<Self> {
        match ip {
            IpAddr::V4(v4) => Self::of_v4(v4),
            IpAddr::V6(v6) => Self::of_v6(v6),
        }
    }

    fn of_v4(ip: Ipv4Addr) -> Option<Self> {
        let [a, b, c, _] = ip.octets();
        let class = match (a, b, c) {
            _ if METADATA_V4.contains(&ip) => Self::Metadata,
            _ if ip.is_broadcast() => Self::Broadcast,
            (0, _, _) => Self::Unspecified, // "this network": 0.0.0.0 is this host
            (10, _, _) | (172, 16..=31, _) | (192, 168, _) => Self::Private,
            (100, 64..=127, _) => Self::Shared,
            (127, _, _) => Self::Loopback,
            (169, 254, _) => Self::LinkLocal,
            (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => Self::Documentation,
            (198, 18..=19, _) => Self::Benchmarking,
            (192, 0, 0) => Self::Reserved, // IETF protocol assignments
            (224..=239, _, _) => Self::Multicast,
            (240..=255, _, _) => Self::Reserved,
            _ => return None,
        };
        Some(class)
    }

    fn of_v6(ip: Ipv6Addr) -> Option<Self> {
        let s = ip.segments();
        if ip == METADATA_V6 {
            return Some(Self::Metadata);
        }
        if ip.is_unspecified() {
            return Some(Self::Unspecified);
        }
        if ip.is_loopback() {
            return Some(Self::Loopback);
        }
        let v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
        // IPv6 forms that carry an IPv4 address are what they carry.
        // IPv4-mapped (::ffff:a.b.c.d), NAT64 (64:ff9b::a.b.c.d) and 6to4
        // (2002:aabb:ccdd::) reach public IPv4 hosts too.
        if (s[..5] == [0; 5] && s[5] == 0xffff) || (s[..2] == [0x64, 0xff9b] && s[2..6] == [0; 4]) {
            return Self::of_v4(v4(s[6], s[7]));
        }
        if s[0] == 0x2002 {
            return Self::of_v4(v4(s[1], s[2]));
        }
        // IPv4-compatible (::a.b.c.d) and -translated (::ffff:0:a.b.c.d)
        // are deprecated or internal to translators: never public.
        if s[..6] == [0; 6] || (s[..4] == [0; 4] && s[4] == 0xffff && s[5] == 0) {
            return Some(Self::of_v4(v4(s[6], s[7])).unwrap_or(Self::Reserved));
        }
        let class = match s {
            [0xfc00..=0xfdff, ..] | [0xfec0..=0xfeff, ..] => Self::Private, // unique local; site-local
            [0xfe80..=0xfebf, ..] => Self::LinkLocal,
            [0xff00..=0xffff, ..] => Self::Multicast,
            [0x2001, 0x0db8, ..] | [0x3fff, 0x0000..=0x0fff, ..] => Self::Documentation,
            [0x2001, 0x0002, 0, ..] => Self::Benchmarking,
            [0x64, 0xff9b, 1, ..] => Self::Private, // local-use NAT64
            [0x2001, 0, ..] => Self::Reserved,      // Teredo
            [0x100, 0, 0, 0, ..] => Self::Reserved, // discard-only
            [0..=0xff, ..] => Self::Reserved,       // ::/8, unassigned
            _ => return None,
        };
        Some(class)
    }
}

impl std::fmt::Display for Internal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Loopback => "loopback",
            Self::Private => "private-network",
            Self::LinkLocal => "link-local",
            Self::Shared => "shared (CGNAT)",
            Self::Metadata => "cloud metadata",
            Self::Multicast => "multicast",
            Self::Unspecified => "unspecified",
            Self::Broadcast => "broadcast",
            Self::Documentation => "documentation-only",
            Self::Benchmarking => "benchmarking-only",
            Self::Reserved => "reserved",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(ip: &str) -> Option<Internal> {
        Internal::of(ip.parse().unwrap())
    }

    #[test]
    fn internal_ipv4_ranges_are_classified() {
        use Internal::*;
        for (ip, expected) in [
            ("127.0.0.1", Loopback),
            ("127.255.255.254", Loopback),
            ("10.0.0.1", Private),
            ("172.16.0.1", Private),
            ("172.31.255.255", Private),
            ("192.168.1.1", Private),
            ("169.254.0.1", LinkLocal),
            ("169.254.169.254", Metadata),
            ("169.254.170.2", Metadata),
            ("100.100.100.200", Metadata),
            ("100.64.0.1", Shared),
            ("100.127.255.255", Shared),
            ("224.0.0.1", Multicast),
            ("239.255.255.250", Multicast),
            ("0.0.0.0", Unspecified),
            ("0.1.2.3", Unspecified),
            ("255.255.255.255", Broadcast),
            ("240.0.0.1", Reserved),
            ("192.0.0.8", Reserved),
            ("192.0.2.1", Documentation),
            ("198.51.100.1", Documentation),
            ("203.0.113.1", Documentation),
            ("198.18.0.1", Benchmarking),
            ("198.19.255.255", Benchmarking),
        ] {
            assert_eq!(class(ip), Some(expected), "{ip}");
        }
    }

    #[test]
    fn internal_ipv6_ranges_are_classified() {
        use Internal::*;
        for (ip, expected) in [
            ("::1", Loopback),
            ("::", Unspecified),
            ("fc00::1", Private),
            ("fd12:3456::1", Private),
            ("fec0::1", Private),
            ("fe80::1", LinkLocal),
            ("febf::1", LinkLocal),
            ("fd00:ec2::254", Metadata),
            ("ff02::1", Multicast),
            ("2001:db8::1", Documentation),
            ("3fff::1", Documentation),
            ("2001:2::1", Benchmarking),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", Reserved),
            ("100::1", Reserved),
            ("64:ff9b:1::a00:1", Private),
        ] {
            assert_eq!(class(ip), Some(expected), "{ip}");
        }
    }

    #[test]
    fn ipv6_forms_carrying_an_internal_ipv4_address_are_internal() {
        use Internal::*;
        for (ip, expected) in [
            ("::ffff:127.0.0.1", Loopback),
            ("::ffff:7f00:1", Loopback),
            ("::ffff:169.254.169.254", Metadata),
            ("::ffff:10.1.2.3", Private),
            ("::127.0.0.1", Loopback),
            ("::10.0.0.1", Private),
            ("::ffff:0:127.0.0.1", Loopback),
            ("64:ff9b::127.0.0.1", Loopback),
            ("64:ff9b::a9fe:a9fe", Metadata),
            ("64:ff9b::192.168.0.1", Private),
            ("2002:7f00:1::", Loopback),
            ("2002:a9fe:a9fe::1", Metadata),
            ("2002:c0a8:101::", Private),
            // Deprecated forms stay internal even around a public address.
            ("::8.8.8.8", Reserved),
            ("::ffff:0:8.8.8.8", Reserved),
        ] {
            assert_eq!(class(ip), Some(expected), "{ip}");
        }
    }

    #[test]
    fn public_addresses_are_not_internal() {
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "93.184.215.14",
            "172.15.255.255",
            "172.32.0.1",
            "100.63.255.255",
            "100.128.0.1",
            "169.253.255.255",
            "192.0.3.1",
            "198.17.255.255",
            "223.255.255.255",
            "2606:4700:4700::1111",
            "2a00:1450:4001:80b::200e",
            "::ffff:8.8.8.8",
            "64:ff9b::8.8.8.8",
            "2002:808:808::1",
        ] {
            assert_eq!(class(ip), None, "{ip}");
        }
    }

    fn reach(patterns: &[&str], host: &str, port: u16) -> Option<Reach> {
        let mut grants = Grants::none();
        for pattern in patterns {
            grants = grants.allow_host(pattern).unwrap();
        }
        Reach::of(grants.hosts(), "http", host, port)
    }

    fn socket(ip: &str) -> SocketAddr {
        SocketAddr::new(ip.parse().unwrap(), 80)
    }

    #[test]
    fn a_name_never_reaches_an_internal_address_through_a_wildcard() {
        let reach = reach(&["http://*:*"], "localhost", 80).unwrap();
        let refused = screen(vec![socket("127.0.0.1"), socket("::1")], &reach).unwrap_err();
        assert_eq!(refused, ("127.0.0.1".parse().unwrap(), Internal::Loopback));
        let refused = screen(vec![socket("::ffff:169.254.169.254")], &reach).unwrap_err();
        assert_eq!(refused.1, Internal::Metadata);
    }

    #[test]
    fn internal_addresses_are_skipped_when_a_public_one_is_left() {
        let reach = reach(&["http://*.example.org"], "a.example.org", 80).unwrap();
        let resolved = vec![socket("10.0.0.1"), socket("93.184.215.14"), socket("::1")];
        assert_eq!(screen(resolved, &reach), Ok(vec![socket("93.184.215.14")]));
    }

    #[test]
    fn localhost_reaches_loopback_only() {
        let reach = reach(&["http://localhost"], "localhost", 80).unwrap();
        let resolved = vec![socket("::1"), socket("127.0.0.1")];
        assert_eq!(screen(resolved.clone(), &reach), Ok(resolved));
        assert!(screen(vec![socket("10.0.0.1")], &reach).is_err());
        assert!(screen(vec![socket("169.254.169.254")], &reach).is_err());
    }

    #[test]
    fn an_address_named_literally_is_reached_and_no_other() {
        let named = reach(&["http://127.0.0.1:8081", "http://*:*"], "127.0.0.1", 8081).unwrap();
        assert!(screen(vec![socket("127.0.0.1")], &named).is_ok());
        assert!(screen(vec![socket("127.0.0.2")], &named).is_err());
        let named = reach(&["http://[::1]:8080"], "[::1]", 8080).unwrap();
        assert!(screen(vec![socket("::1")], &named).is_ok());
        assert!(screen(vec![socket("::ffff:127.0.0.1")], &named).is_err());
    }

    #[test]
    fn ungranted_origins_have_no_reach() {
        assert!(reach(&["http://example.org"], "localhost", 80).is_none());
        assert!(reach(&["http://*:*"], "127.1", 80).is_none());
        assert!(reach(&["http://*.1:*"], "127.1", 80).is_none());
    }

    #[test]
    fn refusals_name_the_host_the_address_and_the_fix() {
        let target = Target {
            origin: "http://localhost:8080".into(),
            host: "localhost".into(),
            https: false,
            port: 8080,
        };
        let message = internal_refusal(&target, "::1".parse().unwrap(), Internal::Loopback);
        assert_eq!(
            message,
            "HTTP request to http://localhost:8080 refused: localhost resolves to ::1, a loopback address, \
             which a tool reaches only through an allow_hosts entry naming it, \
             e.g. \"http://[::1]:8080\" or \"http://localhost:8080\""
        );
    }

    #[test]
    fn origin_form_keeps_only_path_and_query() {
        let uri: http::Uri = "https://user@example.org:8443/a/b?c=d".parse().unwrap();
        assert_eq!(origin_form(&uri), "/a/b?c=d");
        let uri: http::Uri = "http://example.org".parse().unwrap();
        assert_eq!(origin_form(&uri), "/");
    }
}
