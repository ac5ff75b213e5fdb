//! `HostIdp`, the outbound client of OpenID Connect sign-in (core's `OidcTransport`): discovery,
//! JWKS, the token endpoint and userinfo of the one issuer the operator configured.
//!
//! The operator named that issuer, so private and loopback addresses are allowed (an IdP on
//! the LAN is normal); cloud metadata addresses never are. Plain `http://` is accepted only
//! when every address of the host is a loopback one (a local test IdP): tokens and the client
//! secret never cross a network in clear. Redirects are never followed, every wait is bounded
//! and bodies are read up to [`trellis_core::auth::oidc::MAX_IDP_BODY`].

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use trellis_core::auth::oidc::port::{IdpAnswer, IdpTransportError, OidcTransport};
use trellis_core::auth::oidc::MAX_IDP_BODY;

use crate::{check_address, DenyReason};

/// The IdP client.
pub struct HostIdp {
    tls: Arc<rustls::ClientConfig>,
    timeout: Duration,
}

impl std::fmt::Debug for HostIdp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostIdp").field("timeout", &self.timeout).finish_non_exhaustive()
    }
}

trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static> Stream for T {}

fn failed(message: impl Into<String>) -> IdpTransportError {
    IdpTransportError(message.into())
}

impl HostIdp {
    /// Trusts the system's roots plus `ca_bundle` (PEM, `TRELLIS_OIDC_CA_BUNDLE`).
    pub fn new(ca_bundle: Option<&std::path::Path>, timeout: Duration) -> Result<HostIdp, String> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(cert);
        }
        if let Some(path) = ca_bundle {
            let pem =
                std::fs::read(path).map_err(|err| format!("cannot read OIDC CA bundle {}: {err}", path.display()))?;
            let mut added = 0usize;
            for cert in rustls_pki_types::pem::PemObject::pem_slice_iter(&pem) {
                let cert: rustls_pki_types::CertificateDer<'static> =
                    cert.map_err(|err| format!("OIDC CA bundle {}: {err}", path.display()))?;
                roots.add(cert).map_err(|err| format!("OIDC CA bundle {}: {err}", path.display()))?;
                added += 1;
            }
            if added == 0 {
                return Err(format!("OIDC CA bundle {} holds no certificates", path.display()));
            }
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|err| format!("TLS setup: {err}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(HostIdp { tls: Arc::new(tls), timeout })
    }

    async fn send(
        &self,
        url: &str,
        request: http::request::Builder,
        body: Bytes,
    ) -> Result<IdpAnswer, IdpTransportError> {
        let uri: http::Uri = url.parse().map_err(|_| failed(format!("`{url}` is not a valid URL")))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(failed(format!("`{url}`: only https:// URLs are used"))),
        };
        let host = uri
            .host()
            .ok_or_else(|| failed(format!("`{url}` names no host")))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => tokio::time::timeout(self.timeout, tokio::net::lookup_host((host.as_str(), port)))
                .await
                .map_err(|_| failed(format!("resolving {host} timed out")))?
                .map_err(|err| failed(format!("cannot resolve {host}: {err}")))?
                .collect(),
        };
        if addrs.is_empty() {
            return Err(failed(format!("{host} resolves to no address")));
        }
        for addr in &addrs {
            if let Err(DenyReason::MetadataAddress) = check_address(addr.ip(), true) {
                return Err(failed(format!("{host} resolves to a cloud metadata address, which is never allowed")));
            }
            if !https && !addr.ip().is_loopback() {
                return Err(failed(format!("{url}: plain http:// is allowed only for a loopback IdP; use https://")));
            }
        }
        let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
        let authority = uri.authority().map(|a| a.as_str().to_owned()).unwrap_or_else(|| host.clone());
        let request = request
            .uri(path)
            .header(http::header::HOST, authority)
            .header(http::header::ACCEPT, "application/json")
            .header(http::header::USER_AGENT, "trellis")
            .body(Full::new(body))
            .map_err(|err| failed(format!("cannot build the request: {err}")))?;
        let exchange = async {
            let mut last = failed("no address to connect to");
            for addr in &addrs {
                let tcp = match TcpStream::connect(addr).await {
                    Ok(tcp) => tcp,
                    Err(err) => {
                        last = failed(format!("cannot connect to {addr}: {err}"));
                        continue;
                    }
                };
                let stream: Box<dyn Stream> = if https {
                    let name = match host.parse::<IpAddr>() {
                        Ok(ip) => rustls_pki_types::ServerName::IpAddress(ip.into()),
                        Err(_) => rustls_pki_types::ServerName::try_from(host.clone())
                            .map_err(|_| failed(format!("`{host}` is not a valid host name")))?,
                    };
                    let connector = tokio_rustls::TlsConnector::from(self.tls.clone());
                    Box::new(
                        connector.connect(name, tcp).await.map_err(|err| failed(format!("TLS with {host}: {err}")))?,
                    )
                } else {
                    Box::new(tcp)
                };
                let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                    .await
                    .map_err(|err| failed(format!("HTTP handshake with {addr}: {err}")))?;
                tokio::spawn(async move {
                    let _ = connection.await;
                });
                let response =
                    sender.send_request(request).await.map_err(|err| failed(format!("request to {host}: {err}")))?;
                let status = response.status().as_u16();
                let mut body = response.into_body();
                let mut bytes = Vec::new();
                while let Some(frame) = body.frame().await {
                    let frame = frame.map_err(|err| failed(format!("reading the answer of {host}: {err}")))?;
                    if let Some(data) = frame.data_ref() {
                        if bytes.len() + data.len() > MAX_IDP_BODY {
                            return Err(failed(format!("{host} answered more than {MAX_IDP_BODY} bytes")));
                        }
                        bytes.extend_from_slice(data);
                    }
                }
                return Ok(IdpAnswer { status, body: bytes });
            }
            Err(last)
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| failed(format!("{host} did not answer within {} s", self.timeout.as_secs())))?
    }
}

/// RFC 6749 §2.3.1: the client id and secret are form-encoded before Basic authentication.
fn basic_credentials(id: &str, secret: &str) -> String {
    let encode = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    let pair = format!("{}:{}", encode(id), encode(secret));
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair))
}

#[async_trait]
impl OidcTransport for HostIdp {
    async fn get(&self, url: &str, bearer: Option<&str>) -> Result<IdpAnswer, IdpTransportError> {
        let mut request = http::Request::get("/");
        if let Some(token) = bearer {
            request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        self.send(url, request, Bytes::new()).await
    }

    async fn post_form(
        &self,
        url: &str,
        basic: Option<(&str, &str)>,
        form: &[(&str, &str)],
    ) -> Result<IdpAnswer, IdpTransportError> {
        let body = url::form_urlencoded::Serializer::new(String::new()).extend_pairs(form).finish();
        let mut request =
            http::Request::post("/").header(http::header::CONTENT_TYPE, "application/x-www-form-urlencoded");
        if let Some((id, secret)) = basic {
            request = request.header(http::header::AUTHORIZATION, basic_credentials(id, secret));
        }
        self.send(url, request, Bytes::from(body)).await
    }
}
