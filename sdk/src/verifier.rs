//! Attestation verifiers, in two steps ([`AttestationVerifier`]): `enroll` checks a device's
//! endorsement key (EK certificate chain against the workspace's trust anchors) and attestation
//! key, and wraps a host-chosen secret in a TPM2_MakeCredential challenge; `verify` checks
//! fresh evidence (quote, PCRs, certification of the CSR key, event log) against a policy for
//! the enrolled AK. Pure computation: no HTTP, state, keys or clock (the host passes `now`).
//!
//! Binary TPM structures arrive as the TPM marshalled them; verify signatures over these bytes
//! as received. Failures are [`Failure`]s with stable snake_case codes, in the order checked;
//! the host returns them to the API verbatim, and does not believe a verdict that passes with
//! failures.

use std::fmt;

use crate::{CallContext, PluginError, PluginInfo};

/// A two-step attestation verifier.
pub trait AttestationVerifier {
    /// The verifier's own settings (not the attestation policy, which comes with each call).
    type Config: serde::de::DeserializeOwned + schemars::JsonSchema;

    /// Describe the plugin ([`PluginInfo::attestation_verifier`]). No I/O.
    fn describe() -> PluginInfo;

    /// Check a configuration.
    fn validate_config(config: &Self::Config) -> Result<(), PluginError> {
        let _ = config;
        Ok(())
    }

    /// Step 1: check the EK and AK and make the activation challenge. A refused enrollment is
    /// a verdict with failures, not an error.
    fn enroll(
        ctx: &CallContext,
        config: &Self::Config,
        request: &EnrollmentRequest,
    ) -> Result<EnrollmentVerdict, PluginError>;

    /// Step 2: verify evidence. A refused attestation is a verdict with failures; errors are
    /// for calls that cannot be evaluated at all (an unparsable policy).
    fn verify(ctx: &CallContext, config: &Self::Config, request: &VerifyRequest) -> Result<Verdict, PluginError>;
}

/// A certificate the workspace trusts for EK certificate chains.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TrustAnchor {
    /// DER.
    pub certificate_der: Vec<u8>,
    /// `id:XXXXXXXX`: only EK certificates of this manufacturer may chain to it.
    pub manufacturer: Option<String>,
}

impl TrustAnchor {
    /// An anchor, for tests.
    pub fn new(certificate_der: Vec<u8>, manufacturer: Option<&str>) -> TrustAnchor {
        TrustAnchor { certificate_der, manufacturer: manufacturer.map(str::to_owned) }
    }
}

/// Step 1 input.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EnrollmentRequest {
    /// The EK certificate from the TPM's NV (DER, maybe with vendor padding).
    pub ek_certificate: Option<Vec<u8>>,
    /// Untrusted intermediates the device supplied, DER.
    pub ek_chain: Vec<Vec<u8>>,
    /// TPMT_PUBLIC of the EK.
    pub ek_public: Vec<u8>,
    /// TPMT_PUBLIC of the AK.
    pub ak_public: Vec<u8>,
    /// What the workspace trusts.
    pub trust_anchors: Vec<TrustAnchor>,
    /// The attestation policy that applies, JSON, if any.
    pub policy: Option<serde_json::Value>,
    /// The secret the device must recover with TPM2_ActivateCredential.
    pub secret: Vec<u8>,
    /// CSPRNG bytes: derive every random value of the challenge from them.
    pub entropy: Vec<u8>,
    /// Now, seconds since the epoch.
    pub now: i64,
}

impl EnrollmentRequest {
    /// A request with these keys and anchors, a 32-byte secret and 64 bytes of entropy, for tests.
    pub fn for_test(
        ek_certificate: Option<Vec<u8>>,
        ek_public: Vec<u8>,
        ak_public: Vec<u8>,
        trust_anchors: Vec<TrustAnchor>,
    ) -> EnrollmentRequest {
        EnrollmentRequest {
            ek_certificate,
            ek_chain: Vec::new(),
            ek_public,
            ak_public,
            trust_anchors,
            policy: None,
            secret: (0..32).collect(),
            entropy: (0..64).map(|i| i * 3).collect(),
            now: 1_767_225_600,
        }
    }
}

/// TPM2_MakeCredential's output, without the TPM2B size prefixes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActivationChallenge {
    /// TPM2B_ID_OBJECT's `credential`.
    pub credential_blob: Vec<u8>,
    /// TPM2B_ENCRYPTED_SECRET's `secret`.
    pub encrypted_secret: Vec<u8>,
}

/// One failed check: a stable snake_case code and a detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// e.g. `pcr_mismatch`.
    pub code: String,
    /// e.g. `SHA256 PCR 7`; may be empty.
    pub detail: String,
}

impl Failure {
    /// A failure.
    pub fn new(code: &str, detail: impl Into<String>) -> Failure {
        Failure { code: code.to_owned(), detail: detail.into() }
    }
}

impl fmt::Display for Failure {
    /// The contract's form, `code: detail`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.detail.is_empty() {
            write!(f, "{}:", self.code)
        } else {
            write!(f, "{}: {}", self.code, self.detail)
        }
    }
}

/// Step 1 output. Build it with [`EnrollmentVerdict::passed`] or [`EnrollmentVerdict::failed`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnrollmentVerdict {
    pub(crate) failures: Vec<Failure>,
    pub(crate) ak_name: Option<Vec<u8>>,
    pub(crate) ek_manufacturer: Option<String>,
    pub(crate) challenge: Option<ActivationChallenge>,
}

impl EnrollmentVerdict {
    /// The keys are acceptable: bind the AK named `ak_name` once the device answers `challenge`.
    pub fn passed(ak_name: Vec<u8>, challenge: ActivationChallenge) -> EnrollmentVerdict {
        EnrollmentVerdict {
            failures: Vec::new(),
            ak_name: Some(ak_name),
            ek_manufacturer: None,
            challenge: Some(challenge),
        }
    }

    /// Refused, for these reasons (at least one).
    pub fn failed(failures: Vec<Failure>) -> EnrollmentVerdict {
        EnrollmentVerdict { failures, ak_name: None, ek_manufacturer: None, challenge: None }
    }

    /// The manufacturer read from the EK certificate, `id:XXXXXXXX`.
    pub fn with_ek_manufacturer(mut self, manufacturer: impl Into<String>) -> EnrollmentVerdict {
        self.ek_manufacturer = Some(manufacturer.into());
        self
    }

    /// The AK's name, when its public area parsed (also on a refusal).
    pub fn with_ak_name(mut self, ak_name: Vec<u8>) -> EnrollmentVerdict {
        self.ak_name = Some(ak_name);
        self
    }

    /// Whether enrollment may proceed: no failures and a challenge.
    pub fn is_passed(&self) -> bool {
        self.failures.is_empty() && self.challenge.is_some() && self.ak_name.is_some()
    }

    /// The failures.
    pub fn failures(&self) -> &[Failure] {
        &self.failures
    }

    /// The challenge, when passed.
    pub fn challenge(&self) -> Option<&ActivationChallenge> {
        self.challenge.as_ref()
    }
}

/// One PCR value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PcrValue {
    /// `SHA1`, `SHA256`, `SHA384`, `SHA512`, `SM3_256`.
    pub bank: String,
    /// 0 to 23.
    pub index: u32,
    /// The bank's digest size.
    pub digest: Vec<u8>,
}

/// A TPM2_Certify of the CSR's key by the AK.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Tpm2Certification {
    /// TPMS_ATTEST (TPM_ST_ATTEST_CERTIFY).
    pub attest: Vec<u8>,
    /// TPMT_SIGNATURE by the AK.
    pub signature: Vec<u8>,
    /// TPMT_PUBLIC of the certified key.
    pub certified_key_public: Vec<u8>,
}

/// TPM 2.0 evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Tpm2Evidence {
    /// TPMS_ATTEST of the quote.
    pub quote: Vec<u8>,
    /// TPMT_SIGNATURE of the quote.
    pub quote_signature: Vec<u8>,
    /// The PCR values the device says the quote covers (unsigned: check them against it).
    pub pcrs: Vec<PcrValue>,
    /// The CSR key's certification, if supplied.
    pub certification: Option<Tpm2Certification>,
    /// TCG PC Client crypto-agile event log, if supplied.
    pub event_log: Option<Vec<u8>>,
}

/// Evidence a device presented.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Evidence {
    /// TPM 2.0 quote, certify and event log.
    Tpm2(Tpm2Evidence),
    /// Another format (as named in the plugin's `serves`), encoded as that format defines.
    Other {
        /// The format's name.
        format: String,
        /// The evidence.
        data: Vec<u8>,
    },
}

/// A TPM's clock state (TPMS_CLOCK_INFO).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TpmClock {
    /// Milliseconds powered.
    pub clock: u64,
    /// resetCount.
    pub reset_count: u32,
    /// restartCount.
    pub restart_count: u32,
    /// safe.
    pub safe: bool,
}

/// What the host holds about the device from its enrollment.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EnrolledDevice {
    /// The enrolled AK's TPMT_PUBLIC: the only key evidence may be signed by.
    pub ak_public: Vec<u8>,
    /// The AK's name.
    pub ak_name: Vec<u8>,
    /// The EK certificate accepted at enrollment.
    pub ek_certificate: Option<Vec<u8>>,
    /// Intermediates supplied at enrollment.
    pub ek_chain: Vec<Vec<u8>>,
    /// The clock of the last passing attestation.
    pub last_clock: Option<TpmClock>,
}

/// The CSR to bind (its signature already verified by the host).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BoundCsr {
    /// PKCS#10, DER.
    pub der: Vec<u8>,
    /// Its SubjectPublicKeyInfo, DER.
    pub public_key: Vec<u8>,
}

/// Step 2 input.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifyRequest {
    /// The evidence.
    pub evidence: Evidence,
    /// The attestation policy (spec §2.3 members: `expectedPcrs`, `requiredPcrBanks`, …).
    pub policy: serde_json::Value,
    /// The host's nonce, raw (32 bytes): the quote's extraData must equal it.
    pub nonce: Vec<u8>,
    /// When the nonce was issued, seconds since the epoch.
    pub nonce_issued_at: i64,
    /// Now, seconds since the epoch.
    pub now: i64,
    /// The device's enrollment.
    pub device: EnrolledDevice,
    /// The CSR the certificate is for, if any.
    pub csr: Option<BoundCsr>,
    /// The anchors the workspace trusts now.
    pub trust_anchors: Vec<TrustAnchor>,
}

impl VerifyRequest {
    /// TPM 2.0 evidence for a device enrolled with `ak_public`, for tests.
    pub fn for_test(
        evidence: Tpm2Evidence,
        policy: serde_json::Value,
        nonce: Vec<u8>,
        ak_public: Vec<u8>,
    ) -> VerifyRequest {
        VerifyRequest {
            evidence: Evidence::Tpm2(evidence),
            policy,
            nonce,
            nonce_issued_at: 1_767_225_600,
            now: 1_767_225_610,
            device: EnrolledDevice {
                ak_public,
                ak_name: Vec::new(),
                ek_certificate: None,
                ek_chain: Vec::new(),
                last_clock: None,
            },
            csr: None,
            trust_anchors: Vec::new(),
        }
    }
}

impl Tpm2Evidence {
    /// A quote with its signature and PCR values, for tests.
    pub fn for_test(quote: Vec<u8>, quote_signature: Vec<u8>, pcrs: Vec<PcrValue>) -> Tpm2Evidence {
        Tpm2Evidence { quote, quote_signature, pcrs, certification: None, event_log: None }
    }
}

/// Step 2 output. It passes exactly when it has no failures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub(crate) failures: Vec<Failure>,
    pub(crate) verified_pcrs: Vec<PcrValue>,
    pub(crate) ek_manufacturer: Option<String>,
    pub(crate) trust_score: u8,
    pub(crate) clock: Option<TpmClock>,
}

impl Verdict {
    /// The outcome of the checks: passed when `failures` is empty, with `trust_score` (0-100;
    /// reported as 0 when failed) and the PCRs found equal to the policy's.
    pub fn from_checks(failures: Vec<Failure>, verified_pcrs: Vec<PcrValue>, trust_score: u8) -> Verdict {
        Verdict { failures, verified_pcrs, ek_manufacturer: None, trust_score: trust_score.min(100), clock: None }
    }

    /// The EK certificate's manufacturer, `id:XXXXXXXX`.
    pub fn with_ek_manufacturer(mut self, manufacturer: impl Into<String>) -> Verdict {
        self.ek_manufacturer = Some(manufacturer.into());
        self
    }

    /// The quote's clock state, which the host keeps for the next regression check.
    pub fn with_clock(mut self, clock: TpmClock) -> Verdict {
        self.clock = Some(clock);
        self
    }

    /// Whether it passed.
    pub fn is_passed(&self) -> bool {
        self.failures.is_empty()
    }

    /// The failures, in the order checked.
    pub fn failures(&self) -> &[Failure] {
        &self.failures
    }

    /// The trust score as reported: 0 unless passed.
    pub fn trust_score(&self) -> u8 {
        if self.is_passed() {
            self.trust_score
        } else {
            0
        }
    }
}
