//! The IdP's signing keys (its JWKS) and the ID token's signature.
//!
//! Keys are fetched on first use and cached. A token signed with a key the cache does not know
//! (the IdP rotated its keys) triggers one refresh, but at most one such refresh per
//! `min_refresh` interval: a stream of tokens naming unknown keys cannot make Trellis hammer
//! the IdP. Concurrent callbacks that miss together wait for the same refresh (the lock is held
//! across it).

use jsonwebtoken::jwk::{Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};

use super::OidcError;

/// Signature algorithms an ID token may use. `none` and the HMAC family (whose key would be
/// the client secret, shared with whoever holds it) are refused.
const ALLOWED: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

#[derive(Default)]
pub(super) struct KeyCache {
    keys: Option<Vec<Jwk>>,
    /// When a refresh was last forced by an unknown key (ms), for the rate limit.
    last_forced_refresh: Option<i64>,
}

/// What a fetch of the JWKS answers: the usable keys (a key of a type this build cannot use is
/// skipped, rather than failing the whole set).
pub(super) fn parse_jwks(body: &[u8]) -> Result<Vec<Jwk>, OidcError> {
    #[derive(serde::Deserialize)]
    struct Set {
        keys: Vec<serde_json::Value>,
    }
    let set: Set = serde_json::from_slice(body)
        .map_err(|err| OidcError::ProviderInvalid(format!("the JWKS is not a JSON key set: {err}")))?;
    Ok(set
        .keys
        .into_iter()
        .filter_map(|value| serde_json::from_value::<Jwk>(value).ok())
        .filter(|jwk| !matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)))
        .collect())
}

/// The header of a token, with its algorithm checked against [`ALLOWED`].
pub(super) fn header(token: &str) -> Result<(Algorithm, Option<String>), OidcError> {
    let header = jsonwebtoken::decode_header(token)
        .map_err(|err| OidcError::TokenMalformed(format!("the ID token's header does not parse: {err}")))?;
    if !ALLOWED.contains(&header.alg) {
        return Err(OidcError::TokenAlgorithm(format!("{:?}", header.alg)));
    }
    Ok((header.alg, header.kid))
}

impl KeyCache {
    /// The keys that may have signed a token with this `kid`: the one with that id, or, when the
    /// token names none, every key.
    fn candidates(&self, kid: Option<&str>) -> Vec<Jwk> {
        let keys = self.keys.as_deref().unwrap_or_default();
        match kid {
            Some(kid) => keys.iter().filter(|k| k.common.key_id.as_deref() == Some(kid)).cloned().collect(),
            None => keys.to_vec(),
        }
    }

    pub(super) fn is_loaded(&self) -> bool {
        self.keys.is_some()
    }

    pub(super) fn load(&mut self, keys: Vec<Jwk>) {
        self.keys = Some(keys);
    }

    /// Keys for `kid`; `Ok(None)` when none is known and a refresh is allowed now (the caller
    /// then refreshes and asks again with `after_refresh`).
    pub(super) fn lookup(
        &mut self,
        kid: Option<&str>,
        now_ms: i64,
        min_refresh_ms: i64,
        after_refresh: bool,
    ) -> Result<Option<Vec<Jwk>>, OidcError> {
        let found = self.candidates(kid);
        if !found.is_empty() {
            return Ok(Some(found));
        }
        if after_refresh {
            return Err(OidcError::UnknownKey(kid.unwrap_or("(none)").to_owned()));
        }
        let allowed = self.last_forced_refresh.is_none_or(|at| now_ms - at >= min_refresh_ms);
        if !allowed {
            tracing::warn!(target: "trellis::security", kid, "ID token signed with an unknown key; JWKS refresh rate-limited");
            return Err(OidcError::UnknownKey(kid.unwrap_or("(none)").to_owned()));
        }
        self.last_forced_refresh = Some(now_ms);
        Ok(None)
    }
}

/// Checks the token's signature with one of `keys`; answers its claims (not yet checked).
pub(super) fn verify_signature(token: &str, alg: Algorithm, keys: &[Jwk]) -> Result<serde_json::Value, OidcError> {
    let mut validation = Validation::new(alg);
    // The claims are checked by the caller, with the injected clock and one error code each.
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    validation.required_spec_claims.clear();
    let mut last = OidcError::UnknownKey("(no usable key)".into());
    for jwk in keys {
        let Ok(key) = DecodingKey::from_jwk(jwk) else { continue };
        match jsonwebtoken::decode::<serde_json::Value>(token, &key, &validation) {
            Ok(data) => return Ok(data.claims),
            Err(err) => {
                last = match err.kind() {
                    jsonwebtoken::errors::ErrorKind::InvalidSignature
                    | jsonwebtoken::errors::ErrorKind::InvalidAlgorithm
                    | jsonwebtoken::errors::ErrorKind::InvalidEcdsaKey
                    | jsonwebtoken::errors::ErrorKind::InvalidRsaKey(_)
                    | jsonwebtoken::errors::ErrorKind::InvalidEddsaKey => OidcError::BadSignature,
                    _ => OidcError::TokenMalformed(format!("the ID token does not decode: {err}")),
                };
            }
        }
    }
    Err(last)
}
