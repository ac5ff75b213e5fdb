//! The console's static files, embedded in the binary and served under names that carry a
//! hash of their content (`console.3f9c0a1b2c3d4e5f.css`): a page always names the current
//! file, so browsers may cache one for a year; the ETag answers revalidations with 304.

use std::sync::OnceLock;

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

struct Asset {
    /// `console.css` → served as `console.<hash>.css`.
    stem: &'static str,
    extension: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

/// htmx 2.0.8 from npm (`htmx.org`, dist/htmx.min.js), vendored unchanged.
const FILES: [Asset; 2] = [
    Asset {
        stem: "console",
        extension: "css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("../static/console.css"),
    },
    Asset {
        stem: "htmx-2.0.8.min",
        extension: "js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../static/htmx-2.0.8.min.js"),
    },
];

struct Served {
    name: String,
    etag: String,
    asset: &'static Asset,
}

fn served() -> &'static [Served] {
    static SERVED: OnceLock<Vec<Served>> = OnceLock::new();
    SERVED.get_or_init(|| {
        FILES
            .iter()
            .map(|asset| {
                let digest = hex::encode(Sha256::digest(asset.body));
                let hash = &digest[..16];
                Served {
                    name: format!("{}.{hash}.{}", asset.stem, asset.extension),
                    etag: format!("\"{hash}\""),
                    asset,
                }
            })
            .collect()
    })
}

/// The URL of the stylesheet.
pub fn css_url() -> String {
    url_of("console")
}

/// The URL of htmx.
pub fn htmx_url() -> String {
    url_of("htmx-2.0.8.min")
}

fn url_of(stem: &str) -> String {
    served().iter().find(|s| s.asset.stem == stem).map(|s| format!("/assets/{}", s.name)).unwrap_or_default()
}

pub async fn serve(Path(file): Path<String>, headers: HeaderMap) -> Response {
    let Some(found) = served().iter().find(|s| s.name == file) else {
        return (StatusCode::NOT_FOUND, "no such asset").into_response();
    };
    let etag = HeaderValue::from_str(&found.etag).unwrap_or(HeaderValue::from_static("\"\""));
    let cache = HeaderValue::from_static("public, max-age=31536000, immutable");
    if headers.get(header::IF_NONE_MATCH).is_some_and(|v| v.as_bytes() == found.etag.as_bytes()) {
        return (StatusCode::NOT_MODIFIED, [(header::ETAG, etag), (header::CACHE_CONTROL, cache)]).into_response();
    }
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(found.asset.content_type)),
            (header::ETAG, etag),
            (header::CACHE_CONTROL, cache),
        ],
        found.asset.body,
    )
        .into_response()
}
