//! `POST /plugins/upload`: a new plugin version from a `multipart/form-data` form (the component,
//! optionally its detached signature, whether to activate it), installed by the same use case as
//! `POST /api/plugins` (`plugins::service::install`). The form's token travels as a field of
//! the multipart body, so the body is parsed here: a file upload is the one console form that
//! cannot be URL-encoded.

use axum::body::{Body, Bytes};
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
const MAX_FORM_BYTES: u64 = (32 << 20) + (64 << 10);
/// A refused upload this small is read before answering, so the browser sees the answer on a
/// clean connection (as the API's install does).
const DRAIN_BEFORE_REFUSING: usize = 1 << 20;

/// The upload form's fields (RFC 7578 `multipart/form-data`, parsed by multer).
#[derive(Debug, Default)]
struct UploadForm {
    csrf: String,
    /// `None` when the file input was absent or left empty.
    component: Option<Bytes>,
    signature: Option<Bytes>,
    activate: Option<String>,
}

/// A form multer could not read: too large (the API's limit), or not a multipart body.
fn unreadable(err: multer::Error) -> PageError {
    match err {
        multer::Error::StreamSizeExceeded { .. } | multer::Error::FieldSizeExceeded { .. } => {
            PageError::Api(ApiError::PayloadTooLarge)
        }
        other => PageError::from(Error::validation(format!("The upload form could not be read: {other}"))),
    }
}

async fn read_form(headers: &HeaderMap, body: Body) -> Result<UploadForm, PageError> {
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let boundary = multer::parse_boundary(content_type)
        .map_err(|_| PageError::from(Error::validation("The upload form must be sent as multipart/form-data")))?;
    let limits = multer::Constraints::new().size_limit(multer::SizeLimit::new().whole_stream(MAX_FORM_BYTES));
    let mut multipart = multer::Multipart::with_constraints(body.into_data_stream(), boundary, limits);
    let mut form = UploadForm::default();
    while let Some(field) = multipart.next_field().await.map_err(unreadable)? {
        let name = field.name().unwrap_or_default().to_string();
        let data = field.bytes().await.map_err(unreadable)?;
        let file = Some(data.clone()).filter(|d| !d.is_empty());
        match name.as_str() {
            "csrf" => form.csrf = String::from_utf8_lossy(&data).into_owned(),
            "component" => form.component = file,
            "signature" => form.signature = file,
            "activate" => form.activate = Some(String::from_utf8_lossy(&data).into_owned()),
            _ => {}
        }
    }
    Ok(form)
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
    let form = read_form(&headers, body).await?;
    if !constant_time_eq(form.csrf.as_bytes(), console.csrf.as_bytes()) {
        return Err(PageError::Api(ApiError::CrossOrigin));
    }
    let Some(component) = form.component.as_deref() else {
        let notice = Notice::refused("Choose the component file (.wasm) to upload.".to_string());
        return plugins_page(&ctx, &console, Some(notice), axum::http::StatusCode::BAD_REQUEST).await;
    };
    let activation = match form.activate.as_deref().unwrap_or("if-newer") {
        "always" => Activation::Always,
        "never" => Activation::Never,
        _ => Activation::IfNewer,
    };
    let signature = form.signature.as_deref();
    match plugins::install(&ctx.plugin_deps(), &console.caller, component, signature, activation).await {
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
    use super::signature_status;
    use trellis_core::plugins::signatures::SignatureMode;

    #[test]
    fn the_signature_status_is_said_in_words() {
        assert!(signature_status(SignatureMode::Require, Some("k1"), None).contains("trusted key k1"));
        let warning = ("plugin.unsigned".to_string(), "the component carries no signature".to_string());
        let warned = signature_status(SignatureMode::Warn, None, Some(&warning));
        assert!(warned.contains("plugin.unsigned") && warned.contains("warn mode"), "{warned}");
        assert!(signature_status(SignatureMode::Off, None, None).contains("off"));
    }
}
