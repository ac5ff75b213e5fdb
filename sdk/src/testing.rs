//! A native test harness: in `cargo test` (any non-wasm target) the SDK's `http`, `state`,
//! `keystore`, `pki` and `log` talk to the fakes here instead of the host. Each test thread has its
//! own fakes, so tests run in parallel without seeing each other.
//!
//! ```ignore
//! use trellis_plugin_sdk::testing;
//!
//! #[test]
//! fn signs_through_the_rest_api() {
//!     testing::http::respond("POST", "https://ca.example/v1/sign", 200, r#"{"certificate":"…"}"#);
//!     let outcome = MyConnector::issue(&testing::context("ca_1"), &config, &request).unwrap();
//!     assert_eq!(testing::http::requests()[0].header("authorization").as_deref(), Some("Bearer k"));
//! }
//! ```

use std::cell::RefCell;
use std::collections::BTreeMap;

use crate::http::{HttpError, Request, Response, Target};
use crate::keystore::{KeyAlgorithm, KeyInfo, KeystoreError};
use crate::log::Level;
use crate::state::StateError;
use crate::CallContext;

#[derive(Default)]
struct Fakes {
    responses: Vec<(String, String, Result<Response, HttpError>)>,
    requests: Vec<SentRequest>,
    state: BTreeMap<String, Vec<u8>>,
    keys: BTreeMap<String, KeyAlgorithm>,
    logs: Vec<String>,
    pki: pki::Fake,
    clock_ms: u64,
    presented: Vec<crate::challenge::Challenge>,
    cleaned: Vec<crate::challenge::Challenge>,
    supported: Option<Vec<crate::challenge::ChallengeType>>,
    solver_failure: Option<crate::challenge::SolverError>,
}

thread_local! {
    static FAKES: RefCell<Fakes> = RefCell::new(Fakes::default());
}

fn with<T>(f: impl FnOnce(&mut Fakes) -> T) -> T {
    FAKES.with(|fakes| f(&mut fakes.borrow_mut()))
}

/// Clears every fake of this thread.
pub fn reset() {
    with(|fakes| *fakes = Fakes::default());
}

/// A call context for `record_id`.
pub fn context(record_id: &str) -> CallContext {
    CallContext::for_record(record_id)
}

/// Parses a configuration the way the host hands it to the plugin.
pub fn config<C: serde::de::DeserializeOwned>(json: serde_json::Value) -> Result<C, crate::PluginError> {
    crate::glue::parse_config(&json.to_string())
}

/// The JSON Schema the SDK derives from a config type and sends to the host.
pub fn config_schema<C: schemars::JsonSchema>() -> serde_json::Value {
    crate::glue::config_schema::<C>()
}

/// The secret members the SDK derives from a config type: (JSON pointer, withheld).
pub fn secret_fields<C: schemars::JsonSchema>() -> Vec<(String, bool)> {
    crate::glue::secret_fields::<C>()
}

/// Log lines of this thread so far, as `LEVEL message key=value …`.
pub fn logs() -> Vec<String> {
    with(|fakes| fakes.logs.clone())
}

pub(crate) fn log(level: Level, message: &str, fields: &[(&str, &str)]) {
    let level = match level {
        Level::Debug => "DEBUG",
        Level::Info => "INFO",
        Level::Warn => "WARN",
        Level::Error => "ERROR",
    };
    let fields: String = fields.iter().map(|(k, v)| format!(" {k}={v}")).collect();
    with(|fakes| fakes.logs.push(format!("{level} {message}{fields}")));
}

/// A request the plugin sent.
#[derive(Debug, Clone)]
pub struct SentRequest {
    /// Method, uppercase.
    pub method: String,
    /// URL.
    pub url: String,
    headers: Vec<(String, String)>,
    /// Body.
    pub body: Vec<u8>,
}

impl SentRequest {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone())
    }

    /// The body parsed as JSON (`Null` when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// Fake outbound HTTP.
pub mod http {
    use super::*;

    /// Answers the next `method` request to exactly `url` with `status` and `body` (answers
    /// queue up in order; the last one for a URL keeps answering).
    pub fn respond(method: &str, url: &str, status: u16, body: impl Into<Vec<u8>>) {
        let response = Response { status, headers: Vec::new(), body: body.into() };
        with(|fakes| fakes.responses.push((method.to_ascii_uppercase(), url.to_owned(), Ok(response))));
    }

    /// As [`respond`], with response headers (e.g. `replay-nonce`, `location`, `retry-after`).
    pub fn respond_with_headers(
        method: &str,
        url: &str,
        status: u16,
        headers: &[(&str, &str)],
        body: impl Into<Vec<u8>>,
    ) {
        let headers =
            headers.iter().map(|(name, value)| (name.to_ascii_lowercase(), value.as_bytes().to_vec())).collect();
        let response = Response { status, headers, body: body.into() };
        with(|fakes| fakes.responses.push((method.to_ascii_uppercase(), url.to_owned(), Ok(response))));
    }

    /// Fails the next `method` request to `url` as the host would (denied, timeout, …).
    pub fn fail(method: &str, url: &str, error: HttpError) {
        with(|fakes| fakes.responses.push((method.to_ascii_uppercase(), url.to_owned(), Err(error))));
    }

    /// Every request sent so far, in order.
    pub fn requests() -> Vec<SentRequest> {
        with(|fakes| fakes.requests.clone())
    }
}

pub(crate) fn send(request: Request, _target: Target) -> Result<Response, HttpError> {
    with(|fakes| {
        fakes.requests.push(SentRequest {
            method: request.method().to_owned(),
            url: request.url().to_owned(),
            headers: request
                .header_pairs()
                .map(|(name, value)| (name.to_ascii_lowercase(), String::from_utf8_lossy(value).into_owned()))
                .collect(),
            body: request.body_bytes().to_vec(),
        });
        let matching: Vec<usize> = fakes
            .responses
            .iter()
            .enumerate()
            .filter(|(_, (method, url, _))| method == request.method() && url == request.url())
            .map(|(i, _)| i)
            .collect();
        match matching.as_slice() {
            [] => Err(HttpError::Transport(format!(
                "testing: no fake response for {} {} (use testing::http::respond)",
                request.method(),
                request.url()
            ))),
            [only] => fakes.responses[*only].2.clone(),
            [first, ..] => fakes.responses.remove(*first).2,
        }
    })
}

/// The fake monotonic clock: starts at 0 per test thread; `clock::sleep_ms` advances it at
/// once instead of sleeping.
pub mod clock {
    use super::with;

    /// Milliseconds since the thread's fakes were reset.
    pub fn monotonic_ms() -> u64 {
        with(|fakes| fakes.clock_ms)
    }

    /// Advances the fake clock.
    pub fn sleep_ms(ms: u64) {
        with(|fakes| fakes.clock_ms = fakes.clock_ms.saturating_add(ms));
    }
}

/// The fake `challenge-solver`: supports every type unless told otherwise, and records what
/// was presented and cleaned up.
pub mod challenges {
    use super::with;
    use crate::challenge::{Challenge, ChallengeType, Presented, SolverError};

    /// The types the fake reports (default: HTTP-01 and DNS-01).
    pub fn set_supported(types: &[ChallengeType]) {
        with(|fakes| fakes.supported = Some(types.to_vec()));
    }

    /// Makes every following `present` fail with `error`.
    pub fn fail_with(error: SolverError) {
        with(|fakes| fakes.solver_failure = Some(error));
    }

    /// Challenges presented so far.
    pub fn presented() -> Vec<Challenge> {
        with(|fakes| fakes.presented.clone())
    }

    /// Challenges cleaned up so far.
    pub fn cleaned() -> Vec<Challenge> {
        with(|fakes| fakes.cleaned.clone())
    }

    pub(crate) fn supported() -> Vec<ChallengeType> {
        with(|fakes| fakes.supported.clone().unwrap_or_else(|| vec![ChallengeType::Http01, ChallengeType::Dns01]))
    }

    pub(crate) fn present(challenge: &Challenge) -> Result<Presented, SolverError> {
        with(|fakes| {
            if let Some(err) = fakes.solver_failure.clone() {
                return Err(err);
            }
            fakes.presented.push(challenge.clone());
            Ok(Presented { settle_seconds: 0 })
        })
    }

    pub(crate) fn cleanup(challenge: &Challenge) -> Result<(), SolverError> {
        with(|fakes| fakes.cleaned.push(challenge.clone()));
        Ok(())
    }
}

/// The fake `state` backend; read it directly in assertions.
pub mod state {
    use super::*;

    fn check(key: &str) -> Result<(), StateError> {
        if key.is_empty() || key.len() > 256 || key.chars().any(char::is_control) {
            return Err(StateError::InvalidKey(format!("{key:?}")));
        }
        Ok(())
    }

    /// Reads a value.
    pub fn get(key: &str) -> Result<Option<Vec<u8>>, StateError> {
        check(key)?;
        Ok(with(|fakes| fakes.state.get(key).cloned()))
    }

    /// Writes a value.
    pub fn set(key: &str, value: &[u8]) -> Result<(), StateError> {
        check(key)?;
        with(|fakes| fakes.state.insert(key.to_owned(), value.to_vec()));
        Ok(())
    }

    /// Removes a value.
    pub fn delete(key: &str) -> Result<(), StateError> {
        check(key)?;
        with(|fakes| fakes.state.remove(key));
        Ok(())
    }

    /// Keys by prefix, as the host lists them.
    pub fn list_keys(prefix: &str, after: Option<&str>, limit: u32) -> Result<Vec<String>, StateError> {
        Ok(with(|fakes| {
            fakes
                .state
                .keys()
                .filter(|k| k.starts_with(prefix) && after.is_none_or(|after| k.as_str() > after))
                .take(limit as usize)
                .cloned()
                .collect()
        }))
    }

    /// Compare-and-swap, as the host does it.
    pub fn compare_and_swap(key: &str, expected: Option<&[u8]>, new: Option<&[u8]>) -> Result<bool, StateError> {
        check(key)?;
        Ok(with(|fakes| {
            if fakes.state.get(key).map(Vec::as_slice) != expected {
                return false;
            }
            match new {
                Some(value) => fakes.state.insert(key.to_owned(), value.to_vec()),
                None => fakes.state.remove(key),
            };
            true
        }))
    }
}

/// The fake `keystore` backend. Keys are labels only and signatures are
/// `sig(<label>:<message>)` bytes: enough to test what a plugin does with them, not crypto.
pub mod keystore {
    use super::*;

    fn info(label: &str, algorithm: KeyAlgorithm) -> KeyInfo {
        KeyInfo {
            algorithm,
            spki_der: label.as_bytes().to_vec(),
            jwk: format!(r#"{{"kty":"fake","label":"{label}"}}"#),
            jwk_thumbprint: format!("thumbprint-{label}"),
            jws_algorithm: match algorithm {
                KeyAlgorithm::EcdsaP256 => "ES256",
                KeyAlgorithm::EcdsaP384 => "ES384",
                KeyAlgorithm::Ed25519 => "EdDSA",
                _ => "RS256",
            }
            .into(),
        }
    }

    /// Generates (records) a key.
    pub fn generate(label: &str, algorithm: KeyAlgorithm) -> Result<KeyInfo, KeystoreError> {
        with(|fakes| {
            if fakes.keys.contains_key(label) {
                return Err(KeystoreError::AlreadyExists(label.to_owned()));
            }
            fakes.keys.insert(label.to_owned(), algorithm);
            Ok(info(label, algorithm))
        })
    }

    /// The public key.
    pub fn public_key(label: &str) -> Result<KeyInfo, KeystoreError> {
        with(|fakes| fakes.keys.get(label).map(|a| info(label, *a)))
            .ok_or_else(|| KeystoreError::NotFound(label.to_owned()))
    }

    /// The labels.
    pub fn labels() -> Result<Vec<String>, KeystoreError> {
        Ok(with(|fakes| fakes.keys.keys().cloned().collect()))
    }

    /// `sig(<label>:<message>)`.
    pub fn sign(label: &str, message: &[u8]) -> Result<Vec<u8>, KeystoreError> {
        public_key(label)?;
        Ok([b"sig(", label.as_bytes(), b":", message, b")"].concat())
    }

    /// Forgets a key.
    pub fn delete(label: &str) -> Result<(), KeystoreError> {
        with(|fakes| fakes.keys.remove(label));
        Ok(())
    }
}

/// The fake `pki-core`: one authority per test thread, "signing" returns the CSR bytes as the
/// certificate (serials `01`, `02`, …) and revocations are recorded. Enough to test what a
/// connector does with the PKI, not the PKI.
pub mod pki {
    use super::with;
    use crate::pki::{
        AuthorityInfo, AuthoritySpec, IssuedEntry, IssuedPage, PkiError, RevocationInfo, SerialStatus, Signed,
    };
    use crate::{CertificateProfile, PageRequest, RevocationReason};

    #[derive(Default)]
    pub(super) struct Fake {
        authority: Option<AuthorityInfo>,
        spec: Option<AuthoritySpec>,
        issued: Vec<(IssuedEntry, CertificateProfile)>,
    }

    fn now() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
    }

    /// The spec `create_authority` was first called with.
    pub fn created_with() -> Option<AuthoritySpec> {
        with(|fakes| fakes.pki.spec.clone())
    }

    /// The profiles `sign_csr` signed under, in order.
    pub fn signed_profiles() -> Vec<CertificateProfile> {
        with(|fakes| fakes.pki.issued.iter().map(|(_, profile)| profile.clone()).collect())
    }

    /// Moves the authority's validity (to test expiry handling); no-op without one.
    pub fn set_validity(not_before: i64, not_after: i64) {
        with(|fakes| {
            if let Some(authority) = &mut fakes.pki.authority {
                authority.not_before = not_before;
                authority.not_after = not_after;
            }
        });
    }

    /// The authority, if created.
    pub fn authority() -> Result<Option<AuthorityInfo>, PkiError> {
        Ok(with(|fakes| fakes.pki.authority.clone()))
    }

    /// Creates the authority: subject `CN=<common name>`, the spec's validity from now.
    pub fn create_authority(spec: AuthoritySpec) -> Result<AuthorityInfo, PkiError> {
        with(|fakes| {
            if let Some(existing) = &fakes.pki.authority {
                return Err(PkiError::AuthorityExists(Box::new(existing.clone())));
            }
            let (subject, days, key_algorithm, parent) = match &spec {
                AuthoritySpec::Root(a) => (a.subject.common_name.clone(), a.validity_days, Some(a.key_algorithm), None),
                AuthoritySpec::Intermediate { parent_record_id, authority: a } => (
                    a.subject.common_name.clone(),
                    a.validity_days,
                    Some(a.key_algorithm),
                    Some(parent_record_id.clone()),
                ),
                AuthoritySpec::Imported { .. } => (Some("Imported CA".to_owned()), 365, None, None),
            };
            let subject = format!("CN={}", subject.unwrap_or_default());
            let info = AuthorityInfo {
                certificate_der: subject.as_bytes().to_vec(),
                issuer: if parent.is_some() { "CN=Parent CA".to_owned() } else { subject.clone() },
                subject,
                not_before: now(),
                not_after: now() + i64::from(days) * 86_400,
                key_algorithm,
                parent_record_id: parent,
            };
            fakes.pki.authority = Some(info.clone());
            fakes.pki.spec = Some(spec);
            Ok(info)
        })
    }

    /// "Signs": the certificate is the CSR bytes.
    pub fn sign_csr(csr_der: &[u8], profile: &CertificateProfile) -> Result<Signed, PkiError> {
        with(|fakes| {
            if fakes.pki.authority.is_none() {
                return Err(PkiError::NoAuthority);
            }
            if csr_der.is_empty() {
                return Err(PkiError::InvalidCsr("empty".into()));
            }
            let serial_number = format!("{:02x}", fakes.pki.issued.len() + 1);
            let entry = IssuedEntry {
                certificate_der: csr_der.to_vec(),
                serial_number: serial_number.clone(),
                revocation: None,
            };
            fakes.pki.issued.push((entry, profile.clone()));
            Ok(Signed { certificate_der: csr_der.to_vec(), chain_der: Vec::new(), serial_number })
        })
    }

    /// The authority's certificate alone.
    pub fn ca_chain() -> Result<Vec<Vec<u8>>, PkiError> {
        with(|fakes| fakes.pki.authority.as_ref().map(|a| vec![a.certificate_der.clone()]).ok_or(PkiError::NoAuthority))
    }

    /// Records the revocation (the first one stays).
    pub fn revoke(serial_hex: &str, reason: RevocationReason) -> Result<(), PkiError> {
        with(|fakes| {
            let (entry, _) = fakes
                .pki
                .issued
                .iter_mut()
                .find(|(e, _)| e.serial_number == serial_hex)
                .ok_or_else(|| PkiError::UnknownSerial(serial_hex.to_owned()))?;
            entry.revocation.get_or_insert(RevocationInfo { revoked_at: now(), reason });
            Ok(())
        })
    }

    /// Good, revoked or unknown.
    pub fn status(serial_hex: &str) -> Result<SerialStatus, PkiError> {
        Ok(with(|fakes| match fakes.pki.issued.iter().find(|(e, _)| e.serial_number == serial_hex) {
            None => SerialStatus::Unknown,
            Some((e, _)) => e.revocation.map_or(SerialStatus::Good, SerialStatus::Revoked),
        }))
    }

    /// Pages of what was signed; the cursor is the index of the next item.
    pub fn list_issued(page: &PageRequest) -> Result<IssuedPage, PkiError> {
        let start: usize = page.cursor.as_deref().and_then(|c| c.parse().ok()).unwrap_or(0);
        Ok(with(|fakes| {
            let issued = &fakes.pki.issued;
            let end = start.saturating_add(page.limit.max(1) as usize).min(issued.len());
            IssuedPage {
                items: issued.get(start..end).unwrap_or_default().iter().map(|(e, _)| e.clone()).collect(),
                next_cursor: (end < issued.len()).then(|| end.to_string()),
            }
        }))
    }
}
