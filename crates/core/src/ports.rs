//! The ports of the domain: what use cases need from storage, expressed without SQL.
//!
//! `trellis-store` implements them over SQLite and PostgreSQL; tests implement them in
//! memory. Reads go through [`Store`]; writes through a [`Tx`] that commits with the audit
//! rows and events of its change (see [`crate::unit_of_work`]).
//!
//! Every method that reads or changes workspace data takes the workspace id and must
//! confine itself to it: a row of another workspace is indistinguishable from an absent one.

use std::any::Any;
use std::sync::Arc;

use async_trait::async_trait;
use futures_util::future::BoxFuture;

use crate::error::Error;
/// The issuance area's port lives beside it; re-exported so `Store` and `Tx` name it here.
pub use crate::issuance::port::{IssuanceReads, IssuanceWrites};
use crate::pki::IssuedRecord;
/// The webhooks area's port lives next to it; re-exported here for the `Store`/`Tx` composites.
pub use crate::webhooks::port::{WebhookReads, WebhookWrites};

pub use crate::attestation::port::{AttestationReads, AttestationWrites};
pub use crate::audit::port::{AuditReads, AuditWrites};
pub use crate::auth::port::{AuthReads, AuthWrites};
pub use crate::cas::port::{CaReads, CaWrites};
pub use crate::certificates::port::{CertificateReads, CertificateWrites};
pub use crate::discovery::port::{DiscoveryReads, DiscoveryWrites};
pub use crate::events::port::{EventReads, EventWrites};
pub use crate::pki::port::{PkiReads, PkiWrites};
pub use crate::plugins::port::{PluginReads, PluginWrites};

pub use crate::store_error::{StoreError, StoreResult};

/// The rows a unit of work writes with its change; re-exported for the stores.
pub use crate::unit_of_work::NewRow;
use crate::unit_of_work::{ChangeTx, GroupCommit};

/// A write transaction: every area's writes, and (as a [`ChangeTx`]) a unit of work's rows and
/// the commit. Dropping it without committing rolls back. An area's narrow transaction is a
/// supertrait, so a `Box<dyn Tx>` becomes one by coercion.
pub trait Tx:
    ChangeTx
    + crate::lifecycle::port::LifecycleTx
    + crate::attestation::port::AttestationTx
    + crate::issuance::port::IssuanceTx
    + crate::auth::port::AuthTx
    + crate::discovery::port::DiscoveryTx
    + crate::certificates::port::CertificateTx
    + crate::cas::port::CaTx
    + CertificateWrites
    + AuthWrites
    + crate::auth::oidc::port::OidcWrites
    + AuditWrites
    + EventWrites
    + PluginWrites
    + CaWrites
    + PkiWrites
    + IssuanceWrites
    + DiscoveryWrites
    + WebhookWrites
    + AttestationWrites
    + Send
{
}

/// Inserts `rows` one by one, as `insert_issued`, `insert_audit` and `insert_event` would: a
/// transaction's [`ChangeTx::insert_rows`] where nothing is gained by sending them together.
pub async fn insert_each<T: ?Sized + PkiWrites + AuditWrites + EventWrites>(
    tx: &mut T,
    rows: &[NewRow<'_>],
) -> StoreResult<()> {
    for row in rows {
        match row {
            NewRow::Issued(record) => tx.insert_issued(record).await?,
            NewRow::Audit(entry) => tx.insert_audit(entry).await?,
            NewRow::Event(event) => tx.insert_event(event).await?,
        }
    }
    Ok(())
}

/// A group-commit job over the full transaction, its result type erased (see [`Store::write`]).
pub type ErasedJob = crate::unit_of_work::ErasedJob<dyn Tx>;

/// The database.
#[async_trait]
pub trait Store:
    GroupCommit<dyn Tx>
    + crate::lifecycle::port::LifecycleStore
    + crate::attestation::port::AttestationStore
    + crate::issuance::port::IssuanceStore
    + crate::auth::port::AuthStore
    + crate::discovery::port::DiscoveryStore
    + crate::cas::port::CaStore
    + crate::certificates::port::CertificateStore
    + CertificateReads
    + AuthReads
    + crate::auth::oidc::port::OidcReads
    + AuditReads
    + EventReads
    + PluginReads
    + CaReads
    + PkiReads
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
    /// Readiness probe: the database answers a trivial query.
    async fn ping(&self) -> StoreResult<()>;
    async fn close(&self);
}

/// The full store seen through an area's port: `$store` opens the area's narrow transaction
/// `$tx` (a supertrait of [`Tx`], so the full one coerces to it).
macro_rules! area_port {
    ($store:path, $begin:ident, $tx:path) => {
        #[async_trait]
        impl<S: ?Sized + Store> $store for S {
            async fn $begin(&self) -> StoreResult<Box<dyn $tx>> {
                Ok(self.begin().await?)
            }
        }
    };
}

/// The full store's group commit seen through an area's narrow transaction `$tx`.
macro_rules! area_group_commit {
    ($tx:path) => {
        #[async_trait]
        impl<S: ?Sized + Store> GroupCommit<dyn $tx> for S {
            async fn write_erased(
                &self,
                job: crate::unit_of_work::ErasedJob<dyn $tx>,
            ) -> Result<Box<dyn Any + Send>, Error> {
                GroupCommit::<dyn Tx>::write_erased(self, Box::new(move |tx: &mut (dyn Tx + 'static)| job(tx))).await
            }
        }
    };
}

area_port!(crate::attestation::port::AttestationStore, begin_attestation, crate::attestation::port::AttestationTx);
area_port!(crate::auth::port::AuthStore, begin_auth, crate::auth::port::AuthTx);
area_port!(crate::cas::port::CaStore, begin_cas, crate::cas::port::CaTx);
area_port!(crate::certificates::port::CertificateStore, begin_certificates, crate::certificates::port::CertificateTx);
area_port!(crate::discovery::port::DiscoveryStore, begin_discovery, crate::discovery::port::DiscoveryTx);
area_port!(crate::issuance::port::IssuanceStore, begin_issuance, crate::issuance::port::IssuanceTx);
area_port!(crate::lifecycle::port::LifecycleStore, begin_lifecycle, crate::lifecycle::port::LifecycleTx);
area_group_commit!(crate::certificates::port::CertificateTx);
area_group_commit!(crate::issuance::port::IssuanceTx);

/// The internal PKI's writes, each a group-commit job.
#[async_trait]
impl crate::pki::PkiStore for Arc<dyn Store> {
    fn reads(&self) -> &dyn PkiReads {
        self.as_ref()
    }

    async fn write_authority(&self, authority: crate::pki::StoredAuthority) -> Result<(), Error> {
        self.write(move |tx| Box::pin(async move { tx.insert_authority(&authority).await.map_err(Into::into) })).await
    }

    async fn write_issued(&self, records: Vec<IssuedRecord>) -> Result<(), Error> {
        self.write(move |tx| {
            Box::pin(async move {
                for record in &records {
                    match tx.insert_issued(record).await {
                        Ok(()) | Err(StoreError::Unique(_)) => {}
                        Err(err) => return Err(err.into()),
                    }
                }
                Ok(())
            })
        })
        .await
    }

    async fn write_revocation(
        &self,
        ca_id: i64,
        serial_number: String,
        at: crate::clock::UnixMillis,
        reason: &'static str,
    ) -> Result<bool, Error> {
        self.write(move |tx| {
            Box::pin(async move { tx.revoke_issued(ca_id, &serial_number, at, reason).await.map_err(Into::into) })
        })
        .await
    }

    async fn write_crl(&self, ca_id: i64, crl: crate::pki::StoredCrl) -> Result<bool, Error> {
        self.write(move |tx| Box::pin(async move { tx.store_crl(ca_id, &crl).await.map_err(Into::into) })).await
    }
}

/// The full store, seen through the webhooks area's port.
#[async_trait]
impl crate::webhooks::port::WebhookStore for Arc<dyn Store> {
    fn reads(&self) -> &dyn WebhookReads {
        self.as_ref()
    }

    async fn begin(&self) -> StoreResult<Box<dyn crate::webhooks::port::WebhookTx>> {
        let tx = self.as_ref().begin().await?;
        Ok(Box::new(tx))
    }
}

impl crate::webhooks::port::WebhookTx for Box<dyn Tx> {
    fn webhooks(&mut self) -> &mut dyn WebhookWrites {
        self.as_mut()
    }
}

#[async_trait]
impl ChangeTx for Box<dyn Tx> {
    async fn insert_rows(&mut self, rows: &[NewRow<'_>]) -> StoreResult<()> {
        self.as_mut().insert_rows(rows).await
    }

    async fn commit(self: Box<Self>) -> StoreResult<()> {
        (*self).commit().await
    }
}

/// The full store, seen through the plugin registry's port.
#[async_trait]
impl crate::plugins::port::PluginStore for Arc<dyn Store> {
    fn reads(&self) -> &dyn PluginReads {
        self.as_ref()
    }

    async fn begin(&self) -> StoreResult<Box<dyn crate::plugins::port::PluginTx>> {
        let tx = self.as_ref().begin().await?;
        Ok(Box::new(tx))
    }
}

impl crate::plugins::port::PluginTx for Box<dyn Tx> {
    fn plugins(&mut self) -> &mut dyn PluginWrites {
        self.as_mut()
    }
}

/// Transactions for a change's audit rows and events alone.
#[async_trait]
impl crate::unit_of_work::Changes for Arc<dyn Store> {
    async fn begin_change(&self) -> StoreResult<Box<dyn ChangeTx>> {
        let tx = self.as_ref().begin().await?;
        Ok(Box::new(tx))
    }
}

/// Whether a workspace exists, for the domain claims an administrator assigns.
#[async_trait]
impl crate::domain_claims::WorkspaceDirectory for Arc<dyn Store> {
    async fn workspace_exists(&self, workspace_id: &str) -> StoreResult<bool> {
        Ok(self.find_workspace(workspace_id).await?.is_some())
    }
}

/// Retention's batches, each in its own transaction.
#[async_trait]
impl crate::events::OutboxRetention for Arc<dyn Store> {
    async fn purge_delivered_batch(&self, before: i64, limit: i64) -> StoreResult<u64> {
        let mut tx = self.begin().await?;
        let purged = tx.purge_delivered_events(before, limit).await?;
        tx.commit().await?;
        Ok(purged)
    }
}

impl dyn Store {
    /// Runs `job` in a write transaction and commits it, possibly together with other jobs
    /// (see [`crate::unit_of_work::write`]).
    pub async fn write<T, F>(&self, job: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: for<'t> FnOnce(&'t mut (dyn Tx + 'static)) -> BoxFuture<'t, Result<T, Error>> + Send + 'static,
    {
        crate::unit_of_work::write::<dyn Tx, T, F>(self, job).await
    }
}
