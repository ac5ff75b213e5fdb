//! The write transaction, and the only way to its connection.
//!
//! Its connection is private to this module, so every statement of a transaction goes
//! through [`Tx::conn`] or [`Tx::fetch_opening`]. That is what lets the group-commit writer
//! ([`crate::writer`]) open a job's savepoint lazily: every statement is a round trip to
//! SQLite's connection thread, and under load each costs more than most statements do. So a
//! job's savepoint is not a statement of its own: the job's first statement opens it, in the
//! same text for the hot inserts ([`Tx::fetch_opening`]), just before for everything else
//! ([`Tx::conn`]). A successful job's savepoint is not released: the next job's nests inside
//! it, and the commit ends them all; a failed job's is rolled back to and released.

use futures_util::StreamExt;
use sqlx::any::{AnyArguments, AnyRow};
use sqlx::{Any, AnyConnection, Either};
use tokio::sync::OwnedMutexGuard;

use crate::{certificates, DbResult, Dialect, StoreResult};

/// A write transaction. Dropping it without `commit` rolls back.
pub struct Tx {
    inner: sqlx::Transaction<'static, Any>,
    _gate: Option<OwnedMutexGuard<()>>,
    pub(crate) dialect: Dialect,
    /// SQLite: a certificate was inserted, so its search index entry waits for the commit
    /// (migration 0590).
    search_pending: bool,
    /// SQLite group commit: where the running job's savepoint stands.
    savepoint: JobSavepoint,
}

/// Where the running group-commit job's savepoint stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JobSavepoint {
    /// No job runs: a transaction of its own, or the writer between jobs.
    NoJob,
    /// A job runs and has run no statement yet: its first opens the savepoint.
    Owed,
    /// The job's savepoint is open: a failure rolls back to it.
    Open,
}

/// Opens a job's savepoint. One name for all: `ROLLBACK TO` and `RELEASE` act on the newest.
const OPEN_SAVEPOINT: &str = "SAVEPOINT job";

impl Tx {
    pub(crate) fn new(
        inner: sqlx::Transaction<'static, Any>,
        gate: Option<OwnedMutexGuard<()>>,
        dialect: Dialect,
    ) -> Tx {
        Tx { inner, _gate: gate, dialect, search_pending: false, savepoint: JobSavepoint::NoJob }
    }

    /// The connection, for a statement of this transaction. Inside a group-commit job whose
    /// savepoint is owed, opens it first.
    pub(crate) async fn conn(&mut self) -> StoreResult<&mut AnyConnection> {
        if self.savepoint == JobSavepoint::Owed {
            sqlx::query(OPEN_SAVEPOINT).execute(&mut *self.inner).await.db()?;
            self.savepoint = JobSavepoint::Open;
        }
        Ok(&mut *self.inner)
    }

    /// `sql` as [`Tx::fetch_opening`] must be given it: after the savepoint statement when the
    /// job owes one. SQLite runs every statement of a text, binding `$n` across them.
    pub(crate) fn opening_sql(&self, sql: &str) -> String {
        match self.savepoint {
            JobSavepoint::Owed => format!("{OPEN_SAVEPOINT};\n{sql}"),
            JobSavepoint::NoJob | JobSavepoint::Open => sql.to_owned(),
        }
    }

    /// Runs a query whose text came from [`Tx::opening_sql`] and returns its rows: the job's
    /// savepoint and its first statement in one round trip. The savepoint counts as open once
    /// the first statement of the text finished, even when a later one failed: the failed job
    /// must then roll back to it.
    pub(crate) async fn fetch_opening<'q>(
        &mut self,
        query: sqlx::query::Query<'q, Any, AnyArguments<'q>>,
    ) -> StoreResult<Vec<AnyRow>> {
        let owed = self.savepoint == JobSavepoint::Owed;
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
        if owed && finished_statements > 0 {
            self.savepoint = JobSavepoint::Open;
        }
        match failure {
            Some(error) => Err(crate::db(error)),
            None => Ok(rows),
        }
    }

    /// A certificate was inserted: on SQLite, its search index entry is written at the commit.
    pub(crate) fn note_certificate_inserted(&mut self) {
        self.search_pending = self.dialect == Dialect::Sqlite;
    }

    /// The writer starts a job: its first statement opens the job's savepoint.
    pub(crate) fn start_job(&mut self) {
        self.savepoint = JobSavepoint::Owed;
    }

    /// The writer ends a job; a failed one rolls back to its savepoint. One that failed before
    /// its first statement wrote nothing.
    pub(crate) async fn end_job(&mut self, failed: bool) -> StoreResult<()> {
        if failed && self.savepoint == JobSavepoint::Open {
            sqlx::query("ROLLBACK TO job; RELEASE job").execute(&mut *self.inner).await.db()?;
        }
        self.savepoint = JobSavepoint::NoJob;
        Ok(())
    }

    pub(crate) async fn commit_tx(mut self) -> StoreResult<()> {
        if self.search_pending {
            sqlx::query(certificates::SEARCH_PENDING_FLUSH).execute(&mut *self.inner).await.db()?;
        }
        self.inner.commit().await.db()
    }
}
