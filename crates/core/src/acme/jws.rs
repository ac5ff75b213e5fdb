//! JWS as ACME uses it (RFC 8555 §6.2): flattened JSON serialization, the protected header's
//! `alg`, `nonce`, `url` and exactly one of `jwk` / `kid`. Signatures are checked by `ring`
//! (ES256, ES384, RS256, EdDSA); nothing here does signature math. Thumbprints per RFC 7638.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::signature::{self, UnparsedPublicKey};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::problem::{Problem, ProblemType};

/// The longest request body the ACME endpoints read (a CSR with many names fits easily).
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// A flattened JWS, its protected header decoded.
#[derive(Debug, Clone)]
pub struct Jws {
    pub protected_b64: String,
    pub payload_b64: String,
    pub signature: Vec<u8>,
    pub header: Header,
}

#[derive(Debug, Clone)]
pub struct Header {
    pub alg: String,
    pub nonce: Option<String>,
    pub url: Option<String>,
    pub jwk: Option<Jwk>,
    pub kid: Option<String>,
}

/// A public key as a JWK; only the members RFC 7638 hashes are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Jwk {
    Ec { crv: String, x: String, y: String },
    Rsa { n: String, e: String },
    Okp { crv: String, x: String },
}

pub fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

pub fn unb64(text: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(text.trim_end_matches('=')).ok()
}

fn malformed(detail: impl Into<String>) -> Problem {
    Problem::new(ProblemType::Malformed, detail)
}

impl Jws {
    /// Parses a flattened JWS (the body of every ACME POST).
    pub fn parse(body: &[u8]) -> Result<Jws, Problem> {
        if body.len() > MAX_BODY_BYTES {
            return Err(malformed(format!("the request body is larger than {MAX_BODY_BYTES} bytes")));
        }
        let value: Value =
            serde_json::from_slice(body).map_err(|_| malformed("the body is not a JSON object (flattened JWS)"))?;
        Jws::from_value(&value)
    }

    pub fn from_value(value: &Value) -> Result<Jws, Problem> {
        let member = |name: &str| {
            value.get(name).and_then(Value::as_str).map(str::to_owned).ok_or_else(|| {
                malformed(format!("the JWS has no `{name}` member (flattened JSON serialization is required)"))
            })
        };
        let (protected_b64, payload_b64, signature_b64) =
            (member("protected")?, member("payload")?, member("signature")?);
        let protected = unb64(&protected_b64).ok_or_else(|| malformed("the protected header is not base64url"))?;
        let protected: Value =
            serde_json::from_slice(&protected).map_err(|_| malformed("the protected header is not JSON"))?;
        let signature = unb64(&signature_b64).ok_or_else(|| malformed("the signature is not base64url"))?;
        let text = |name: &str| protected.get(name).and_then(Value::as_str).map(str::to_owned);
        let alg = text("alg").ok_or_else(|| malformed("the protected header has no `alg`"))?;
        let jwk = match protected.get("jwk") {
            Some(jwk) => Some(Jwk::from_value(jwk)?),
            None => None,
        };
        let header = Header { alg, nonce: text("nonce"), url: text("url"), jwk, kid: text("kid") };
        Ok(Jws { protected_b64, payload_b64, signature, header })
    }

    /// The payload's bytes (empty for POST-as-GET).
    pub fn payload(&self) -> Result<Vec<u8>, Problem> {
        unb64(&self.payload_b64).ok_or_else(|| malformed("the payload is not base64url"))
    }

    /// The payload as JSON; an empty payload is refused (only POST-as-GET has one).
    pub fn payload_json(&self) -> Result<Value, Problem> {
        let bytes = self.payload()?;
        serde_json::from_slice(&bytes).map_err(|_| malformed("the payload is not JSON"))
    }

    /// The refusals every account request shares: `none` and MACs are not account signatures.
    pub fn check_alg(&self) -> Result<(), Problem> {
        match self.header.alg.as_str() {
            "ES256" | "ES384" | "RS256" | "EdDSA" => Ok(()),
            other => Err(Problem::new(
                ProblemType::BadSignatureAlgorithm,
                format!("`{other}` is not accepted: sign with ES256, ES384, RS256 or EdDSA"),
            )
            .with_algorithms()),
        }
    }

    /// Verifies the signature with `key`.
    pub fn verify(&self, key: &Jwk) -> Result<(), Problem> {
        let message = format!("{}.{}", self.protected_b64, self.payload_b64);
        key.verify(&self.header.alg, message.as_bytes(), &self.signature)
    }

    /// Verifies an HS256 MAC (external account binding) with `secret`, in constant time.
    pub fn verify_hs256(&self, secret: &[u8]) -> Result<(), Problem> {
        if self.header.alg != "HS256" {
            return Err(malformed("the external account binding must be signed with HS256"));
        }
        let message = format!("{}.{}", self.protected_b64, self.payload_b64);
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
        ring::hmac::verify(&key, message.as_bytes(), &self.signature)
            .map_err(|_| Problem::new(ProblemType::Unauthorized, "the external account binding's MAC is wrong"))
    }
}

impl Jwk {
    pub fn from_value(value: &Value) -> Result<Jwk, Problem> {
        let text = |name: &str| {
            value
                .get(name)
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty() && unb64(t).is_some())
                .map(str::to_owned)
                .ok_or_else(|| malformed(format!("the JWK has no valid `{name}`")))
        };
        match value.get("kty").and_then(Value::as_str) {
            Some("EC") => {
                let crv = value.get("crv").and_then(Value::as_str).unwrap_or_default();
                if crv != "P-256" && crv != "P-384" {
                    return Err(Problem::new(ProblemType::BadPublicKey, format!("curve `{crv}` is not accepted")));
                }
                Ok(Jwk::Ec { crv: crv.to_owned(), x: text("x")?, y: text("y")? })
            }
            Some("RSA") => Ok(Jwk::Rsa { n: text("n")?, e: text("e")? }),
            Some("OKP") => {
                let crv = value.get("crv").and_then(Value::as_str).unwrap_or_default();
                if crv != "Ed25519" {
                    return Err(Problem::new(ProblemType::BadPublicKey, format!("curve `{crv}` is not accepted")));
                }
                Ok(Jwk::Okp { crv: crv.to_owned(), x: text("x")? })
            }
            _ => Err(Problem::new(ProblemType::BadPublicKey, "the JWK's `kty` must be EC, RSA or OKP")),
        }
    }

    /// The RFC 7638 members in lexicographic order (also how the key is stored).
    pub fn to_value(&self) -> Value {
        match self {
            Jwk::Ec { crv, x, y } => json!({ "crv": crv, "kty": "EC", "x": x, "y": y }),
            Jwk::Rsa { n, e } => json!({ "e": e, "kty": "RSA", "n": n }),
            Jwk::Okp { crv, x } => json!({ "crv": crv, "kty": "OKP", "x": x }),
        }
    }

    /// RFC 7638 thumbprint (SHA-256, base64url): serde_json writes object members sorted and
    /// without whitespace, which is the RFC's canonical form.
    pub fn thumbprint(&self) -> String {
        let canonical = self.to_value().to_string();
        b64(&Sha256::digest(canonical.as_bytes()))
    }

    fn decoded(text: &str) -> Vec<u8> {
        unb64(text).unwrap_or_default()
    }

    fn verify(&self, alg: &str, message: &[u8], signature_bytes: &[u8]) -> Result<(), Problem> {
        let bad_alg = || {
            Problem::new(ProblemType::BadSignatureAlgorithm, format!("`{alg}` does not fit the account key's type"))
                .with_algorithms()
        };
        let checked = match (self, alg) {
            (Jwk::Ec { crv, x, y }, "ES256" | "ES384") => {
                let algorithm: &dyn signature::VerificationAlgorithm = match (crv.as_str(), alg) {
                    ("P-256", "ES256") => &signature::ECDSA_P256_SHA256_FIXED,
                    ("P-384", "ES384") => &signature::ECDSA_P384_SHA384_FIXED,
                    _ => return Err(bad_alg()),
                };
                let mut point = vec![0x04];
                point.extend(Self::decoded(x));
                point.extend(Self::decoded(y));
                UnparsedPublicKey::new(algorithm, point).verify(message, signature_bytes)
            }
            (Jwk::Rsa { n, e }, "RS256") => {
                signature::RsaPublicKeyComponents { n: Self::decoded(n), e: Self::decoded(e) }.verify(
                    &signature::RSA_PKCS1_2048_8192_SHA256,
                    message,
                    signature_bytes,
                )
            }
            (Jwk::Okp { x, .. }, "EdDSA") => {
                UnparsedPublicKey::new(&signature::ED25519, Self::decoded(x)).verify(message, signature_bytes)
            }
            _ => return Err(bad_alg()),
        };
        checked.map_err(|_| malformed("the JWS signature does not verify"))
    }

    /// Whether this is the key of a certificate's SubjectPublicKeyInfo (revocation by the
    /// certificate's key).
    pub fn matches_spki(&self, spki: &x509_parser::x509::SubjectPublicKeyInfo<'_>) -> bool {
        use x509_parser::public_key::PublicKey;
        let strip = |bytes: &[u8]| bytes.iter().skip_while(|b| **b == 0).copied().collect::<Vec<u8>>();
        match (self, spki.parsed()) {
            (Jwk::Ec { x, y, .. }, Ok(PublicKey::EC(point))) => {
                let mut expected = vec![0x04];
                expected.extend(Self::decoded(x));
                expected.extend(Self::decoded(y));
                point.data() == expected.as_slice()
            }
            (Jwk::Rsa { n, e }, Ok(PublicKey::RSA(key))) => {
                strip(key.modulus) == strip(&Self::decoded(n)) && strip(key.exponent) == strip(&Self::decoded(e))
            }
            (Jwk::Okp { x, .. }, _) => spki.subject_public_key.data.as_ref() == Self::decoded(x).as_slice(),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc7638_thumbprint_example() {
        // RFC 7638 §3.1.
        let jwk = Jwk::from_value(&json!({
            "kty": "RSA",
            "n": "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw",
            "e": "AQAB",
            "alg": "RS256",
            "kid": "2011-04-29"
        }))
        .map_err(|p| p.detail)
        .unwrap_or_else(|detail| panic!("{detail}"));
        assert_eq!(jwk.thumbprint(), "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs");
    }

    #[test]
    fn none_and_hmac_are_refused_for_accounts() {
        for alg in ["none", "HS256"] {
            let header = b64(json!({ "alg": alg, "nonce": "n", "url": "u", "kid": "k" }).to_string().as_bytes());
            let body = json!({ "protected": header, "payload": "", "signature": "" }).to_string();
            let jws = Jws::parse(body.as_bytes()).map_err(|p| p.detail).unwrap_or_else(|d| panic!("{d}"));
            let refused = jws.check_alg().err().map(|p| p.kind);
            assert_eq!(refused, Some(ProblemType::BadSignatureAlgorithm), "{alg}");
        }
    }

    #[test]
    fn a_compact_jws_is_malformed() {
        let refused = Jws::parse(b"\"eyJ.eyJ.sig\"").err().map(|p| p.kind);
        assert_eq!(refused, Some(ProblemType::Malformed));
    }
}
