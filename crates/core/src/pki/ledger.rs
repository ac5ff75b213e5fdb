//! The ledger row of a certificate signed inside an issuance, recorded in the issuance's own
//! transaction.
//!
//! Every certificate an internal CA signs must be in its ledger (`internal_issued`) before it
//! leaves the service, or its CRL and OCSP could never answer for it. `pki-core.sign-csr` used
//! to write that row in a write of its own before handing the certificate to the connector,
//! and the issuance use case then wrote the certificate in a second one: two group-commit
//! waits per issuance on SQLite's one writer. When the issuance use case gives the call a
//! [`LedgerSlot`] (in its `SignPermit`), `sign-csr` leaves the row there instead, as an
//! [`Unrecorded`], and the use case writes it in the job that stores the certificate, its audit
//! row and its event. The guarantee holds because:
//!
//! - the certificate leaves the service in the answer to the request, and the use case answers
//!   only after that job committed, the ledger row with it;
//! - if the job fails (or anything between the signature and the job does), the use case
//!   writes the row on its own ([`Unrecorded::record_now`]) before it answers with the error;
//! - if the request goes away meanwhile (client disconnected, its future dropped), an
//!   [`Unrecorded`] nobody disposed of writes itself in a background task when dropped;
//! - the row is keyed by (CA, serial): a second write of the same row is a no-op, so these
//!   fallbacks never record a certificate twice.
//!
//! What this gives up: the row used to be durable before the connector saw the certificate; now
//! a crash of the process between the signature and the commit loses it. Only the connector's
//! sandbox saw the certificate then, and the first-party `internal` connector makes no outbound
//! call; a connector that sent it out over its granted egress before crashing the process is the
//! case left.
//!
//! A signature under a permit without a slot (any caller but the issuance use case) is recorded
//! by `sign-csr` itself, as before, before it returns.

use std::sync::{Arc, Mutex, PoisonError};

use crate::cas::IssuedRecord;
use crate::error::Error;
use crate::ports::{Store, StoreError};

/// Where `sign-csr` leaves the ledger row of the certificate it signed, for the caller to
/// record in its own transaction. Shared by the clones of the grant (the host's and the
/// domain's see the same slot).
#[derive(Clone, Default)]
pub struct LedgerSlot(Arc<Mutex<Option<Unrecorded>>>);

impl LedgerSlot {
    /// Leaves `row` for the caller; gives it back if the slot is taken (a call signs once).
    pub fn put(&self, row: Unrecorded) -> Result<(), Unrecorded> {
        let mut slot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.is_some() {
            return Err(row);
        }
        *slot = Some(row);
        Ok(())
    }

    /// The row left here, if a certificate was signed.
    pub fn take(&self) -> Option<Unrecorded> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

/// Slots compare by identity (a permit equals its clones).
impl PartialEq for LedgerSlot {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for LedgerSlot {}

impl std::fmt::Debug for LedgerSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let filled = self.0.lock().map(|slot| slot.is_some()).unwrap_or(false);
        f.debug_struct("LedgerSlot").field("filled", &filled).finish()
    }
}

/// The ledger row of a signed certificate not yet known to be in the database. Whoever holds it
/// records it: inside a transaction that then commits ([`Unrecorded::committed`]), or on its
/// own ([`Unrecorded::record_now`]); dropped undisposed, it records itself in the background.
pub struct Unrecorded {
    /// Boxed: the slot hands it back and forth.
    row: Option<Box<(IssuedRecord, Arc<dyn Store>)>>,
}

impl Unrecorded {
    pub fn new(record: IssuedRecord, store: Arc<dyn Store>) -> Unrecorded {
        Unrecorded { row: Some(Box::new((record, store))) }
    }

    /// The row to write.
    pub fn record(&self) -> &IssuedRecord {
        match &self.row {
            Some(row) => &row.0,
            None => unreachable!("an Unrecorded holds its row until disposed of"),
        }
    }

    /// The transaction that wrote [`Unrecorded::record`] committed.
    pub fn committed(mut self) {
        self.row = None;
    }

    /// Writes the row in a write of its own. A row already there (the same CA and serial) counts
    /// as written.
    pub async fn record_now(mut self) -> Result<(), Error> {
        match self.row.take() {
            Some(row) => write(row.1, row.0).await,
            None => Ok(()),
        }
    }
}

async fn write(store: Arc<dyn Store>, record: IssuedRecord) -> Result<(), Error> {
    let written =
        store.write(move |tx| Box::pin(async move { tx.insert_issued(&record).await.map_err(Into::into) })).await;
    match written {
        Ok(()) | Err(Error::Store(StoreError::Unique(_))) => Ok(()),
        Err(err) => Err(err),
    }
}

impl Drop for Unrecorded {
    fn drop(&mut self) {
        let Some(row) = self.row.take() else { return };
        let (record, store) = *row;
        let serial = record.serial_number.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if let Err(err) = write(store, record).await {
                        tracing::error!(error = %err, serial, "recording an issued certificate in the CA's ledger failed");
                    }
                });
            }
            Err(_) => tracing::error!(serial, "an issued certificate was not recorded in the CA's ledger (no runtime)"),
        }
    }
}
