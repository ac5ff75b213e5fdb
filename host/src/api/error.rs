//! The one place where domain errors become HTTP responses (spec §7 shape).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::error::Error;

/// A domain error on its way to the client.
#[derive(Debug)]
pub struct ApiError(pub Error);

impl<E: Into<Error>> From<E> for ApiError {
    fn from(err: E) -> Self {
        ApiError(err.into())
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

pub fn status_of(err: &Error) -> StatusCode {
    match err {
        Error::NotFound(_) => StatusCode::NOT_FOUND,
        Error::Validation { .. } => StatusCode::BAD_REQUEST,
        Error::Conflict(_) => StatusCode::CONFLICT,
        Error::Unauthorized => StatusCode::UNAUTHORIZED,
        Error::Forbidden(_) | Error::MissingScope(_) | Error::PrivateKeyNotAvailable => StatusCode::FORBIDDEN,
        Error::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
        Error::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        Error::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        Error::Store(_) | Error::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let err = self.0;
        let status = status_of(&err);
        // Server faults are logged once, here, with their cause; the client gets a
        // stable code and a generic message, never internals.
        let message = if status.is_server_error() {
            tracing::error!(code = err.code(), error = ?err, "request failed");
            "Internal server error; the request id identifies it in the logs".to_string()
        } else {
            err.to_string()
        };
        let mut body = json!({ "error": { "code": err.code(), "message": message } });
        if let Error::Validation { details: Some(details), .. } = &err {
            body["error"]["details"] = details.clone();
        }
        let mut response = (status, Json(body)).into_response();
        if let Error::RateLimited { retry_after_secs } = err {
            if let Ok(value) = HeaderValue::from_str(&retry_after_secs.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
        }
        response
    }
}
