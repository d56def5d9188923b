//! The HTTP side of the OCI distribution API, as little of it as toolhost
//! needs: manifests and blobs by digest or tag, uploads, and the login
//! dance registries ask for. A registry is untrusted input: every body is
//! capped (by its `Content-Length` first, by what arrives always), every
//! exchange has a deadline, plain HTTP is used only for loopback hosts or
//! hosts marked `insecure`, and redirects are followed only within the
//! registry (blob downloads also to hosts the operator listed, and never
//! with credentials).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use reqwest::{Method, StatusCode, header};

use super::auth::{Challenge, Credentials};
use super::body::{Body, read_capped, same_authority, scope, success, unreachable};
use super::digest::Digest;
use super::layout::OCI_INDEX;
use super::reference::OciRef;
use super::store::Incoming;
use super::{Reason, Settings};

pub(crate) use super::body::is_loopback;

/// The largest manifest read: what distribution itself accepts.
pub(crate) const MAX_MANIFEST: u64 = 4 << 20;

/// Why manifests have a fixed cap.
pub(super) const MANIFEST_CAP: &str = "registries themselves refuse larger manifests";

/// The answers to `GET …/referrers/DIGEST` that mean the registry has no
/// referrers API, so the referrers tag is read instead: what
/// go-containerregistry (and so cosign) falls back on.
const NO_REFERRERS_API: [StatusCode; 4] = [
    StatusCode::BAD_REQUEST,
    StatusCode::NOT_FOUND,
    StatusCode::METHOD_NOT_ALLOWED,
    StatusCode::NOT_IMPLEMENTED,
];

/// Redirects followed for one request, within the rules.
const MAX_REDIRECTS: usize = 5;

/// How long an idle connection is kept.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether a request reads or writes a repository: the scope a token is
/// asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Pull,
    Push,
}

/// Talks to registries; one per load, shared by its pulls.
pub(crate) struct Client {
    /// For HTTPS registries: proxies from the environment are honoured.
    /// Built at the first request: a load from the cache makes none, and
    /// building a TLS client costs milliseconds.
    http: OnceLock<reqwest::Client>,
    /// For plain-HTTP ones (this machine, or marked insecure): never
    /// through a proxy, which would see credentials in the clear.
    direct: OnceLock<reqwest::Client>,
    pub(super) settings: Arc<Settings>,
    /// `Authorization` values (tokens, or Basic credentials) by registry
    /// and scope.
    tokens: Mutex<HashMap<(String, String), String>>,
}

impl std::fmt::Debug for Client {
    /// Never the cached credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cached = self.tokens.lock().map_or(0, |t| t.len());
        f.debug_struct("Client")
            .field("settings", &self.settings)
            .field("cached_authorizations", &cached)
            .finish_non_exhaustive()
    }
}

/// A manifest as served.
#[derive(Debug)]
pub(crate) struct Fetched {
    pub bytes: Vec<u8>,
    pub content_type: Option<String>,
}

impl Client {
    pub fn new(settings: Arc<Settings>) -> Self {
        Self {
            http: OnceLock::new(),
            direct: OnceLock::new(),
            settings,
            tokens: Mutex::default(),
        }
    }

    /// `https://REGISTRY/v2/REPOSITORY`, or `http://` where allowed.
    fn base(&self, reference: &OciRef) -> String {
        let scheme = if self.plain_http_allowed(reference.registry()) {
            "http"
        } else {
            "https"
        };
        format!(
            "{scheme}://{}/v2/{}",
            reference.api_registry(),
            reference.api_repository()
        )
    }

    /// Plain HTTP only for a loopback host or one marked `insecure`.
    pub fn plain_http_allowed(&self, registry: &str) -> bool {
        is_loopback(registry) || self.settings.host(registry).is_some_and(|h| h.insecure)
    }

    /// The HTTP client for `registry`.
    pub(super) fn http_for(&self, registry: &str) -> Result<&reqwest::Client, Reason> {
        let (cell, proxies) = if self.plain_http_allowed(registry) {
            (&self.direct, false)
        } else {
            (&self.http, true)
        };
        if let Some(client) = cell.get() {
            return Ok(client);
        }
        // The ring provider is already in the build for wasi:http.
        let _ = rustls::crypto::ring::default_provider().install_default();
        // Each operation as a whole, reading the body included, is bounded
        // by `within`.
        let mut builder = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("toolhost/", env!("CARGO_PKG_VERSION")));
        if !proxies {
            builder = builder.no_proxy();
        }
        let client = builder
            .build()
            .map_err(|e| Reason::Unreachable(format!("cannot build an HTTP client: {e}")))?;
        Ok(cell.get_or_init(|| client))
    }

    /// `work` (one whole operation: every request, redirect and login it
    /// takes, and reading the body) within the deadline, so that a registry
    /// that sends a body a byte at a time is given up on too.
    async fn within<T>(
        &self,
        work: impl std::future::Future<Output = Result<T, Reason>>,
    ) -> Result<T, Reason> {
        let deadline = self.settings.timeout;
        tokio::time::timeout(deadline, work)
            .await
            .map_err(|_| Reason::Timeout(deadline))?
    }

    /// The manifest `tag_or_digest` of the reference's repository.
    pub async fn manifest(
        &self,
        reference: &OciRef,
        tag_or_digest: &str,
    ) -> Result<Fetched, Reason> {
        self.within(self.fetch_manifest(reference, tag_or_digest))
            .await
    }

    async fn fetch_manifest(
        &self,
        reference: &OciRef,
        tag_or_digest: &str,
    ) -> Result<Fetched, Reason> {
        let url = format!("{}/manifests/{tag_or_digest}", self.base(reference));
        let response = self
            .send(reference, Access::Pull, Method::GET, &url, Body::Manifest)
            .await?;
        let response = success(response, "manifest", tag_or_digest).await?;
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.split(';').next().unwrap_or(v).trim().to_owned());
        let mut bytes = Vec::new();
        read_capped(
            response,
            "the manifest",
            (MAX_MANIFEST, MANIFEST_CAP),
            |chunk| {
                bytes.extend_from_slice(chunk);
                Ok(())
            },
        )
        .await?;
        Ok(Fetched {
            bytes,
            content_type,
        })
    }

    /// The OCI 1.1 referrers of manifest `digest` (an image index), or
    /// `None` when the registry has no referrers API (the caller then reads
    /// the referrers tag). As go-containerregistry and cosign decide it: an
    /// answer of 400, 404 (distribution 2.8), 405 or 501, or a 200 that is
    /// not an OCI image index (a registry's HTML page, a catch-all route),
    /// means no API.
    pub async fn referrers(
        &self,
        reference: &OciRef,
        digest: &Digest,
    ) -> Result<Option<Fetched>, Reason> {
        self.within(async {
            let url = format!("{}/referrers/{digest}", self.base(reference));
            let response = self
                .send(reference, Access::Pull, Method::GET, &url, Body::Manifest)
                .await?;
            if NO_REFERRERS_API.contains(&response.status()) {
                return Ok(None);
            }
            let response = success(response, "the referrers of", &digest.to_string()).await?;
            let index_type = response
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.split(';').next().unwrap_or(v).trim() == OCI_INDEX);
            if !index_type {
                return Ok(None);
            }
            let mut bytes = Vec::new();
            read_capped(
                response,
                "the referrers index",
                (MAX_MANIFEST, MANIFEST_CAP),
                |chunk| {
                    bytes.extend_from_slice(chunk);
                    Ok(())
                },
            )
            .await?;
            let is_index = serde_json::from_slice::<serde_json::Value>(&bytes)
                .is_ok_and(|index| index["manifests"].is_array());
            Ok(is_index.then_some(Fetched {
                bytes,
                content_type: Some(OCI_INDEX.to_owned()),
            }))
        })
        .await
    }

    /// The blob `digest`, streamed into `sink` (which hashes it), at most
    /// `max` bytes.
    pub async fn blob(
        &self,
        reference: &OciRef,
        digest: &Digest,
        max: (u64, &'static str),
        what: &str,
        sink: &mut Incoming,
    ) -> Result<(), Reason> {
        self.within(self.fetch_blob(reference, digest, max, what, sink))
            .await
    }

    async fn fetch_blob(
        &self,
        reference: &OciRef,
        digest: &Digest,
        max: (u64, &'static str),
        what: &str,
        sink: &mut Incoming,
    ) -> Result<(), Reason> {
        let url = format!("{}/blobs/{digest}", self.base(reference));
        let response = self
            .send(reference, Access::Pull, Method::GET, &url, Body::Blob)
            .await?;
        let response = success(response, what, &digest.to_string()).await?;
        read_capped(response, what, max, |chunk| {
            sink.write(chunk)
                .map_err(|e| Reason::Store(format!("writing {what} to the cache: {e}")))
        })
        .await?;
        debug_assert!(sink.written() <= max.0);
        Ok(())
    }

    /// Whether the repository already has the blob.
    async fn has_blob(&self, reference: &OciRef, digest: &Digest) -> Result<bool, Reason> {
        let url = format!("{}/blobs/{digest}", self.base(reference));
        let response = self
            .send(reference, Access::Push, Method::HEAD, &url, Body::Blob)
            .await?;
        Ok(response.status().is_success())
    }

    /// Upload a blob (monolithic: components are megabytes, not gigabytes).
    pub async fn upload(&self, reference: &OciRef, bytes: &[u8]) -> Result<Digest, Reason> {
        self.within(self.upload_blob(reference, bytes)).await
    }

    async fn upload_blob(&self, reference: &OciRef, bytes: &[u8]) -> Result<Digest, Reason> {
        let digest = Digest::of(bytes);
        if self.has_blob(reference, &digest).await? {
            return Ok(digest);
        }
        let url = format!("{}/blobs/uploads/", self.base(reference));
        let response = self
            .send(reference, Access::Push, Method::POST, &url, Body::Empty)
            .await?;
        let response = success(response, "an upload", "blobs/uploads/").await?;
        let location = response
            .headers()
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| {
                Reason::Refused("the registry started an upload without a Location".into())
            })?;
        let mut target = reqwest::Url::parse(&url)
            .and_then(|base| base.join(location))
            .map_err(|e| {
                Reason::Refused(format!(
                    "the upload Location {location:?} is not a URL: {e}"
                ))
            })?;
        if !same_authority(&target, &url) {
            return Err(Reason::Redirect {
                to: target.host_str().unwrap_or_default().to_owned(),
            });
        }
        target
            .query_pairs_mut()
            .append_pair("digest", &digest.to_string());
        let response = self
            .send(
                reference,
                Access::Push,
                Method::PUT,
                target.as_str(),
                Body::Bytes(bytes.to_vec(), "application/octet-stream"),
            )
            .await?;
        success(response, "the upload of", &digest.to_string()).await?;
        Ok(digest)
    }

    /// Store a manifest under a tag or its digest.
    pub async fn put_manifest(
        &self,
        reference: &OciRef,
        tag_or_digest: &str,
        bytes: Vec<u8>,
        media_type: &'static str,
    ) -> Result<(), Reason> {
        self.within(self.store_manifest(reference, tag_or_digest, bytes, media_type))
            .await
    }

    async fn store_manifest(
        &self,
        reference: &OciRef,
        tag_or_digest: &str,
        bytes: Vec<u8>,
        media_type: &'static str,
    ) -> Result<(), Reason> {
        let url = format!("{}/manifests/{tag_or_digest}", self.base(reference));
        let response = self
            .send(
                reference,
                Access::Push,
                Method::PUT,
                &url,
                Body::Bytes(bytes, media_type),
            )
            .await?;
        success(response, "the manifest", tag_or_digest).await?;
        Ok(())
    }

    /// One exchange: credentials when the registry asks, redirects within
    /// the rules.
    async fn send(
        &self,
        reference: &OciRef,
        access: Access,
        method: Method,
        url: &str,
        body: Body,
    ) -> Result<reqwest::Response, Reason> {
        // The callers bound the whole operation (`within`).
        self.exchange(reference, access, method, url, body).await
    }

    async fn exchange(
        &self,
        reference: &OciRef,
        access: Access,
        method: Method,
        url: &str,
        body: Body,
    ) -> Result<reqwest::Response, Reason> {
        let scope = scope(reference, access);
        let key = (reference.registry().to_owned(), scope.clone());
        let cached = self.tokens.lock().expect("tokens").get(&key).cloned();
        let response = self
            .follow(reference, method.clone(), url, &body, cached.as_deref())
            .await?;
        if response.status() != StatusCode::UNAUTHORIZED {
            return Ok(response);
        }
        // Only the registry itself may ask for its credentials: a 401 from
        // a host a blob was redirected to gets none.
        if !same_authority(response.url(), url) {
            return Err(Reason::Unauthorized(format!(
                "{} (a host a download was redirected to) asks for credentials; toolhost gives a registry's credentials to the registry only",
                response.url().host_str().unwrap_or_default()
            )));
        }
        let challenge = response
            .headers()
            .get(header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .and_then(Challenge::parse)
            .ok_or_else(|| Reason::Unauthorized(self.login_fix(reference, None)))?;
        let credentials = self.credentials(reference.registry()).await?;
        let authorization = match challenge {
            Challenge::Basic => credentials
                .as_ref()
                .map(Credentials::basic)
                .ok_or_else(|| Reason::Unauthorized(self.login_fix(reference, None)))?,
            Challenge::Bearer { realm, service, .. } => {
                self.token(
                    reference,
                    &realm,
                    service.as_deref(),
                    &scope,
                    credentials.as_ref(),
                )
                .await?
            }
        };
        let response = self
            .follow(reference, method, url, &body, Some(&authorization))
            .await?;
        if response.status() == StatusCode::UNAUTHORIZED
            || response.status() == StatusCode::FORBIDDEN
        {
            return Err(Reason::Unauthorized(
                self.login_fix(reference, credentials.as_ref()),
            ));
        }
        self.tokens
            .lock()
            .expect("tokens")
            .insert(key, authorization);
        Ok(response)
    }

    /// Send, following redirects within the registry; blob downloads may
    /// also go to the hosts listed for it, over HTTPS and without
    /// credentials.
    async fn follow(
        &self,
        reference: &OciRef,
        method: Method,
        url: &str,
        body: &Body,
        authorization: Option<&str>,
    ) -> Result<reqwest::Response, Reason> {
        let mut current = reqwest::Url::parse(url)
            .map_err(|e| Reason::Refused(format!("{url} is not a URL: {e}")))?;
        let mut authorization = authorization.map(str::to_owned);
        for _ in 0..=MAX_REDIRECTS {
            let mut request = self
                .http_for(reference.registry())?
                .request(method.clone(), current.clone());
            if let Some(value) = &authorization {
                request = request.header(header::AUTHORIZATION, value);
            }
            request = body.apply(request);
            let response = request
                .send()
                .await
                .map_err(|e| unreachable(reference, &e))?;
            if !response.status().is_redirection() {
                return Ok(response);
            }
            let location = response
                .headers()
                .get(header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .ok_or_else(|| Reason::Refused("a redirect without a Location".into()))?;
            let next = current
                .join(location)
                .map_err(|e| Reason::Refused(format!("a redirect to {location:?}: {e}")))?;
            if same_authority(&next, current.as_str()) {
                current = next;
                continue;
            }
            let host = next.host_str().unwrap_or_default().to_owned();
            let authority = match next.port() {
                Some(port) => format!("{host}:{port}"),
                None => host.clone(),
            };
            // A listed `host` means its HTTPS port; `host:port` that port.
            let listed = self
                .settings
                .blob_redirects(reference)
                .iter()
                .any(|(allowed, _)| {
                    *allowed == authority || (next.port().is_none() && *allowed == host)
                });
            if matches!(body, Body::Blob) && listed && next.scheme() == "https" {
                authorization = None;
                current = next;
                continue;
            }
            return Err(Reason::Redirect { to: authority });
        }
        Err(Reason::Refused(format!(
            "more than {MAX_REDIRECTS} redirects"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_is_for_loopback_registries_and_those_marked_insecure() {
        for loopback in [
            "127.0.0.1:5000",
            "127.3.4.5",
            "localhost:5000",
            "[::1]:5000",
            "localhost",
        ] {
            assert!(is_loopback(loopback), "{loopback}");
        }
        for remote in [
            "ghcr.io",
            "registry.internal:5000",
            "10.0.0.1:5000",
            "localhost.evil.com",
            "[fe80::1]:5000",
        ] {
            assert!(!is_loopback(remote), "{remote}");
        }
        let mut settings = Settings::default();
        settings.hosts.insert(
            "registry.internal:5000".into(),
            super::super::HostSettings {
                insecure: true,
                ..Default::default()
            },
        );
        let client = Client::new(Arc::new(settings));
        assert!(client.plain_http_allowed("registry.internal:5000"));
        assert!(!client.plain_http_allowed("registry.internal:5001"));
        assert!(!client.plain_http_allowed("ghcr.io"));
        let calc: OciRef = "oci://ghcr.io/acme/calc:1".parse().unwrap();
        assert!(
            client
                .base(&calc)
                .starts_with("https://ghcr.io/v2/acme/calc")
        );
    }
}
