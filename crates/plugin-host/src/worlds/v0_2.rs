//! Domain ⇄ `trellis:plugin@0.2.0` conversions. The domain's plugin vocabulary has 0.2's
//! shape, so these are mostly one-to-one; certificates a plugin returns as PEM are parsed to
//! DER here, and a plugin's malformed answer is its own error, never a host failure.

use std::net::IpAddr;

use trellis_core::plugins::*;
use trellis_pki::x509::{pem_certificates, pem_encode};

use super::{Ctx, Described};
use crate::bindings::v0_2::{ca, integration as int, policy as pol, verifier as ver, wit_types as w};

super::test_report_conversion!();

pub(super) fn described(info: w::PluginInfo) -> Described {
    let kind = match info.kind {
        w::PluginKind::CaConnector => PluginKind::CaConnector,
        w::PluginKind::Integration => PluginKind::Integration,
        w::PluginKind::AttestationVerifier => PluginKind::AttestationVerifier,
        w::PluginKind::IssuancePolicy => PluginKind::IssuancePolicy,
    };
    let c = info.capabilities;
    Described {
        id: info.id,
        version: info.version,
        kind,
        name: info.name,
        description: info.description,
        serves: info.serves,
        config_schema: info.config_schema,
        secret_fields: info
            .secret_fields
            .into_iter()
            .map(|f| SecretField { pointer: f.pointer, withheld: f.withheld })
            .collect(),
        capabilities: Capabilities {
            issue: c.contains(w::Capabilities::ISSUE),
            revoke: c.contains(w::Capabilities::REVOKE),
            discover: c.contains(w::Capabilities::DISCOVER),
            renew: c.contains(w::Capabilities::RENEW),
            renewal_info: c.contains(w::Capabilities::RENEWAL_INFO),
        },
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
        w::PluginError::Conflict(message) => ReportedError::Conflict { message },
        w::PluginError::Rejected(message) => ReportedError::Rejected { message },
        w::PluginError::Internal(message) => ReportedError::Internal { message },
    }
}

pub(super) fn context(ctx: &Ctx<'_>) -> w::CallContext {
    let c = &ctx.target.context;
    w::CallContext {
        workspace_id: c.workspace_id.clone(),
        record_id: c.record_id.clone(),
        request_id: c.request_id.clone(),
        endpoint: c.endpoint.clone(),
        time_budget_ms: ctx.time_budget_ms,
    }
}

pub(super) fn event(e: &Event) -> int::Event {
    int::Event {
        id: e.id.clone(),
        event_type: e.event_type.clone(),
        occurred_at: e.occurred_at_ms,
        summary: e.summary.clone(),
        payload: e.payload.to_string(),
    }
}

pub(super) fn delivery(d: int::Delivery) -> Delivery {
    Delivery { status: d.status, reference: d.reference }
}

pub(crate) fn subject(s: &Subject) -> w::Subject {
    w::Subject {
        common_name: s.common_name.clone(),
        organization: s.organization.clone(),
        organizational_unit: s.organizational_unit.clone(),
        country: s.country.clone(),
        state: s.state.clone(),
        locality: s.locality.clone(),
        other: s.other.iter().map(|(oid, value)| w::NameAttribute { oid: oid.clone(), value: value.clone() }).collect(),
    }
}

fn san(name: &SubjectAltName) -> w::SubjectAltName {
    match name {
        SubjectAltName::Dns(name) => w::SubjectAltName::Dns(name.clone()),
        SubjectAltName::Email(mailbox) => w::SubjectAltName::Email(mailbox.clone()),
        SubjectAltName::Uri(uri) => w::SubjectAltName::Uri(uri.clone()),
        SubjectAltName::Ip(IpAddr::V4(ip)) => {
            let [a, b, c, d] = ip.octets();
            w::SubjectAltName::Ip(w::IpAddress::Ipv4((a, b, c, d)))
        }
        SubjectAltName::Ip(IpAddr::V6(ip)) => {
            let [a, b, c, d, e, f, g, h] = ip.segments();
            w::SubjectAltName::Ip(w::IpAddress::Ipv6((a, b, c, d, e, f, g, h)))
        }
    }
}

fn key_usages(usages: &[KeyUsage]) -> w::KeyUsages {
    usages.iter().fold(w::KeyUsages::empty(), |flags, usage| {
        flags
            | match usage {
                KeyUsage::DigitalSignature => w::KeyUsages::DIGITAL_SIGNATURE,
                KeyUsage::ContentCommitment => w::KeyUsages::CONTENT_COMMITMENT,
                KeyUsage::KeyEncipherment => w::KeyUsages::KEY_ENCIPHERMENT,
                KeyUsage::DataEncipherment => w::KeyUsages::DATA_ENCIPHERMENT,
                KeyUsage::KeyAgreement => w::KeyUsages::KEY_AGREEMENT,
                KeyUsage::KeyCertSign => w::KeyUsages::KEY_CERT_SIGN,
                KeyUsage::CrlSign => w::KeyUsages::CRL_SIGN,
                KeyUsage::EncipherOnly => w::KeyUsages::ENCIPHER_ONLY,
                KeyUsage::DecipherOnly => w::KeyUsages::DECIPHER_ONLY,
            }
    })
}

fn profile(p: &CertificateProfile) -> w::CertificateProfile {
    w::CertificateProfile {
        subject: subject(&p.subject),
        subject_alt_names: p.subject_alt_names.iter().map(san).collect(),
        key_usages: key_usages(&p.key_usages),
        extended_key_usages: p.extended_key_usages.clone(),
        validity_days: p.validity_days,
    }
}

pub(crate) fn subject_from_wit(s: w::Subject) -> Subject {
    Subject {
        common_name: s.common_name,
        organization: s.organization,
        organizational_unit: s.organizational_unit,
        country: s.country,
        state: s.state,
        locality: s.locality,
        other: s.other.into_iter().map(|a| (a.oid, a.value)).collect(),
    }
}

fn san_from_wit(name: w::SubjectAltName) -> SubjectAltName {
    match name {
        w::SubjectAltName::Dns(name) => SubjectAltName::Dns(name),
        w::SubjectAltName::Email(mailbox) => SubjectAltName::Email(mailbox),
        w::SubjectAltName::Uri(uri) => SubjectAltName::Uri(uri),
        w::SubjectAltName::Ip(w::IpAddress::Ipv4((a, b, c, d))) => {
            SubjectAltName::Ip(IpAddr::V4(std::net::Ipv4Addr::new(a, b, c, d)))
        }
        w::SubjectAltName::Ip(w::IpAddress::Ipv6((a, b, c, d, e, f, g, h))) => {
            SubjectAltName::Ip(IpAddr::V6(std::net::Ipv6Addr::new(a, b, c, d, e, f, g, h)))
        }
    }
}

fn key_usages_from_wit(flags: w::KeyUsages) -> Vec<KeyUsage> {
    [
        (w::KeyUsages::DIGITAL_SIGNATURE, KeyUsage::DigitalSignature),
        (w::KeyUsages::CONTENT_COMMITMENT, KeyUsage::ContentCommitment),
        (w::KeyUsages::KEY_ENCIPHERMENT, KeyUsage::KeyEncipherment),
        (w::KeyUsages::DATA_ENCIPHERMENT, KeyUsage::DataEncipherment),
        (w::KeyUsages::KEY_AGREEMENT, KeyUsage::KeyAgreement),
        (w::KeyUsages::KEY_CERT_SIGN, KeyUsage::KeyCertSign),
        (w::KeyUsages::CRL_SIGN, KeyUsage::CrlSign),
        (w::KeyUsages::ENCIPHER_ONLY, KeyUsage::EncipherOnly),
        (w::KeyUsages::DECIPHER_ONLY, KeyUsage::DecipherOnly),
    ]
    .into_iter()
    .filter(|(flag, _)| flags.contains(*flag))
    .map(|(_, usage)| usage)
    .collect()
}

/// A profile a plugin passes back to the host (`pki-core.sign-csr`).
pub(crate) fn profile_from_wit(p: w::CertificateProfile) -> CertificateProfile {
    CertificateProfile {
        subject: subject_from_wit(p.subject),
        subject_alt_names: p.subject_alt_names.into_iter().map(san_from_wit).collect(),
        key_usages: key_usages_from_wit(p.key_usages),
        extended_key_usages: p.extended_key_usages,
        validity_days: p.validity_days,
    }
}

fn der_pem(label: &str, der: &[u8]) -> w::DerPem {
    w::DerPem { der: der.to_vec(), pem: pem_encode(label, der) }
}

pub(super) fn certificate_ref(c: &CertificateRef) -> w::CertificateRef {
    w::CertificateRef {
        certificate: c.certificate_der.as_deref().map(|der| der_pem("CERTIFICATE", der)),
        serial_number: c.serial_number.clone(),
        authority_key_id: c.authority_key_id.clone(),
        not_before: c.not_before,
        not_after: c.not_after,
        ca_reference: c.ca_reference.clone(),
    }
}

pub(super) fn issue_request(r: &IssueRequest) -> ca::IssueRequest {
    ca::IssueRequest {
        idempotency_key: r.idempotency_key.clone(),
        csr: der_pem("CERTIFICATE REQUEST", &r.csr_der),
        template: r.template.clone(),
        profile: profile(&r.profile),
        replaces: r.replaces.as_ref().map(certificate_ref),
        metadata: r.metadata.to_string(),
    }
}

/// DER of a certificate and of any chain that came with it (PEM may carry several blocks).
fn certificate_data(data: w::CertificateData, what: &str) -> Result<(Vec<u8>, Vec<Vec<u8>>), ReportedError> {
    match data {
        w::CertificateData::Der(der) if !der.is_empty() => Ok((der, Vec::new())),
        w::CertificateData::Der(_) => Err(ReportedError::Internal { message: format!("{what} is empty") }),
        w::CertificateData::Pem(text) => {
            let mut blocks = pem_certificates(&text)
                .ok_or_else(|| ReportedError::Internal { message: format!("{what} is not PEM certificate text") })?
                .into_iter();
            let leaf = blocks.next().unwrap_or_default();
            Ok((leaf, blocks.collect()))
        }
    }
}

pub(super) fn issued(c: ca::IssuedCertificate) -> Result<IssuedCertificate, ReportedError> {
    let (certificate_der, mut chain_der) = certificate_data(c.certificate, "certificate")?;
    for link in c.chain {
        let (der, more) = certificate_data(link, "chain")?;
        chain_der.push(der);
        chain_der.extend(more);
    }
    Ok(IssuedCertificate { certificate_der, chain_der, ca_reference: c.ca_reference })
}

pub(super) fn outcome(o: ca::IssueOutcome) -> Result<IssueOutcome, ReportedError> {
    match o {
        ca::IssueOutcome::Issued(c) => issued(c).map(IssueOutcome::Issued),
        ca::IssueOutcome::Pending(p) => {
            if p.reference.is_empty() || p.reference.len() > 1024 {
                return Err(ReportedError::Internal {
                    message: "a pending issuance's reference must be 1 to 1024 bytes".into(),
                });
            }
            Ok(IssueOutcome::Pending(PendingIssue {
                reference: p.reference,
                retry_after_secs: p.retry_after_seconds,
                status_message: p.status_message.chars().take(500).collect(),
            }))
        }
    }
}

pub(super) fn chain(links: Vec<w::CertificateData>) -> Result<Vec<Vec<u8>>, ReportedError> {
    let mut chain = Vec::with_capacity(links.len());
    for link in links {
        let (der, more) = certificate_data(link, "ca-chain")?;
        chain.push(der);
        chain.extend(more);
    }
    Ok(chain)
}

pub(crate) fn reason_to_wit(reason: RevocationReason) -> w::RevocationReason {
    match reason {
        RevocationReason::Unspecified => w::RevocationReason::Unspecified,
        RevocationReason::KeyCompromise => w::RevocationReason::KeyCompromise,
        RevocationReason::CaCompromise => w::RevocationReason::CaCompromise,
        RevocationReason::AffiliationChanged => w::RevocationReason::AffiliationChanged,
        RevocationReason::Superseded => w::RevocationReason::Superseded,
        RevocationReason::CessationOfOperation => w::RevocationReason::CessationOfOperation,
        RevocationReason::CertificateHold => w::RevocationReason::CertificateHold,
        RevocationReason::RemoveFromCrl => w::RevocationReason::RemoveFromCrl,
        RevocationReason::PrivilegeWithdrawn => w::RevocationReason::PrivilegeWithdrawn,
        RevocationReason::AaCompromise => w::RevocationReason::AaCompromise,
    }
}

pub(crate) fn reason_from_wit(reason: w::RevocationReason) -> RevocationReason {
    match reason {
        w::RevocationReason::Unspecified => RevocationReason::Unspecified,
        w::RevocationReason::KeyCompromise => RevocationReason::KeyCompromise,
        w::RevocationReason::CaCompromise => RevocationReason::CaCompromise,
        w::RevocationReason::AffiliationChanged => RevocationReason::AffiliationChanged,
        w::RevocationReason::Superseded => RevocationReason::Superseded,
        w::RevocationReason::CessationOfOperation => RevocationReason::CessationOfOperation,
        w::RevocationReason::CertificateHold => RevocationReason::CertificateHold,
        w::RevocationReason::RemoveFromCrl => RevocationReason::RemoveFromCrl,
        w::RevocationReason::PrivilegeWithdrawn => RevocationReason::PrivilegeWithdrawn,
        w::RevocationReason::AaCompromise => RevocationReason::AaCompromise,
    }
}

pub(super) fn revoke_request(r: &RevokeRequest) -> ca::RevokeRequest {
    ca::RevokeRequest { certificate: certificate_ref(&r.certificate), reason: reason_to_wit(r.reason) }
}

pub(super) fn page(p: ca::CertificatePage) -> Result<CertificatePage, ReportedError> {
    let mut items = Vec::with_capacity(p.items.len());
    for d in p.items {
        let (certificate_der, chain_der) = certificate_data(d.certificate, "discovered certificate")?;
        items.push(DiscoveredCertificate {
            certificate_der,
            chain_der,
            ca_reference: d.ca_reference,
            revocation: d
                .revocation
                .map(|r| RevocationInfo { revoked_at: Some(r.revoked_at), reason: reason_from_wit(r.reason) }),
        });
    }
    Ok(CertificatePage { items, next_cursor: p.next_cursor })
}

pub(super) fn renewal_window(r: ca::RenewalWindow) -> Result<RenewalWindow, ReportedError> {
    if r.end < r.start {
        return Err(ReportedError::Internal { message: "renewal window ends before it starts".into() });
    }
    Ok(RenewalWindow {
        start: r.start,
        end: r.end,
        explanation_url: r.explanation_url,
        retry_after_secs: r.retry_after_seconds,
    })
}

// ---- issuance-policy ----------------------------------------------------------------------

pub(super) fn evaluation_request(r: &EvaluationRequest) -> pol::EvaluationRequest {
    pol::EvaluationRequest {
        ca_type: r.ca_type.clone(),
        ca_id: r.ca_id.clone(),
        template: r.template.clone(),
        subject: subject(&r.subject),
        subject_alt_names: r.subject_alt_names.iter().map(san).collect(),
        key: pol::SubjectKey {
            algorithm: r.key.algorithm.clone(),
            size_bits: r.key.size_bits,
            curve: r.key.curve.clone(),
            server_generated: r.key.server_generated,
        },
        validity_days: r.validity_days,
        requester: pol::Requester {
            kind: match r.requester.kind {
                RequesterKind::User => pol::RequesterKind::User,
                RequesterKind::ApiKey => pol::RequesterKind::ApiKey,
                RequesterKind::Agent => pol::RequesterKind::Agent,
                RequesterKind::System => pol::RequesterKind::System,
            },
            id: r.requester.id.clone(),
            display_name: r.requester.display_name.clone(),
        },
        source: match r.source {
            IssuanceSource::Api => pol::Source::Api,
            IssuanceSource::RequestWorkflow => pol::Source::RequestWorkflow,
            IssuanceSource::Attestation => pol::Source::Attestation,
            IssuanceSource::Renewal => pol::Source::Renewal,
        },
    }
}

pub(super) fn decision(d: pol::Decision) -> Decision {
    let reasons = |reasons: Vec<pol::Reason>| {
        reasons.into_iter().map(|r| PolicyReason { code: r.code, message: r.message }).collect::<Vec<_>>()
    };
    match d {
        pol::Decision::Allow(days) => Decision::Allow { max_validity_days: days },
        pol::Decision::Deny(list) => Decision::Deny(reasons(list)),
        pol::Decision::RequireApproval(list) => Decision::RequireApproval(reasons(list)),
    }
}

// ---- attestation-verifier -----------------------------------------------------------------

fn trust_anchor(a: &TrustAnchor) -> ver::TrustAnchor {
    ver::TrustAnchor { certificate_der: a.certificate_der.clone(), manufacturer: a.manufacturer.clone() }
}

fn pcr_to_wit(p: &PcrValue) -> ver::PcrValue {
    ver::PcrValue { bank: p.bank.clone(), index: p.index, digest: p.digest.clone() }
}

fn pcr_from_wit(p: ver::PcrValue) -> PcrValue {
    PcrValue { bank: p.bank, index: p.index, digest: p.digest }
}

fn clock_to_wit(c: &TpmClock) -> ver::TpmClock {
    ver::TpmClock { clock: c.clock, reset_count: c.reset_count, restart_count: c.restart_count, safe: c.safe }
}

pub(super) fn enrollment_request(r: &EnrollmentRequest) -> ver::EnrollmentRequest {
    ver::EnrollmentRequest {
        ek_certificate: r.ek_certificate.clone(),
        ek_chain: r.ek_chain.clone(),
        ek_public: r.ek_public.clone(),
        ak_public: r.ak_public.clone(),
        trust_anchors: r.trust_anchors.iter().map(trust_anchor).collect(),
        policy: r.policy.as_ref().map(|p| p.to_string()),
        secret: r.secret.clone(),
        entropy: r.entropy.clone(),
        now: r.now,
    }
}

pub(super) fn enrollment_verdict(v: ver::EnrollmentVerdict) -> EnrollmentVerdict {
    EnrollmentVerdict {
        passed: v.passed,
        failures: v.failures.iter().map(|f| Failure::parse(f)).collect(),
        ak_name: v.ak_name,
        ek_manufacturer: v.ek_manufacturer,
        challenge: v
            .challenge
            .map(|c| ActivationChallenge { credential_blob: c.credential_blob, encrypted_secret: c.encrypted_secret }),
    }
    .normalized()
}

pub(super) fn verify_request(r: &VerifyRequest) -> ver::VerifyRequest {
    let evidence = match &r.evidence {
        Evidence::Tpm2(e) => ver::Evidence::Tpm2(ver::Tpm2Evidence {
            quote: e.quote.clone(),
            quote_signature: e.quote_signature.clone(),
            pcrs: e.pcrs.iter().map(pcr_to_wit).collect(),
            certification: e.certification.as_ref().map(|c| ver::Tpm2Certification {
                attest: c.attest.clone(),
                signature: c.signature.clone(),
                certified_key_public: c.certified_key_public.clone(),
            }),
            event_log: e.event_log.clone(),
        }),
        Evidence::Other { format, data } => {
            ver::Evidence::Other(ver::OpaqueEvidence { format: format.clone(), data: data.clone() })
        }
    };
    let d = &r.device;
    ver::VerifyRequest {
        evidence,
        policy: r.policy.to_string(),
        nonce: r.nonce.clone(),
        nonce_issued_at: r.nonce_issued_at,
        now: r.now,
        device: ver::EnrolledDevice {
            ak_public: d.ak_public.clone(),
            ak_name: d.ak_name.clone(),
            ek_certificate: d.ek_certificate.clone(),
            ek_chain: d.ek_chain.clone(),
            last_clock: d.last_clock.as_ref().map(clock_to_wit),
        },
        csr: r.csr.as_ref().map(|c| ver::BoundCsr { der: c.der.clone(), public_key: c.public_key.clone() }),
        trust_anchors: r.trust_anchors.iter().map(trust_anchor).collect(),
    }
}

pub(super) fn verdict(v: ver::Verdict) -> Verdict {
    Verdict {
        passed: v.passed,
        failures: v.failures.iter().map(|f| Failure::parse(f)).collect(),
        verified_pcrs: v.verified_pcrs.into_iter().map(pcr_from_wit).collect(),
        ek_manufacturer: v.ek_manufacturer,
        trust_score: v.trust_score,
        clock: v.clock.map(|c| TpmClock {
            clock: c.clock,
            reset_count: c.reset_count,
            restart_count: c.restart_count,
            safe: c.safe,
        }),
    }
    .normalized()
}
