//! Request extractors whose rejections use the spec's error shape: the caller
//! (authentication + workspace), JSON bodies, query strings and numeric ids.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::error::ApiError;
use crate::RequestId;
use trellis_core::auth::{self, Caller, User, SESSION_COOKIE};
use trellis_core::context::SharedContext;
use trellis_core::error::Error;

/// The authenticated caller. API keys win over cookies; `X-Workspace-Id` applies to sessions only.
pub struct Authenticated(pub Caller);

impl FromRequestParts<SharedContext> for Authenticated {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, ctx: &SharedContext) -> Result<Self, Self::Rejection> {
        let request_id = request_id(parts);
        if let Some(key) = api_key(&parts.headers) {
            return Ok(Authenticated(auth::authenticate_key(&ctx.auth_deps(), &key, &request_id).await?));
        }
        let (token, workspace) = session_of(parts)?;
        let (_, caller) =
            auth::authenticate_session(&ctx.auth_deps(), &token, workspace.as_deref(), &request_id).await?;
        Ok(Authenticated(caller))
    }
}

/// A session user (not an API key) with their caller.
pub struct SessionUser(pub User, pub Caller);

impl FromRequestParts<SharedContext> for SessionUser {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, ctx: &SharedContext) -> Result<Self, Self::Rejection> {
        let request_id = request_id(parts);
        let (token, workspace) = session_of(parts)?;
        let (user, caller) =
            auth::authenticate_session(&ctx.auth_deps(), &token, workspace.as_deref(), &request_id).await?;
        Ok(SessionUser(user, caller))
    }
}

/// Whoever calls: an API key's caller, or a session user with their caller when they have a
/// workspace (see [`SessionPerson`]).
pub enum Principal {
    Key(Caller),
    Session(User, Option<Caller>),
}

impl FromRequestParts<SharedContext> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, ctx: &SharedContext) -> Result<Self, Self::Rejection> {
        if let Some(key) = api_key(&parts.headers) {
            return Ok(Principal::Key(auth::authenticate_key(&ctx.auth_deps(), &key, &request_id(parts)).await?));
        }
        let SessionPerson(user, caller) = SessionPerson::from_request_parts(parts, ctx).await?;
        Ok(Principal::Session(user, caller))
    }
}

/// A session user, and their caller when they have a workspace (a person the IdP signed in
/// whose groups map to none yet has none).
pub struct SessionPerson(pub User, pub Option<Caller>);

impl FromRequestParts<SharedContext> for SessionPerson {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, ctx: &SharedContext) -> Result<Self, Self::Rejection> {
        let request_id = request_id(parts);
        let (token, workspace) = session_of(parts)?;
        let (user, caller) = auth::session_user(&ctx.auth_deps(), &token, workspace.as_deref(), &request_id).await?;
        Ok(SessionPerson(user, caller))
    }
}

/// A session's token and the workspace it asks for (`X-Workspace-Id`); a cookie-borne request
/// that changes state must be same-origin.
fn session_of(parts: &Parts) -> Result<(String, Option<String>), ApiError> {
    let token = session_token(&parts.headers, session_cookie_name(parts)).ok_or(Error::Unauthorized)?;
    check_same_origin(&parts.method, &parts.headers)?;
    let workspace = parts
        .headers
        .get("x-workspace-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned);
    Ok((token, workspace))
}

pub fn request_id(parts: &Parts) -> String {
    parts.extensions.get::<RequestId>().map(|id| id.0.clone()).unwrap_or_default()
}

fn api_key(headers: &HeaderMap) -> Option<String> {
    if let Some(key) = headers.get("x-api-key").and_then(|v| v.to_str().ok()) {
        return Some(key.trim().to_string());
    }
    let authorization = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = authorization.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim().to_string())
}

/// The session cookie's name as configured (see `HttpSettings::session_cookie`); the console
/// reads the same cookie.
pub fn session_cookie_name(parts: &Parts) -> &'static str {
    parts.extensions.get::<crate::HttpSettings>().map_or(SESSION_COOKIE, crate::HttpSettings::session_cookie)
}

/// Cross-site request forgery: a browser attaches the session cookie to requests that another
/// site makes it send. A state-changing request authenticated by the cookie must come from
/// this origin: `Sec-Fetch-Site` (sent by current browsers) must be `same-origin` or `none`;
/// without it, an `Origin` header must name this host. A request with neither comes from a
/// client that is not a browser (curl, scripts), which no other site can steer.
pub fn check_same_origin(method: &axum::http::Method, headers: &HeaderMap) -> Result<(), ApiError> {
    if method.is_safe() {
        return Ok(());
    }
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(site) = header("sec-fetch-site") {
        return match site {
            "same-origin" | "none" => Ok(()),
            _ => Err(ApiError::CrossOrigin),
        };
    }
    match (header("origin"), header("host")) {
        (None, _) => Ok(()),
        (Some(origin), Some(host)) if origin_host(origin).is_some_and(|o| o.eq_ignore_ascii_case(host)) => Ok(()),
        _ => Err(ApiError::CrossOrigin),
    }
}

/// `https://host:port` → `host:port`.
fn origin_host(origin: &str) -> Option<&str> {
    let (_, rest) = origin.split_once("://")?;
    Some(rest.trim_end_matches('/'))
}

pub fn session_token(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(cookie, _)| *cookie == name)
        .map(|(_, value)| value.to_string())
}

/// `axum::Json` with rejections in the spec's error shape.
pub struct Json<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(Json(value)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

fn json_rejection(rejection: JsonRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return ApiError::PayloadTooLarge;
    }
    let (message, detail) = match &rejection {
        JsonRejection::MissingJsonContentType(_) => {
            ("Expected a JSON body with Content-Type: application/json", rejection.body_text())
        }
        JsonRejection::JsonSyntaxError(_) => ("The body is not valid JSON", rejection.body_text()),
        JsonRejection::JsonDataError(_) => ("The JSON body does not match the expected shape", rejection.body_text()),
        _ => ("The request body could not be read", rejection.body_text()),
    };
    ApiError::Domain(Error::validation_with(message, serde_json::json!({ "reason": detail })))
}

/// The raw request body, with the body-limit rejection in the spec's error shape.
pub struct RawBody(pub axum::body::Bytes);

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        axum::body::Bytes::from_request(req, state).await.map(RawBody).map_err(body_rejection)
    }
}

fn body_rejection(rejection: axum::extract::rejection::BytesRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::PayloadTooLarge
    } else {
        ApiError::Domain(Error::validation("The request body could not be read"))
    }
}

/// A JSON body that may be absent or empty (for action endpoints with optional bodies).
pub struct OptionalJson<T>(pub Option<T>);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for OptionalJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = axum::body::Bytes::from_request(req, state).await.map_err(body_rejection)?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJson(None));
        }
        // `null` is "no body" too (the document declares these bodies optional, i.e. nullable).
        serde_json::from_slice::<Option<T>>(&bytes).map(OptionalJson).map_err(|err| {
            ApiError::Domain(Error::validation_with(
                "The JSON body is invalid",
                serde_json::json!({ "reason": err.to_string() }),
            ))
        })
    }
}

/// `axum::extract::Query` with rejections in the spec's error shape.
pub struct Query<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(Query(value)),
            Err(rejection) => Err(query_rejection(rejection)),
        }
    }
}

fn query_rejection(rejection: QueryRejection) -> ApiError {
    ApiError::Domain(Error::validation_with(
        "Invalid query string",
        serde_json::json!({ "reason": rejection.body_text() }),
    ))
}

/// Parses a numeric path id, rejecting anything else with 400.
pub fn numeric_id(text: &str) -> Result<i64, ApiError> {
    match text.parse::<i64>() {
        Ok(id) if id > 0 => Ok(id),
        _ => Err(ApiError::Domain(Error::validation_with(
            format!("`{}` is not a valid id; ids are positive integers", text.chars().take(40).collect::<String>()),
            serde_json::json!({ "field": "id" }),
        ))),
    }
}

/// JSON Schema counts `1.0` as an integer, and so do clients that only have doubles: integer
/// body fields accept integral numbers written either way (`deserialize_with`).
pub fn integral<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    let number = serde_json::Number::deserialize(deserializer)?;
    as_integer(&number).ok_or_else(|| serde::de::Error::custom(format!("{number} is not an integer")))
}

/// As [`integral`], for an optional field (use with `#[serde(default)]`).
pub fn optional_integral<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    match Option::<serde_json::Number>::deserialize(deserializer)? {
        None => Ok(None),
        Some(number) => {
            as_integer(&number).map(Some).ok_or_else(|| serde::de::Error::custom(format!("{number} is not an integer")))
        }
    }
}

fn as_integer(number: &serde_json::Number) -> Option<i64> {
    number.as_i64().or_else(|| number.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15).map(|f| f as i64))
}

/// A text id such as `whk_3f9c…`: the prefix, then 1 to 64 lowercase hex digits. Anything else
/// is a malformed id (400), not an absent one.
pub fn prefixed_id(text: &str, prefix: &str) -> Result<String, ApiError> {
    let valid = text.strip_prefix(prefix).is_some_and(|hex| {
        !hex.is_empty() && hex.len() <= 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    });
    if valid {
        return Ok(text.to_owned());
    }
    Err(ApiError::Domain(Error::validation_with(
        format!("`{}` is not a valid id; these ids look like {prefix}…", text.chars().take(40).collect::<String>()),
        serde_json::json!({ "field": "id" }),
    )))
}
