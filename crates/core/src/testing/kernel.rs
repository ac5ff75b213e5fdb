//! What every in-memory fake shares, so that an area's fake writes only its own rules:
//! committed tables behind a lock; transactions that work on a copy and swap it in on commit,
//! so that a change failing midway leaves nothing behind, as with a database; ids; and the audit
//! rows and outbox events a unit of work writes. `MemoryStore`'s tables (which the discovery,
//! issuance and attestation fakes extend) and the webhooks fake's tables both sit on it.

use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;

use crate::audit::{AuditEntry, NewAuditEntry};
use crate::events::{NewEvent, OutboxEvent};
use crate::ports::{AuditWrites, EventWrites};
use crate::store_error::StoreResult;

/// A fake's set of tables: its own rows, plus the ones the kernel writes.
pub trait FakeTables: Clone + Default + Send + 'static {
    /// A new id, unique across the tables (as a database sequence hands them out).
    fn next_id(&mut self) -> i64;
    fn audit_rows(&mut self) -> &mut Vec<AuditEntry>;
    fn outbox(&mut self) -> &mut Vec<OutboxEvent>;
    /// How many transactions have committed, for tests that count them.
    fn commits(&mut self) -> &mut usize;
}

/// The committed tables. Clones share them.
pub struct Committed<T>(Arc<Mutex<T>>);

impl<T> Clone for Committed<T> {
    fn clone(&self) -> Self {
        Committed(self.0.clone())
    }
}

impl<T: FakeTables> Default for Committed<T> {
    fn default() -> Self {
        Committed(Arc::new(Mutex::new(T::default())))
    }
}

impl<T: FakeTables> Committed<T> {
    /// A test that panicked while holding the lock leaves the tables as they were.
    fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Reads or changes the committed tables in place (reads of the port, test setup).
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        f(&mut self.lock())
    }

    /// A copy of the committed tables, for assertions.
    pub fn snapshot(&self) -> T {
        self.lock().clone()
    }

    /// A transaction over a copy of the committed tables.
    pub fn begin(&self) -> Working<T> {
        Working { committed: self.clone(), working: self.snapshot() }
    }
}

/// A transaction: its own copy of the tables, which replaces the committed ones when it
/// commits and is simply dropped otherwise.
pub struct Working<T> {
    committed: Committed<T>,
    /// The transaction's copy of the tables (the area fakes write here).
    pub(crate) working: T,
}

impl<T: FakeTables> Working<T> {
    /// Swaps the transaction's tables in, counting the commit.
    pub fn commit_tables(self) {
        let Working { committed, mut working } = self;
        let mut tables = committed.lock();
        *working.commits() = *tables.commits() + 1;
        *tables = working;
    }
}

#[async_trait]
impl<T: FakeTables> AuditWrites for Working<T> {
    async fn insert_audit(&mut self, entry: &NewAuditEntry<'_>) -> StoreResult<()> {
        let id = self.working.next_id();
        self.working.audit_rows().push(AuditEntry {
            id,
            workspace_id: entry.workspace_id.map(str::to_owned),
            actor_type: entry.actor_type.into(),
            actor_id: entry.actor_id.into(),
            action: entry.action.into(),
            target_type: entry.target_type.into(),
            target_id: entry.target_id.map(str::to_owned),
            request_id: entry.request_id.map(str::to_owned),
            details: entry.details.clone(),
            created_at: entry.created_at,
        });
        Ok(())
    }
}

#[async_trait]
impl<T: FakeTables> EventWrites for Working<T> {
    async fn insert_event(&mut self, event: &NewEvent<'_>) -> StoreResult<()> {
        let id = self.working.next_id();
        self.working.outbox().push(OutboxEvent {
            id,
            workspace_id: event.workspace_id.into(),
            event_type: event.event_type.as_str().into(),
            payload: event.payload.clone(),
            created_at: event.created_at,
            processed_at: None,
        });
        Ok(())
    }

    async fn purge_delivered_events(&mut self, before: i64, limit: i64) -> StoreResult<u64> {
        let mut purged = 0u64;
        let limit = u64::try_from(limit).unwrap_or(0);
        self.working.outbox().retain(|e| {
            let purge = purged < limit && e.processed_at.is_some_and(|at| at < before);
            purged += u64::from(purge);
            !purge
        });
        Ok(purged)
    }
}

/// Implements [`FakeTables`] for a struct with `audit`, `events`, `commits` and `next_id` fields.
macro_rules! fake_tables {
    ($tables:ty) => {
        impl $crate::testing::kernel::FakeTables for $tables {
            fn next_id(&mut self) -> i64 {
                self.next_id += 1;
                self.next_id
            }
            fn audit_rows(&mut self) -> &mut Vec<$crate::audit::AuditEntry> {
                &mut self.audit
            }
            fn outbox(&mut self) -> &mut Vec<$crate::events::OutboxEvent> {
                &mut self.events
            }
            fn commits(&mut self) -> &mut usize {
                &mut self.commits
            }
        }
    };
}
pub(crate) use fake_tables;
