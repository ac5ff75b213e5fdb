//! Step 1: check the EK (certificate, chain, key, manufacturer) and the AK, and make the
//! TPM2_MakeCredential challenge that binds the AK's Name to the EK.

use trellis_plugin_sdk::verifier::{EnrollmentRequest, Failure};
use trellis_plugin_sdk::PluginError;

use crate::checks::{check_ak, check_ek_certificate};
use crate::codes;
use crate::credential::{self, Credential, CredentialError, MIN_ENTROPY};
use crate::crypto;
use crate::policy::Policy;
use crate::tpm::TpmPublic;

/// What enrollment found, before it becomes the SDK's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnrollOutcome {
    /// Every failed check, in order.
    pub failures: Vec<Failure>,
    /// Name of the AK, when its public area parsed.
    pub ak_name: Option<Vec<u8>>,
    /// `id:XXXXXXXX` from the EK certificate.
    pub ek_manufacturer: Option<String>,
    /// The challenge, only when there are no failures.
    pub challenge: Option<Credential>,
}

/// Runs the enrollment checks, in this order: EK certificate (present, parses, valid now,
/// manufacturer), its path to a trust anchor, the EK public area (parses, same key as the
/// certificate, able to protect a credential), the policy's manufacturers, the AK; then, when
/// nothing failed, TPM2_MakeCredential.
pub fn enroll(request: &EnrollmentRequest) -> Result<EnrollOutcome, PluginError> {
    let policy = request.policy.as_ref().map(Policy::from_json).transpose()?;
    if request.entropy.len() < MIN_ENTROPY {
        return Err(PluginError::invalid_input(format!(
            "entropy: at least {MIN_ENTROPY} bytes needed, got {}",
            request.entropy.len()
        )));
    }
    if request.secret.is_empty() {
        return Err(PluginError::invalid_input("secret: empty"));
    }
    let mut failures = Vec::new();

    let identity = check_ek_certificate(
        request.ek_certificate.as_deref(),
        &request.ek_chain,
        &request.trust_anchors,
        Some(request.now),
        &mut failures,
    );
    let ek_manufacturer = identity.as_ref().and_then(|i| i.manufacturer.clone());

    let ek = match TpmPublic::parse(&request.ek_public) {
        Ok(ek) => Some(ek),
        Err(e) => {
            failures.push(Failure::new(codes::EK_PUBLIC_MALFORMED, e.to_string()));
            None
        }
    };
    if let Some(ek) = &ek {
        match crypto::material_from_public(ek) {
            Ok(material) => {
                if let Some(cert_key) = identity.as_ref().and_then(|i| i.key.as_ref()) {
                    if *cert_key != material {
                        failures.push(Failure::new(
                            codes::EK_PUBLIC_MISMATCH,
                            format!(
                                "the EK certificate's {} key is not the EK public area's {} key",
                                cert_key.describe(),
                                material.describe()
                            ),
                        ));
                    }
                }
            }
            Err(e) => failures.push(Failure::new(codes::EK_PUBLIC_UNSUPPORTED, e)),
        }
        if let Err(e) = credential::check_ek(ek) {
            failures.push(Failure::new(codes::EK_PUBLIC_UNSUPPORTED, e));
        }
    }

    if let Some(policy) = &policy {
        if identity.is_some() && !policy.allows_manufacturer(ek_manufacturer.as_deref()) {
            failures.push(Failure::new(
                codes::EK_MANUFACTURER_NOT_ALLOWED,
                ek_manufacturer.clone().unwrap_or_else(|| "no manufacturer in the EK certificate".to_owned()),
            ));
        }
    }

    let ak = check_ak(&request.ak_public, &mut failures);
    let ak_name = ak.as_ref().map(|ak| ak.name.clone());

    let challenge = match (&ek, &ak_name) {
        (Some(ek), Some(name)) if failures.is_empty() => {
            if request.secret.len() > ek.name_alg.size() {
                return Err(PluginError::invalid_input(format!(
                    "secret: {} bytes, more than the EK name digest's {}",
                    request.secret.len(),
                    ek.name_alg.size()
                )));
            }
            match credential::make_credential(ek, name, &request.secret, &request.entropy) {
                Ok(c) => Some(c),
                Err(CredentialError::BadInput(e)) => return Err(PluginError::invalid_input(e)),
                Err(CredentialError::UnsupportedEk(e)) => {
                    failures.push(Failure::new(codes::EK_PUBLIC_UNSUPPORTED, e));
                    None
                }
            }
        }
        _ => None,
    };
    Ok(EnrollOutcome { failures, ak_name, ek_manufacturer, challenge })
}
