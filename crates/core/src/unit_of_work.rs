//! One unit of work: a change, its audit rows and its events commit together or not at all.
//!
//! ```ignore
//! let mut change = ctx.change(Audit::of(caller), Some(&caller.workspace_id)).await?;
//! let certificate = change.tx().update_certificate(ws, id, &update, now).await?;
//! change
//!     .audit("certificate.updated", Target::new("certificate", id), details)
//!     .emit(Event::CertificateUpdated(data));
//! change.commit().await?;
//! ```
//!
//! Audit rows and events are buffered and written by [`UnitOfWork::commit`], in the same
//! transaction as the change: a failed request writes none of the three.
//!
//! A unit of work runs over the full transaction (`dyn Tx`, the default) or over an area's
//! narrow one (`UnitOfWork<dyn WebhookTx>`): whatever [`ChangeTx`] it is, its audit rows and
//! events are built here and nowhere else.

use std::any::Any;

use async_trait::async_trait;
use futures_util::future::BoxFuture;
use serde_json::Value;

use crate::audit::{Audit, NewAuditEntry};
use crate::error::Result;
use crate::events::{self, Event, NewEvent};
use crate::pki::IssuedRecord;
use crate::store_error::StoreResult;

/// A row written for its own sake, with no answer needed: see [`ChangeTx::insert_rows`].
pub enum NewRow<'a> {
    /// An internal CA's ledger row.
    Issued(&'a IssuedRecord),
    Audit(NewAuditEntry<'a>),
    Event(NewEvent<'a>),
}

/// What a unit of work needs of its transaction: to write the change's rows and to commit.
/// The full transaction (`crate::ports::Tx`) is one; an area's narrow transaction
/// (`webhooks::port::WebhookTx`) is another, so a use case that sees only its area's port still
/// records its change here.
#[async_trait]
pub trait ChangeTx: Send {
    /// Inserts `rows` in order; a store may send them together (one round trip on SQLite). A
    /// narrow transaction writes the audit rows and events a unit of work builds; only the full
    /// one takes the others ([`UnitOfWork::commit_with`]).
    async fn insert_rows(&mut self, rows: &[NewRow<'_>]) -> StoreResult<()>;
    async fn commit(self: Box<Self>) -> StoreResult<()>;
}

/// Opens transactions that carry only a change's audit rows and events: for areas whose own
/// rows live behind another port (domain claims) or that change nothing but the record of it.
/// The full store is one implementation (`crate::ports`).
#[async_trait]
pub trait Changes: Send + Sync {
    async fn begin_change(&self) -> StoreResult<Box<dyn ChangeTx>>;
}

/// A group-commit job over transactions `T`, its result type erased (see [`GroupCommit`]).
pub type ErasedJob<T> = Box<dyn for<'t> FnOnce(&'t mut T) -> BoxFuture<'t, Result<Box<dyn Any + Send>>> + Send>;

/// Runs a job in a write transaction `T`, possibly together with other jobs (group commit on
/// SQLite); its changes commit if and only if it returns `Ok`. The full store is one for its
/// own transaction and for each area's narrow one (`crate::ports`). Call it through [`write`].
#[async_trait]
pub trait GroupCommit<T: ?Sized>: Send + Sync {
    async fn write_erased(&self, job: ErasedJob<T>) -> Result<Box<dyn Any + Send>>;
}

/// Runs `job` in a write transaction of `store` and commits it, possibly together with other
/// jobs. The job must touch the database only through the transaction it is given: other calls
/// on the store inside it would wait for the writer that is running it.
pub async fn write<T, R, F>(store: &(dyn GroupCommit<T> + '_), job: F) -> Result<R>
where
    T: ?Sized + Send + 'static,
    R: Send + 'static,
    F: for<'t> FnOnce(&'t mut T) -> BoxFuture<'t, Result<R>> + Send + 'static,
{
    let erased: ErasedJob<T> =
        Box::new(move |tx| Box::pin(async move { job(tx).await.map(|value| Box::new(value) as Box<dyn Any + Send>) }));
    let value = store.write_erased(erased).await?;
    value
        .downcast::<R>()
        .map(|value| *value)
        .map_err(|_| crate::error::Error::Internal("group commit returned a foreign value".into()))
}

/// What an audit row is about.
#[derive(Debug, Clone)]
pub struct Target {
    pub kind: &'static str,
    pub id: Option<String>,
}

impl Target {
    pub fn new(kind: &'static str, id: impl ToString) -> Target {
        Target { kind, id: Some(id.to_string()) }
    }

    /// A row about a kind of thing rather than one instance of it.
    pub fn kind(kind: &'static str) -> Target {
        Target { kind, id: None }
    }
}

struct PendingAudit {
    /// Another workspace than the unit's (see [`UnitOfWork::audit_in`]).
    workspace_id: Option<String>,
    action: String,
    target: Target,
    details: Value,
}

struct PendingEvent {
    workspace_id: String,
    event: Event,
}

enum Slot<'a, T: ?Sized> {
    /// Opened by the unit of work, committed by it.
    Owned(Box<T>),
    /// A group-commit job's transaction: the writer commits it.
    Borrowed(&'a mut T),
}

/// A change in progress over a transaction `T` (the full `dyn crate::ports::Tx`, or an area's
/// narrow one). Dropping it without [`UnitOfWork::commit`] rolls everything back.
pub struct UnitOfWork<'a, T: ?Sized + ChangeTx> {
    slot: Slot<'a, T>,
    actor: Audit,
    workspace_id: Option<String>,
    at: i64,
    audits: Vec<PendingAudit>,
    events: Vec<PendingEvent>,
}

impl<T: ?Sized + ChangeTx> UnitOfWork<'static, T> {
    /// A unit of work over a transaction it owns (see `Context::change`).
    pub fn owning(tx: Box<T>, actor: Audit, workspace_id: Option<&str>, at: i64) -> Self {
        UnitOfWork::new(Slot::Owned(tx), actor, workspace_id, at)
    }
}

impl<'a, T: ?Sized + ChangeTx> UnitOfWork<'a, T> {
    /// A unit of work inside a group-commit job's transaction.
    pub fn within(tx: &'a mut T, actor: Audit, workspace_id: Option<&str>, at: i64) -> Self {
        UnitOfWork::new(Slot::Borrowed(tx), actor, workspace_id, at)
    }

    /// [`UnitOfWork::commit`] that also writes `rows` (the change's own rows that need no
    /// answer), before the audit rows and events and together with them: one call to the store
    /// (one round trip on SQLite).
    pub async fn commit_with(self, rows: Vec<NewRow<'_>>) -> Result<()> {
        self.write_and_commit(rows).await
    }

    fn new(slot: Slot<'a, T>, actor: Audit, workspace_id: Option<&str>, at: i64) -> Self {
        UnitOfWork {
            slot,
            actor,
            workspace_id: workspace_id.map(str::to_owned),
            at,
            audits: Vec::new(),
            events: Vec::new(),
        }
    }

    /// The transaction, for the change's own statements.
    pub fn tx(&mut self) -> &mut T {
        match &mut self.slot {
            Slot::Owned(tx) => tx.as_mut(),
            Slot::Borrowed(tx) => tx,
        }
    }

    /// The instant the change happens at (audit rows and events carry it).
    pub fn at(&self) -> i64 {
        self.at
    }

    /// Records an audit row for the change, in the unit's workspace.
    pub fn audit(&mut self, action: &str, target: Target, details: Value) -> &mut Self {
        self.audits.push(PendingAudit { workspace_id: None, action: action.to_owned(), target, details });
        self
    }

    /// Records an audit row in a given workspace: a change that spans workspaces (a user
    /// redeeming invitations to several) leaves its trail in each one's log.
    pub fn audit_in(&mut self, workspace_id: &str, action: &str, target: Target, details: Value) -> &mut Self {
        self.audits.push(PendingAudit {
            workspace_id: Some(workspace_id.to_owned()),
            action: action.to_owned(),
            target,
            details,
        });
        self
    }

    /// Emits an event in the unit's workspace. A unit without a workspace emits nothing here:
    /// use [`UnitOfWork::emit_in`].
    pub fn emit(&mut self, event: Event) -> &mut Self {
        if let Some(workspace_id) = self.workspace_id.clone() {
            self.emit_in(&workspace_id, event);
        }
        self
    }

    /// Emits an event in a given workspace (system jobs that span workspaces).
    pub fn emit_in(&mut self, workspace_id: &str, event: Event) -> &mut Self {
        self.events.push(PendingEvent { workspace_id: workspace_id.to_owned(), event });
        self
    }

    /// Writes the audit rows and events, then commits (unless a group-commit writer owns the
    /// transaction, which commits it with its batch).
    pub async fn commit(self) -> Result<()> {
        self.write_and_commit(Vec::new()).await
    }

    /// Writes `rows`, then the audit rows and events, in one call to the store, and commits.
    async fn write_and_commit(mut self, mut rows: Vec<NewRow<'_>>) -> Result<()> {
        let audits = std::mem::take(&mut self.audits);
        let pending_events = std::mem::take(&mut self.events);
        let (actor, workspace_id, at) = (self.actor.clone(), self.workspace_id.clone(), self.at);
        let payloads = pending_events
            .iter()
            .map(|pending| {
                let data = pending.event.data()?;
                Ok(events::envelope(None, &pending.workspace_id, pending.event.event_type().as_str(), &data, at))
            })
            .collect::<Result<Vec<Value>>>()?;
        rows.reserve(audits.len() + pending_events.len());
        for row in &audits {
            rows.push(NewRow::Audit(NewAuditEntry {
                workspace_id: row.workspace_id.as_deref().or(workspace_id.as_deref()),
                actor_type: actor.principal.kind.as_str(),
                actor_id: &actor.principal.id,
                action: &row.action,
                target_type: row.target.kind,
                target_id: row.target.id.as_deref(),
                request_id: actor.request_id.as_deref(),
                details: &row.details,
                created_at: at,
            }));
        }
        for (event, payload) in pending_events.iter().zip(&payloads) {
            rows.push(NewRow::Event(NewEvent {
                workspace_id: &event.workspace_id,
                event_type: event.event.event_type(),
                payload,
                created_at: at,
            }));
        }
        if !rows.is_empty() {
            ChangeTx::insert_rows(self.tx(), &rows).await?;
        }
        drop(rows);
        if let Slot::Owned(tx) = self.slot {
            ChangeTx::commit(tx).await?;
        }
        Ok(())
    }
}
