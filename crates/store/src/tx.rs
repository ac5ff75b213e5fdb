//! The write transaction, and the only way to its connection.
//!
//! Its connection is private to this module, so every statement of a transaction goes
//! through [`Tx::conn`] or [`Tx::fetch_opening`]. That is what lets the group-commit writer
//! ([`crate::writer`]) open a job's savepoint lazily: every statement is a round trip to
//! SQLite's connection thread, and under load each costs more than most statements do. So a
//! job's savepoint is not a statement of its own: the job's first statement opens it, in the
//! same text for the hot inserts ([`Tx::fetch_opening`]), just before for everything else
//! ([`Tx::conn`]). A successful job's savepoint is released by the next job's opening, in the
//! same text (`RELEASE job; SAVEPOINT job`), or by the commit; a failed job's is rolled back
//! to and released. Savepoints do not nest: SQLite keeps the pages a savepoint may restore in
//! a sub-journal, which grows for as long as any savepoint stays open and is emptied when the
//! last one is released, and it checks every open savepoint on each page it writes.
//!
//! A just-issued certificate's insert need not be a round trip of its own either: inside a
//! job, once the transaction knows the id SQLite will give the next certificate (the previous
//! insert's plus one: the writer is the only one writing), the insert is held
//! ([`Tx::hold_certificate`]) and travels with the job's next statement: the audit row, event
//! and ledger row of [`crate::Store`]'s one-text `insert_rows`, or any other statement, which
//! sends it first. A failure of the held insert fails the statement it travelled with.

use futures_util::StreamExt;
use sqlx::any::{AnyArguments, AnyRow};
use sqlx::{Any, AnyConnection, Either};
use tokio::sync::OwnedMutexGuard;

use crate::{bind_owned, certificates, AnyQuery, Bind, DbResult, Dialect, StoreResult};

/// A write transaction. Dropping it without `commit` rolls back.
pub struct Tx {
    inner: TxConnection,
    _gate: Option<OwnedMutexGuard<()>>,
    pub(crate) dialect: Dialect,
    /// SQLite: a certificate was inserted, so its search index entry waits for the commit
    /// (migration 0590).
    search_pending: bool,
    /// SQLite group commit: where the running job's savepoint stands.
    savepoint: JobSavepoint,
    /// SQLite group commit: the id the next certificate insert gets, when this transaction
    /// knows it (from its previous certificate insert, with nothing run since that might
    /// insert one).
    next_certificate_id: Option<i64>,
    /// A certificate insert waiting for the job's next statement.
    held: Option<HeldInsert>,
}

/// The connection a transaction runs on.
enum TxConnection {
    /// A pooled connection under sqlx's transaction, which rolls back when dropped.
    Pooled(sqlx::Transaction<'static, Any>),
    /// The group-commit writer's own connection, its transaction begun by hand (see
    /// [`crate::writer`]). Dropped uncommitted, the connection closes, and SQLite rolls the
    /// transaction back with it.
    Own(AnyConnection),
}

impl std::ops::Deref for TxConnection {
    type Target = AnyConnection;

    fn deref(&self) -> &AnyConnection {
        match self {
            TxConnection::Pooled(transaction) => transaction,
            TxConnection::Own(connection) => connection,
        }
    }
}

impl std::ops::DerefMut for TxConnection {
    fn deref_mut(&mut self) -> &mut AnyConnection {
        match self {
            TxConnection::Pooled(transaction) => transaction,
            TxConnection::Own(connection) => connection,
        }
    }
}

/// An insert held back to travel with the job's next statement: its text, whose parameters
/// are numbered from where the text it joins leaves off, and its values in that order.
pub(crate) struct HeldInsert {
    pub(crate) sql: fn(first_parameter: usize) -> String,
    pub(crate) values: Vec<Bind>,
}

/// How many inserts were held so far, for the tests to see that holding happens.
#[cfg(test)]
pub(crate) static HELD_INSERTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl HeldInsert {
    /// Binds the values onto `query`, after whatever it already holds.
    pub(crate) fn bind(self, query: AnyQuery<'_>) -> AnyQuery<'_> {
        bind_owned(query, self.values)
    }
}

/// Where the running group-commit job's savepoint stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JobSavepoint {
    /// No job runs: a transaction of its own, or the writer between jobs.
    NoJob,
    /// A job runs and has run no statement yet: its first opens the savepoint.
    Owed,
    /// As `Owed`, and an earlier job's savepoint is still open: the first statement releases it.
    OwedAfterKept,
    /// The job's savepoint is open: a failure rolls back to it.
    Open,
}

impl JobSavepoint {
    /// The statement a job's first statement must be preceded by, if any.
    fn opening(self) -> Option<&'static str> {
        match self {
            JobSavepoint::Owed => Some(OPEN_SAVEPOINT),
            JobSavepoint::OwedAfterKept => Some(REOPEN_SAVEPOINT),
            JobSavepoint::NoJob | JobSavepoint::Open => None,
        }
    }

    /// How many statements [`JobSavepoint::opening`] is.
    fn opening_statements(self) -> usize {
        match self {
            JobSavepoint::Owed => 1,
            JobSavepoint::OwedAfterKept => 2,
            JobSavepoint::NoJob | JobSavepoint::Open => 0,
        }
    }
}

/// Opens a job's savepoint. One name for all: `ROLLBACK TO` and `RELEASE` act on the newest.
const OPEN_SAVEPOINT: &str = "SAVEPOINT job";
/// Releases the previous job's savepoint and opens this job's.
const REOPEN_SAVEPOINT: &str = "RELEASE job; SAVEPOINT job";

impl Tx {
    pub(crate) fn new(
        inner: sqlx::Transaction<'static, Any>,
        gate: Option<OwnedMutexGuard<()>>,
        dialect: Dialect,
    ) -> Tx {
        Tx::with_connection(TxConnection::Pooled(inner), gate, dialect)
    }

    /// A transaction already begun (`BEGIN IMMEDIATE`) on the group-commit writer's own
    /// connection; [`Tx::commit_keeping`] gives the connection back.
    pub(crate) fn on_own_connection(
        connection: AnyConnection,
        gate: Option<OwnedMutexGuard<()>>,
        dialect: Dialect,
    ) -> Tx {
        Tx::with_connection(TxConnection::Own(connection), gate, dialect)
    }

    fn with_connection(inner: TxConnection, gate: Option<OwnedMutexGuard<()>>, dialect: Dialect) -> Tx {
        Tx {
            inner,
            _gate: gate,
            dialect,
            search_pending: false,
            savepoint: JobSavepoint::NoJob,
            next_certificate_id: None,
            held: None,
        }
    }

    /// The connection, for a statement of this transaction. Inside a group-commit job whose
    /// savepoint is owed, opens it first; a held insert goes first.
    pub(crate) async fn conn(&mut self) -> StoreResult<&mut AnyConnection> {
        self.send_held().await?;
        // The statement may insert a certificate of its own: the next id is no longer known.
        self.next_certificate_id = None;
        if let Some(opening) = self.savepoint.opening() {
            sqlx::query(opening).execute(&mut *self.inner).await.db()?;
            self.savepoint = JobSavepoint::Open;
        }
        Ok(&mut *self.inner)
    }

    /// `sql` as [`Tx::fetch_opening`] must be given it: after the savepoint statement when the
    /// job owes one. SQLite runs every statement of a text, binding `$n` across them.
    pub(crate) fn opening_sql(&self, sql: &str) -> String {
        match self.savepoint.opening() {
            Some(opening) => format!("{opening};\n{sql}"),
            None => sql.to_owned(),
        }
    }

    /// Runs a query whose text came from [`Tx::opening_sql`] and returns its rows: the job's
    /// savepoint and its first statement in one round trip. The savepoint counts as open once
    /// the opening's statements finished, even when a later one failed: the failed job must
    /// then roll back to it.
    pub(crate) async fn fetch_opening<'q>(
        &mut self,
        query: sqlx::query::Query<'q, Any, AnyArguments<'q>>,
    ) -> StoreResult<Vec<AnyRow>> {
        let opening_statements = self.savepoint.opening_statements();
        let mut finished_statements = 0;
        let mut rows = Vec::new();
        let mut failure = None;
        {
            // sqlx marks running several statements of one text deprecated (only SQLite can);
            // `insert_rows` relies on it too, and the pinned version keeps it.
            #[allow(deprecated)]
            let mut results = query.fetch_many(&mut *self.inner);
            while let Some(result) = results.next().await {
                match result {
                    Ok(Either::Left(_)) => finished_statements += 1,
                    Ok(Either::Right(row)) => rows.push(row),
                    Err(error) => {
                        failure = Some(error);
                        break;
                    }
                }
            }
        }
        if opening_statements > 0 && finished_statements >= opening_statements {
            self.savepoint = JobSavepoint::Open;
        } else if self.savepoint == JobSavepoint::OwedAfterKept && finished_statements == 1 {
            // The earlier job's savepoint was released, this job's never opened.
            self.savepoint = JobSavepoint::Owed;
        }
        match failure {
            Some(error) => {
                self.next_certificate_id = None;
                Err(crate::db(error))
            }
            None => Ok(rows),
        }
    }

    /// The id a certificate inserted now would get, if its insert may be held: inside a
    /// group-commit job that holds nothing yet, with the next id known.
    pub(crate) fn holdable_certificate_id(&self) -> Option<i64> {
        match (self.savepoint, &self.held) {
            (JobSavepoint::NoJob, _) | (_, Some(_)) => None,
            _ => self.next_certificate_id,
        }
    }

    /// Holds the insert of certificate `id` (from [`Tx::holdable_certificate_id`]) for the
    /// job's next statement.
    pub(crate) fn hold_certificate(&mut self, id: i64, insert: HeldInsert) {
        #[cfg(test)]
        HELD_INSERTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.held = Some(insert);
        self.next_certificate_id = Some(id + 1);
    }

    /// SQLite gave a certificate `id` inside a group-commit job: the next one gets `id + 1`.
    pub(crate) fn certificate_inserted(&mut self, id: i64) {
        if self.savepoint != JobSavepoint::NoJob {
            self.next_certificate_id = Some(id + 1);
        }
    }

    /// The held insert, for a statement that carries it in its own text.
    pub(crate) fn take_held(&mut self) -> Option<HeldInsert> {
        self.held.take()
    }

    /// Sends the held insert, if any, as a statement of its own.
    pub(crate) async fn send_held(&mut self) -> StoreResult<()> {
        let Some(held) = self.held.take() else {
            return Ok(());
        };
        let sql = self.opening_sql(&(held.sql)(1));
        let query = held.bind(sqlx::query(&sql));
        self.fetch_opening(query).await.map(|_| ())
    }

    /// A certificate was inserted: on SQLite, its search index entry is written at the commit.
    pub(crate) fn note_certificate_inserted(&mut self) {
        self.search_pending = self.dialect == Dialect::Sqlite;
    }

    /// The writer starts a job: its first statement opens the job's savepoint (releasing the
    /// one a previous job left open).
    pub(crate) fn start_job(&mut self) {
        self.savepoint = match self.savepoint {
            JobSavepoint::NoJob | JobSavepoint::Owed => JobSavepoint::Owed,
            JobSavepoint::Open | JobSavepoint::OwedAfterKept => JobSavepoint::OwedAfterKept,
        };
    }

    /// The writer ends a job; a failed one rolls back to its savepoint. One that failed before
    /// its first statement wrote nothing.
    pub(crate) async fn end_job(&mut self, failed: bool) -> StoreResult<()> {
        if failed {
            // Whatever the job held never ran; what it ran is rolled back below, ids included.
            self.held = None;
            self.next_certificate_id = None;
        }
        self.savepoint = match (failed, self.savepoint) {
            (true, JobSavepoint::Open) => {
                sqlx::query("ROLLBACK TO job; RELEASE job").execute(&mut *self.inner).await.db()?;
                JobSavepoint::NoJob
            }
            // Kept open: the next job's opening or the commit releases it.
            (false, JobSavepoint::Open) => JobSavepoint::Open,
            (_, JobSavepoint::OwedAfterKept) => JobSavepoint::Open,
            (_, JobSavepoint::NoJob | JobSavepoint::Owed) => JobSavepoint::NoJob,
        };
        Ok(())
    }

    pub(crate) async fn commit_tx(self) -> StoreResult<()> {
        self.commit_keeping().await.map(drop)
    }

    /// Commits, and gives back the writer's own connection if this transaction ran on it.
    pub(crate) async fn commit_keeping(mut self) -> StoreResult<Option<AnyConnection>> {
        self.send_held().await?;
        match self.inner {
            TxConnection::Pooled(mut transaction) => {
                if self.search_pending {
                    sqlx::query(certificates::SEARCH_PENDING_FLUSH).execute(&mut *transaction).await.db()?;
                }
                transaction.commit().await.db()?;
                Ok(None)
            }
            TxConnection::Own(mut connection) => {
                // One round trip: the search index's pending rows and the commit in one text.
                let commit = if self.search_pending { certificates::SEARCH_PENDING_FLUSH_AND_COMMIT } else { "COMMIT" };
                sqlx::query(commit).execute(&mut connection).await.db()?;
                Ok(Some(connection))
            }
        }
    }
}
