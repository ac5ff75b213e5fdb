//! Domain ⇄ `trellis:plugin@0.1.0` conversions. 0.1 has no records, pending issuance, typed
//! SANs or DER: requests are flattened to its shapes and its PEM answers parsed to DER here.

use trellis_core::plugins::*;
use trellis_pki::x509::{pem_certificates, pem_encode};

use super::{Ctx, Described};
use crate::bindings::v0_1::{ca, integration as int, verifier, wit_types as w};

super::test_report_conversion!();

pub(super) fn described(info: w::PluginInfo) -> Described {
    let kind = match info.kind {
        w::PluginKind::CaConnector => PluginKind::CaConnector,
        w::PluginKind::Integration => PluginKind::Integration,
        w::PluginKind::AttestationVerifier => PluginKind::AttestationVerifier,
    };
    // A 0.1 connector exports issue, revoke and list-certificates; it cannot renew by ARI.
    let capabilities = if kind == PluginKind::CaConnector {
        Capabilities { issue: true, revoke: true, discover: true, renew: true, renewal_info: false }
    } else {
        Capabilities::default()
    };
    Described {
        id: info.id,
        version: info.version,
        kind,
        name: info.name,
        description: info.description,
        serves: info.serves,
        config_schema: info.config_schema,
        secret_fields: Vec::new(),
        capabilities,
        default_issuer_patterns: info.default_issuer_patterns,
        outbound_hosts: info.outbound_hosts,
    }
}

pub(super) fn reported(err: w::PluginError) -> ReportedError {
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

pub(super) fn context(ctx: &Ctx<'_>) -> w::CallContext {
    let c = &ctx.target.context;
    w::CallContext { workspace_id: c.workspace_id.clone(), request_id: c.request_id.clone() }
}

pub(super) fn event(e: &Event) -> int::Event {
    int::Event {
        id: e.id.clone(),
        event_type: e.event_type.clone(),
        occurred_at: e.occurred_at_ms,
        workspace_id: e.workspace_id.clone(),
        summary: e.summary.clone(),
        payload: e.payload.to_string(),
    }
}

pub(super) fn delivery(d: int::Delivery) -> Delivery {
    Delivery { status: d.status, reference: d.reference }
}

pub(super) fn issue_request(r: &IssueRequest) -> ca::IssueRequest {
    ca::IssueRequest {
        csr_pem: pem_encode("CERTIFICATE REQUEST", &r.csr_der),
        subject_alt_names: r.profile.subject_alt_names.iter().map(ToString::to_string).collect(),
        validity_days: Some(r.profile.validity_days),
        profile: r.template.clone(),
        metadata: r.metadata.to_string(),
    }
}

fn certificates(pem: &str, what: &str) -> Result<Vec<Vec<u8>>, ReportedError> {
    pem_certificates(pem)
        .ok_or_else(|| ReportedError::Internal { message: format!("{what} is not PEM certificate text") })
}

/// The certificate and chain from PEM. Serial and validity the plugin reported are dropped: the
/// domain reads them from the certificate.
pub(super) fn issued(c: ca::IssuedCertificate) -> Result<IssueOutcome, ReportedError> {
    let mut blocks = certificates(&c.certificate_pem, "certificate-pem")?.into_iter();
    let certificate_der = blocks.next().unwrap_or_default();
    let mut chain_der: Vec<Vec<u8>> = blocks.collect();
    for pem in &c.chain_pem {
        chain_der.extend(certificates(pem, "chain-pem")?);
    }
    Ok(IssueOutcome::Issued(IssuedCertificate { certificate_der, chain_der, ca_reference: c.ca_reference }))
}

fn reason(reason: RevocationReason) -> ca::RevocationReason {
    match reason {
        RevocationReason::Unspecified => ca::RevocationReason::Unspecified,
        RevocationReason::KeyCompromise => ca::RevocationReason::KeyCompromise,
        RevocationReason::CaCompromise => ca::RevocationReason::CaCompromise,
        RevocationReason::AffiliationChanged => ca::RevocationReason::AffiliationChanged,
        RevocationReason::Superseded => ca::RevocationReason::Superseded,
        RevocationReason::CessationOfOperation => ca::RevocationReason::CessationOfOperation,
        RevocationReason::CertificateHold => ca::RevocationReason::CertificateHold,
        RevocationReason::PrivilegeWithdrawn => ca::RevocationReason::PrivilegeWithdrawn,
        // 0.1 predates these two; the nearest it has.
        RevocationReason::RemoveFromCrl => ca::RevocationReason::Unspecified,
        RevocationReason::AaCompromise => ca::RevocationReason::CaCompromise,
    }
}

pub(super) fn revoke_request(r: &RevokeRequest) -> ca::RevokeRequest {
    ca::RevokeRequest {
        serial_number: r.certificate.serial_number.clone(),
        certificate_pem: r.certificate.certificate_der.as_deref().map(|der| pem_encode("CERTIFICATE", der)),
        reason: reason(r.reason),
    }
}

pub(super) fn page(p: ca::CertificatePage) -> Result<CertificatePage, ReportedError> {
    let mut items = Vec::with_capacity(p.items.len());
    for d in p.items {
        let mut blocks = certificates(&d.certificate_pem, "certificate-pem")?.into_iter();
        items.push(DiscoveredCertificate {
            certificate_der: blocks.next().unwrap_or_default(),
            chain_der: blocks.collect(),
            ca_reference: d.ca_reference,
            revocation: d.revoked.then_some(RevocationInfo { revoked_at: None, reason: RevocationReason::Unspecified }),
        });
    }
    Ok(CertificatePage { items, next_cursor: p.next_cursor })
}

fn pcr_to_wit(p: &PcrValue) -> verifier::PcrValue {
    verifier::PcrValue { bank: p.bank.clone(), index: p.index, digest: p.digest.clone() }
}

/// 0.1 verifiers take one flat evidence record: the quote with the AK and EK certificate of
/// the enrolled device beside it; a 0.2 format the typed case does not cover goes as `quote`.
pub(super) fn verify_request(r: &VerifyRequest) -> verifier::VerifyRequest {
    let device = &r.device;
    let evidence = match &r.evidence {
        Evidence::Tpm2(e) => verifier::Evidence {
            format: "tpm2".into(),
            quote: e.quote.clone(),
            signature: e.quote_signature.clone(),
            ak_public: device.ak_public.clone(),
            pcrs: e.pcrs.iter().map(pcr_to_wit).collect(),
            ek_certificate: device.ek_certificate.clone(),
            event_log: e.event_log.clone(),
        },
        Evidence::Other { format, data } => verifier::Evidence {
            format: format.clone(),
            quote: data.clone(),
            signature: Vec::new(),
            ak_public: device.ak_public.clone(),
            pcrs: Vec::new(),
            ek_certificate: device.ek_certificate.clone(),
            event_log: None,
        },
    };
    verifier::VerifyRequest {
        evidence,
        policy: r.policy.to_string(),
        csr_public_key: r.csr.as_ref().map(|csr| csr.public_key.clone()).unwrap_or_default(),
        expected_nonce: r.nonce.clone(),
    }
}

pub(super) fn verdict(v: verifier::Verdict) -> Verdict {
    Verdict {
        passed: v.verified,
        failures: v.failures.into_iter().map(|f| Failure { code: f.code, message: f.message }).collect(),
        verified_pcrs: v
            .verified_pcrs
            .into_iter()
            .map(|p| PcrValue { bank: p.bank, index: p.index, digest: p.digest })
            .collect(),
        ek_manufacturer: v.ek_manufacturer,
        trust_score: v.trust_score,
        clock: None,
    }
    .normalized()
}
