//! Sending an admitted request: resolve its name, screen the addresses,
//! connect (with TLS for https) to the address checked, and drive the
//! HTTP/1.1 exchange, holding the connection's permit until it closes.

use std::future::{Future, poll_fn};
use std::io;
use std::net::SocketAddr;
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
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody};

use super::address::{Reach, Target, internal_refusal, screen};
use crate::sandbox::budget::FdPermit;
use crate::sandbox::refusal::Refusals;

/// The most of a response one connection buffers (hyper's read buffer,
/// which must hold the response head). hyper's default is about 400 KiB.
const MAX_RESPONSE_BUFFER: usize = 64 << 10;

/// Timeouts a request did not set: as wasmtime's default sender. The call's
/// own deadline, which ends every connection with the store, comes first
/// in practice.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

type IoFuture = Box<dyn Future<Output = wasmtime_wasi_http::Result<()>> + Send>;
pub(super) type Sent = (http::Response<WasiBody>, IoFuture);

/// A request that passed the gate's first checks.
pub(super) struct Admitted {
    pub(super) target: Target,
    pub(super) reach: Reach,
    /// Shared with the name lookup, which may outlive the request.
    pub(super) permit: Arc<ConnectionPermit>,
}

/// A connection's share of the call's and the process's budgets, given back
/// when the connection is dropped.
#[derive(Debug)]
pub(super) struct ConnectionPermit {
    pub(super) _call: OwnedSemaphorePermit,
    pub(super) _descriptor: FdPermit,
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
pub(super) async fn send(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_form_keeps_only_path_and_query() {
        let uri: http::Uri = "https://user@example.org:8443/a/b?c=d".parse().unwrap();
        assert_eq!(origin_form(&uri), "/a/b?c=d");
        let uri: http::Uri = "http://example.org".parse().unwrap();
        assert_eq!(origin_form(&uri), "/");
    }
}
