//! What a registry request carries, and how its answer is read: bodies
//! capped (by their declared length first, by what arrives always), a
//! refusal made an error that names what was asked (the registry's own
//! words shown as one printable, clipped line), and which URLs are the same
//! registry.

use futures::StreamExt as _;
use reqwest::{StatusCode, header};

use super::Reason;
use super::client::Access;
use super::layout::ACCEPTED_MANIFESTS;
use super::reference::OciRef;

/// What a request carries, and what kind of request it is.
pub(super) enum Body {
    Empty,
    Manifest,
    Blob,
    Bytes(Vec<u8>, &'static str),
}

impl Body {
    pub(super) fn apply(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match self {
            Self::Empty | Self::Blob => request,
            Self::Manifest => ACCEPTED_MANIFESTS
                .iter()
                .fold(request, |r, media| r.header(header::ACCEPT, *media)),
            Self::Bytes(bytes, media_type) => request
                .header(header::CONTENT_TYPE, *media_type)
                .body(bytes.clone()),
        }
    }
}

/// `repository:NAME:pull` or `…:pull,push`.
pub(super) fn scope(reference: &OciRef, access: Access) -> String {
    let actions = match access {
        Access::Pull => "pull",
        Access::Push => "pull,push",
    };
    format!("repository:{}:{actions}", reference.api_repository())
}

/// A success, or the registry's refusal as an error naming what was asked.
pub(super) async fn success(
    response: reqwest::Response,
    what: &str,
    name: &str,
) -> Result<reqwest::Response, Reason> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    // The registry's error body, clipped: it names the cause.
    let mut detail = Vec::new();
    let _ = read_capped(response, "an error", (4096, ""), |chunk| {
        detail.extend_from_slice(chunk);
        Ok(())
    })
    .await;
    // Registry text, shown to a person: one printable line, clipped.
    let detail = crate::printable::one_line(&String::from_utf8_lossy(&detail), 300);
    if status == StatusCode::NOT_FOUND {
        return Err(Reason::NotFound(format!(
            "{what} {name} is not in the registry ({detail})"
        )));
    }
    Err(Reason::Refused(format!(
        "{what} {name}: the registry answered {status} {}",
        detail.trim()
    )))
}

/// Read a body, refusing it once it is over `max` bytes (at once when its
/// declared length is).
pub(super) async fn read_capped(
    response: reqwest::Response,
    what: &str,
    (max, fix): (u64, &'static str),
    mut sink: impl FnMut(&[u8]) -> Result<(), Reason>,
) -> Result<(), Reason> {
    if let Some(length) = response.content_length()
        && length > max
    {
        return Err(Reason::TooLarge {
            what: what.to_owned(),
            size: length,
            max,
            fix,
        });
    }
    let mut read = 0u64;
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| Reason::Unreachable(format!("reading {what}: {e}")))?;
        read += chunk.len() as u64;
        if read > max {
            return Err(Reason::TooLarge {
                what: what.to_owned(),
                size: read,
                max,
                fix,
            });
        }
        sink(&chunk)?;
    }
    Ok(())
}

pub(super) fn unreachable(reference: &OciRef, error: &reqwest::Error) -> Reason {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(inner) = source {
        text = format!("{text}: {inner}");
        source = inner.source();
    }
    Reason::Unreachable(format!("cannot reach {}: {text}", reference.registry()))
}

/// Whether `next` is on the same scheme, host and port as `url`.
pub(super) fn same_authority(next: &reqwest::Url, url: &str) -> bool {
    reqwest::Url::parse(url).is_ok_and(|url| {
        next.scheme() == url.scheme()
            && next.host_str() == url.host_str()
            && next.port_or_known_default() == url.port_or_known_default()
    })
}

/// Whether a registry (`host`, `host:port`, `[v6]:port`) is this machine.
pub(crate) fn is_loopback(registry: &str) -> bool {
    let host = match registry.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(rest),
        None => registry.rsplit_once(':').map_or(registry, |(host, _)| host),
    };
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}
