//! The ports of the domain: what use cases need from storage, expressed without SQL.
//!
//! `trellis-store` implements them over SQLite and PostgreSQL; tests implement them in
//! memory. Reads go through [`Store`]; writes through a [`Tx`] that commits with the audit
//! rows and events of its change (see [`crate::unit_of_work`]).
//!
//! Every method that reads or changes workspace data takes the workspace id and must
//! confine itself to it: a row of another workspace is indistinguishable from an absent one.

use std::any::Any;

use async_trait::async_trait;
use futures_util::future::BoxFuture;

use crate::audit::NewAuditEntry;
use crate::cas::{CaFields, CaStats, CertificateAuthority};
use crate::error::Error;
use crate::events::NewEvent;
/// The issuance area's port lives beside it; re-exported so `Store` and `Tx` name it here.
pub use crate::issuance::port::{IssuanceReads, IssuanceWrites};
use crate::pagination::{Page, PageRequest};
use crate::pki::{IssuedRecord, StoredAuthority};
use crate::plugins::signatures::SigningKey;
use crate::plugins::{NewPluginVersion, StoredBinding, StoredPlugin, StoredPluginVersion};
/// The webhooks area's port lives next to it; re-exported here for the `Store`/`Tx` composites.
pub use crate::webhooks::port::{WebhookReads, WebhookWrites};

pub use crate::attestation::port::{AttestationReads, AttestationWrites};
pub use crate::audit::port::{AuditReads, AuditWrites};
pub use crate::auth::port::{AuthReads, AuthWrites};
pub use crate::certificates::port::{CertificateReads, CertificateWrites};
pub use crate::discovery::port::{DiscoveryReads, DiscoveryWrites};
pub use crate::events::port::{EventReads, EventWrites};

pub use crate::store_error::{StoreError, StoreResult};

#[async_trait]
pub trait PluginReads: Send + Sync {
    async fn list_plugin_versions(&self) -> StoreResult<Vec<StoredPluginVersion>>;
    async fn plugin_component(&self, sha256: &str) -> StoreResult<Option<Vec<u8>>>;
    async fn list_plugins(&self) -> StoreResult<Vec<StoredPlugin>>;
    /// Bindings of every workspace: the runtime of each replica serves them all.
    async fn list_plugin_bindings(&self) -> StoreResult<Vec<StoredBinding>>;
    /// Bindings of one workspace.
    async fn list_workspace_plugin_bindings(&self, workspace_id: &str) -> StoreResult<Vec<StoredBinding>>;
    async fn any_plugin_installed(&self) -> StoreResult<bool>;
    /// The trust store of plugin publisher keys, revoked ones included, oldest first.
    async fn list_plugin_signing_keys(&self) -> StoreResult<Vec<SigningKey>>;
    /// `(plugin id, version)` of every version the key signed.
    async fn plugin_versions_signed_by(&self, key_id: &str) -> StoreResult<Vec<(String, String)>>;
    /// The key that signed a version (none: unsigned or unknown version).
    async fn plugin_version_signer(&self, plugin_id: &str, version: &str) -> StoreResult<Option<String>>;
}

#[async_trait]
pub trait PluginWrites: Send {
    async fn insert_plugin_version(&mut self, new: &NewPluginVersion<'_>) -> StoreResult<()>;
    async fn set_plugin_activation(
        &mut self,
        plugin_id: &str,
        active_version: Option<&str>,
        previous_versions: &[String],
        at: i64,
    ) -> StoreResult<()>;
    async fn set_plugin_grants(&mut self, plugin_id: &str, hosts: &[String], at: i64) -> StoreResult<()>;
    async fn delete_plugin(&mut self, plugin_id: &str, version: Option<&str>) -> StoreResult<()>;
    async fn upsert_plugin_binding(&mut self, binding: &StoredBinding, at: i64) -> StoreResult<()>;
    async fn delete_plugin_binding(&mut self, workspace_id: &str, kind: &str, service_type: &str) -> StoreResult<bool>;
    /// Adds a key; false when the trust store already holds one with its id.
    async fn insert_plugin_signing_key(&mut self, key: &SigningKey) -> StoreResult<bool>;
    async fn revoke_plugin_signing_key(&mut self, key_id: &str, at: i64) -> StoreResult<()>;
}

#[async_trait]
pub trait CaReads: Send + Sync {
    async fn find_ca(&self, workspace_id: &str, id: i64) -> StoreResult<Option<CertificateAuthority>>;
    async fn list_cas(&self, workspace_id: &str, page: PageRequest) -> StoreResult<Page<CertificateAuthority>>;
    async fn ca_stats(&self, workspace_id: &str) -> StoreResult<CaStats>;
    /// An internal CA's key material, by CA id alone (the unauthenticated CRL and OCSP
    /// endpoints know only the id).
    async fn find_authority(&self, ca_id: i64) -> StoreResult<Option<StoredAuthority>>;
    async fn find_issued(&self, ca_id: i64, serial_number: &str) -> StoreResult<Option<IssuedRecord>>;
    /// Issued certificates of a CA after ledger id `after`, oldest first.
    async fn list_issued(&self, ca_id: i64, after: i64, limit: i64) -> StoreResult<Vec<IssuedRecord>>;
    /// Every revoked certificate of a CA that has not expired (what its CRL lists).
    async fn list_revoked(&self, ca_id: i64, now_secs: i64) -> StoreResult<Vec<IssuedRecord>>;
    /// Revoked certificates of every internal CA of a workspace, newest first.
    async fn list_workspace_revoked(&self, workspace_id: &str, page: PageRequest) -> StoreResult<Page<IssuedRecord>>;
    /// Ledger rows of the workspace's internal CAs with this serial (lowercase hex), whatever
    /// became of their CA records.
    async fn find_issued_by_serial(&self, workspace_id: &str, serial_number: &str) -> StoreResult<Vec<IssuedRecord>>;
    /// The CA's revocation marker and cached CRL (its DER only when `with_der`).
    async fn crl_state(&self, ca_id: i64, with_der: bool) -> StoreResult<crate::pki::CrlState>;
}

#[async_trait]
pub trait CaWrites: Send {
    async fn insert_ca(&mut self, workspace_id: &str, fields: &CaFields, at: i64) -> StoreResult<CertificateAuthority>;
    async fn find_ca(&mut self, workspace_id: &str, id: i64) -> StoreResult<Option<CertificateAuthority>>;
    async fn update_ca(
        &mut self,
        workspace_id: &str,
        id: i64,
        fields: &CaFields,
        at: i64,
    ) -> StoreResult<Option<CertificateAuthority>>;
    async fn set_ca_health(
        &mut self,
        workspace_id: &str,
        id: i64,
        status: crate::cas::CaStatus,
        health: crate::cas::HealthStatus,
        at: i64,
    ) -> StoreResult<()>;
    async fn touch_ca_sync(
        &mut self,
        workspace_id: &str,
        id: i64,
        at: i64,
    ) -> StoreResult<Option<CertificateAuthority>>;
    /// Deletes the CA; its certificates stay and lose their link.
    async fn delete_ca(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool>;
    /// Claims up to `limit` CAs (of every workspace, `disconnected` ones excepted) not health-
    /// checked since `due_before`, stamping them checked at `now`: a claimed CA is not returned
    /// again within the interval, so replicas never probe one CA twice in it.
    async fn claim_ca_health_checks(
        &mut self,
        now: i64,
        due_before: i64,
        limit: i64,
    ) -> StoreResult<Vec<CertificateAuthority>>;
    async fn insert_authority(&mut self, authority: &StoredAuthority) -> StoreResult<()>;
    async fn insert_issued(&mut self, record: &IssuedRecord) -> StoreResult<()>;
    /// Marks a serial revoked; false when the CA never issued it. Revoking twice keeps the
    /// first time and reason. A revocation that changed the row bumps the CA's revocation
    /// marker in the same transaction ([`crate::pki::CrlState::revocations`]).
    async fn revoke_issued(&mut self, ca_id: i64, serial_number: &str, at_secs: i64, reason: &str)
        -> StoreResult<bool>;
    /// Keeps `crl` as the CA's cached CRL unless one with an equal or higher number is kept
    /// already (another replica's): CRL numbers never go back. True when stored.
    async fn store_crl(&mut self, ca_id: i64, crl: &crate::pki::StoredCrl) -> StoreResult<bool>;
}

/// A row written for its own sake, with no answer needed: see [`Tx::insert_rows`].
pub enum NewRow<'a> {
    /// An internal CA's ledger row.
    Issued(&'a IssuedRecord),
    Audit(NewAuditEntry<'a>),
    Event(NewEvent<'a>),
}

/// A write transaction. Dropping it without [`Tx::commit`] rolls back.
#[async_trait]
pub trait Tx:
    CertificateWrites
    + AuthWrites
    + crate::auth::oidc::port::OidcWrites
    + AuditWrites
    + EventWrites
    + PluginWrites
    + CaWrites
    + IssuanceWrites
    + DiscoveryWrites
    + WebhookWrites
    + AttestationWrites
    + Send
{
    async fn commit(self: Box<Self>) -> StoreResult<()>;

    /// Inserts `rows` in order, as `insert_issued`, `insert_audit` and `insert_event` would. A
    /// store may send them together (on SQLite one round trip to the connection instead of one
    /// each: what a unit of work's audit rows and events cost on the group-commit writer's
    /// path). An error fails the whole call.
    async fn insert_rows(&mut self, rows: &[NewRow<'_>]) -> StoreResult<()> {
        for row in rows {
            match row {
                NewRow::Issued(record) => self.insert_issued(record).await?,
                NewRow::Audit(entry) => self.insert_audit(entry).await?,
                NewRow::Event(event) => self.insert_event(event).await?,
            }
        }
        Ok(())
    }
}

/// A group-commit job with its result type erased (see [`Store::write`]).
pub type ErasedJob =
    Box<dyn for<'t> FnOnce(&'t mut dyn Tx) -> BoxFuture<'t, Result<Box<dyn Any + Send>, Error>> + Send>;

/// The database.
#[async_trait]
pub trait Store:
    CertificateReads
    + AuthReads
    + crate::auth::oidc::port::OidcReads
    + AuditReads
    + EventReads
    + PluginReads
    + CaReads
    + IssuanceReads
    + DiscoveryReads
    + WebhookReads
    + AttestationReads
    + Send
    + Sync
    + 'static
{
    /// Opens a write transaction (on SQLite, writers queue for the one write slot).
    async fn begin(&self) -> StoreResult<Box<dyn Tx>>;
    /// Runs a job in a write transaction, possibly together with other jobs (group commit
    /// on SQLite); its changes commit if and only if it returns `Ok`. Use [`Store::write`].
    async fn write_erased(&self, job: ErasedJob) -> Result<Box<dyn Any + Send>, Error>;
    /// Readiness probe: the database answers a trivial query.
    async fn ping(&self) -> StoreResult<()>;
    async fn close(&self);
}

impl dyn Store {
    /// Runs `job` in a write transaction and commits it, possibly together with other jobs.
    /// The job must touch the database only through the `Tx` it is given: other calls on the
    /// store inside it would wait for the writer that is running it.
    pub async fn write<T, F>(&self, job: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: for<'t> FnOnce(&'t mut dyn Tx) -> BoxFuture<'t, Result<T, Error>> + Send + 'static,
    {
        let erased: ErasedJob = Box::new(move |tx| {
            Box::pin(async move { job(tx).await.map(|value| Box::new(value) as Box<dyn Any + Send>) })
        });
        let value = self.write_erased(erased).await?;
        value
            .downcast::<T>()
            .map(|value| *value)
            .map_err(|_| Error::Internal("group commit returned a foreign value".into()))
    }
}
