//! Group commit for SQLite.
//!
//! SQLite has one writer at a time, and a commit costs more than the statements it commits
//! (WAL frames for every dirty page, the FTS segment flush). [`Store::write`] hands a job to
//! one writer task, which runs whatever jobs are queued together in one transaction, each
//! inside its own savepoint: a failing job rolls back only its own changes, and every job
//! learns its outcome only after the shared commit. Under load the queue fills while a
//! batch commits, so batches grow with the load, without a timer; a lone job commits alone.
//!
//! Every statement is a round trip to SQLite's connection thread, and under load each costs
//! more than most statements themselves. So a job's savepoint is not a statement of its own:
//! the job's first statement opens it, either in the same text (the hot inserts) or just
//! before (see [`crate::tx`]).
//!
//! On PostgreSQL, which has concurrent writers, `write` is simply begin, job, commit.

use std::panic::AssertUnwindSafe;

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use sqlx::any::AnyConnectOptions;
use sqlx::{AnyConnection, Connection};
use tokio::sync::{mpsc, oneshot};

use super::{Store, StoreError, Tx};

/// Jobs taken into one transaction at most; bounds how long one batch holds the writer.
const MAX_BATCH: usize = 64;
/// Jobs waiting for the writer before `write` callers wait to enqueue.
const QUEUE_CAPACITY: usize = 1024;

/// A job with its result type erased: runs on the batch transaction and returns how it went
/// plus the hand-over of its result, called once the batch's commit succeeded or failed.
pub(super) type Job = Box<dyn for<'t> FnOnce(&'t mut Tx) -> BoxFuture<'t, Finished> + Send>;

pub(super) struct Finished {
    failed: bool,
    deliver: Box<dyn FnOnce(Option<StoreError>) + Send>,
}

pub(super) type JobSender = mpsc::Sender<Job>;

impl Store {
    /// Runs `job` in a write transaction and commits it, possibly together with other jobs
    /// (SQLite). The job's changes commit if and only if it returns `Ok`.
    ///
    /// The job must only touch the database through `tx`: other calls on the store inside
    /// it would wait for the writer that is running it.
    pub async fn write<T, E, F>(&self, job: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
        F: for<'t> FnOnce(&'t mut Tx) -> BoxFuture<'t, Result<T, E>> + Send + 'static,
    {
        let Some(writer) = &self.writer else {
            let mut tx = self.begin_tx().await?;
            let value = job(&mut tx).await?;
            tx.commit_tx().await?;
            return Ok(value);
        };
        let (sender, receiver) = oneshot::channel::<Result<T, E>>();
        let erased: Job = Box::new(move |tx| {
            Box::pin(async move {
                let mut result = match AssertUnwindSafe(job(tx)).catch_unwind().await {
                    Ok(result) => result,
                    Err(_) => Err(E::from(StoreError::JobPanicked)),
                };
                // An insert the job's last statement left held is the job's, and so is its failure.
                if result.is_ok() {
                    if let Err(error) = tx.send_held().await {
                        result = Err(E::from(error));
                    }
                }
                let failed = result.is_err();
                let deliver = Box::new(move |commit_error: Option<StoreError>| {
                    let outcome = match (commit_error, result) {
                        (Some(error), Ok(_)) => Err(E::from(error)),
                        (_, result) => result,
                    };
                    // The caller may have gone away (client disconnected); the change stands.
                    let _ = sender.send(outcome);
                });
                Finished { failed, deliver }
            })
        });
        writer.send(erased).await.map_err(|_| StoreError::WriterStopped)?;
        // A dropped sender means the batch failed before this job ran.
        receiver.await.map_err(|_| StoreError::BatchFailed("it failed before this change ran".into()))?
    }
}

/// Starts the writer task of an SQLite store; it ends when every sender is dropped.
pub(super) fn spawn(store: Store) -> JobSender {
    let (sender, mut receiver) = mpsc::channel::<Job>(QUEUE_CAPACITY);
    tokio::spawn(async move {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        while receiver.recv_many(&mut batch, MAX_BATCH).await > 0 {
            run_batch(&store, std::mem::take(&mut batch)).await;
        }
    });
    sender
}

/// The writer's own SQLite connection, kept between batches. SQLite drops a connection's whole
/// page cache when another connection wrote since its previous transaction: taken from the
/// shared pool, the writer began every batch with a cold cache and read back the index pages
/// it had just written (and the pool pinged the connection on each return). A batch that fails
/// drops the connection (closing it rolls back whatever it left open); the next opens anew.
pub(super) struct OwnConnection {
    options: AnyConnectOptions,
    slot: std::sync::Mutex<OwnSlot>,
}

#[derive(Default)]
struct OwnSlot {
    idle: Option<AnyConnection>,
    closed: bool,
}

impl OwnConnection {
    pub(super) fn new(options: AnyConnectOptions) -> Self {
        OwnConnection { options, slot: Default::default() }
    }

    /// The kept connection, or a new one.
    async fn take(&self) -> Result<AnyConnection, StoreError> {
        let idle = match self.slot.lock() {
            Ok(slot) if slot.closed => return Err(StoreError::WriterStopped),
            Ok(mut slot) => slot.idle.take(),
            Err(_) => None,
        };
        match idle {
            Some(connection) => Ok(connection),
            None => crate::sqlite_connection(&self.options).await,
        }
    }

    async fn put_back(&self, connection: AnyConnection) {
        let refused = match self.slot.lock() {
            Ok(mut slot) if !slot.closed => slot.idle.replace(connection),
            _ => Some(connection),
        };
        if let Some(connection) = refused {
            let _ = connection.close().await;
        }
    }

    /// Closes the kept connection; the writer takes no other.
    pub(super) async fn close(&self) {
        let idle = match self.slot.lock() {
            Ok(mut slot) => {
                slot.closed = true;
                slot.idle.take()
            }
            Err(_) => None,
        };
        if let Some(connection) = idle {
            let _ = connection.close().await;
        }
    }
}

/// Copies committed WAL frames into the database file every [`CHECKPOINT_INTERVAL`], on a
/// reader connection: a passive checkpoint neither waits for nor blocks the writer. Left to
/// SQLite, the checkpoint would run inside whichever commit crossed the threshold, holding
/// every queued write behind its file copy and fsync (inventory-bench register: 1,672/s that
/// way, 1,877/s with this task; docs/benchmarks-history.md).
/// Under steady writes no pass reaches the WAL's end; what starts it over is SQLite's own
/// checkpoint, kept rare ([`crate::SQLITE_PRAGMAS`]).
pub(super) fn spawn_checkpointer(pool: sqlx::AnyPool) {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(CHECKPOINT_INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !pool.is_closed() {
            ticks.tick().await;
            if let Err(error) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)").execute(&pool).await {
                if !pool.is_closed() {
                    tracing::warn!(%error, "WAL checkpoint failed; SQLite's own checkpoint takes over");
                }
            }
        }
    });
}

/// How often the background checkpointer runs. A checkpoint copies each page the interval
/// changed once, however often it changed, and syncs twice: at full issuance load, passes
/// once a second cost 411 µs of CPU per issuance against 435 µs twice a second, and the rate
/// was 4,084 against 3,894/s (docs/benchmarks.md, issue 24).
const CHECKPOINT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Times the phases of a batch into `trellis_store_group_commit_seconds{phase}`: `begin`
/// (waiting for the write lock, which the process's other SQLite writers also take, and
/// `BEGIN IMMEDIATE`), `jobs` (every job with its round trips to SQLite's thread) and `commit`
/// (the search index's pending rows and `COMMIT`). They tell where the single writer's time
/// goes under load (docs/benchmarks.md, issue 24).
struct BatchPhases {
    since: std::time::Instant,
}

impl BatchPhases {
    fn start() -> Self {
        BatchPhases { since: std::time::Instant::now() }
    }

    fn end(&mut self, phase: &'static str) {
        let now = std::time::Instant::now();
        metrics::histogram!("trellis_store_group_commit_seconds", "phase" => phase)
            .record(now.duration_since(self.since).as_secs_f64());
        self.since = now;
    }
}

/// The largest batch committed so far, for the tests to see that batching happens.
#[cfg(test)]
static LARGEST_BATCH: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

async fn run_batch(store: &Store, jobs: Vec<Job>) {
    metrics::histogram!("trellis_store_group_commit_jobs").record(jobs.len() as f64);
    #[cfg(test)]
    LARGEST_BATCH.fetch_max(jobs.len(), std::sync::atomic::Ordering::Relaxed);
    let mut finished = Vec::with_capacity(jobs.len());
    let mut phases = BatchPhases::start();
    let outcome = async {
        let mut tx = match &store.writer_connection {
            Some(own) => store.begin_on_own(own.take().await?).await?,
            None => store.begin_tx().await?,
        };
        phases.end("begin");
        for job in jobs {
            tx.start_job();
            let done = job(&mut tx).await;
            tx.end_job(done.failed).await?;
            finished.push(done);
        }
        phases.end("jobs");
        let committed = tx.commit_keeping().await;
        phases.end("commit");
        match (committed, &store.writer_connection) {
            (Ok(Some(connection)), Some(own)) => {
                own.put_back(connection).await;
                Ok(())
            }
            (committed, _) => committed.map(drop),
        }
    }
    .await;
    let failure = outcome.err().map(|error| error.to_string());
    if let Some(message) = &failure {
        tracing::error!(error = %message, jobs = finished.len(), "group commit failed; no job of the batch was committed");
    }
    // Jobs the batch never reached were dropped, and with them their result senders.
    for done in finished {
        (done.deliver)(failure.clone().map(StoreError::BatchFailed));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[derive(Debug, PartialEq)]
    enum JobError {
        Refused,
        Store(String),
    }

    impl From<StoreError> for JobError {
        fn from(err: StoreError) -> Self {
            JobError::Store(err.to_string())
        }
    }

    async fn workspace_names(store: &Store) -> Vec<String> {
        sqlx::query_scalar("SELECT name FROM workspaces ORDER BY name").fetch_all(&store.pool).await.unwrap()
    }

    fn insert_workspace(name: &'static str) -> impl for<'t> FnOnce(&'t mut Tx) -> BoxFuture<'t, Result<(), JobError>> {
        move |tx| {
            Box::pin(async move {
                sqlx::query("INSERT INTO workspaces (id, name, created_at, updated_at) VALUES ($1, $1, 0, 0)")
                    .bind(name)
                    .execute(tx.conn().await?)
                    .await
                    .map_err(crate::db)?;
                Ok(())
            })
        }
    }

    /// Two workspaces in one text whose savepoint statement leads it (`Tx::fetch_opening`).
    fn insert_two_at_once(
        first: &'static str,
        second: &'static str,
    ) -> impl for<'t> FnOnce(&'t mut Tx) -> BoxFuture<'t, Result<(), JobError>> {
        move |tx| {
            Box::pin(async move {
                let sql = tx.opening_sql(
                    "INSERT INTO workspaces (id, name, created_at, updated_at) VALUES ($1, $1, 0, 0);\n\
                     INSERT INTO workspaces (id, name, created_at, updated_at) VALUES ($2, $2, 0, 0)",
                );
                tx.fetch_opening(sqlx::query(&sql).bind(first).bind(second)).await?;
                Ok(())
            })
        }
    }

    /// A job's savepoint opened in the text of its first statement: when a later statement
    /// of that text fails, the job still rolls back to its own savepoint, and only to it;
    /// a job whose first statement is a plain one behaves the same. Batch-mates commit.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_savepoint_opened_with_the_first_statement_bounds_the_rollback() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/writer.db", dir.path().display());
        let store = Arc::new(Store::open(&url).await.unwrap());
        store.write(insert_workspace("taken")).await.unwrap();
        let mut tasks = Vec::new();
        for round in 0..20 {
            let names: [&'static str; 4] =
                std::array::from_fn(|i| &*Box::leak(format!("r{round:02}-{i}").into_boxed_str()));
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let (kept, failed_late, refused, kept_plain) = tokio::join!(
                    store.write(insert_two_at_once(names[0], names[1])),
                    // The text's second insert violates uniqueness: its first insert goes too.
                    store.write(insert_two_at_once(names[2], "taken")),
                    // Writes through the opening text, then refuses.
                    store.write(move |tx| {
                        Box::pin(async move {
                            insert_two_at_once(names[3], "unused-name-never-kept")(tx).await?;
                            Err::<(), _>(JobError::Refused)
                        })
                    }),
                    store.write(insert_workspace(&*Box::leak(format!("r{round:02}-plain").into_boxed_str()))),
                );
                assert_eq!(kept, Ok(()));
                assert!(matches!(failed_late, Err(JobError::Store(_))), "{failed_late:?}");
                assert_eq!(refused, Err(JobError::Refused));
                assert_eq!(kept_plain, Ok(()));
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let mut expected: Vec<String> = vec!["taken".into()];
        for round in 0..20 {
            expected.extend([format!("r{round:02}-0"), format!("r{round:02}-1"), format!("r{round:02}-plain")]);
        }
        expected.sort();
        assert_eq!(workspace_names(&store).await, expected);
    }

    /// Many concurrent jobs share batches; a job that fails after writing, or panics, takes
    /// back only its own rows, and its batch-mates still commit.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn failing_jobs_roll_back_alone_and_batch_mates_commit() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/writer.db", dir.path().display());
        let store = Arc::new(Store::open(&url).await.unwrap());
        let names: Vec<&'static str> = (0..200).map(|i| &*Box::leak(format!("ws-{i:03}").into_boxed_str())).collect();
        let mut tasks = Vec::new();
        for (i, name) in names.iter().copied().enumerate() {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                match i % 10 {
                    // Writes, then refuses: its row must not survive.
                    3 => {
                        store
                            .write(move |tx| {
                                Box::pin(async move {
                                    insert_workspace(name)(tx).await?;
                                    Err::<(), _>(JobError::Refused)
                                })
                            })
                            .await
                    }
                    // Writes, then panics: same, and the writer keeps serving.
                    7 => {
                        store
                            .write(move |tx| {
                                Box::pin(async move {
                                    insert_workspace(name)(tx).await?;
                                    panic!("job {name} panics on purpose");
                                })
                            })
                            .await
                    }
                    _ => store.write(insert_workspace(name)).await,
                }
            }));
        }
        let mut outcomes = Vec::new();
        for task in tasks {
            outcomes.push(task.await.unwrap());
        }
        for (i, outcome) in outcomes.iter().enumerate() {
            match i % 10 {
                3 => assert_eq!(outcome, &Err(JobError::Refused)),
                7 => assert_eq!(outcome, &Err(JobError::Store(StoreError::JobPanicked.to_string()))),
                _ => assert_eq!(outcome, &Ok(()), "job {i}"),
            }
        }
        let expected: Vec<String> =
            names.iter().enumerate().filter(|(i, _)| i % 10 != 3 && i % 10 != 7).map(|(_, n)| n.to_string()).collect();
        assert_eq!(workspace_names(&store).await, expected);
        assert!(
            LARGEST_BATCH.load(std::sync::atomic::Ordering::Relaxed) > 1,
            "200 concurrent jobs never shared a batch"
        );
        // A unique violation inside a job is that job's error; the row stays single.
        let duplicate = store.write(insert_workspace("ws-000")).await;
        assert!(matches!(duplicate, Err(JobError::Store(_))), "{duplicate:?}");
        assert_eq!(workspace_names(&store).await.len(), expected.len());
    }

    /// The writer keeps its own connection from batch to batch, and a batch whose commit fails
    /// gives it up: the next batch runs on a fresh connection, with nothing of the failed one
    /// left open (a transaction left open there would hold SQLite's write lock for good).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_batch_gives_up_the_writers_connection_and_the_next_batch_commits() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/writer.db", dir.path().display());
        let store = Store::open(&url).await.unwrap();
        // A temporary table lives as long as its connection.
        let marked = |store: Store| async move {
            store
                .write(|tx: &mut Tx| {
                    Box::pin(async move {
                        let conn = tx.conn().await?;
                        let marked: i64 =
                            sqlx::query_scalar("SELECT count(*) FROM sqlite_temp_master WHERE name = 'writer_mark'")
                                .fetch_one(&mut *conn)
                                .await
                                .map_err(crate::db)?;
                        sqlx::query("CREATE TEMP TABLE IF NOT EXISTS writer_mark (n INTEGER)")
                            .execute(&mut *conn)
                            .await
                            .map_err(crate::db)?;
                        Ok::<_, JobError>(marked == 1)
                    })
                })
                .await
        };
        assert_eq!(marked(store.clone()).await, Ok(false));
        store.write(insert_workspace("before")).await.unwrap();
        assert_eq!(marked(store.clone()).await, Ok(true), "the writer changed connections between batches");
        // A job that ends the batch's transaction behind the writer's back: its own statements
        // succeed, the batch's COMMIT then fails, and so does the job.
        let broken = store
            .write(|tx: &mut Tx| {
                Box::pin(async move {
                    insert_workspace("lost")(tx).await?;
                    sqlx::query("ROLLBACK").execute(tx.conn().await?).await.map_err(crate::db)?;
                    Ok::<_, JobError>(())
                })
            })
            .await;
        assert!(matches!(broken, Err(JobError::Store(_))), "{broken:?}");
        store.write(insert_workspace("after")).await.unwrap();
        assert_eq!(marked(store.clone()).await, Ok(false), "the failed batch's connection was kept");
        // Another connection can write, so the failed batch left no transaction open.
        let mut other = store.begin_tx().await.unwrap();
        sqlx::query("INSERT INTO workspaces (id, name, created_at, updated_at) VALUES ('other', 'other', 0, 0)")
            .execute(other.conn().await.unwrap())
            .await
            .unwrap();
        other.commit_tx().await.unwrap();
        assert_eq!(workspace_names(&store).await, ["after", "before", "other"]);
    }
}
