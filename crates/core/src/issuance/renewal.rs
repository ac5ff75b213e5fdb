//! Auto-renewal: certificates with `autoRenewal` that a CA of this service issued are renewed
//! inside their renewal window (their template's `renewalWindowDays` when issued; 30 days
//! before expiry otherwise) through
//! the same path as every issuance (policies, then the CA's connector). A key generated here is
//! replaced by a new one; a caller-held key is renewed with its stored CSR.
//!
//! When the CA's connector declares `renewal_info` (ACME ARI, RFC 9773), each run first asks it
//! (at most [`ARI_CHECKS_PER_RUN`] certificates, each when its next check is due) for its
//! suggested window and stores a time picked uniformly at random inside it (§4.2; now when the
//! window has ended; kept while later answers still contain it): that time, not the
//! expiry-minus-window rule, then makes the certificate due. The CA's Retry-After (bounded to [`ARI_RETRY_MIN_MS`]..[`ARI_RETRY_MAX_MS`], else
//! [`ARI_RETRY_DEFAULT_MS`]) says when to ask again; a failed call is logged and retried then,
//! and a window's explanation URL is logged.
//!
//! Replica-safe: a certificate is claimed (stamped) before it is renewed, and a claim holds for
//! [`CLAIM_LEASE_MS`], so two replicas never renew it at once and a failure is retried after
//! the lease.

use serde_json::json;
use x509_parser::prelude::{FromDer, X509Certificate};

use super::request::{IssueInput, SubjectInput};
use super::run::{Decision, Run};
use super::IssuanceDeps;
use crate::audit::Audit;
use crate::cas::service::{call_target, connector_for, find};
use crate::certificates::Certificate;
use crate::error::{Error, Result};
use crate::events::{CertificateRenewalFailed, CertificateRenewed, Event};
use crate::plugins::RenewalWindow;
use crate::unit_of_work::Target;

/// Renewal window before expiry of certificates that did not record their own.
pub const WINDOW_MS: i64 = 30 * 86_400_000;
/// How long a claim holds (and how long a failed renewal waits before the next try).
pub const CLAIM_LEASE_MS: i64 = 3_600_000;

/// At most this many certificates' renewal information is asked per run.
pub const ARI_CHECKS_PER_RUN: i64 = 50;
/// When to ask the CA again without its Retry-After, and the bounds of the one it gives.
pub const ARI_RETRY_DEFAULT_MS: i64 = 6 * 3_600_000;
pub const ARI_RETRY_MIN_MS: i64 = 3_600_000;
pub const ARI_RETRY_MAX_MS: i64 = 24 * 3_600_000;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RenewalRun {
    pub renewed: u32,
    pub failed: u32,
    /// The CA answered "pending": an `issuing` certificate request completes the renewal.
    pub pending: u32,
}

/// Renews up to `limit` due certificates now.
pub async fn run(ctx: &IssuanceDeps, limit: i64) -> Result<RenewalRun> {
    let now = ctx.now_millis();
    check_renewal_info(ctx, now, limit.min(ARI_CHECKS_PER_RUN)).await?;
    let mut change = ctx.change(Audit::system("renewal"), None).await?;
    let due = change.tx().claim_renewals(now, WINDOW_MS, now - CLAIM_LEASE_MS, limit).await?;
    change.commit().await?;
    let mut run = RenewalRun::default();
    for certificate in due {
        match crate::error::contain_panic("a renewal", renew(ctx, &certificate)).await {
            Ok(Renewed::Now(new_id)) => {
                run.renewed += 1;
                tracing::info!(certificate = certificate.id, renewed_by = new_id, "certificate renewed");
            }
            Ok(Renewed::Pending(request_id)) => {
                run.pending += 1;
                tracing::info!(certificate = certificate.id, request = request_id, "renewal pending at the CA");
            }
            Err(err) => {
                run.failed += 1;
                tracing::warn!(certificate = certificate.id, error = %err, "renewal failed; retrying after the claim lease");
                record_failure(ctx, &certificate, &err).await?;
            }
        }
    }
    Ok(run)
}

/// Asks the CAs that offer renewal information about the certificates whose next check is due,
/// and stores when to renew them. Claiming moves the next check to the default retry first, so
/// a replica that dies mid-way (or a CA that fails) leaves them for the next check.
pub(crate) async fn check_renewal_info(ctx: &IssuanceDeps, now: i64, limit: i64) -> Result<()> {
    let mut change = ctx.change(Audit::system("renewal"), None).await?;
    let due = change.tx().claim_renewal_info_checks(now, now + ARI_RETRY_DEFAULT_MS, limit).await?;
    change.commit().await?;
    for certificate in due {
        match crate::error::contain_panic("a renewal information check", ask_renewal_info(ctx, &certificate)).await {
            // The CA type offers no renewal information: ask it again much later (a connector
            // upgrade may add it), and leave the template window in charge.
            Ok(None) => record_renewal_info(ctx, &certificate, None, None, now + ARI_RETRY_MAX_MS).await?,
            Ok(Some(window)) => {
                let renew_at = window.as_ref().map(|w| renew_at(ctx, now, w));
                if let Some(w) = &window {
                    tracing::info!(
                        certificate = certificate.id,
                        renew_at,
                        explanation_url = w.explanation_url.as_deref().unwrap_or(""),
                        "CA renewal window"
                    );
                }
                let retry = window.as_ref().and_then(|w| w.retry_after_secs);
                let bounds = window.as_ref().map(|w| (w.start.saturating_mul(1000), w.end.saturating_mul(1000)));
                record_renewal_info(ctx, &certificate, renew_at, bounds, now + next_check_in(retry)).await?;
            }
            Err(err) => {
                tracing::warn!(certificate = certificate.id, error = %err, "renewal information failed; asking again at the next check");
            }
        }
    }
    Ok(())
}

/// The CA's window for `certificate`: `None` when its connector does not offer renewal
/// information, `Some(None)` when the CA suggests nothing.
async fn ask_renewal_info(ctx: &IssuanceDeps, certificate: &Certificate) -> Result<Option<Option<RenewalWindow>>> {
    let Some(ca_id) = certificate.ca_id else { return Ok(None) };
    let ca = find(ctx.store.as_ref(), &certificate.workspace_id, ca_id).await?;
    let info = connector_for(ctx.plugins.host(), &ca.workspace_id, &ca.ca_type)?;
    if !info.capabilities.renewal_info {
        return Ok(None);
    }
    let reference = crate::certificates::connector_ref(certificate);
    let window = ctx.plugins.host().ca_renewal_info(&call_target(&ctx.master_key, &ca, &info)?, &reference).await?;
    Ok(Some(window))
}

async fn record_renewal_info(
    ctx: &IssuanceDeps,
    certificate: &Certificate,
    renew_at: Option<i64>,
    window: Option<(i64, i64)>,
    next_check: i64,
) -> Result<()> {
    let mut change = ctx.change(Audit::system("renewal"), Some(&certificate.workspace_id)).await?;
    change.tx().record_renewal_info(&certificate.workspace_id, certificate.id, renew_at, window, next_check).await?;
    change.commit().await
}

/// A time (ms) picked uniformly at random inside the window (seconds), so the CA's clients do
/// not all come at its start (RFC 9773 §4.2; a time already past means renew now); now when the
/// window has already ended.
fn renew_at(ctx: &IssuanceDeps, now: i64, window: &RenewalWindow) -> i64 {
    let (start, end) = (window.start.saturating_mul(1000), window.end.saturating_mul(1000));
    if end <= now {
        return now;
    }
    let start = start.min(end);
    let mut bytes = [0u8; 8];
    ctx.entropy.fill(&mut bytes);
    let span = u64::try_from(end - start).unwrap_or(0);
    let offset = if span == 0 { 0 } else { u64::from_le_bytes(bytes) % (span + 1) };
    start.saturating_add(i64::try_from(offset).unwrap_or(0))
}

/// When to ask again: the CA's Retry-After within bounds, else the default.
fn next_check_in(retry_after_secs: Option<u32>) -> i64 {
    retry_after_secs
        .map_or(ARI_RETRY_DEFAULT_MS, |secs| (i64::from(secs) * 1000).clamp(ARI_RETRY_MIN_MS, ARI_RETRY_MAX_MS))
}

/// The subject's DN parts of a certificate (what a renewal keeps).
fn subject_parts(certificate: &Certificate) -> SubjectInput {
    let Some(der) =
        trellis_pki::x509::pem_certificates(&certificate.certificate_pem).and_then(|b| b.into_iter().next())
    else {
        return SubjectInput::default();
    };
    let Ok((_, parsed)) = X509Certificate::from_der(&der) else { return SubjectInput::default() };
    let subject = parsed.subject();
    let text = |attribute: Option<&x509_parser::x509::AttributeTypeAndValue<'_>>| {
        attribute.and_then(|a| a.as_str().ok()).map(str::to_owned)
    };
    let parts = SubjectInput {
        organization: text(subject.iter_organization().next()),
        organizational_unit: text(subject.iter_organizational_unit().next()),
        country: text(subject.iter_country().next()),
        state: text(subject.iter_state_or_province().next()),
        locality: text(subject.iter_locality().next()),
    };
    parts
}

/// The key algorithm of a generated key, as the issue API names it.
fn key_algorithm(certificate: &Certificate) -> Option<String> {
    Some(
        match (certificate.key_algorithm.as_str(), certificate.key_size) {
            ("ECDSA", Some(384)) => "ecdsa-p384",
            ("ECDSA", _) => "ecdsa-p256",
            ("ED25519", _) => "ed25519",
            ("RSA", Some(3072)) => "rsa-3072",
            ("RSA", Some(4096)) => "rsa-4096",
            ("RSA", _) => "rsa-2048",
            _ => return None,
        }
        .to_owned(),
    )
}

enum Renewed {
    /// The successor's id.
    Now(i64),
    /// The `issuing` request's id.
    Pending(i64),
}

async fn renew(ctx: &IssuanceDeps, old: &Certificate) -> Result<Renewed> {
    let ca_id = old.ca_id.ok_or_else(|| Error::UnsupportedCa("the certificate has no CA".into()))?;
    let ca = find(ctx.store.as_ref(), &old.workspace_id, ca_id).await?;
    let info = connector_for(ctx.plugins.host(), &ca.workspace_id, &ca.ca_type)?;
    if !info.capabilities.issue {
        return Err(Error::UnsupportedCa(format!("CA type `{}` cannot renew", ca.ca_type)));
    }
    let names = old
        .subject_alt_names
        .iter()
        .map(|name| name.split_once(':').map_or(name.as_str(), |(_, value)| value).to_owned())
        .collect();
    let generated_key = old.has_private_key || old.csr_pem.is_none();
    let input = IssueInput {
        ca_id: Some(ca_id),
        csr: if generated_key { None } else { old.csr_pem.clone() },
        common_name: Some(old.common_name.clone()).filter(|cn| !cn.is_empty()),
        subject_alt_names: names,
        template_id: old.issuance_template.clone(),
        subject: subject_parts(old),
        key_algorithm: if generated_key { key_algorithm(old) } else { None },
        auto_renewal: Some(true),
        metadata: Some(old.metadata.clone()).filter(|m| m.is_object()),
        ..IssueInput::default()
    };
    let lifetime_days = u32::try_from((old.expires_at - old.not_before).div_euclid(86_400_000)).unwrap_or(1);
    let (run, input) = Run::for_renewal(ctx, ca, info, &input, lifetime_days).await?;
    let issued = match run.decide(ctx).await? {
        Decision::Issued(issued) => issued,
        // Parked like any pending issuance; the claim query skips a certificate whose renewal
        // is in flight, and the poller links the successor when the CA issues.
        Decision::Pending(order) => {
            let request = super::pending::open(ctx, &run, &input, *order, Some(old.id)).await?;
            return Ok(Renewed::Pending(request.id));
        }
        // Nobody can approve a renewal: a policy that holds it fails it, as one that denies it.
        Decision::NeedsApproval { reasons, .. } => return Err(Error::ApprovalRequired(reasons)),
        Decision::Refused(reasons) => return Err(Error::PolicyDenied(reasons)),
    };
    let actor = run.actor.clone();
    let new_id = issued.certificate.id;
    let mut change = ctx.change(actor, Some(&old.workspace_id)).await?;
    change.tx().record_renewal(&old.workspace_id, old.id, new_id).await?;
    change.audit("certificate.renewed", Target::new("certificate", old.id), json!({ "renewedBy": new_id })).emit(
        Event::CertificateRenewed(CertificateRenewed {
            old_certificate_id: old.id,
            new_certificate_id: new_id,
            common_name: old.common_name.clone(),
            ca_id: Some(ca_id),
        }),
    );
    change.commit().await?;
    Ok(Renewed::Now(new_id))
}

async fn record_failure(ctx: &IssuanceDeps, certificate: &Certificate, err: &Error) -> Result<()> {
    let message: String = err.to_string().chars().take(1000).collect();
    let mut change = ctx.change(Audit::system("renewal"), Some(&certificate.workspace_id)).await?;
    change.tx().record_renewal_failure(&certificate.workspace_id, certificate.id, &message).await?;
    change
        .audit("certificate.renewal_failed", Target::new("certificate", certificate.id), json!({ "error": message }))
        .emit(Event::CertificateRenewalFailed(CertificateRenewalFailed {
            certificate_id: certificate.id,
            common_name: certificate.common_name.clone(),
            error: message,
            code: err.code(),
        }));
    change.commit().await
}
