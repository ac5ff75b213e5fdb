//! First-party attestation verifier `io.trellis.tpm2-verifier` (serves evidence format `tpm2`,
//! contract 0.2 `attestation-verifier`, on the SDK). Pure computation, pure Rust (RustCrypto):
//!
//! - `enroll`: the EK certificate (lenient parse, path to a workspace trust anchor through the
//!   supplied intermediates, the anchor's manufacturer restriction), its key against the EK
//!   public area, the manufacturer against the policy, the AK's attributes; then
//!   TPM2_MakeCredential for the AK's Name under the EK (RSA or ECC), randomness from the host.
//! - `verify`: the enrolled AK, the EK chain against today's anchors, the quote (magic, type,
//!   scheme, signature over the raw bytes, nonce), the PCR values (signed selection, composite
//!   digest, policy), age and TPM clock, the TPM2_Certify of the CSR's key, and secure boot from
//!   the event log replayed to the quoted PCRs.
//!
//! README.md lists the evidence format, the order of the checks and every failure code.

#![forbid(unsafe_code)]
// Tests index freely: a panic there is a failed test, not a crash on untrusted input.
#![cfg_attr(test, allow(clippy::indexing_slicing))]

pub mod checks;
pub mod codes;
pub mod credential;
pub mod crypto;
pub mod ekcert;
pub mod enroll;
pub mod eventlog;
pub mod montgomery;
pub mod policy;
pub mod tpm;
pub mod verify;
pub mod wire;

use trellis_plugin_sdk::verifier::{
    ActivationChallenge, AttestationVerifier, EnrollmentRequest, EnrollmentVerdict, Verdict, VerifyRequest,
};
use trellis_plugin_sdk::{CallContext, PluginError, PluginInfo};

/// The plugin id.
pub const PLUGIN_ID: &str = "io.trellis.tpm2-verifier";

/// The verifier's own settings: none yet (everything that varies comes with the policy and the
/// trust anchors of each call). Unknown members are refused, so a typo is not silently ignored.
#[derive(Debug, Default, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {}

/// The plugin.
pub struct Tpm2Verifier;

impl AttestationVerifier for Tpm2Verifier {
    type Config = Config;

    fn describe() -> PluginInfo {
        PluginInfo::attestation_verifier(PLUGIN_ID, env!("CARGO_PKG_VERSION"), "TPM 2.0 verifier", &["tpm2"])
            .with_description(
                "TPM 2.0 attestation: EK certificate chains to the workspace's anchors, AK enrollment by \
                 TPM2_MakeCredential (RSA and ECC EKs), quotes and PCR policy, TPM2_Certify of the CSR key, \
                 secure boot from the UEFI event log. Pure Rust.",
            )
    }

    fn enroll(
        _ctx: &CallContext,
        _config: &Config,
        request: &EnrollmentRequest,
    ) -> Result<EnrollmentVerdict, PluginError> {
        let outcome = enroll::enroll(request)?;
        let verdict = match (outcome.challenge, outcome.failures.is_empty(), &outcome.ak_name) {
            (Some(c), true, Some(name)) => EnrollmentVerdict::passed(
                name.clone(),
                ActivationChallenge { credential_blob: c.credential_blob, encrypted_secret: c.encrypted_secret },
            ),
            (_, _, name) => {
                let mut failures = outcome.failures;
                if failures.is_empty() {
                    // Unreachable by construction; never let a verdict pass without a challenge.
                    failures
                        .push(trellis_plugin_sdk::verifier::Failure::new(codes::EK_PUBLIC_UNSUPPORTED, "no challenge"));
                }
                let verdict = EnrollmentVerdict::failed(failures);
                match name {
                    Some(name) => verdict.with_ak_name(name.clone()),
                    None => verdict,
                }
            }
        };
        Ok(match outcome.ek_manufacturer {
            Some(m) => verdict.with_ek_manufacturer(m),
            None => verdict,
        })
    }

    fn verify(_ctx: &CallContext, _config: &Config, request: &VerifyRequest) -> Result<Verdict, PluginError> {
        let outcome = verify::verify(request)?;
        let mut verdict = Verdict::from_checks(outcome.failures, outcome.verified_pcrs, outcome.trust_score);
        if let Some(m) = outcome.ek_manufacturer {
            verdict = verdict.with_ek_manufacturer(m);
        }
        if let Some(c) = outcome.clock {
            verdict = verdict.with_clock(c);
        }
        Ok(verdict)
    }
}

trellis_plugin_sdk::export_attestation_verifier!(Tpm2Verifier);
