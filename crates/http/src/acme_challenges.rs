//! The ACME HTTP-01 challenge listener: `GET /.well-known/acme-challenge/{token}` answers with
//! the key authorization a connector presented through `challenge-solver`, as `text/plain`;
//! anything else is 404, and so is a token asked for on another `Host` than the identifier it
//! was presented for. It runs on its own address (`TRELLIS_ACME_HTTP01_LISTEN`, usually
//! port 80 of the public name), apart from the API: CAs reach it unauthenticated.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use trellis_core::clock::SharedClock;
use trellis_core::plugins::challenges::{self, ChallengeAnswers};

#[derive(Clone)]
struct Responder {
    answers: Arc<dyn ChallengeAnswers>,
    clock: SharedClock,
}

/// The listener's router.
pub fn router(answers: Arc<dyn ChallengeAnswers>, clock: SharedClock) -> Router {
    Router::new()
        .route("/.well-known/acme-challenge/{token}", get(answer))
        .fallback(|| async { StatusCode::NOT_FOUND })
        .with_state(Responder { answers, clock })
}

async fn answer(State(responder): State<Responder>, Path(token): Path<String>, headers: HeaderMap) -> Response {
    let now_ms = responder.clock.now().timestamp_millis();
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    match challenges::answer_for(responder.answers.as_ref(), &token, host, now_ms).await {
        Ok(Some(key_authorization)) => {
            tracing::info!(token = %token, "served an ACME HTTP-01 answer");
            ([(header::CONTENT_TYPE, "text/plain")], key_authorization).into_response()
        }
        Ok(None) => StatusCode::NOT_FOUND.into_response(),
        Err(err) => {
            // The CA retries validation; a 503 tells it (and the operator's logs) why.
            tracing::warn!(error = %err, "cannot read ACME HTTP-01 answers");
            StatusCode::SERVICE_UNAVAILABLE.into_response()
        }
    }
}
