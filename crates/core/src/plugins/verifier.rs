//! The attestation verifier's vocabulary, in contract 0.2's two-step shape: `enroll` checks a
//! device's EK and AK and makes a credential-activation challenge; `verify` checks fresh
//! evidence against a policy for the enrolled AK. Binary TPM structures travel as the TPM
//! marshalled them. Contract 0.1 verifiers have only `verify`; the host adapts.

use serde::Serialize;

/// A certificate the workspace trusts for EK certificate chains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustAnchor {
    pub certificate_der: Vec<u8>,
    /// `id:XXXXXXXX`: only EK certificates of this manufacturer may chain to the anchor.
    pub manufacturer: Option<String>,
}

/// Step 1 input: the device's endorsement and attestation keys.
#[derive(Debug, Clone, PartialEq)]
pub struct EnrollmentRequest {
    pub ek_certificate: Option<Vec<u8>>,
    /// Untrusted intermediates, DER.
    pub ek_chain: Vec<Vec<u8>>,
    /// TPMT_PUBLIC of the EK.
    pub ek_public: Vec<u8>,
    /// TPMT_PUBLIC of the AK.
    pub ak_public: Vec<u8>,
    pub trust_anchors: Vec<TrustAnchor>,
    /// The attestation policy that applies, if any.
    pub policy: Option<serde_json::Value>,
    /// What the device must recover with TPM2_ActivateCredential (the host keeps its hash).
    pub secret: Vec<u8>,
    /// CSPRNG bytes (at least 64) every random value of the challenge derives from.
    pub entropy: Vec<u8>,
    /// Unix seconds.
    pub now: i64,
}

/// TPM2_MakeCredential's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActivationChallenge {
    pub credential_blob: Vec<u8>,
    pub encrypted_secret: Vec<u8>,
}

/// Step 1 output.
#[derive(Debug, Clone, PartialEq)]
pub struct EnrollmentVerdict {
    /// True only without failures; then `challenge` and `ak_name` are set.
    pub passed: bool,
    pub failures: Vec<Failure>,
    pub ak_name: Option<Vec<u8>>,
    pub ek_manufacturer: Option<String>,
    pub challenge: Option<ActivationChallenge>,
}

/// A PCR value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PcrValue {
    /// `SHA1`, `SHA256`, `SHA384`, `SHA512`, `SM3_256`.
    pub bank: String,
    pub index: u32,
    pub digest: Vec<u8>,
}

/// A TPM2_Certify of the CSR's key by the AK.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tpm2Certification {
    pub attest: Vec<u8>,
    pub signature: Vec<u8>,
    pub certified_key_public: Vec<u8>,
}

/// TPM 2.0 evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tpm2Evidence {
    /// TPMS_ATTEST of the quote.
    pub quote: Vec<u8>,
    /// TPMT_SIGNATURE of the quote by the AK.
    pub quote_signature: Vec<u8>,
    pub pcrs: Vec<PcrValue>,
    pub certification: Option<Tpm2Certification>,
    /// TCG PC Client crypto-agile event log.
    pub event_log: Option<Vec<u8>>,
}

/// Evidence a device presented.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Evidence {
    Tpm2(Tpm2Evidence),
    /// A format the typed case does not cover, for verifiers that serve it.
    Other {
        format: String,
        data: Vec<u8>,
    },
}

/// The TPM's clock state from a quote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TpmClock {
    pub clock: u64,
    pub reset_count: u32,
    pub restart_count: u32,
    pub safe: bool,
}

/// What the host holds about a device from its enrollment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnrolledDevice {
    pub ak_public: Vec<u8>,
    pub ak_name: Vec<u8>,
    pub ek_certificate: Option<Vec<u8>>,
    pub ek_chain: Vec<Vec<u8>>,
    pub last_clock: Option<TpmClock>,
}

/// The CSR the evidence is to bind (its signature already verified).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundCsr {
    pub der: Vec<u8>,
    /// SubjectPublicKeyInfo, DER.
    pub public_key: Vec<u8>,
}

/// Step 2 input.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifyRequest {
    pub evidence: Evidence,
    /// The attestation policy (spec §2.3 members).
    pub policy: serde_json::Value,
    /// The host's nonce, raw.
    pub nonce: Vec<u8>,
    /// Unix seconds.
    pub nonce_issued_at: i64,
    /// Unix seconds.
    pub now: i64,
    pub device: EnrolledDevice,
    pub csr: Option<BoundCsr>,
    pub trust_anchors: Vec<TrustAnchor>,
}

/// One failed check: a stable snake_case code and its detail (the contract's `code: detail`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Failure {
    pub code: String,
    pub message: String,
}

impl Failure {
    /// Reads the contract's `code: detail` form; text without a colon is all code.
    pub fn parse(text: &str) -> Failure {
        let (code, detail) = text.split_once(':').unwrap_or((text, ""));
        Failure { code: code.trim().to_owned(), message: detail.trim().to_owned() }
    }
}

/// Step 2 output.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    /// True only without failures.
    pub passed: bool,
    pub failures: Vec<Failure>,
    pub verified_pcrs: Vec<PcrValue>,
    pub ek_manufacturer: Option<String>,
    /// 0 to 100; 0 whenever not passed.
    pub trust_score: u8,
    /// The quote's clock, kept as the device's `last_clock` when the attestation passed.
    pub clock: Option<TpmClock>,
}

impl Verdict {
    /// A plugin's verdict as the host accepts it: "passed" with failures is not passed, and a
    /// failed verdict carries no trust.
    pub fn normalized(mut self) -> Verdict {
        self.passed = self.passed && self.failures.is_empty();
        self.trust_score = if self.passed { self.trust_score.min(100) } else { 0 };
        self
    }
}

impl EnrollmentVerdict {
    /// As [`Verdict::normalized`]: passing needs no failures, a challenge and the AK's name.
    pub fn normalized(mut self) -> EnrollmentVerdict {
        self.passed = self.passed && self.failures.is_empty() && self.challenge.is_some() && self.ak_name.is_some();
        if !self.passed {
            self.challenge = None;
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_read_code_and_detail() {
        assert_eq!(Failure::parse("pcr_mismatch: SHA256 PCR 7").code, "pcr_mismatch");
        assert_eq!(Failure::parse("pcr_mismatch: SHA256 PCR 7").message, "SHA256 PCR 7");
        assert_eq!(
            Failure::parse("quote_nonce_mismatch:"),
            Failure { code: "quote_nonce_mismatch".into(), message: "".into() }
        );
        assert_eq!(Failure::parse("odd").code, "odd");
    }

    #[test]
    fn a_verdict_passes_only_without_failures() {
        let verdict = Verdict {
            passed: true,
            failures: vec![Failure::parse("pcr_mismatch: 7")],
            verified_pcrs: vec![],
            ek_manufacturer: None,
            trust_score: 90,
            clock: None,
        };
        let normalized = verdict.normalized();
        assert!(!normalized.passed);
        assert_eq!(normalized.trust_score, 0);
    }
}
