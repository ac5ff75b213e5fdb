//! JSON Web Signatures for ACME-like protocols (RFC 7515 flattened JSON serialization, as
//! RFC 8555 §6.2 uses it): requests signed by a [`crate::keystore`] key, identified by its
//! public `jwk` (account creation, revocation by certificate key) or by the account URL as
//! `kid` (everything else), with the `url` and `nonce` protected members; HS256 for External
//! Account Binding (RFC 8555 §7.3.4); base64url and SHA-256 helpers.
//!
//! ```ignore
//! let key = keystore::get_or_generate("acme-account", KeyAlgorithm::EcdsaP256)?;
//! let body = jws::sign("acme-account", &key, jws::KeyId::Kid(&account_url), &url, Some(&nonce),
//!                      Some(&serde_json::json!({ "identifiers": [...] })))?;
//! http::Request::post(&url).header("content-type", jws::CONTENT_TYPE).json(&body)?.send()?;
//! ```
//! The private key never enters the plugin: the host signs (`keystore::sign`).

use base64::Engine as _;
use hmac::Mac as _;
use serde_json::{json, Value};
use sha2::Digest as _;

use crate::keystore::{self, KeyInfo};
use crate::PluginError;

/// The media type of a JWS request body (RFC 8555 §6.2).
pub const CONTENT_TYPE: &str = "application/jose+json";

/// base64url without padding (RFC 7515 §2).
pub fn base64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Decodes base64url, with or without padding.
pub fn base64url_decode(text: &str) -> Result<Vec<u8>, PluginError> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text.trim().trim_end_matches('='))
        .map_err(|err| PluginError::invalid_input(format!("not base64url: {err}")))
}

/// SHA-256.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    sha2::Sha256::digest(bytes).into()
}

/// HMAC-SHA256 (RFC 2104).
pub fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    // HMAC takes keys of any length; `new_from_slice` cannot fail for it.
    match hmac::Hmac::<sha2::Sha256>::new_from_slice(key) {
        Ok(mut mac) => {
            mac.update(message);
            mac.finalize().into_bytes().into()
        }
        Err(_) => [0; 32],
    }
}

/// How the protected header names the signing key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyId<'a> {
    /// The public key itself (`jwk`): new accounts, and requests signed by a certificate key.
    Jwk,
    /// A key identifier (`kid`): the ACME account URL.
    Kid(&'a str),
}

/// Signs `payload` (`None`: the empty payload of a POST-as-GET, RFC 8555 §6.3) for `url` with
/// the keystore key `label` (`key` is its [`keystore::public_key`]). Returns the flattened
/// JWS `{"protected", "payload", "signature"}` to send as the body.
pub fn sign(
    label: &str,
    key: &KeyInfo,
    id: KeyId<'_>,
    url: &str,
    nonce: Option<&str>,
    payload: Option<&Value>,
) -> Result<Value, PluginError> {
    let mut protected = json!({ "alg": key.jws_algorithm, "url": url });
    match id {
        KeyId::Jwk => {
            let jwk: Value = serde_json::from_str(&key.jwk)
                .map_err(|err| PluginError::internal(format!("the keystore's JWK is not JSON: {err}")))?;
            protected["jwk"] = jwk;
        }
        KeyId::Kid(kid) => protected["kid"] = Value::String(kid.to_owned()),
    }
    if let Some(nonce) = nonce {
        protected["nonce"] = Value::String(nonce.to_owned());
    }
    let protected = base64url(protected.to_string().as_bytes());
    let payload = match payload {
        Some(value) => base64url(value.to_string().as_bytes()),
        None => String::new(),
    };
    let signature = keystore::sign(label, format!("{protected}.{payload}").as_bytes())?;
    Ok(json!({ "protected": protected, "payload": payload, "signature": base64url(&signature) }))
}

/// The `externalAccountBinding` member of a new-account request (RFC 8555 §7.3.4): the
/// account's public JWK signed with HS256 under the CA-issued MAC key, for `new_account_url`.
/// `hmac_key` is the decoded key (CAs hand it out base64url-encoded: [`base64url_decode`]).
pub fn external_account_binding(eab_kid: &str, hmac_key: &[u8], account_jwk: &str, new_account_url: &str) -> Value {
    let protected = json!({ "alg": "HS256", "kid": eab_kid, "url": new_account_url });
    let protected = base64url(protected.to_string().as_bytes());
    let payload = base64url(account_jwk.as_bytes());
    let signature = hmac_sha256(hmac_key, format!("{protected}.{payload}").as_bytes());
    json!({ "protected": protected, "payload": payload, "signature": base64url(&signature) })
}

/// The decoded protected header of a flattened JWS (for tests and logs).
pub fn protected_header(jws: &Value) -> Result<Value, PluginError> {
    let text = jws.get("protected").and_then(Value::as_str).unwrap_or_default();
    serde_json::from_slice(&base64url_decode(text)?)
        .map_err(|err| PluginError::invalid_input(format!("protected header is not JSON: {err}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keystore::KeyAlgorithm;
    use crate::testing;

    #[test]
    fn base64url_round_trips_without_padding() {
        assert_eq!(base64url(&[0xfb, 0xff]), "-_8");
        assert_eq!(base64url_decode("-_8").unwrap(), vec![0xfb, 0xff]);
        assert_eq!(base64url_decode("-_8=").unwrap(), vec![0xfb, 0xff]);
        assert!(base64url_decode("+/").is_err());
    }

    #[test]
    fn hmac_matches_rfc_4231() {
        // RFC 4231 test case 2.
        let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(hex(&mac), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
        assert_eq!(hex(&sha256(b"abc"))[..16], *"ba7816bf8f01cfea");
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn signs_with_jwk_or_kid_over_protected_dot_payload() {
        testing::reset();
        let key = keystore::generate("acct", KeyAlgorithm::EcdsaP256).unwrap();
        let jws = sign("acct", &key, KeyId::Jwk, "https://ca/new-acct", Some("n1"), Some(&json!({"a": 1}))).unwrap();
        let header = protected_header(&jws).unwrap();
        assert_eq!(header["alg"], "ES256");
        assert_eq!(header["jwk"]["label"], "acct");
        assert_eq!(header["nonce"], "n1");
        assert_eq!(header["url"], "https://ca/new-acct");
        assert!(header.get("kid").is_none());
        let signed = format!("{}.{}", jws["protected"].as_str().unwrap(), jws["payload"].as_str().unwrap());
        let signature = base64url_decode(jws["signature"].as_str().unwrap()).unwrap();
        assert_eq!(signature, [b"sig(acct:", signed.as_bytes(), b")"].concat());

        let get = sign("acct", &key, KeyId::Kid("https://ca/acct/1"), "https://ca/order/1", Some("n2"), None).unwrap();
        assert_eq!(get["payload"], "", "POST-as-GET");
        let header = protected_header(&get).unwrap();
        assert_eq!(header["kid"], "https://ca/acct/1");
        assert!(header.get("jwk").is_none());
    }

    #[test]
    fn external_account_binding_is_hs256_over_the_account_jwk() {
        let jwk = r#"{"crv":"P-256","kty":"EC","x":"x","y":"y"}"#;
        let eab = external_account_binding("kid-1", b"secret", jwk, "https://ca/new-acct");
        let header = protected_header(&eab).unwrap();
        assert_eq!(header, json!({ "alg": "HS256", "kid": "kid-1", "url": "https://ca/new-acct" }));
        assert_eq!(base64url_decode(eab["payload"].as_str().unwrap()).unwrap(), jwk.as_bytes());
        let input = format!("{}.{}", eab["protected"].as_str().unwrap(), eab["payload"].as_str().unwrap());
        assert_eq!(eab["signature"], base64url(&hmac_sha256(b"secret", input.as_bytes())));
    }
}
