//! The ledger row of a certificate signed inside an issuance, recorded in the issuance's own
//! transaction, and the backlog that keeps a row nobody recorded until the PKI writes it.
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
//!   [`Unrecorded`] nobody disposed of moves its row, when dropped, to the PKI's
//!   [`LedgerBacklog`] (memory only: dropping starts no I/O). [`InternalPki`] writes the backlog
//!   before its next ledger read or write (a signature, a revocation, a CRL, an OCSP answer, a
//!   status or listing), so no CRL or OCSP answer is given while a signed certificate is
//!   missing from the ledger; the jobs tick writes it too ([`super::PkiPort::record_ledger_backlog`]),
//!   so it does not wait for the next PKI call. A backlog write that fails keeps its rows for
//!   the next attempt;
//! - the row is keyed by (CA, serial): a second write of the same row is a no-op, so these
//!   fallbacks never record a certificate twice.
//!
//! What this gives up: the row used to be durable before the connector saw the certificate; now
//! a crash of the process between the signature and the commit (or before the backlog is
//! written) loses it. Only the connector's sandbox saw the certificate then (the request that
//! would have carried it went away), and the first-party `internal` connector makes no
//! outbound call; a connector that sent it out over its granted egress before crashing the
//! process is the case left.
//!
//! A signature under a permit without a slot (any caller but the issuance use case) is recorded
//! by `sign-csr` itself, as before, before it returns.
//!
//! [`InternalPki`]: super::InternalPki

use std::sync::{Arc, Mutex, PoisonError};

use super::port::PkiStore;
use super::records::IssuedRecord;
use crate::error::Error;

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

/// Ledger rows of signed certificates that no transaction wrote: an [`Unrecorded`] dropped
/// undisposed leaves its row here, and [`LedgerBacklog::record`] writes them. One per
/// [`super::InternalPki`], shared with every row it hands out.
#[derive(Debug, Default)]
pub struct LedgerBacklog {
    rows: Mutex<Vec<IssuedRecord>>,
}

impl LedgerBacklog {
    pub fn shared() -> Arc<LedgerBacklog> {
        Arc::new(LedgerBacklog::default())
    }

    fn push(&self, record: IssuedRecord) {
        self.rows.lock().unwrap_or_else(PoisonError::into_inner).push(record);
    }

    /// How many rows wait to be written.
    pub fn len(&self) -> usize {
        self.rows.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes every waiting row in one write (a row already there counts as written) and
    /// returns how many were waiting. On failure the rows wait for the next call.
    pub async fn record(&self, store: &dyn PkiStore) -> Result<usize, Error> {
        let rows = std::mem::take(&mut *self.rows.lock().unwrap_or_else(PoisonError::into_inner));
        if rows.is_empty() {
            return Ok(0);
        }
        let count = rows.len();
        let written = store.write_issued(rows.clone()).await;
        match written {
            Ok(()) => Ok(count),
            Err(err) => {
                self.rows.lock().unwrap_or_else(PoisonError::into_inner).extend(rows);
                Err(err)
            }
        }
    }
}

/// The ledger row of a signed certificate not yet known to be in the database. Whoever holds it
/// records it: inside a transaction that then commits ([`Unrecorded::committed`]), or on its
/// own ([`Unrecorded::record_now`]); dropped undisposed, it leaves the row in the
/// [`LedgerBacklog`].
pub struct Unrecorded {
    /// `None` once disposed of.
    record: Option<Box<IssuedRecord>>,
    store: Arc<dyn PkiStore>,
    backlog: Arc<LedgerBacklog>,
}

impl Unrecorded {
    pub fn new(record: IssuedRecord, store: Arc<dyn PkiStore>, backlog: Arc<LedgerBacklog>) -> Unrecorded {
        Unrecorded { record: Some(Box::new(record)), store, backlog }
    }

    /// The row to write.
    pub fn record(&self) -> &IssuedRecord {
        match &self.record {
            Some(record) => record,
            None => unreachable!("an Unrecorded holds its row until disposed of"),
        }
    }

    /// The transaction that wrote [`Unrecorded::record`] committed.
    pub fn committed(mut self) {
        self.record = None;
    }

    /// Writes the row in a write of its own. A row already there (the same CA and serial) counts
    /// as written. If the write fails, the row goes to the backlog (and the error is returned).
    pub async fn record_now(mut self) -> Result<(), Error> {
        let Some(record) = self.record.take() else { return Ok(()) };
        match self.store.write_issued(vec![(*record).clone()]).await {
            Ok(()) => Ok(()),
            Err(err) => {
                self.backlog.push(*record);
                Err(err)
            }
        }
    }
}

impl Drop for Unrecorded {
    /// Undisposed (the request went away): the row waits in the backlog. No I/O here.
    fn drop(&mut self) {
        let Some(record) = self.record.take() else { return };
        tracing::warn!(
            serial = %record.serial_number,
            ca_id = record.ca_id,
            "an issued certificate's ledger row was left unwritten; it waits in the PKI's backlog"
        );
        self.backlog.push(*record);
    }
}

#[cfg(test)]
#[path = "ledger_tests.rs"]
mod tests;
