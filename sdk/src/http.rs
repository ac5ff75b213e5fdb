//! A small blocking HTTP client over the standard `wasi:http/outgoing-handler`.
//!
//! The host decides what is reachable: the host of the record the plugin serves (its
//! `CallContext::endpoint`) and hosts the operator granted. Everything else fails with
//! [`HttpError::Denied`]. In native builds (`cargo test`) requests go to the fakes of
//! [`crate::testing`] instead.

use crate::PluginError;

/// Responses larger than this are refused by the SDK even if the host would allow more.
const DEFAULT_MAX_RESPONSE_BYTES: usize = 4 << 20;

/// Why a request failed.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum HttpError {
    /// The URL could not be parsed or uses an unsupported scheme.
    InvalidUrl(String),
    /// The host's outbound policy refused the request (host not allowed, private address, …).
    Denied,
    /// The connection or response timed out.
    Timeout,
    /// The response was larger than allowed.
    ResponseTooLarge,
    /// Anything else at the transport level (DNS, TLS, connection refused or reset).
    Transport(String),
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HttpError::InvalidUrl(msg) => write!(f, "invalid URL: {msg}"),
            HttpError::Denied => {
                f.write_str("outbound request denied by the host's policy (ask the operator to grant the host)")
            }
            HttpError::Timeout => f.write_str("request timed out"),
            HttpError::ResponseTooLarge => f.write_str("response too large"),
            HttpError::Transport(msg) => write!(f, "{msg}"),
        }
    }
}

impl std::error::Error for HttpError {}

impl From<HttpError> for PluginError {
    fn from(err: HttpError) -> PluginError {
        let retryable = matches!(err, HttpError::Timeout | HttpError::Transport(_));
        PluginError::upstream(None, err.to_string(), retryable)
    }
}

/// An HTTP response with its whole body read.
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Header name/value pairs, names in lowercase.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// True for 2xx statuses.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The body as (lossy) UTF-8 text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// Parses the body as JSON.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, PluginError> {
        serde_json::from_slice(&self.body).map_err(|err| {
            PluginError::upstream(Some(self.status), format!("response is not the expected JSON: {err}"), false)
        })
    }

    /// `Retry-After` in seconds, when the server sent a number.
    pub fn retry_after_secs(&self) -> Option<u32> {
        self.header("retry-after").and_then(|v| v.trim().parse().ok())
    }

    /// The first value of a header, as text.
    pub fn header(&self, name: &str) -> Option<String> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(key, _)| *key == name).map(|(_, value)| String::from_utf8_lossy(value).into_owned())
    }
}

/// A request being built.
#[derive(Debug, Clone)]
pub struct Request {
    method: String,
    url: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    timeout_ms: u64,
    max_response_bytes: usize,
}

impl Request {
    /// Starts a request with any method.
    pub fn new(method: &str, url: &str) -> Request {
        Request {
            method: method.to_ascii_uppercase(),
            url: url.to_owned(),
            headers: Vec::new(),
            body: Vec::new(),
            timeout_ms: 10_000,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        }
    }

    /// Starts a GET request.
    pub fn get(url: &str) -> Request {
        Request::new("GET", url)
    }

    /// Starts a POST request.
    pub fn post(url: &str) -> Request {
        Request::new("POST", url)
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Request {
        self.headers.push((name.to_owned(), value.as_bytes().to_vec()));
        self
    }

    /// `Authorization: Basic base64(user:password)` (RFC 7617).
    pub fn basic_auth(self, user: &str, password: &str) -> Request {
        self.header("authorization", &basic_auth(user, password))
    }

    /// Sets a raw body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Request {
        self.body = body.into();
        self
    }

    /// Sets a JSON body and the matching content type.
    pub fn json<T: serde::Serialize>(self, value: &T) -> Result<Request, PluginError> {
        let body = serde_json::to_vec(value)
            .map_err(|err| PluginError::internal(format!("cannot serialize request body: {err}")))?;
        Ok(self.header("content-type", "application/json").body(body))
    }

    /// Sets connect, first-byte and between-bytes timeouts (each). The host may enforce lower ones.
    pub fn timeout_ms(mut self, timeout_ms: u64) -> Request {
        self.timeout_ms = timeout_ms;
        self
    }

    /// Caps the response body size accepted by the SDK.
    pub fn max_response_bytes(mut self, max: usize) -> Request {
        self.max_response_bytes = max;
        self
    }

    /// The method, uppercase.
    pub fn method(&self) -> &str {
        &self.method
    }

    /// The URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The first value of a header, as text.
    pub fn header_value(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| String::from_utf8_lossy(value).into_owned())
    }

    /// The body.
    pub fn body_bytes(&self) -> &[u8] {
        &self.body
    }

    /// Every header, in the order added.
    pub fn header_pairs(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.headers.iter().map(|(name, value)| (name.as_str(), value.as_slice()))
    }

    /// Sends the request and reads the whole response.
    pub fn send(self) -> Result<Response, HttpError> {
        let target = Target::parse(&self.url)?;
        #[cfg(target_arch = "wasm32")]
        return wasi_transport::send(self, target);
        #[cfg(not(target_arch = "wasm32"))]
        return crate::testing::send(self, target);
    }
}

/// The request over `wasi:http`, in the component.
#[cfg(target_arch = "wasm32")]
mod wasi_transport {
    use super::{HttpError, Request, Response, Target};
    use crate::bindings::imports::wasi::http::outgoing_handler;
    use crate::bindings::imports::wasi::http::types::{
        self as wasi, ErrorCode, Fields, IncomingBody, Method, OutgoingBody, OutgoingRequest, RequestOptions, Scheme,
    };
    use crate::bindings::imports::wasi::io::streams::StreamError;

    /// Bytes per write into the request body stream.
    const WRITE_CHUNK: usize = 4096;

    pub(super) fn send(request_spec: Request, target: Target) -> Result<Response, HttpError> {
        let this = request_spec;
        let method = match this.method.as_str() {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "PATCH" => Method::Patch,
            "OPTIONS" => Method::Options,
            other => Method::Other(other.to_owned()),
        };
        let scheme = if target.https { Scheme::Https } else { Scheme::Http };
        let headers = Fields::new();
        let has_length = this.headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("content-length"));
        if !has_length && (!this.body.is_empty() || !matches!(method, Method::Get | Method::Head)) {
            // A declared length lets servers that do not take chunked uploads read the body.
            let _ = headers.append("content-length", this.body.len().to_string().as_bytes());
        }
        for (name, value) in &this.headers {
            headers.append(name, value).map_err(|err| HttpError::InvalidUrl(format!("header {name}: {err:?}")))?;
        }
        let request = OutgoingRequest::new(headers);
        let invalid = |what: &str| HttpError::InvalidUrl(format!("{what} rejected by wasi:http"));
        request.set_method(&method).map_err(|()| invalid("method"))?;
        request.set_scheme(Some(&scheme)).map_err(|()| invalid("scheme"))?;
        request.set_authority(Some(&target.authority)).map_err(|()| invalid("authority"))?;
        request.set_path_with_query(Some(&target.path_and_query)).map_err(|()| invalid("path"))?;

        let options = RequestOptions::new();
        let nanos = this.timeout_ms.saturating_mul(1_000_000);
        // Setting a timeout the host does not support is not fatal; the host's own limits apply.
        let _ = options.set_connect_timeout(Some(nanos));
        let _ = options.set_first_byte_timeout(Some(nanos));
        let _ = options.set_between_bytes_timeout(Some(nanos));

        let body = request.body().map_err(|()| HttpError::Transport("request body already taken".into()))?;
        // `handle` must come before the body is written: the host buffers only a little of
        // the body and drains it into the connection that `handle` opens.
        let pending = outgoing_handler::handle(request, Some(options))?;
        // If the host refuses or fails the request, the body stream closes; the response
        // future then carries the real reason, so a write failure defers to it.
        let written = write_body(body, &this.body);

        let incoming = loop {
            match pending.get() {
                Some(Ok(result)) => break result?,
                Some(Err(())) => return Err(HttpError::Transport("response already taken".into())),
                None => pending.subscribe().block(),
            }
        };

        written?;

        let status = incoming.status();
        let headers =
            incoming.headers().entries().into_iter().map(|(name, value)| (name.to_ascii_lowercase(), value)).collect();
        let body = incoming.consume().map_err(|()| HttpError::Transport("response body already taken".into()))?;
        let bytes = read_body(&body, this.max_response_bytes)?;
        drop(IncomingBody::finish(body));
        Ok(Response { status, headers, body: bytes })
    }

    impl From<ErrorCode> for HttpError {
        fn from(code: ErrorCode) -> HttpError {
            match code {
                ErrorCode::HttpRequestDenied | ErrorCode::DestinationIpProhibited => HttpError::Denied,
                ErrorCode::ConnectionTimeout
                | ErrorCode::ConnectionReadTimeout
                | ErrorCode::ConnectionWriteTimeout
                | ErrorCode::HttpResponseTimeout
                | ErrorCode::DnsTimeout => HttpError::Timeout,
                ErrorCode::HttpResponseBodySize(_) => HttpError::ResponseTooLarge,
                ErrorCode::DnsError(err) => HttpError::Transport(format!(
                    "DNS lookup failed{}",
                    err.rcode.map(|rcode| format!(" ({rcode})")).unwrap_or_default()
                )),
                ErrorCode::DestinationNotFound => HttpError::Transport("destination not found".into()),
                ErrorCode::DestinationUnavailable => HttpError::Transport("destination unavailable".into()),
                ErrorCode::ConnectionRefused => HttpError::Transport("connection refused".into()),
                ErrorCode::ConnectionTerminated => HttpError::Transport("connection closed by the server".into()),
                ErrorCode::TlsProtocolError => HttpError::Transport("TLS protocol error".into()),
                ErrorCode::TlsCertificateError => {
                    HttpError::Transport("the server's TLS certificate is not trusted".into())
                }
                ErrorCode::TlsAlertReceived(alert) => HttpError::Transport(format!(
                    "TLS alert from the server{}",
                    alert.alert_message.map(|m| format!(": {m}")).unwrap_or_default()
                )),
                ErrorCode::HttpProtocolError => HttpError::Transport("HTTP protocol error".into()),
                ErrorCode::InternalError(Some(message)) => {
                    HttpError::Transport(format!("transport failure: {message}"))
                }
                _ => HttpError::Transport("transport failure".into()),
            }
        }
    }

    fn write_body(body: OutgoingBody, bytes: &[u8]) -> Result<(), HttpError> {
        {
            let stream = body.write().map_err(|()| HttpError::Transport("request body stream unavailable".into()))?;
            for chunk in bytes.chunks(WRITE_CHUNK) {
                stream.blocking_write_and_flush(chunk).map_err(stream_error)?;
            }
        }
        OutgoingBody::finish(body, None)?;
        Ok(())
    }

    fn read_body(body: &IncomingBody, max: usize) -> Result<Vec<u8>, HttpError> {
        let stream = body.stream().map_err(|()| HttpError::Transport("response body stream unavailable".into()))?;
        let mut bytes = Vec::new();
        loop {
            match stream.blocking_read(64 * 1024) {
                Ok(chunk) => {
                    if bytes.len() + chunk.len() > max {
                        return Err(HttpError::ResponseTooLarge);
                    }
                    bytes.extend_from_slice(&chunk);
                }
                Err(StreamError::Closed) => return Ok(bytes),
                Err(err) => return Err(stream_error(err)),
            }
        }
    }

    fn stream_error(err: StreamError) -> HttpError {
        match err {
            StreamError::Closed => HttpError::Transport("stream closed".into()),
            StreamError::LastOperationFailed(err) => match wasi::http_error_code(&err) {
                Some(code) => HttpError::from(code),
                None => HttpError::Transport("stream failure".into()),
            },
        }
    }
}

/// The parts of an absolute `http(s)://` URL that wasi:http wants separately (native builds
/// only validate the URL).
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
pub(crate) struct Target {
    pub(crate) https: bool,
    pub(crate) authority: String,
    pub(crate) path_and_query: String,
}

impl Target {
    pub(crate) fn parse(url: &str) -> Result<Target, HttpError> {
        let (scheme, rest) = if let Some(rest) = url.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("http://") {
            (false, rest)
        } else {
            return Err(HttpError::InvalidUrl(format!("{url}: only http:// and https:// are supported")));
        };
        let split = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(split);
        if authority.is_empty() || authority.contains('@') {
            return Err(HttpError::InvalidUrl(format!("{url}: missing host or embedded credentials")));
        }
        let tail = tail.split('#').next().unwrap_or("");
        let path_and_query = if tail.is_empty() {
            "/".to_owned()
        } else if tail.starts_with('?') {
            format!("/{tail}")
        } else {
            tail.to_owned()
        };
        Ok(Target { https: scheme, authority: authority.to_owned(), path_and_query })
    }
}

/// The `Authorization` value of HTTP basic authentication: `Basic base64(user:password)`.
pub fn basic_auth(user: &str, password: &str) -> String {
    use base64::Engine as _;
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}")))
}

/// Why `url` cannot be an endpoint a record names, if it cannot: it must be an absolute
/// `https://` URL with a host and no embedded credentials or spaces.
pub fn https_url_problem(url: &str) -> Option<&'static str> {
    let Some(rest) = url.strip_prefix("https://") else {
        return Some("must be an https:// URL");
    };
    authority_unusable(url, rest).then_some("must be an https:// URL with a host and no embedded credentials or spaces")
}

/// As [`https_url_problem`], also accepting `http://`: for endpoints that may sit on a private
/// network or be a local test server (an ACME directory, a cloud API endpoint override).
pub fn http_url_problem(url: &str) -> Option<&'static str> {
    let Some(rest) = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://")) else {
        return Some("must be an http:// or https:// URL");
    };
    authority_unusable(url, rest)
        .then_some("must be an http:// or https:// URL with a host and no embedded credentials or spaces")
}

/// As [`http_url_problem`], for a base URL that paths are appended to (no query or fragment).
pub fn http_base_url_problem(url: &str) -> Option<&'static str> {
    http_url_problem(url).or_else(|| url.contains(['?', '#']).then_some("must be a base URL without query or fragment"))
}

/// No host, embedded credentials, or spaces anywhere in the URL.
fn authority_unusable(url: &str, after_scheme: &str) -> bool {
    let authority = after_scheme.split(['/', '?', '#']).next().unwrap_or_default();
    authority.is_empty() || authority.contains('@') || url.chars().any(char::is_whitespace)
}

/// As [`https_url_problem`], for a base URL that paths are appended to (no query or fragment).
pub fn https_base_url_problem(url: &str) -> Option<&'static str> {
    https_url_problem(url)
        .or_else(|| url.contains(['?', '#']).then_some("must be a base URL without query or fragment"))
}

#[cfg(test)]
mod helper_tests {
    use super::*;

    #[test]
    fn basic_auth_and_url_checks() {
        assert_eq!(basic_auth("ops@example.com", "tok"), "Basic b3BzQGV4YW1wbGUuY29tOnRvaw==");
        assert_eq!(https_url_problem("https://hooks.example.com/x?sig=1"), None);
        assert!(https_url_problem("http://hooks.example.com/x").is_some());
        assert!(https_url_problem("https://user@hooks.example.com/x").is_some());
        assert!(https_url_problem("https:///x").is_some());
        assert!(https_base_url_problem("https://jira.example.net/?x=1").is_some());
        assert_eq!(https_base_url_problem("https://jira.example.net"), None);
        assert_eq!(http_url_problem("http://127.0.0.1:14000/dir"), None);
        assert!(http_url_problem("ftp://x").is_some() && http_url_problem("http://u@x").is_some());
        assert!(http_base_url_problem("http://127.0.0.1:5000/?x").is_some());
    }
}
