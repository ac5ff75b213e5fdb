//! The HTTP layer: axum routers, request/response types and the error mapping.
//! Handlers translate HTTP to domain calls and back; they hold no business rules.

pub mod acme_challenges;
mod acme_server;
mod attestation;
mod audit;
mod auth;
mod cas;
mod certificates;
mod discovery;
pub mod docs;
mod domain_claims;
pub mod error;
pub mod extract;
mod integrations;
mod issuance;
pub mod listener;
mod members;
mod oidc;
pub mod ops;
pub mod plugin_dto;
mod plugins;
mod webhooks;

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde::Serialize;
use tower_http::catch_panic::CatchPanicLayer;

use crate::error::ApiError;
use trellis_core::context::SharedContext;
use trellis_core::error::Error;
use trellis_core::pagination::{Page, PageRequest};

/// The request's correlation id, echoed in `X-Request-Id` and written to audit rows.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

/// What the HTTP layer itself is configured with (the binary loads and validates it).
#[derive(Debug, Clone)]
pub struct HttpSettings {
    /// Larger request bodies get 413.
    pub body_limit_bytes: usize,
    /// Mark the session cookie `Secure` (behind HTTPS).
    pub secure_cookies: bool,
    /// Reverse proxies whose `X-Forwarded-For` names the client: `(network, prefix length)`.
    pub trusted_proxies: Vec<(std::net::IpAddr, u8)>,
    /// A request (reading its body included) that takes longer is answered 408.
    pub request_timeout: std::time::Duration,
    /// Requests handled at once; more are answered 503 with `Retry-After` at once.
    pub max_concurrent_requests: usize,
    /// The same for the public `/pki` endpoints, a pool of their own: a flood of anonymous
    /// OCSP requests fills only this one, never the API's.
    pub pki_max_concurrent_requests: usize,
    /// `/metrics` on this router; false when a separate metrics listener serves it.
    pub metrics_on_api: bool,
}

impl HttpSettings {
    /// The session cookie's name: with secure cookies on, the `__Host-` prefix makes browsers
    /// accept it only from this origin over HTTPS, with `Path=/` and no `Domain`.
    pub fn session_cookie(&self) -> &'static str {
        if self.secure_cookies {
            "__Host-trellis_session"
        } else {
            trellis_core::auth::SESSION_COOKIE
        }
    }

    /// The `Set-Cookie` value of a session: `token` for its lifetime, or (`None`) a clearing one.
    /// Password and identity-provider sign-ins set the same cookie.
    pub fn session_set_cookie(&self, token: Option<&str>) -> String {
        let secure = if self.secure_cookies { "; Secure" } else { "" };
        let max_age = if token.is_some() { trellis_core::auth::SESSION_LIFETIME_SECS } else { 0 };
        format!(
            "{}={}; HttpOnly; SameSite=Lax; Path=/; Max-Age={max_age}{secure}",
            self.session_cookie(),
            token.unwrap_or_default()
        )
    }

    /// The client's address: the peer, unless the peer is a trusted proxy, in which case the
    /// rightmost `X-Forwarded-For` hop that is not itself a trusted proxy. A client cannot
    /// choose its address for throttling by sending the header itself.
    pub fn client_address(&self, peer: std::net::IpAddr, headers: &axum::http::HeaderMap) -> std::net::IpAddr {
        if !self.is_trusted(peer) {
            return peer;
        }
        let hops: Vec<std::net::IpAddr> = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|hop| hop.trim().parse().ok())
            .collect();
        hops.into_iter().rev().find(|hop| !self.is_trusted(*hop)).unwrap_or(peer)
    }

    fn is_trusted(&self, address: std::net::IpAddr) -> bool {
        self.trusted_proxies.iter().any(|(network, prefix)| in_network(address, *network, *prefix))
    }
}

fn in_network(address: std::net::IpAddr, network: std::net::IpAddr, prefix: u8) -> bool {
    use std::net::IpAddr;
    let (a, n, bits) = match (address, network) {
        (IpAddr::V4(a), IpAddr::V4(n)) => (u128::from(u32::from(a)) << 96, u128::from(u32::from(n)) << 96, prefix),
        (IpAddr::V6(a), IpAddr::V6(n)) => (u128::from(a), u128::from(n), prefix),
        _ => return false,
    };
    let mask = if bits == 0 { 0 } else { u128::MAX << (128 - u32::from(bits.min(128))) };
    a & mask == n & mask
}

pub fn router(ctx: SharedContext, settings: HttpSettings) -> Router {
    router_with(ctx, settings, Router::new())
}

/// The API's router with `extra` routes (the web console, `trellis-console`) merged in, so they
/// go through the same admission, body limit, settings and request-id layers.
pub fn router_with(ctx: SharedContext, settings: HttpSettings, extra: Router<SharedContext>) -> Router {
    let body_limit = settings.body_limit_bytes;
    let ops = if settings.metrics_on_api { ops::routes().merge(ops::metrics_routes()) } else { ops::routes() };
    Router::new()
        .merge(ops)
        .merge(auth::routes())
        .merge(oidc::routes())
        .merge(members::routes())
        .merge(cas::routes())
        .merge(issuance::routes())
        .merge(discovery::routes())
        .merge(webhooks::routes())
        .merge(integrations::routes())
        .merge(attestation::routes())
        .merge(domain_claims::routes())
        .merge(certificates::routes())
        .merge(audit::routes())
        .merge(plugins::routes())
        .merge(acme_server::routes())
        .merge(docs::routes())
        .merge(extra)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::from_fn_with_state(Arc::new(Admission::new(&settings)), admit))
        .layer(axum::Extension(settings))
        .layer(axum::middleware::from_fn_with_state(ctx.clone(), observe))
        .layer(CatchPanicLayer::custom(panic_response))
        .with_state(ctx)
}

async fn not_found() -> ApiError {
    ApiError::RouteNotFound
}

async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

fn panic_response(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("handler panicked");
    ApiError::Domain(Error::Internal("handler panicked".into())).into_response()
}

/// Bounds on the requests being served: how many at once, and for how long each.
struct Admission {
    slots: tokio::sync::Semaphore,
    /// The public `/pki` endpoints' own slots.
    pki_slots: tokio::sync::Semaphore,
    timeout: std::time::Duration,
}

impl Admission {
    fn new(settings: &HttpSettings) -> Self {
        Admission {
            slots: tokio::sync::Semaphore::new(settings.max_concurrent_requests.max(1)),
            pki_slots: tokio::sync::Semaphore::new(settings.pki_max_concurrent_requests.max(1)),
            timeout: settings.request_timeout,
        }
    }
}

/// Whether a request goes to the public PKI endpoints (`/pki/…`), which anyone may call.
fn is_pki(path: &str) -> bool {
    path.starts_with("/pki/")
}

/// A slow client (a body trickling in) or a stuck handler holds a slot only until the
/// timeout; when every slot is taken, new requests are refused at once rather than queued
/// without bound. `/pki` takes its slots from its own pool.
async fn admit(State(admission): State<Arc<Admission>>, request: Request<Body>, next: Next) -> Response {
    let slots = if is_pki(request.uri().path()) { &admission.pki_slots } else { &admission.slots };
    let Ok(_slot) = slots.try_acquire() else {
        return ApiError::Busy.into_response();
    };
    match tokio::time::timeout(admission.timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::Timeout(admission.timeout.as_secs()).into_response(),
    }
}

/// Assigns the request id, opens the request's tracing span, and records metrics
/// labelled by the matched route (never the raw path, which may carry ids or secrets).
async fn observe(State(_ctx): State<SharedContext>, mut request: Request<Body>, next: Next) -> Response {
    let started = Instant::now();
    let request_id = request
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| {
            !v.is_empty() && v.len() <= 64 && v.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        })
        .map(str::to_string)
        .unwrap_or_else(|| trellis_core::clock::random_hex(&trellis_core::clock::OsEntropy, 16));
    let route =
        request.extensions().get::<MatchedPath>().map(|p| p.as_str().to_string()).unwrap_or_else(|| "unmatched".into());
    let method = request.method().clone();
    request.extensions_mut().insert(RequestId(request_id.clone()));
    let span = tracing::info_span!("request", request_id = %request_id, method = %method, route = %route);
    let mut response = tracing::Instrument::instrument(next.run(request), span.clone()).await;
    let status = response.status().as_u16();
    let elapsed = started.elapsed();
    span.in_scope(|| tracing::info!(status, latency_ms = elapsed.as_secs_f64() * 1000.0, "request finished"));
    let labels = [("method", method.to_string()), ("route", route), ("status", status.to_string())];
    metrics::counter!("http_requests_total", &labels).increment(1);
    metrics::histogram!("http_request_duration_seconds", &labels[..2]).record(elapsed.as_secs_f64());
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert("x-request-id", value);
    }
    response
}

/// `{ "data": … }`, the single-resource envelope.
pub fn data<T: Serialize>(value: T) -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({ "data": value }))
}

/// 201 with `{ "data": … }`, serialised straight from `value` (not through a `Value`: an
/// issuance's certificate record was built three times over on the hot path).
pub fn created<T: Serialize>(value: T) -> Response {
    (StatusCode::CREATED, axum::Json(Data { data: value })).into_response()
}

/// `{ "data": … }`, the single-resource envelope, as the OpenAPI document states it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Data<T> {
    pub data: T,
}

/// A list window: `data` plus totals beside it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListEnvelope<T> {
    pub data: Vec<T>,
    /// Items matching the filters, across all pages (a lower bound when `totalExact` is false).
    pub total: i64,
    /// False when the matches were not counted to the end (certificate lists count up to 10,000).
    pub total_exact: bool,
    pub page: i64,
    pub limit: i64,
    pub offset: i64,
    pub total_pages: i64,
}

pub fn list<T, U: Serialize>(page: Page<T>, convert: impl FnMut(T) -> U) -> axum::Json<ListEnvelope<U>> {
    let request: PageRequest = page.request;
    let total = page.total;
    axum::Json(ListEnvelope {
        data: page.items.into_iter().map(convert).collect(),
        total,
        total_exact: page.total_exact,
        page: request.page(),
        limit: request.limit,
        offset: request.offset,
        total_pages: (total + request.limit - 1) / request.limit,
    })
}

/// The pagination parameters of every list endpoint.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageParams {
    /// 1-indexed page; values below 1 read as 1.
    #[param(maximum = 10_000_000)]
    pub page: Option<i64>,
    /// Page size, clamped to [1, 100]; default 50.
    pub limit: Option<i64>,
    /// Zero-based offset; overrides `page` when present.
    #[param(minimum = 0, maximum = 1_000_000_000)]
    pub offset: Option<i64>,
}

impl PageParams {
    pub fn request(&self) -> Result<PageRequest, Error> {
        PageRequest::new(self.page, self.limit, self.offset, 50)
    }
}
