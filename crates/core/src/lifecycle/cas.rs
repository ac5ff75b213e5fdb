//! CA registry work that involves another area: a new CA scanned by discovery, a certificate's
//! auto-renewal that needs its CA to issue again.

use super::LifecycleDeps;
use crate::caller::{Caller, Scope};
use crate::cas::service::{self as registry, connector_for, CaInput, CaView};
use crate::certificates::{self, Certificate};
use crate::error::{Error, Result};

/// Creates a CA and, when asked (`scanCertificates`), starts a `ca_certs` scan of it; the scan
/// id is returned beside the CA.
pub async fn create_ca_and_scan(
    ctx: &LifecycleDeps,
    caller: &Caller,
    input: CaInput,
    scan_certificates: bool,
) -> Result<(CaView, Option<i64>)> {
    // Refused before anything is created: a 400 never leaves a CA behind.
    if scan_certificates {
        let ca_type = input.ca_type.as_deref().map(str::trim).unwrap_or_default();
        let info = connector_for(ctx.plugins.host(), &caller.workspace_id, ca_type)?;
        if !info.capabilities.discover {
            return Err(Error::UnsupportedCa(format!(
                "CA type `{ca_type}` cannot list its certificates; create the CA without scanCertificates"
            )));
        }
    }
    let created = registry::create(&ctx.cas, caller, input).await?;
    let scan = if scan_certificates {
        Some(crate::discovery::start_ca_scan(&ctx.discovery, caller, created.ca.id).await?.id)
    } else {
        None
    };
    Ok((created, scan))
}

/// Sets auto-renewal (with no value given, flips it). Turning it on needs a CA that can issue
/// again: see [`check_can_renew`].
pub async fn set_auto_renewal(
    ctx: &LifecycleDeps,
    caller: &Caller,
    id: i64,
    enabled: Option<bool>,
) -> Result<Certificate> {
    caller.require(Scope::CertificatesWrite)?;
    let current = certificates::get(&ctx.certificates, caller, id).await?;
    let enabled = enabled.unwrap_or(!current.auto_renewal);
    if enabled {
        check_can_renew(ctx, &current).await?;
    }
    certificates::set_auto_renewal(&ctx.certificates, caller, id, enabled).await
}

/// Auto-renewal needs a CA that can issue again: a certificate issued through a CA whose
/// connector cannot issue (or renew) gets 400 `UNSUPPORTED_CA`. Certificates without a CA link
/// (imports) keep the flag as a reminder; nothing renews them here.
pub async fn check_can_renew(ctx: &LifecycleDeps, certificate: &Certificate) -> Result<()> {
    let Some(ca_id) = certificate.ca_id else { return Ok(()) };
    let Some(ca) = ctx.store.find_ca(&certificate.workspace_id, ca_id).await? else { return Ok(()) };
    let info = connector_for(ctx.plugins.host(), &ca.workspace_id, &ca.ca_type)?;
    if !(info.capabilities.issue || info.capabilities.renew) {
        return Err(Error::UnsupportedCa(format!(
            "CA type `{}` has no renewal method: its connector can neither issue nor renew",
            ca.ca_type
        )));
    }
    Ok(())
}
