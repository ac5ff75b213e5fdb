//! The workspace's TPM vendor roots: the anchors EK certificate chains must reach. An anchor
//! may be restricted to one manufacturer (`id:XXXXXXXX`), so one vendor's root cannot vouch for
//! another vendor's TPMs.

use serde_json::json;
use sha2::{Digest, Sha256};

use super::AttestationDeps;
use crate::audit::Audit;
use crate::caller::{Caller, Scope};
use crate::error::Result;
use crate::plugins::TrustAnchor;
use crate::unit_of_work::Target;

use super::AttestationError;

/// A trusted root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustRoot {
    pub id: i64,
    pub workspace_id: String,
    pub name: String,
    pub certificate_pem: String,
    pub subject: String,
    pub manufacturer: Option<String>,
    pub fingerprint_sha256: String,
    pub not_after: i64,
    pub created_at: i64,
}

/// `id:XXXXXXXX` (TCG vendor id, 8 hex digits, uppercase).
pub fn normalize_manufacturer(text: &str) -> Option<String> {
    let hex = text.trim().strip_prefix("id:").or_else(|| text.trim().strip_prefix("ID:"))?;
    (hex.len() == 8 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then(|| format!("id:{}", hex.to_ascii_uppercase()))
}

pub async fn list(ctx: &AttestationDeps, caller: &Caller) -> Result<Vec<TrustRoot>> {
    caller.require(Scope::AttestationRead)?;
    Ok(ctx.store.list_trust_roots(&caller.workspace_id).await?)
}

/// Adds a root: a CA certificate (PEM or base64 DER) that has not expired.
pub async fn add(
    ctx: &AttestationDeps,
    caller: &Caller,
    name: Option<String>,
    certificate: Option<String>,
    manufacturer: Option<String>,
) -> Result<TrustRoot> {
    caller.require(Scope::AttestationManage)?;
    let certificate = certificate.ok_or_else(|| AttestationError::MissingField("certificate".into()))?;
    let der = super::certificate_der("certificate", &certificate)?;
    let (rest, parsed) = x509_parser::parse_x509_certificate(&der)
        .map_err(|_| AttestationError::invalid("certificate", "is not an X.509 certificate"))?;
    if !rest.is_empty() {
        return Err(AttestationError::invalid("certificate", "has trailing bytes after the certificate").into());
    }
    let is_ca = parsed.basic_constraints().ok().flatten().is_some_and(|bc| bc.value.ca);
    if !is_ca {
        return Err(
            AttestationError::invalid("certificate", "is not a CA certificate (basicConstraints CA:TRUE)").into()
        );
    }
    let now_secs = ctx.now_millis() / 1000;
    let not_after = parsed.validity().not_after.timestamp();
    if not_after < now_secs {
        return Err(AttestationError::invalid("certificate", "has expired").into());
    }
    let manufacturer = match manufacturer.filter(|m| !m.trim().is_empty()) {
        None => None,
        Some(m) => Some(
            normalize_manufacturer(&m)
                .ok_or_else(|| AttestationError::invalid("manufacturer", "must be a TCG vendor id like id:49424D00"))?,
        ),
    };
    let subject = parsed.subject().to_string();
    let name = name.map(|n| n.trim().to_owned()).filter(|n| !n.is_empty()).unwrap_or_else(|| subject.clone());
    if name.chars().count() > 200 || name.chars().any(char::is_control) {
        return Err(AttestationError::invalid("name", "must be at most 200 characters").into());
    }
    let pem = super::certificate_pem(&der);
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    let root = TrustRoot {
        id: 0,
        workspace_id: caller.workspace_id.to_string(),
        name,
        certificate_pem: pem,
        subject,
        manufacturer,
        fingerprint_sha256: hex::encode(Sha256::digest(&der)),
        not_after: not_after * 1000,
        created_at: change.at(),
    };
    let root = change.tx().insert_trust_root(&root).await.map_err(|err| match err {
        crate::store_error::StoreError::Unique(_) => AttestationError::DuplicateTrustRoot.into(),
        other => crate::error::Error::from(other),
    })?;
    change.audit(
        "attestation_trust_root.added",
        Target::new("attestation_trust_root", root.id),
        json!({ "subject": root.subject, "manufacturer": root.manufacturer, "fingerprintSha256": root.fingerprint_sha256 }),
    );
    change.commit().await?;
    Ok(root)
}

pub async fn remove(ctx: &AttestationDeps, caller: &Caller, id: i64) -> Result<()> {
    caller.require(Scope::AttestationManage)?;
    let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
    if !change.tx().delete_trust_root(&caller.workspace_id, id).await? {
        return Err(AttestationError::TrustRootNotFound.into());
    }
    change.audit("attestation_trust_root.removed", Target::new("attestation_trust_root", id), json!({}));
    change.commit().await
}

/// The anchors a verifier call gets.
pub async fn anchors(ctx: &AttestationDeps, workspace_id: &str) -> Result<Vec<TrustAnchor>> {
    let roots = ctx.store.list_trust_roots(workspace_id).await?;
    Ok(roots
        .into_iter()
        .filter_map(|root| {
            let der = super::certificate_der("certificate", &root.certificate_pem).ok()?;
            Some(TrustAnchor { certificate_der: der, manufacturer: root.manufacturer })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::normalize_manufacturer;

    #[test]
    fn manufacturers_are_tcg_ids() {
        assert_eq!(normalize_manufacturer("id:49424d00").as_deref(), Some("id:49424D00"));
        assert_eq!(normalize_manufacturer("IBM"), None);
        assert_eq!(normalize_manufacturer("id:1234"), None);
    }
}
