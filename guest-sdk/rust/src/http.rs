//! Outgoing HTTP through `wasi:http`.
//!
//! The host allows a request only to the origins the manifest grants the
//! component (`allow_hosts`); anything else fails with [`Error::Denied`],
//! whose message names the manifest line that would allow it. Redirects are
//! followed (up to [`Request::max_redirects`]), and every hop is checked by
//! the host again, so a redirect cannot lead a tool out of its grants.
//!
//! ```no_run
//! use toolhost_guest::http;
//!
//! # fn run() -> Result<(), http::Error> {
//! let page = http::get("https://example.org/")?.text();
//! let created = http::Request::post("https://api.example.org/items")
//!     .header("content-type", "application/json")
//!     .body(r#"{"name":"x"}"#)
//!     .send()?;
//! assert!(created.status() < 400);
//! let removed = http::Request::new(http::Method::DELETE, "https://api.example.org/items/1").send()?;
//! # let _ = (page, removed); Ok(()) }
//! ```

use std::fmt;
use std::time::Duration;

pub use ::http::Method;
use url::Url;

use crate::bindings::wasi::http::outgoing_handler;
use crate::bindings::wasi::http::types::{
    ErrorCode, Fields, IncomingBody, Method as WasiMethod, OutgoingBody, OutgoingRequest,
    RequestOptions, Scheme,
};
use crate::bindings::wasi::io::streams::StreamError;

/// Response bodies larger than this are refused unless the request raises
/// [`Request::max_body`]: a tool's memory is limited, and a runaway download
/// should fail with a clear error rather than an out-of-memory trap.
pub const DEFAULT_MAX_BODY: usize = 8 * 1024 * 1024;

/// How many redirects a request follows by default.
pub const DEFAULT_MAX_REDIRECTS: u8 = 5;

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The host refused the request: the origin is not in the component's
    /// `allow_hosts`.
    Denied {
        /// The origin that was refused, `scheme://host[:port]`.
        origin: String,
    },
    /// The URL could not be parsed or is not absolute http(s).
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The response body was larger than the request allowed.
    BodyTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// Too many redirects.
    TooManyRedirects {
        /// The URL of the last hop.
        url: String,
    },
    /// The request failed on the way (DNS, connection, timeout, protocol).
    Transport {
        /// The `wasi:http` error code, as text.
        reason: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Denied { origin } => write!(
                f,
                "request to {origin} denied: the tool is not granted that host (allow_hosts)"
            ),
            Self::InvalidUrl { url, reason } => write!(f, "invalid URL {url:?}: {reason}"),
            Self::BodyTooLarge { limit } => {
                write!(f, "response body is larger than the {limit}-byte limit")
            }
            Self::TooManyRedirects { url } => write!(f, "too many redirects, last to {url}"),
            Self::Transport { reason } => write!(f, "request failed: {reason}"),
        }
    }
}

impl std::error::Error for Error {}

/// A request to send. Build with [`Request::get`] or [`Request::new`].
#[derive(Debug, Clone)]
pub struct Request {
    method: Method,
    url: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    timeout: Option<Duration>,
    max_body: usize,
    max_redirects: u8,
}

impl Request {
    /// A request with `method` ([`Method::GET`], [`Method::PUT`], …) to an
    /// absolute http(s) `url`.
    pub fn new(method: Method, url: impl Into<String>) -> Self {
        Self {
            method,
            url: url.into(),
            headers: Vec::new(),
            body: Vec::new(),
            timeout: None,
            max_body: DEFAULT_MAX_BODY,
            max_redirects: DEFAULT_MAX_REDIRECTS,
        }
    }

    /// A `GET` request.
    pub fn get(url: impl Into<String>) -> Self {
        Self::new(Method::GET, url)
    }

    /// A `POST` request.
    pub fn post(url: impl Into<String>) -> Self {
        Self::new(Method::POST, url)
    }

    /// Add a header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Set the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Give up connecting and waiting for the first byte after `timeout`.
    /// The host's own deadline for the call applies regardless.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Refuse response bodies larger than `bytes` (default [`DEFAULT_MAX_BODY`]).
    pub fn max_body(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    /// Follow at most `n` redirects (default [`DEFAULT_MAX_REDIRECTS`]; 0 returns them).
    pub fn max_redirects(mut self, n: u8) -> Self {
        self.max_redirects = n;
        self
    }

    /// Send the request and read the whole response.
    ///
    /// # Errors
    ///
    /// [`Error::Denied`] when the host does not allow the origin (also for a
    /// redirect's target), [`Error::InvalidUrl`], [`Error::BodyTooLarge`],
    /// [`Error::TooManyRedirects`], or [`Error::Transport`].
    pub fn send(self) -> Result<Response, Error> {
        let mut url = self.url.clone();
        let mut method = self.method.clone();
        let mut body = self.body.clone();
        let mut headers = self.headers.clone();
        for _ in 0..=self.max_redirects {
            let response = self.send_once(&method, &url, &body, &headers)?;
            let location = match response.status {
                301 | 302 | 303 | 307 | 308 => response.header("location").map(str::to_owned),
                _ => None,
            };
            let Some(location) = location.filter(|_| self.max_redirects > 0) else {
                return Ok(response);
            };
            let next = resolve(&url, &location)?;
            // Credentials go only where they were meant to: to another
            // origin, as browsers and curl do, they are dropped.
            if origin_of(&next) != origin_of(&url) {
                headers.retain(|(name, _)| {
                    !["authorization", "cookie", "proxy-authorization"]
                        .iter()
                        .any(|h| name.eq_ignore_ascii_case(h))
                });
            }
            url = next;
            // 303 always, and 301/302 after POST by long-standing practice, become GET,
            // and the body and what describes it are dropped.
            if response.status == 303
                || (response.status != 307 && response.status != 308 && method == Method::POST)
            {
                method = Method::GET;
                body.clear();
                headers.retain(|(name, _)| !name.to_ascii_lowercase().starts_with("content-"));
            }
        }
        Err(Error::TooManyRedirects { url })
    }

    fn send_once(
        &self,
        method: &Method,
        url: &str,
        body: &[u8],
        header_list: &[(String, String)],
    ) -> Result<Response, Error> {
        let parsed = Url::parse(url).map_err(|e| Error::InvalidUrl {
            url: url.into(),
            reason: e.to_string(),
        })?;
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(Error::InvalidUrl {
                url: redacted(&parsed),
                reason: "credentials in a URL are not sent: put them in an Authorization header"
                    .into(),
            });
        }
        let scheme = match parsed.scheme() {
            "http" => Scheme::Http,
            "https" => Scheme::Https,
            _ => {
                return Err(Error::InvalidUrl {
                    url: url.into(),
                    reason: "only absolute http:// and https:// URLs are supported".into(),
                });
            }
        };
        let Some(host) = parsed.host_str() else {
            return Err(Error::InvalidUrl {
                url: url.into(),
                reason: "the URL has no host".into(),
            });
        };
        // The port only when the URL gives one other than the scheme's default,
        // as the origin is written in `allow_hosts`.
        let authority = match parsed.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        };
        let origin = format!("{}://{authority}", parsed.scheme());

        let headers = Fields::new();
        for (name, value) in header_list {
            headers
                .append(name, value.as_bytes())
                .map_err(|e| Error::InvalidUrl {
                    url: url.into(),
                    reason: format!("header {name:?} refused: {e:?}"),
                })?;
        }
        // A known length, so servers that refuse chunked bodies take it
        // (an empty POST, PUT or PATCH included).
        let sends_body =
            !body.is_empty() || matches!(*method, Method::POST | Method::PUT | Method::PATCH);
        if sends_body
            && !header_list
                .iter()
                .any(|(name, _)| name.eq_ignore_ascii_case("content-length"))
        {
            headers
                .append("content-length", body.len().to_string().as_bytes())
                .map_err(|e| Error::InvalidUrl {
                    url: url.into(),
                    reason: format!("content-length refused: {e:?}"),
                })?;
        }
        let request = OutgoingRequest::new(headers);
        let wasi_method = match *method {
            Method::GET => WasiMethod::Get,
            Method::HEAD => WasiMethod::Head,
            Method::POST => WasiMethod::Post,
            Method::PUT => WasiMethod::Put,
            Method::DELETE => WasiMethod::Delete,
            Method::PATCH => WasiMethod::Patch,
            Method::OPTIONS => WasiMethod::Options,
            Method::CONNECT => WasiMethod::Connect,
            Method::TRACE => WasiMethod::Trace,
            ref other => WasiMethod::Other(other.as_str().into()),
        };
        let invalid = |what: &str| Error::InvalidUrl {
            url: url.into(),
            reason: format!("the host refused the {what}"),
        };
        request
            .set_method(&wasi_method)
            .map_err(|()| invalid("method"))?;
        request
            .set_scheme(Some(&scheme))
            .map_err(|()| invalid("scheme"))?;
        request
            .set_authority(Some(&authority))
            .map_err(|()| invalid("host"))?;
        // The fragment stays with the client, as browsers do.
        let path = &parsed[url::Position::BeforePath..url::Position::AfterQuery];
        request
            .set_path_with_query(Some(path))
            .map_err(|()| invalid("path"))?;

        let options = RequestOptions::new();
        if let Some(timeout) = self.timeout {
            let nanos = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
            // The host may refuse to honour these; its deadline still applies.
            let _ = options.set_connect_timeout(Some(nanos));
            let _ = options.set_first_byte_timeout(Some(nanos));
        }

        // The request is handed to the host before its body is written: the
        // body stream's buffer is small, and the host reads it only once the
        // request is on its way, so a body written first would block on a
        // full buffer for good.
        let outgoing = request.body().expect("a new request's body is taken once");
        let pending =
            outgoing_handler::handle(request, Some(options)).map_err(|e| error_code(&origin, e))?;
        let mut written = Ok(());
        {
            let stream = outgoing.write().expect("a new body's stream is taken once");
            // blocking_write_and_flush takes at most 4096 bytes per call.
            for chunk in body.chunks(4096) {
                if let Err(e) = stream.blocking_write_and_flush(chunk) {
                    written = Err(transport(format!("writing the body: {e:?}")));
                    break;
                }
            }
        }
        let finished = OutgoingBody::finish(outgoing, None).map_err(|e| error_code(&origin, e));
        pending.subscribe().block();
        // A response wins: a server may answer (413, say) before it has read
        // a body it will not take, and then the write fails. Without one,
        // its error says best why, then the write's.
        let response = match pending
            .get()
            .expect("the response is ready after block()")
            .expect("the response is taken once")
        {
            Ok(response) => response,
            Err(code) => {
                written?;
                finished?;
                return Err(error_code(&origin, code));
            }
        };

        let status = response.status();
        let headers = response
            .headers()
            .entries()
            .into_iter()
            .map(|(name, value)| (name, String::from_utf8_lossy(&value).into_owned()))
            .collect();
        let incoming = response.consume().expect("a response's body is taken once");
        let body = read_body(&incoming, self.max_body)?;
        IncomingBody::finish(incoming);
        Ok(Response {
            status,
            headers,
            body,
        })
    }
}

fn read_body(incoming: &IncomingBody, limit: usize) -> Result<Vec<u8>, Error> {
    let stream = incoming.stream().expect("a body's stream is taken once");
    let mut body = Vec::new();
    loop {
        match stream.blocking_read(64 * 1024) {
            Ok(chunk) => {
                if body.len() + chunk.len() > limit {
                    return Err(Error::BodyTooLarge { limit });
                }
                body.extend_from_slice(&chunk);
            }
            Err(StreamError::Closed) => return Ok(body),
            Err(StreamError::LastOperationFailed(e)) => {
                return Err(transport(format!(
                    "reading the body: {}",
                    e.to_debug_string()
                )));
            }
        }
    }
}

fn transport(reason: String) -> Error {
    Error::Transport { reason }
}

fn error_code(origin: &str, code: ErrorCode) -> Error {
    match code {
        ErrorCode::HttpRequestDenied => Error::Denied {
            origin: origin.into(),
        },
        other => transport(format!("{other:?}")),
    }
}

/// `scheme://host[:port]` of `url`, or `None` when it does not parse.
fn origin_of(url: &str) -> Option<String> {
    Url::parse(url)
        .ok()
        .map(|u| u.origin().ascii_serialization())
}

/// `url` without its user name and password, for messages.
fn redacted(url: &Url) -> String {
    let mut url = url.clone();
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.into()
}

/// Resolve a `Location` header against the URL that returned it, as
/// browsers do (RFC 3986 reference resolution: `../`, `?query`, `//host`).
fn resolve(base: &str, location: &str) -> Result<String, Error> {
    let base = Url::parse(base).map_err(|e| Error::InvalidUrl {
        url: base.into(),
        reason: format!("cannot resolve a redirect against it: {e}"),
    })?;
    base.join(location)
        .map(String::from)
        .map_err(|e| Error::InvalidUrl {
            url: location.into(),
            reason: format!("the redirect's Location is not a URL: {e}"),
        })
}

/// A response with its whole body read.
#[derive(Debug, Clone)]
pub struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    /// The HTTP status code.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// All headers in the order received.
    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }

    /// The body's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.body
    }

    /// The body as UTF-8 text, invalid sequences replaced with U+FFFD.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// `GET url` with the default limits.
///
/// # Errors
///
/// As [`Request::send`].
pub fn get(url: impl Into<String>) -> Result<Response, Error> {
    Request::get(url).send()
}

#[cfg(test)]
mod tests {
    use super::resolve;

    #[test]
    fn redirects_resolve_like_browsers() {
        let base = "http://a.test:8080/dir/page?q=1";
        assert_eq!(
            resolve(base, "https://b.test/x").unwrap(),
            "https://b.test/x"
        );
        assert_eq!(resolve(base, "//c.test/y").unwrap(), "http://c.test/y");
        assert_eq!(resolve(base, "/root").unwrap(), "http://a.test:8080/root");
        assert_eq!(
            resolve(base, "next").unwrap(),
            "http://a.test:8080/dir/next"
        );
        assert_eq!(
            resolve(base, "?page=2").unwrap(),
            "http://a.test:8080/dir/page?page=2"
        );
        assert_eq!(
            resolve(base, "../up/there").unwrap(),
            "http://a.test:8080/up/there"
        );
        assert_eq!(
            resolve(base, "./same#frag").unwrap(),
            "http://a.test:8080/dir/same#frag"
        );
        assert_eq!(resolve(base, "../../../x").unwrap(), "http://a.test:8080/x");
        assert!(resolve(base, "http://[bad").is_err());
    }
}
