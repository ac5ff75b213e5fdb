//! Domain claims: which DNS names a workspace may have ACME challenge answers presented for.
//!
//! The host's challenge answers (the shared HTTP-01 listener, DNS-01 through the host's DNS
//! providers) are instance-wide: without this, workspace A could order workspace B's name from a
//! public ACME CA and have it validated by the listener B's name points at. A claim covers its
//! domain and every name under it; a workspace holds one by proving control of the domain's DNS
//! (a TXT record `_trellis-challenge.<domain>` with the claim's token) or by an instance
//! administrator's assignment. One workspace per verified name: a claim that overlaps another
//! workspace's verified claim (the same domain, one above or below it) is refused, unless an
//! administrator reassigns it.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::json;

use crate::audit::Audit;
use crate::caller::{Caller, Scope};
use crate::clock::{SharedClock, SharedEntropy};
use crate::error::{Entity, Error, Result};
use crate::store_error::{StoreError, StoreResult};
use crate::unit_of_work::{ChangeTx, Changes, Target, UnitOfWork};

/// Where the verification TXT record lives: `_trellis-challenge.<domain>`.
pub const TXT_LABEL: &str = "_trellis-challenge";

/// A workspace's claim on a domain and the names under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainClaim {
    pub id: String,
    pub workspace_id: String,
    /// Lower-case, no trailing dot, no wildcard.
    pub domain: String,
    /// The TXT value that proves control.
    pub token: String,
    /// When it was verified or assigned; unverified claims entitle to nothing.
    pub verified_at: Option<i64>,
    /// `dns` (the TXT record was found) or `admin` (an instance administrator assigned it).
    pub method: Option<String>,
    pub created_at: i64,
}

impl DomainClaim {
    pub fn record_name(&self) -> String {
        format!("{TXT_LABEL}.{}", self.domain)
    }

    /// Whether this claim, once verified, covers `name` (normalized).
    pub fn covers(&self, name: &str) -> bool {
        covers(&self.domain, name)
    }
}

fn covers(domain: &str, name: &str) -> bool {
    name == domain || name.strip_suffix(domain).is_some_and(|head| head.ends_with('.'))
}

/// Two domains overlap when one covers the other.
fn overlaps(a: &str, b: &str) -> bool {
    covers(a, b) || covers(b, a)
}

/// The claim form of a domain: trimmed, lower-case, without a trailing dot; at least two LDH
/// labels of 1-63 characters, 253 at most in all. Wildcards and IP addresses cannot be claimed.
pub fn normalize_domain(text: &str) -> Result<String> {
    let domain = text.trim().trim_end_matches('.').to_ascii_lowercase();
    let labels_ok = domain.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    });
    if domain.len() > 253 || !labels_ok || !domain.contains('.') || domain.parse::<std::net::IpAddr>().is_ok() {
        return Err(Error::invalid_field(
            "domain",
            "must be a DNS name of at least two labels (letters, digits, hyphens), without `*.` or an IP address",
        ));
    }
    // An all-numeric last label is an IPv4 address in disguise, never a DNS name.
    if domain.rsplit('.').next().is_some_and(|tld| tld.bytes().all(|b| b.is_ascii_digit())) {
        return Err(Error::invalid_field("domain", "must be a DNS name, not an IP address"));
    }
    Ok(domain)
}

/// The name a challenge identifier asks about: lower-case, no trailing dot, `*.` removed (a
/// wildcard's answer is presented at its base name).
fn identifier_name(identifier: &str) -> String {
    let name = identifier.trim().trim_end_matches('.').to_ascii_lowercase();
    name.strip_prefix("*.").map(str::to_owned).unwrap_or(name)
}

/// Where claims live (the store implements it; every replica and the plugin host share it).
#[async_trait]
pub trait DomainClaims: Send + Sync + 'static {
    async fn insert_claim(&self, claim: &DomainClaim) -> StoreResult<()>;
    /// The workspace's claims, oldest first.
    async fn workspace_claims(&self, workspace_id: &str) -> StoreResult<Vec<DomainClaim>>;
    /// Verified claims of every workspace.
    async fn verified_claims(&self) -> StoreResult<Vec<DomainClaim>>;
    /// Marks the claim verified; false when it no longer exists.
    async fn mark_verified(&self, id: &str, at: i64, method: &str) -> StoreResult<bool>;
    /// Deletes the claim if it belongs to the workspace; false otherwise.
    async fn delete_claim(&self, workspace_id: &str, id: &str) -> StoreResult<bool>;
}

/// Looks up TXT records (for claim verification).
pub trait TxtResolver: Send + Sync + 'static {
    /// Every TXT string at `name` (fully qualified, no trailing dot); empty when there is none.
    fn txt<'a>(
        &'a self,
        name: &'a str,
    ) -> Pin<Box<dyn Future<Output = std::result::Result<Vec<String>, String>> + Send + 'a>>;
}

/// No DNS: verification by TXT record is unavailable (administrators can still assign).
#[derive(Debug, Default)]
pub struct NoResolver;

impl TxtResolver for NoResolver {
    fn txt<'a>(
        &'a self,
        _: &'a str,
    ) -> Pin<Box<dyn Future<Output = std::result::Result<Vec<String>, String>> + Send + 'a>> {
        Box::pin(async { Err("no DNS resolver is configured on this instance".to_owned()) })
    }
}

/// Why the host refuses to present a challenge answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntitlementError {
    #[error(
        "`{name}` is not covered by a verified domain claim of this workspace: claim it with \
         POST /api/domain-claims {{\"domain\": \"{name}\"}} and publish the TXT record it returns, \
         or ask an instance administrator to assign it (POST /api/admin/domain-claims)"
    )]
    NotClaimed { name: String },
    #[error("domain claims cannot be read: {0}")]
    Unavailable(String),
}

/// Whether `workspace_id` may have a challenge answer presented for `identifier`: some verified
/// claim of the workspace covers it. Fails closed when the claims cannot be read.
pub async fn entitled(
    claims: &dyn DomainClaims,
    workspace_id: &str,
    identifier: &str,
) -> std::result::Result<(), EntitlementError> {
    let name = identifier_name(identifier);
    let held =
        claims.workspace_claims(workspace_id).await.map_err(|err| EntitlementError::Unavailable(err.to_string()))?;
    if held.iter().any(|claim| claim.verified_at.is_some() && claim.covers(&name)) {
        Ok(())
    } else {
        Err(EntitlementError::NotClaimed { name })
    }
}

/// Whether a workspace exists (an administrator assigns claims to existing ones only).
#[async_trait]
pub trait WorkspaceDirectory: Send + Sync {
    async fn workspace_exists(&self, workspace_id: &str) -> StoreResult<bool>;
}

/// What the claims' use cases use, and nothing else of the service: the claims, the TXT
/// resolver, the workspace directory, units of work for their audit rows, the clock and
/// entropy. `Context::domain_claim_deps` hands it out.
#[derive(Clone)]
pub struct DomainClaimDeps {
    pub domain_claims: Arc<dyn DomainClaims>,
    pub txt_resolver: Arc<dyn TxtResolver>,
    pub workspaces: Arc<dyn WorkspaceDirectory>,
    pub changes: Arc<dyn Changes>,
    pub clock: SharedClock,
    pub entropy: SharedEntropy,
}

impl DomainClaimDeps {
    fn now_millis(&self) -> i64 {
        crate::clock::now_millis(self.clock.as_ref())
    }

    fn new_id(&self, prefix: &str) -> String {
        crate::clock::new_id(self.entropy.as_ref(), prefix)
    }

    async fn change(&self, actor: Audit, workspace_id: Option<&str>) -> Result<UnitOfWork<'static, dyn ChangeTx>> {
        let tx = self.changes.begin_change().await?;
        Ok(UnitOfWork::owning(tx, actor, workspace_id, self.now_millis()))
    }
}

fn new_claim(ctx: &DomainClaimDeps, workspace_id: &str, domain: String) -> DomainClaim {
    DomainClaim {
        id: ctx.new_id("dc_"),
        workspace_id: workspace_id.to_owned(),
        domain,
        token: crate::clock::random_hex(ctx.entropy.as_ref(), 16),
        verified_at: None,
        method: None,
        created_at: ctx.now_millis(),
    }
}

/// Another workspace's verified claim that overlaps `domain`, if any.
async fn conflicting(ctx: &DomainClaimDeps, workspace_id: &str, domain: &str) -> Result<Option<DomainClaim>> {
    Ok(ctx
        .domain_claims
        .verified_claims()
        .await?
        .into_iter()
        .find(|claim| claim.workspace_id != workspace_id && overlaps(&claim.domain, domain)))
}

fn conflict(domain: &str, other: &DomainClaim) -> Error {
    Error::Conflict(format!(
        "`{domain}` overlaps `{}`, verified by another workspace; only an instance administrator can reassign it",
        other.domain
    ))
}

async fn audited(
    ctx: &DomainClaimDeps,
    caller: &Caller,
    workspace_id: &str,
    action: &str,
    claim: &DomainClaim,
) -> Result<()> {
    let mut change = ctx.change(Audit::of(caller), Some(workspace_id)).await?;
    change.audit(
        action,
        Target::new("domain_claim", &claim.id),
        json!({ "domain": claim.domain, "method": claim.method }),
    );
    change.commit().await
}

/// `POST /api/domain-claims`: a pending claim with the TXT token to publish.
pub async fn create(ctx: &DomainClaimDeps, caller: &Caller, domain: &str) -> Result<DomainClaim> {
    caller.require(Scope::CasWrite)?;
    let domain = normalize_domain(domain)?;
    if let Some(other) = conflicting(ctx, &caller.workspace_id, &domain).await? {
        return Err(conflict(&domain, &other));
    }
    let held = ctx.domain_claims.workspace_claims(&caller.workspace_id).await?;
    if let Some(existing) = held.into_iter().find(|claim| claim.domain == domain) {
        return Ok(existing);
    }
    let claim = new_claim(ctx, &caller.workspace_id, domain);
    ctx.domain_claims.insert_claim(&claim).await?;
    audited(ctx, caller, &caller.workspace_id, "domain_claim.created", &claim).await?;
    Ok(claim)
}

pub async fn list(ctx: &DomainClaimDeps, caller: &Caller) -> Result<Vec<DomainClaim>> {
    caller.require(Scope::CasRead)?;
    Ok(ctx.domain_claims.workspace_claims(&caller.workspace_id).await?)
}

pub async fn get(ctx: &DomainClaimDeps, caller: &Caller, id: &str) -> Result<DomainClaim> {
    list(ctx, caller).await?.into_iter().find(|claim| claim.id == id).ok_or(Error::NotFound(Entity::DomainClaim))
}

/// `POST /api/domain-claims/{id}/verify`: looks for the token at `_trellis-challenge.<domain>`.
pub async fn verify(ctx: &DomainClaimDeps, caller: &Caller, id: &str) -> Result<DomainClaim> {
    caller.require(Scope::CasWrite)?;
    let mut claim = get(ctx, caller, id).await?;
    if claim.verified_at.is_some() {
        return Ok(claim);
    }
    if let Some(other) = conflicting(ctx, &caller.workspace_id, &claim.domain).await? {
        return Err(conflict(&claim.domain, &other));
    }
    let name = claim.record_name();
    let found = ctx
        .txt_resolver
        .txt(&name)
        .await
        // The request is fine; the world is not ready for it yet (or this instance cannot look):
        // a conflict with the current state, never a 400 for a well-formed request.
        .map_err(|err| {
            Error::Conflict(format!(
                "Cannot look up the TXT record at {name}: {err}; an instance administrator can assign the claim \
                 instead (POST /api/admin/domain-claims)"
            ))
        })?;
    if !found.iter().any(|value| value.trim() == claim.token) {
        return Err(Error::Conflict(format!(
            "The TXT record at {name} does not hold this claim's token ({}) yet (found: {}); publish it and verify again",
            claim.token,
            if found.is_empty() { "none".to_owned() } else { found.join(", ") }
        )));
    }
    let at = ctx.now_millis();
    if !ctx.domain_claims.mark_verified(&claim.id, at, "dns").await.map_err(verified_conflict(&claim.domain))? {
        return Err(Error::NotFound(Entity::DomainClaim));
    }
    claim.verified_at = Some(at);
    claim.method = Some("dns".into());
    audited(ctx, caller, &caller.workspace_id, "domain_claim.verified", &claim).await?;
    Ok(claim)
}

/// The store's unique index on verified domains lost a race to another workspace.
fn verified_conflict(domain: &str) -> impl Fn(StoreError) -> Error + '_ {
    move |err| match err {
        StoreError::Unique(_) => {
            Error::Conflict(format!("`{domain}` was verified by another workspace in the meantime"))
        }
        other => other.into(),
    }
}

/// `POST /api/admin/domain-claims`: an instance administrator assigns `domain` to a workspace,
/// verified at once; overlapping verified claims of other workspaces are removed (each removal
/// audited in the workspace that lost it).
pub async fn assign(ctx: &DomainClaimDeps, caller: &Caller, workspace_id: &str, domain: &str) -> Result<DomainClaim> {
    caller.require_instance_admin()?;
    let domain = normalize_domain(domain)?;
    if !ctx.workspaces.workspace_exists(workspace_id).await? {
        return Err(Error::NotFound(Entity::Workspace));
    }
    for other in ctx.domain_claims.verified_claims().await? {
        if other.workspace_id != workspace_id && overlaps(&other.domain, &domain) {
            ctx.domain_claims.delete_claim(&other.workspace_id, &other.id).await?;
            audited(ctx, caller, &other.workspace_id, "domain_claim.reassigned", &other).await?;
        }
    }
    let held = ctx.domain_claims.workspace_claims(workspace_id).await?;
    let mut claim = match held.into_iter().find(|claim| claim.domain == domain) {
        Some(existing) => existing,
        None => {
            let claim = new_claim(ctx, workspace_id, domain.clone());
            ctx.domain_claims.insert_claim(&claim).await?;
            claim
        }
    };
    if claim.verified_at.is_none() {
        let at = ctx.now_millis();
        ctx.domain_claims.mark_verified(&claim.id, at, "admin").await.map_err(verified_conflict(&domain))?;
        claim.verified_at = Some(at);
        claim.method = Some("admin".into());
    }
    audited(ctx, caller, workspace_id, "domain_claim.assigned", &claim).await?;
    Ok(claim)
}

pub async fn delete(ctx: &DomainClaimDeps, caller: &Caller, id: &str) -> Result<()> {
    caller.require(Scope::CasWrite)?;
    let claim = get(ctx, caller, id).await?;
    if !ctx.domain_claims.delete_claim(&caller.workspace_id, id).await? {
        return Err(Error::NotFound(Entity::DomainClaim));
    }
    audited(ctx, caller, &caller.workspace_id, "domain_claim.deleted", &claim).await
}

/// Claims in process memory, for tests and the default context.
#[derive(Debug, Default)]
pub struct InMemoryDomainClaims {
    claims: Mutex<Vec<DomainClaim>>,
}

impl InMemoryDomainClaims {
    pub fn shared() -> Arc<dyn DomainClaims> {
        Arc::new(InMemoryDomainClaims::default())
    }

    fn with<T>(&self, f: impl FnOnce(&mut Vec<DomainClaim>) -> T) -> T {
        f(&mut self.claims.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }
}

#[async_trait]
impl DomainClaims for InMemoryDomainClaims {
    async fn insert_claim(&self, claim: &DomainClaim) -> StoreResult<()> {
        self.with(|claims| claims.push(claim.clone()));
        Ok(())
    }

    async fn workspace_claims(&self, workspace_id: &str) -> StoreResult<Vec<DomainClaim>> {
        Ok(self.with(|claims| claims.iter().filter(|c| c.workspace_id == workspace_id).cloned().collect()))
    }

    async fn verified_claims(&self) -> StoreResult<Vec<DomainClaim>> {
        Ok(self.with(|claims| claims.iter().filter(|c| c.verified_at.is_some()).cloned().collect()))
    }

    async fn mark_verified(&self, id: &str, at: i64, method: &str) -> StoreResult<bool> {
        self.with(|claims| {
            let Some(index) = claims.iter().position(|c| c.id == id) else { return Ok(false) };
            let domain = claims.get(index).map(|c| c.domain.clone()).unwrap_or_default();
            if claims.iter().any(|c| c.id != id && c.domain == domain && c.verified_at.is_some()) {
                return Err(StoreError::Unique(format!("{domain} is verified already")));
            }
            if let Some(claim) = claims.get_mut(index) {
                claim.verified_at = Some(at);
                claim.method = Some(method.to_owned());
            }
            Ok(true)
        })
    }

    async fn delete_claim(&self, workspace_id: &str, id: &str) -> StoreResult<bool> {
        Ok(self.with(|claims| {
            let before = claims.len();
            claims.retain(|c| !(c.id == id && c.workspace_id == workspace_id));
            claims.len() != before
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(workspace: &str, domain: &str, verified: bool) -> DomainClaim {
        DomainClaim {
            id: format!("dc_{workspace}_{domain}"),
            workspace_id: workspace.into(),
            domain: domain.into(),
            token: "t".into(),
            verified_at: verified.then_some(1),
            method: verified.then(|| "admin".to_owned()),
            created_at: 0,
        }
    }

    #[test]
    fn domains_are_normalized_and_ip_addresses_or_wildcards_refused() {
        assert_eq!(normalize_domain(" Example.COM. ").unwrap(), "example.com");
        for bad in ["com", "*.example.com", "127.0.0.1", "1.2.3.4", "::1", "a..b", "-a.example", "a_b.example", ""] {
            assert!(normalize_domain(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_claim_covers_its_domain_and_names_under_it_only() {
        let c = claim("a", "example.com", true);
        assert!(c.covers("example.com") && c.covers("x.y.example.com"));
        assert!(!c.covers("badexample.com") && !c.covers("com") && !c.covers("example.com.evil"));
        assert!(overlaps("example.com", "a.example.com") && overlaps("a.example.com", "example.com"));
        assert!(!overlaps("a.example.com", "b.example.com"));
    }

    #[tokio::test]
    async fn only_verified_claims_of_the_workspace_entitle() {
        let claims = InMemoryDomainClaims::default();
        claims.insert_claim(&claim("a", "a.example", true)).await.unwrap();
        claims.insert_claim(&claim("a", "pending.example", false)).await.unwrap();
        claims.insert_claim(&claim("b", "b.example", true)).await.unwrap();
        assert_eq!(entitled(&claims, "a", "www.A.example.").await, Ok(()));
        assert_eq!(entitled(&claims, "a", "*.a.example").await, Ok(()));
        for name in ["b.example", "pending.example", "a.example.evil", "127.0.0.1"] {
            let err = entitled(&claims, "a", name).await.unwrap_err();
            assert!(matches!(&err, EntitlementError::NotClaimed { .. }), "{name}: {err}");
            assert!(err.to_string().contains("/api/domain-claims"), "says how to claim: {err}");
        }
    }

    #[tokio::test]
    async fn one_workspace_per_verified_domain() {
        let claims = InMemoryDomainClaims::default();
        claims.insert_claim(&claim("a", "x.example", true)).await.unwrap();
        claims.insert_claim(&claim("b", "x.example", false)).await.unwrap();
        assert!(matches!(claims.mark_verified("dc_b_x.example", 2, "dns").await, Err(StoreError::Unique(_))));
    }
}
