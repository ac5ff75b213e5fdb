//! ACME Renewal Information (RFC 9773) on Trellis's ACME server: the certID of an issued leaf,
//! `GET {renewalInfo}/{certID}` (the suggested window), and newOrder's `replaces` (accepted
//! once per certificate, the "once" enforced by a unique index in the store) with the renewal
//! link recorded in the inventory when the replacing order gets its certificate.
//!
//! The window (docs/acme-server.md): from 2/3 to 5/6 of the certificate's validity, so a client
//! renewing anywhere in it still has a sixth of the lifetime left; a revoked certificate gets a
//! window entirely in the past (§4.2: renew now). Clients ask again after [`RETRY_AFTER_SECS`].

use serde_json::{json, Value};
use x509_parser::prelude::{FromDer, ParsedExtension, X509Certificate};

use super::jws::b64;
use super::problem::{Problem, ProblemType};
use super::server::{enabled_directory, store, Reply};
use super::AcmeDeps;
use super::{rfc3339, Account, DirectoryConfig, Identifier, Order, OrderStatus};
use crate::audit::Audit;
use crate::events::{CertificateRenewed, Event};
use crate::principal::Principal;
use crate::unit_of_work::Target;

/// Retry-After of a renewalInfo answer: RFC 9773 §4.3 suggests hours; certbot's own default
/// is the same 6 h.
pub const RETRY_AFTER_SECS: u64 = 6 * 3600;

/// Longest certID accepted (a 64-byte key identifier and a 20-byte serial are far below it).
const MAX_CERT_ID_LEN: usize = 512;

/// The RFC 9773 certID of a DER certificate: base64url(AKI keyIdentifier) "." base64url(the
/// serial number's DER content octets); `None` when it has no authorityKeyIdentifier with a
/// keyIdentifier (ARI cannot name it).
pub fn cert_id_of(der: &[u8]) -> Option<String> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let key_id = cert.extensions().iter().find_map(|ext| match ext.parsed_extension() {
        ParsedExtension::AuthorityKeyIdentifier(aki) => aki.key_identifier.as_ref().map(|k| k.0.to_vec()),
        _ => None,
    })?;
    Some(format!("{}.{}", b64(&key_id), b64(cert.tbs_certificate.raw_serial())))
}

/// Parses a certID a client sent into its canonical form, or a `malformed` problem.
pub fn parse_cert_id(text: &str) -> Result<String, Problem> {
    let malformed = |why: &str| {
        Problem::new(
            ProblemType::Malformed,
            format!("`{}` is not an ARI certID ({why})", text.chars().take(80).collect::<String>()),
        )
    };
    if text.len() > MAX_CERT_ID_LEN {
        return Err(malformed("too long"));
    }
    let (key_id, serial) = text.split_once('.').ok_or_else(|| malformed("expected keyIdentifier.serial"))?;
    let decode = |part: &str| {
        use base64::engine::general_purpose::URL_SAFE_NO_PAD;
        use base64::Engine;
        // RFC 9773 §4.1: unpadded base64url; padding or another alphabet is malformed.
        URL_SAFE_NO_PAD.decode(part).ok().filter(|bytes| !bytes.is_empty())
    };
    let key_id = decode(key_id).ok_or_else(|| malformed("the key identifier is not unpadded base64url"))?;
    let serial = decode(serial).ok_or_else(|| malformed("the serial number is not unpadded base64url"))?;
    Ok(format!("{}.{}", b64(&key_id), b64(&serial)))
}

/// The suggested window (ms since the epoch) of a certificate valid `not_before..not_after`.
pub fn suggested_window(not_before: i64, not_after: i64, revoked: bool, now: i64) -> (i64, i64) {
    if revoked {
        // Entirely in the past: every client that asks renews at once (§4.2).
        return (now - 86_400_000, now - 3_600_000);
    }
    let life = (not_after - not_before).max(0);
    (not_before + life * 2 / 3, not_before + life * 5 / 6)
}

/// `GET /acme/{caId}/renewal-info/{certID}`: unauthenticated; knows only the certificates this
/// directory's CA issued through ACME (another CA's or workspace's certID is 404).
pub async fn renewal_info(ctx: &AcmeDeps, ca_id: i64, cert_id: &str) -> Result<Reply, Problem> {
    let config = enabled_directory(ctx, ca_id).await?;
    let cert_id = parse_cert_id(cert_id)?;
    let unknown = || Problem::new(ProblemType::NotFound, "this directory issued no certificate with that certID");
    let order = store(ctx)?.order_by_cert_id(config.ca_id, &cert_id).await?.ok_or_else(unknown)?;
    let certificate_id = order.certificate_id.ok_or_else(unknown)?;
    let certificate = ctx.store.find_certificate(&config.workspace_id, certificate_id).await?.ok_or_else(unknown)?;
    let (start, end) =
        suggested_window(certificate.not_before, certificate.expires_at, certificate.revoked, ctx.now_millis());
    let body = json!({ "suggestedWindow": { "start": rfc3339(start), "end": rfc3339(end) } });
    Ok(Reply { retry_after: Some(RETRY_AFTER_SECS), ..Reply::json(body) })
}

/// newOrder's `replaces` (RFC 9773 §5): a certID of a certificate this directory issued to the
/// same account, sharing an identifier with the order, not already replaced by an order that
/// is not `invalid`. Answers the canonical certID to store with the order.
pub(super) async fn check_replaces(
    ctx: &AcmeDeps,
    config: &DirectoryConfig,
    account: &Account,
    identifiers: &[Identifier],
    payload: &Value,
) -> Result<Option<String>, Problem> {
    let text = match payload.get("replaces") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(text)) => text,
        Some(_) => return Err(Problem::new(ProblemType::Malformed, "`replaces` must be a certID string")),
    };
    let cert_id = parse_cert_id(text)?;
    let acme = store(ctx)?;
    let replaced = acme
        .order_by_cert_id(config.ca_id, &cert_id)
        .await?
        .ok_or_else(|| Problem::new(ProblemType::Malformed, "`replaces` names no certificate this directory issued"))?;
    if replaced.account_id != account.id {
        return Err(Problem::new(ProblemType::Malformed, "`replaces` names a certificate issued to another account"));
    }
    if !replaced.identifiers.iter().any(|i| identifiers.contains(i)) {
        return Err(Problem::new(
            ProblemType::Malformed,
            "`replaces` names a certificate that shares no identifier with this order",
        ));
    }
    if let Some(existing) = acme.replacing_order(config.ca_id, &cert_id).await? {
        // A pending order past its expiry is invalid though still stored pending: refresh it
        // first so an abandoned replacement does not block the certificate forever.
        let existing = super::server::refresh_order(ctx, existing).await?;
        if existing.status != OrderStatus::Invalid {
            return Err(already_replaced());
        }
    }
    Ok(Some(cert_id))
}

pub(super) fn already_replaced() -> Problem {
    Problem::new(ProblemType::AlreadyReplaced, "the certificate is already replaced by another order")
}

/// The replacing order got its certificate: the inventory shows it as the renewal of the one it
/// replaces (the same link, audit row and `certificate.renewed` as Trellis's own renewals).
pub(super) async fn link_renewal(ctx: &AcmeDeps, order: &Order) -> Result<(), Problem> {
    let (Some(replaces), Some(new_id)) = (&order.replaces, order.certificate_id) else { return Ok(()) };
    let Some(old_order) = store(ctx)?.order_by_cert_id(order.ca_id, replaces).await? else { return Ok(()) };
    let Some(old_id) = old_order.certificate_id else { return Ok(()) };
    let Some(old) = ctx.store.find_certificate(&order.workspace_id, old_id).await? else { return Ok(()) };
    if old.renewed_by_id == Some(new_id) {
        return Ok(());
    }
    let actor = Audit::by(Principal::acme_account(order.account_id.clone()), None);
    let mut change = ctx.change(actor, Some(&order.workspace_id)).await?;
    change.tx().record_renewal(&order.workspace_id, old.id, new_id).await?;
    change
        .audit(
            "certificate.renewed",
            Target::new("certificate", old.id),
            json!({ "renewedBy": new_id, "acme": { "orderId": order.id, "replaces": replaces } }),
        )
        .emit(Event::CertificateRenewed(CertificateRenewed {
            old_certificate_id: old.id,
            new_certificate_id: new_id,
            common_name: old.common_name.clone(),
            ca_id: Some(order.ca_id),
        }));
    change.commit().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cert_ids_are_canonical_unpadded_base64url() {
        // RFC 9773 §4.1's example.
        let id = "aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE";
        assert_eq!(parse_cert_id(id).ok().as_deref(), Some(id));
        for bad in ["", "abc", ".AIdlQyE", "aYhba4dGQEHhs3uEe6CuLN4ByNQ.", "aYhb+a4d.AIdl", "aYhba4dG==.AIdlQyE"] {
            let refused = parse_cert_id(bad).expect_err(bad);
            assert_eq!(refused.kind, ProblemType::Malformed, "{bad}");
        }
        assert!(parse_cert_id(&"a".repeat(600)).is_err());
    }

    #[test]
    fn the_window_is_two_thirds_to_five_sixths_and_past_when_revoked() {
        let day = 86_400_000;
        assert_eq!(suggested_window(0, 90 * day, false, 10 * day), (60 * day, 75 * day));
        let (start, end) = suggested_window(0, 90 * day, true, 10 * day);
        assert!(start < end && end < 10 * day, "a revoked certificate's window is in the past");
    }
}
