//! Checks shared by enrollment and verification: the AK's public area and the EK certificate's
//! identity (parse, manufacturer, path to a trust anchor).

use trellis_plugin_sdk::verifier::{Failure, TrustAnchor};
use x509_parser::certificate::X509Certificate;
use x509_parser::prelude::FromDer;

use crate::codes;
use crate::crypto::{self, KeyMaterial, MIN_RSA_BITS};
use crate::ekcert::{self, Anchor, Cert};
use crate::tpm::{alg, attr, curve, HashAlg, KeyDetail, TpmPublic};

/// An AK public area that parsed, with its Name and verifying key.
pub struct Ak {
    pub public: TpmPublic,
    pub name: Vec<u8>,
    pub key: Option<crypto::VerifyingKey>,
}

/// Parses an AK public area and checks it: a restricted signing key (restricted, sign,
/// fixedTPM, fixedParent, sensitiveDataOrigin, not decrypt) with an explicit RSASSA, RSAPSS or
/// ECDSA scheme, RSA ≥ 2048 bits or P-256/P-384, and no SHA-1 (name or scheme). `None` when it
/// does not parse (then a failure says why).
pub fn check_ak(bytes: &[u8], failures: &mut Vec<Failure>) -> Option<Ak> {
    let public = match TpmPublic::parse(bytes) {
        Ok(p) => p,
        Err(e) => {
            failures.push(Failure::new(codes::AK_PUBLIC_MALFORMED, e.to_string()));
            return None;
        }
    };
    let name = public.name();
    let required = [
        (attr::RESTRICTED, "not restricted"),
        (attr::SIGN, "not a signing key"),
        (attr::FIXED_TPM, "not fixedTPM"),
        (attr::FIXED_PARENT, "not fixedParent"),
        (attr::SENSITIVE_DATA_ORIGIN, "not sensitiveDataOrigin"),
    ];
    for (bit, problem) in required {
        if !public.has(bit) {
            failures.push(Failure::new(codes::AK_ATTRIBUTES_INVALID, problem));
        }
    }
    if public.has(attr::DECRYPT) {
        failures.push(Failure::new(codes::AK_ATTRIBUTES_INVALID, "decrypt set"));
    }
    let scheme_ok = match (&public.detail, public.scheme.scheme) {
        (_, alg::NULL) => Err("no explicit signing scheme (TPM_ALG_NULL)".to_owned()),
        (KeyDetail::Rsa { .. }, alg::RSASSA | alg::RSAPSS) | (KeyDetail::Ecc { .. }, alg::ECDSA) => Ok(()),
        (_, other) => Err(format!("signing scheme {} unsupported", alg::name(other))),
    };
    if let Err(problem) = scheme_ok {
        failures.push(Failure::new(codes::AK_ATTRIBUTES_INVALID, problem));
    }
    match public.scheme.hash.map(|h| (h, HashAlg::from_id(h))) {
        Some((_, Some(HashAlg::Sha1))) => failures.push(Failure::new(codes::AK_KEY_WEAK, "SHA1 signing scheme")),
        Some((_, Some(_))) | None => {}
        Some((other, None)) => failures
            .push(Failure::new(codes::AK_ATTRIBUTES_INVALID, format!("scheme hash {} unsupported", alg::name(other)))),
    }
    if public.name_alg == HashAlg::Sha1 {
        failures.push(Failure::new(codes::AK_KEY_WEAK, "SHA1 name algorithm"));
    }
    match &public.detail {
        KeyDetail::Rsa { key_bits, modulus, .. } => {
            if usize::from(*key_bits) < MIN_RSA_BITS {
                failures.push(Failure::new(codes::AK_KEY_WEAK, format!("RSA-{key_bits}")));
            } else if modulus.len() * 8 != usize::from(*key_bits) {
                failures.push(Failure::new(
                    codes::AK_PUBLIC_MALFORMED,
                    format!("{}-byte modulus for RSA-{key_bits}", modulus.len()),
                ));
            }
        }
        KeyDetail::Ecc { curve: c, .. } => {
            if !matches!(*c, curve::NIST_P256 | curve::NIST_P384) {
                failures.push(Failure::new(codes::AK_KEY_WEAK, format!("ECC curve 0x{c:04x} (P-256 and P-384 only)")));
            }
        }
    }
    let key = match crypto::material_from_public(&public).and_then(|m| crypto::verifying_key(&m)) {
        Ok(key) => Some(key),
        Err(e) => {
            if !failures.iter().any(|f| f.code == codes::AK_KEY_WEAK || f.code == codes::AK_PUBLIC_MALFORMED) {
                failures.push(Failure::new(codes::AK_PUBLIC_MALFORMED, e));
            }
            None
        }
    };
    Some(Ak { public, name, key })
}

/// What the EK certificate says about the device, when it parsed.
pub struct EkIdentity {
    pub manufacturer: Option<String>,
    pub key: Option<KeyMaterial>,
    /// True when a path to a trust anchor was found.
    pub trusted: bool,
}

/// Parses the EK certificate, reads its manufacturer and key, checks its validity at `now`
/// (when given: at enrollment) and builds a path to `anchors` through `chain`.
pub fn check_ek_certificate(
    certificate: Option<&[u8]>,
    chain: &[Vec<u8>],
    anchors: &[TrustAnchor],
    now: Option<i64>,
    failures: &mut Vec<Failure>,
) -> Option<EkIdentity> {
    let Some(bytes) = certificate else {
        failures.push(Failure::new(codes::EK_CERT_MISSING, ""));
        return None;
    };
    let leaf = match ekcert::parse_ek_certificate(bytes) {
        Ok(c) => c,
        Err(e) => {
            failures.push(Failure::new(codes::EK_CERT_MALFORMED, e));
            return None;
        }
    };
    let manufacturer = match ekcert::manufacturer(&leaf.x509) {
        Ok(m) => m,
        Err(e) => {
            failures.push(Failure::new(codes::EK_CERT_MALFORMED, e));
            None
        }
    };
    let key = match crypto::material_from_parsed_spki(leaf.x509.public_key()) {
        Ok(k) => Some(k),
        Err(e) => {
            failures.push(Failure::new(codes::EK_CERT_MALFORMED, format!("subject public key: {e}")));
            None
        }
    };
    if let Some(now) = now {
        if !ekcert::valid_at(&leaf.x509, now) {
            let v = leaf.x509.validity();
            failures
                .push(Failure::new(codes::EK_CERT_EXPIRED, format!("valid from {} to {}", v.not_before, v.not_after)));
        }
    }
    let mut problems = Vec::new();
    let mut parsed_anchors = Vec::new();
    for anchor in anchors {
        let cert = match X509Certificate::from_der(&anchor.certificate_der) {
            Ok(([], x509)) => Cert { der: anchor.certificate_der.as_slice(), x509 },
            Ok(_) => {
                problems.push("a trust anchor has trailing bytes (ignored)".to_owned());
                continue;
            }
            Err(_) => {
                problems.push("a trust anchor is not a certificate (ignored)".to_owned());
                continue;
            }
        };
        // An unreadable restriction vouches for nobody rather than for everybody.
        let restriction = anchor
            .manufacturer
            .as_ref()
            .map(|m| ekcert::normalize_manufacturer(m).unwrap_or_else(|| format!("invalid {m:?}")));
        parsed_anchors.push(Anchor { cert, manufacturer: restriction });
    }
    let mut intermediates: Vec<Cert<'_>> = Vec::new();
    for element in chain {
        match ekcert::parse_certificates(element) {
            Ok(certs) => intermediates.extend(certs),
            Err(_) => problems.push("an intermediate is not a certificate (ignored)".to_owned()),
        }
    }
    let trusted = match ekcert::build_path(&leaf, manufacturer.as_deref(), &intermediates, &parsed_anchors, now) {
        Ok(_) => true,
        Err(why) => {
            problems.insert(0, why);
            failures.push(Failure::new(codes::EK_CERT_UNTRUSTED, problems.join("; ")));
            false
        }
    };
    Some(EkIdentity { manufacturer, key, trusted })
}
