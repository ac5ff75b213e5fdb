//! `POST /plugins/upload`: a new plugin version from a `multipart/form-data` form (the component,
//! optionally its detached signature, whether to activate it), installed by the same use case as
//! `POST /api/plugins` (`plugins::service::install`). The form's token travels as a field of
//! the multipart body, so the body is parsed here: a file upload is the one console form that
//! cannot be URL-encoded.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::Response;
use trellis_core::context::SharedContext;
use trellis_core::crypto::constant_time_eq;
use trellis_core::error::Error;
use trellis_core::plugins::service as plugins;
use trellis_core::plugins::signatures::SignatureMode;
use trellis_core::plugins::Activation;
use trellis_http::error::ApiError;

use crate::fleet::{plugins_page, Notice};
use crate::page::PageError;
use crate::session::Console;

/// The API's component limit (32 MiB), plus room for the form's other fields and the
/// multipart framing.
const MAX_FORM_BYTES: usize = (32 << 20) + (64 << 10);
/// A refused upload this small is read before answering, so the browser sees the answer on a
/// clean connection (as the API's install does).
const DRAIN_BEFORE_REFUSING: usize = 1 << 20;

/// One part of a `multipart/form-data` body.
#[derive(Debug, PartialEq)]
pub struct Part<'a> {
    pub name: String,
    /// Present for a file input (possibly empty: no file chosen).
    pub file_name: Option<String>,
    pub data: &'a [u8],
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The `boundary` parameter of a `multipart/form-data` content type.
pub fn boundary(content_type: &str) -> Option<String> {
    let mut params = content_type.split(';');
    if !params.next()?.trim().eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    params
        .find_map(|p| {
            let (key, value) = p.split_once('=')?;
            key.trim().eq_ignore_ascii_case("boundary").then(|| value.trim().trim_matches('"').to_string())
        })
        .filter(|b| !b.is_empty() && b.len() <= 70)
}

/// A `Content-Disposition` parameter (`name`, `filename`), quoted or not.
fn disposition_param(line: &str, param: &str) -> Option<String> {
    line.split(';').skip(1).find_map(|p| {
        let (key, value) = p.split_once('=')?;
        key.trim().eq_ignore_ascii_case(param).then(|| value.trim().trim_matches('"').to_string())
    })
}

/// Splits a `multipart/form-data` body (RFC 7578) into its parts; `None` when it is not one.
/// Each part's headers end at the first blank line; its data runs to the CRLF before the next
/// delimiter, so binary content (a wasm component) is kept byte for byte.
pub fn parse<'a>(body: &'a [u8], boundary: &str) -> Option<Vec<Part<'a>>> {
    let delimiter = format!("--{boundary}");
    let between = format!("\r\n--{boundary}");
    let start = find(body, delimiter.as_bytes())?;
    let mut rest = &body[start + delimiter.len()..];
    let mut parts = Vec::new();
    loop {
        // After a delimiter: `--` closes the body, CRLF opens a part.
        if rest.starts_with(b"--") {
            return Some(parts);
        }
        rest = rest.strip_prefix(b"\r\n")?;
        let head_end = find(rest, b"\r\n\r\n")?;
        let head = std::str::from_utf8(&rest[..head_end]).ok()?;
        let disposition = head
            .split("\r\n")
            .find(|l| l.split_once(':').is_some_and(|(k, _)| k.trim().eq_ignore_ascii_case("content-disposition")))?;
        let name = disposition_param(disposition, "name")?;
        let file_name = disposition_param(disposition, "filename");
        let data_and_rest = &rest[head_end + 4..];
        let end = find(data_and_rest, between.as_bytes())?;
        parts.push(Part { name, file_name, data: &data_and_rest[..end] });
        rest = &data_and_rest[end + between.len()..];
    }
}

fn text_field<'a>(parts: &'a [Part<'_>], name: &str) -> Option<&'a str> {
    parts.iter().find(|p| p.name == name).and_then(|p| std::str::from_utf8(p.data).ok())
}

/// A chosen file's bytes (`None`: the input was absent or left empty).
fn file_field<'a>(parts: &'a [Part<'_>], name: &str) -> Option<&'a [u8]> {
    parts.iter().find(|p| p.name == name).map(|p| p.data).filter(|d| !d.is_empty())
}

/// What the answer says about the signature of an installed version.
fn signature_status(mode: SignatureMode, signer: Option<&str>, warning: Option<&(String, String)>) -> String {
    match (signer, warning) {
        (Some(key), _) => format!("Signed by the trusted key {key}."),
        (None, Some((code, message))) => format!(
            "Installed without a trusted signature ({code}: {message}). Signature checks are in warn mode; \
             with TRELLIS_PLUGIN_SIGNATURES=require this upload would have been refused."
        ),
        (None, None) if mode == SignatureMode::Off => "Not checked: signature checks are off.".to_string(),
        (None, None) => "No trusted signature.".to_string(),
    }
}

pub async fn upload(
    State(ctx): State<SharedContext>,
    console: Console,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, PageError> {
    // Authorize before reading up to 32 MiB: a non-administrator's upload is refused unread.
    if let Err(refused) = plugins::authorize_install(&console.caller) {
        let _ = axum::body::to_bytes(body, DRAIN_BEFORE_REFUSING).await;
        return Err(refused.into());
    }
    let bytes = axum::body::to_bytes(body, MAX_FORM_BYTES).await.map_err(|err| {
        if std::error::Error::source(&err).is_some_and(|source| source.is::<http_body_util::LengthLimitError>()) {
            PageError::Api(ApiError::PayloadTooLarge)
        } else {
            PageError::from(Error::validation("The form could not be read"))
        }
    })?;
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let parts = boundary(content_type)
        .and_then(|b| parse(&bytes, &b))
        .ok_or_else(|| PageError::from(Error::validation("The upload form must be sent as multipart/form-data")))?;
    let token = text_field(&parts, "csrf").unwrap_or_default();
    if !constant_time_eq(token.as_bytes(), console.csrf.as_bytes()) {
        return Err(PageError::Api(ApiError::CrossOrigin));
    }
    let Some(component) = file_field(&parts, "component") else {
        let notice = Notice::refused("Choose the component file (.wasm) to upload.".to_string());
        return plugins_page(&ctx, &console, Some(notice), axum::http::StatusCode::BAD_REQUEST).await;
    };
    let activation = match text_field(&parts, "activate").unwrap_or("if-newer") {
        "always" => Activation::Always,
        "never" => Activation::Never,
        _ => Activation::IfNewer,
    };
    let signature = file_field(&parts, "signature");
    match plugins::install(&ctx, &console.caller, component, signature, activation).await {
        Ok(installed) => {
            let notice = Notice {
                ok: true,
                message: format!(
                    "Installed {} {} ({}){}.",
                    installed.info.id,
                    installed.info.version,
                    installed.info.kind.as_str(),
                    if installed.active { ", now active" } else { ", not active" }
                ),
                signature: Some(signature_status(
                    ctx.plugins.signature_mode(),
                    installed.signer_key_id.as_deref(),
                    installed.signature_warning.as_ref(),
                )),
            };
            plugins_page(&ctx, &console, Some(notice), axum::http::StatusCode::OK).await
        }
        Err(err) => {
            let status = trellis_http::error::status_of(&err);
            if status.is_server_error() {
                return Err(err.into());
            }
            let message = ApiError::Domain(err).message();
            plugins_page(&ctx, &console, Some(Notice::refused(format!("The upload was refused: {message}"))), status)
                .await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{boundary, parse, signature_status, Part};
    use trellis_core::plugins::signatures::SignatureMode;

    #[test]
    fn the_boundary_is_read_from_the_content_type() {
        assert_eq!(boundary("multipart/form-data; boundary=----x1").as_deref(), Some("----x1"));
        assert_eq!(boundary("Multipart/Form-Data; charset=utf-8; boundary=\"a b\"").as_deref(), Some("a b"));
        assert_eq!(boundary("application/x-www-form-urlencoded"), None);
        assert_eq!(boundary("multipart/form-data"), None);
    }

    #[test]
    fn parts_keep_binary_data_byte_for_byte() {
        let mut body = b"--XY\r\nContent-Disposition: form-data; name=\"csrf\"\r\n\r\nabc\r\n".to_vec();
        body.extend_from_slice(
            b"--XY\r\nContent-Disposition: form-data; name=\"component\"; filename=\"p.wasm\"\r\n\
              Content-Type: application/wasm\r\n\r\n",
        );
        // Bytes that look like framing inside the file: CRLF, dashes, a partial delimiter.
        let file = b"\0asm\r\n--X\r\n\xff\r\n";
        body.extend_from_slice(file);
        body.extend_from_slice(
            b"\r\n--XY\r\nContent-Disposition: form-data; name=\"signature\"; filename=\"\"\r\n\r\n",
        );
        body.extend_from_slice(b"\r\n--XY--\r\n");
        let parts = parse(&body, "XY").unwrap_or_default();
        assert_eq!(
            parts,
            vec![
                Part { name: "csrf".into(), file_name: None, data: b"abc" },
                Part { name: "component".into(), file_name: Some("p.wasm".into()), data: file },
                Part { name: "signature".into(), file_name: Some(String::new()), data: b"" },
            ]
        );
    }

    #[test]
    fn a_body_that_is_not_multipart_is_none() {
        assert_eq!(parse(b"csrf=abc", "XY"), None);
        // A part that never ends.
        assert_eq!(parse(b"--XY\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nno end", "XY"), None);
        // A part without a name.
        assert_eq!(parse(b"--XY\r\nContent-Type: text/plain\r\n\r\nx\r\n--XY--", "XY"), None);
    }

    #[test]
    fn the_signature_status_is_said_in_words() {
        assert!(signature_status(SignatureMode::Require, Some("k1"), None).contains("trusted key k1"));
        let warning = ("plugin.unsigned".to_string(), "the component carries no signature".to_string());
        let warned = signature_status(SignatureMode::Warn, None, Some(&warning));
        assert!(warned.contains("plugin.unsigned") && warned.contains("warn mode"), "{warned}");
        assert!(signature_status(SignatureMode::Off, None, None).contains("off"));
    }
}
