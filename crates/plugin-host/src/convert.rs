//! Conversions between the domain plugin types (`trellis_core::plugins`) and the WIT-generated
//! types. WIT types never leave this crate.

use trellis_core::plugins::*;

use crate::bindings::{ca, integration as int, verifier, wit_types as w};

pub(crate) fn plugin_kind_from_wit(kind: w::PluginKind) -> PluginKind {
    match kind {
        w::PluginKind::CaConnector => PluginKind::CaConnector,
        w::PluginKind::Integration => PluginKind::Integration,
        w::PluginKind::AttestationVerifier => PluginKind::AttestationVerifier,
    }
}

impl From<w::PluginError> for ReportedError {
    fn from(err: w::PluginError) -> ReportedError {
        match err {
            w::PluginError::InvalidConfig(issues) => ReportedError::InvalidConfig {
                issues: issues.into_iter().map(|i| ConfigIssue { field: i.field, message: i.message }).collect(),
            },
            w::PluginError::InvalidInput(message) => ReportedError::InvalidInput { message },
            w::PluginError::Unauthorized(message) => ReportedError::Unauthorized { message },
            w::PluginError::NotFound(message) => ReportedError::NotFound { message },
            w::PluginError::NotSupported(message) => ReportedError::NotSupported { message },
            w::PluginError::Upstream(f) => {
                ReportedError::Upstream { status: f.status, message: f.message, retryable: f.retryable }
            }
            w::PluginError::RateLimited(retry_after_secs) => ReportedError::RateLimited { retry_after_secs },
            w::PluginError::Internal(message) => ReportedError::Internal { message },
        }
    }
}

impl From<w::TestReport> for TestReport {
    fn from(r: w::TestReport) -> TestReport {
        TestReport {
            success: r.success,
            message: r.message,
            checks: r
                .checks
                .into_iter()
                .map(|c| Check {
                    name: c.name,
                    status: match c.status {
                        w::CheckStatus::Pass => CheckStatus::Pass,
                        w::CheckStatus::Warn => CheckStatus::Warn,
                        w::CheckStatus::Fail => CheckStatus::Fail,
                        w::CheckStatus::Skip => CheckStatus::Skip,
                    },
                    message: c.message,
                })
                .collect(),
            // A plugin handing back malformed JSON must not fail the whole test.
            details: serde_json::from_str(&r.details).unwrap_or_else(|_| serde_json::json!({ "raw": r.details })),
        }
    }
}

impl From<&CallContext> for w::CallContext {
    fn from(c: &CallContext) -> w::CallContext {
        w::CallContext { workspace_id: c.workspace_id.clone(), request_id: c.request_id.clone() }
    }
}

impl From<&Event> for int::Event {
    fn from(e: &Event) -> int::Event {
        int::Event {
            id: e.id.clone(),
            event_type: e.event_type.clone(),
            occurred_at: e.occurred_at_ms,
            workspace_id: e.workspace_id.clone(),
            summary: e.summary.clone(),
            payload: e.payload.to_string(),
        }
    }
}

impl From<int::Delivery> for Delivery {
    fn from(d: int::Delivery) -> Delivery {
        Delivery { status: d.status, reference: d.reference }
    }
}

impl From<&IssueRequest> for ca::IssueRequest {
    fn from(r: &IssueRequest) -> ca::IssueRequest {
        ca::IssueRequest {
            csr_pem: r.csr_pem.clone(),
            subject_alt_names: r.subject_alt_names.clone(),
            validity_days: r.validity_days,
            profile: r.profile.clone(),
            metadata: r.metadata.to_string(),
        }
    }
}

impl From<ca::IssuedCertificate> for IssuedCertificate {
    fn from(c: ca::IssuedCertificate) -> IssuedCertificate {
        IssuedCertificate {
            certificate_pem: c.certificate_pem,
            chain_pem: c.chain_pem,
            serial_number: c.serial_number,
            not_before: c.not_before,
            not_after: c.not_after,
            ca_reference: c.ca_reference,
        }
    }
}

impl From<&RevokeRequest> for ca::RevokeRequest {
    fn from(r: &RevokeRequest) -> ca::RevokeRequest {
        ca::RevokeRequest {
            serial_number: r.serial_number.clone(),
            certificate_pem: r.certificate_pem.clone(),
            reason: match r.reason {
                RevocationReason::Unspecified => ca::RevocationReason::Unspecified,
                RevocationReason::KeyCompromise => ca::RevocationReason::KeyCompromise,
                RevocationReason::CaCompromise => ca::RevocationReason::CaCompromise,
                RevocationReason::AffiliationChanged => ca::RevocationReason::AffiliationChanged,
                RevocationReason::Superseded => ca::RevocationReason::Superseded,
                RevocationReason::CessationOfOperation => ca::RevocationReason::CessationOfOperation,
                RevocationReason::CertificateHold => ca::RevocationReason::CertificateHold,
                RevocationReason::PrivilegeWithdrawn => ca::RevocationReason::PrivilegeWithdrawn,
            },
        }
    }
}

impl From<ca::CertificatePage> for CertificatePage {
    fn from(p: ca::CertificatePage) -> CertificatePage {
        CertificatePage {
            items: p
                .items
                .into_iter()
                .map(|d| DiscoveredCertificate {
                    certificate_pem: d.certificate_pem,
                    ca_reference: d.ca_reference,
                    revoked: d.revoked,
                })
                .collect(),
            next_cursor: p.next_cursor,
        }
    }
}

fn pcr_to_wit(p: &PcrValue) -> verifier::PcrValue {
    verifier::PcrValue { bank: p.bank.clone(), index: p.index, digest: p.digest.clone() }
}

impl From<&VerifyRequest> for verifier::VerifyRequest {
    fn from(r: &VerifyRequest) -> verifier::VerifyRequest {
        let e = &r.evidence;
        verifier::VerifyRequest {
            evidence: verifier::Evidence {
                format: e.format.clone(),
                quote: e.quote.clone(),
                signature: e.signature.clone(),
                ak_public: e.ak_public.clone(),
                pcrs: e.pcrs.iter().map(pcr_to_wit).collect(),
                ek_certificate: e.ek_certificate.clone(),
                event_log: e.event_log.clone(),
            },
            policy: r.policy.to_string(),
            csr_public_key: r.csr_public_key.clone(),
            expected_nonce: r.expected_nonce.clone(),
        }
    }
}

impl From<verifier::Verdict> for Verdict {
    fn from(v: verifier::Verdict) -> Verdict {
        Verdict {
            verified: v.verified,
            failures: v.failures.into_iter().map(|f| Failure { code: f.code, message: f.message }).collect(),
            verified_pcrs: v
                .verified_pcrs
                .into_iter()
                .map(|p| PcrValue { bank: p.bank, index: p.index, digest: p.digest })
                .collect(),
            ek_manufacturer: v.ek_manufacturer,
            trust_score: v.trust_score.min(100),
        }
    }
}
