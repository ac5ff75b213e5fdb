//! Persistence: the core's storage ports (`trellis_core::ports`) over SQLite and PostgreSQL.
//! All SQL of the service lives in this crate.
//!
//! One code path serves SQLite (embedded default) and PostgreSQL through sqlx's `Any`
//! driver; statements use `$n` placeholders, which both backends accept, and the few
//! dialect differences (substring search, upserts) branch on [`Dialect`].
//! Writes go through [`Tx`], so a change, its audit row and its outbox event commit together.
//! `redact_url` keeps credentials out of connection errors.

mod acme;
mod attestation;
mod audit;
mod auth;
mod cas;
mod certificates;
mod challenges;
mod discovery;
mod domain_claims;
mod issuance;
mod oidc;
mod outbox;
mod pki;
mod plugins;
#[cfg(test)]
mod probes;
mod readers;
mod tx;
mod webhooks;
mod writer;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{Any, AnyPool, Executor};
use tokio::sync::Mutex;
use trellis_core::ports;
use trellis_core::Error;

pub use self::acme::DbAcme;
pub use self::challenges::DbChallengeAnswers;
pub use self::domain_claims::DbDomainClaims;
pub use self::plugins::{DbPluginKeys, DbPluginState};
pub use self::tx::Tx;

pub use trellis_core::ports::{StoreError, StoreResult};

/// sqlx errors as the core's storage errors. (A `From` impl is impossible here: both types
/// are foreign to this crate, which is the point: the core never sees a driver type.)
pub(crate) fn db(err: sqlx::Error) -> StoreError {
    if let sqlx::Error::Database(db) = &err {
        if db.is_unique_violation() {
            return StoreError::Unique(db.message().to_string());
        }
    }
    StoreError::Database(err.to_string())
}

/// `.db()?` on sqlx results inside the store.
pub(crate) trait DbResult<T> {
    fn db(self) -> StoreResult<T>;
}

impl<T> DbResult<T> for Result<T, sqlx::Error> {
    fn db(self) -> StoreResult<T> {
        self.map_err(db)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

struct Migration {
    version: i64,
    name: &'static str,
    sqlite: &'static str,
    postgres: &'static str,
}

/// Forward-only migrations; both dialects carry the same versions.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "foundation",
        sqlite: include_str!("../../../migrations/sqlite/0001_foundation.sql"),
        postgres: include_str!("../../../migrations/postgres/0001_foundation.sql"),
    },
    Migration {
        version: 2,
        name: "search_by_workspace",
        sqlite: include_str!("../../../migrations/sqlite/0002_search_by_workspace.sql"),
        postgres: include_str!("../../../migrations/postgres/0002_search_by_workspace.sql"),
    },
    Migration {
        version: 3,
        name: "certificate_probe_index",
        sqlite: include_str!("../../../migrations/sqlite/0003_certificate_probe_index.sql"),
        postgres: include_str!("../../../migrations/postgres/0003_certificate_probe_index.sql"),
    },
    Migration {
        version: 100,
        name: "plugins",
        sqlite: include_str!("../../../migrations/sqlite/0100_plugins.sql"),
        postgres: include_str!("../../../migrations/postgres/0100_plugins.sql"),
    },
    Migration {
        version: 101,
        name: "plugin_records",
        sqlite: include_str!("../../../migrations/sqlite/0101_plugin_records.sql"),
        postgres: include_str!("../../../migrations/postgres/0101_plugin_records.sql"),
    },
    Migration {
        version: 200,
        name: "certificate_authorities",
        sqlite: include_str!("../../../migrations/sqlite/0200_certificate_authorities.sql"),
        postgres: include_str!("../../../migrations/postgres/0200_certificate_authorities.sql"),
    },
    Migration {
        version: 210,
        name: "discovery_tls_and_ca_health",
        sqlite: include_str!("../../../migrations/sqlite/0210_discovery_tls_and_ca_health.sql"),
        postgres: include_str!("../../../migrations/postgres/0210_discovery_tls_and_ca_health.sql"),
    },
    Migration {
        version: 300,
        name: "webhooks",
        sqlite: include_str!("../../../migrations/sqlite/0300_webhooks.sql"),
        postgres: include_str!("../../../migrations/postgres/0300_webhooks.sql"),
    },
    Migration {
        version: 400,
        name: "attestation",
        sqlite: include_str!("../../../migrations/sqlite/0400_attestation.sql"),
        postgres: include_str!("../../../migrations/postgres/0400_attestation.sql"),
    },
    Migration {
        version: 450,
        name: "pending_issuance",
        sqlite: include_str!("../../../migrations/sqlite/0450_pending_issuance.sql"),
        postgres: include_str!("../../../migrations/postgres/0450_pending_issuance.sql"),
    },
    Migration {
        version: 460,
        name: "renewal_info",
        sqlite: include_str!("../../../migrations/sqlite/0460_renewal_info.sql"),
        postgres: include_str!("../../../migrations/postgres/0460_renewal_info.sql"),
    },
    Migration {
        version: 470,
        name: "subscribed_at",
        sqlite: include_str!("../../../migrations/sqlite/0470_subscribed_at.sql"),
        postgres: include_str!("../../../migrations/postgres/0470_subscribed_at.sql"),
    },
    Migration {
        version: 480,
        name: "approval_snapshots",
        sqlite: include_str!("../../../migrations/sqlite/0480_approval_snapshots.sql"),
        postgres: include_str!("../../../migrations/postgres/0480_approval_snapshots.sql"),
    },
    Migration {
        version: 481,
        name: "members",
        sqlite: include_str!("../../../migrations/sqlite/0481_members.sql"),
        postgres: include_str!("../../../migrations/postgres/0481_members.sql"),
    },
    Migration {
        version: 490,
        name: "oidc",
        sqlite: include_str!("../../../migrations/sqlite/0490_oidc.sql"),
        postgres: include_str!("../../../migrations/postgres/0490_oidc.sql"),
    },
    Migration {
        version: 504,
        name: "domain_claims",
        sqlite: include_str!("../../../migrations/sqlite/0504_domain_claims.sql"),
        postgres: include_str!("../../../migrations/postgres/0504_domain_claims.sql"),
    },
    Migration {
        version: 510,
        name: "pki_crl_cache",
        sqlite: include_str!("../../../migrations/sqlite/0510_pki_crl_cache.sql"),
        postgres: include_str!("../../../migrations/postgres/0510_pki_crl_cache.sql"),
    },
    Migration {
        version: 520,
        name: "acme_server",
        sqlite: include_str!("../../../migrations/sqlite/0520_acme_server.sql"),
        postgres: include_str!("../../../migrations/postgres/0520_acme_server.sql"),
    },
    Migration {
        version: 530,
        name: "plugin_signatures",
        sqlite: include_str!("../../../migrations/sqlite/0530_plugin_signatures.sql"),
        postgres: include_str!("../../../migrations/postgres/0530_plugin_signatures.sql"),
    },
    Migration {
        version: 550,
        name: "acme_renewal_info",
        sqlite: include_str!("../../../migrations/sqlite/0550_acme_renewal_info.sql"),
        postgres: include_str!("../../../migrations/postgres/0550_acme_renewal_info.sql"),
    },
    Migration {
        version: 560,
        name: "inventory_order_and_tallies",
        sqlite: include_str!("../../../migrations/sqlite/0560_inventory_order_and_tallies.sql"),
        postgres: include_str!("../../../migrations/postgres/0560_inventory_order_and_tallies.sql"),
    },
    Migration {
        version: 570,
        name: "acme_pending_authorizations",
        sqlite: include_str!("../../../migrations/sqlite/0570_acme_pending_authorizations.sql"),
        postgres: include_str!("../../../migrations/postgres/0570_acme_pending_authorizations.sql"),
    },
    Migration {
        version: 580,
        name: "discovery_scan_certificates",
        sqlite: include_str!("../../../migrations/sqlite/0580_discovery_scan_certificates.sql"),
        postgres: include_str!("../../../migrations/postgres/0580_discovery_scan_certificates.sql"),
    },
    Migration {
        version: 590,
        name: "search_index_per_commit",
        sqlite: include_str!("../../../migrations/sqlite/0590_search_index_per_commit.sql"),
        postgres: include_str!("../../../migrations/postgres/0590_search_index_per_commit.sql"),
    },
    Migration {
        version: 600,
        name: "ledger_serial_lookup_through_authorities",
        sqlite: include_str!("../../../migrations/sqlite/0600_ledger_serial_lookup_through_authorities.sql"),
        postgres: include_str!("../../../migrations/postgres/0600_ledger_serial_lookup_through_authorities.sql"),
    },
];

#[derive(Clone)]
pub struct Store {
    pool: AnyPool,
    dialect: Dialect,
    /// SQLite allows one writer; queueing writers here (instead of in SQLite's busy
    /// handler) avoids lock-upgrade deadlocks between deferred transactions.
    write_gate: Option<Arc<Mutex<()>>>,
    /// SQLite: the queue of the group-commit writer (see [`writer`]).
    writer: Option<writer::JobSender>,
    /// SQLite: the group-commit writer's own connection, between batches.
    writer_connection: Option<Arc<writer::OwnConnection>>,
    /// SQLite: workspace numbers of the trigram index, read once each (they never change).
    workspace_numbers: Arc<std::sync::Mutex<std::collections::HashMap<String, i64>>>,
    /// SQLite: connections for single reads, without the pool's ping on release.
    readers: Option<Arc<readers::ReadConnections>>,
}

/// Every SQLite connection's settings (pool and readers alike).
/// Reads go through a memory map of the database file (up to 16 GiB; the ceiling is compiled
/// in, see .cargo/config.toml): no read syscall or copy per page, and the pages are the
/// kernel's page cache, shared by every connection, rather than heap. The 8 MiB page cache
/// then mostly holds pages written since the last checkpoint.
/// The background task does most checkpointing ([`writer::spawn_checkpointer`]); the one SQLite
/// runs inside whichever commit finds the WAL past `wal_autocheckpoint` pages stalls every
/// queued write behind a copy and two syncs, and it is what starts a busy WAL over. At 10,000
/// pages it ran in most of the writer's commits at full issuance load (the WAL grows about
/// 30,000 pages a second there); at 65,536 (256 MiB) it runs every two seconds or so, and the
/// issuance p99 fell from 77 to 45 ms (issue 24). `journal_size_limit`, above the WAL's size at
/// that point, cuts back a WAL that a long reader let grow further.
pub(crate) const SQLITE_PRAGMAS: &str = "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; \
     PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 5000; \
     PRAGMA cache_size = -8192; PRAGMA temp_store = MEMORY; PRAGMA mmap_size = 17179869184; \
     PRAGMA wal_autocheckpoint = 65536; PRAGMA journal_size_limit = 335544320;";

/// An SQLite connection outside the pool, with [`SQLITE_PRAGMAS`]. Boxed: callers sit in
/// `async_trait` methods, whose `Send` check does not see through this future's borrows.
pub(crate) fn sqlite_connection(
    options: &AnyConnectOptions,
) -> futures_util::future::BoxFuture<'_, StoreResult<sqlx::AnyConnection>> {
    Box::pin(async move {
        use sqlx::ConnectOptions;
        let mut connection = options.connect().await.db()?;
        connection.execute(SQLITE_PRAGMAS).await.db()?;
        Ok(connection)
    })
}

/// An SQLite pool of at most `max` connections, each with [`SQLITE_PRAGMAS`].
async fn sqlite_pool(options: AnyConnectOptions, max: u32) -> Result<sqlx::AnyPool, sqlx::Error> {
    AnyPoolOptions::new()
        .max_connections(max)
        .min_connections(1)
        .idle_timeout(None)
        // An embedded database has no link to go stale: no ping (a round trip to the
        // connection's thread) before every query's acquire.
        .test_before_acquire(false)
        .after_connect(|conn, _meta| {
            Box::pin(async move {
                conn.execute(SQLITE_PRAGMAS).await?;
                Ok(())
            })
        })
        .connect_with(options)
        .await
}

/// SQLite: how many kept read connections at most (beyond, reads take the pool's).
const SQLITE_READERS: usize = 8;

impl Store {
    /// Opens (creating if needed) the database and applies pending migrations.
    pub async fn open(url: &str) -> StoreResult<Self> {
        sqlx::any::install_default_drivers();
        let dialect = if url.starts_with("sqlite:") { Dialect::Sqlite } else { Dialect::Postgres };
        let connect_err =
            |source: sqlx::Error| StoreError::Connect { url: redact_url(url), message: source.to_string() };
        let mut readers = None;
        let mut sqlite_options = None;
        let pool = match dialect {
            Dialect::Sqlite => {
                let url = sqlite_url(url);
                let options = AnyConnectOptions::from_str(&url).map_err(connect_err)?;
                readers = Some(readers::ReadConnections::new(options.clone(), SQLITE_READERS));
                // Migrations run on a pool of their own, closed before serving: an SQLite
                // connection caches the schema it first read, and one opened while a migration
                // ran can fail a later statement with "no such table" when its check of the
                // schema's version cannot take a read lock at that moment.
                sqlite_options = Some(options.clone());
                sqlite_pool(options, 1).await.map_err(connect_err)?
            }
            Dialect::Postgres => AnyPoolOptions::new()
                .max_connections(16)
                .acquire_timeout(Duration::from_secs(10))
                .connect(url)
                .await
                .map_err(connect_err)?,
        };
        let write_gate = (dialect == Dialect::Sqlite).then(|| Arc::new(Mutex::new(())));
        let mut store = Store {
            pool,
            dialect,
            write_gate,
            writer: None,
            writer_connection: None,
            workspace_numbers: Default::default(),
            readers,
        };
        store.migrate().await?;
        if let Some(options) = sqlite_options {
            // Certificates a tool inserted straight into the file wait in the search index's
            // queue (migration 0590): index them before the first search.
            store.index_pending_certificates().await?;
            store.pool.close().await;
            store.pool = sqlite_pool(options.clone(), 8).await.map_err(connect_err)?;
            store.writer_connection = Some(Arc::new(writer::OwnConnection::new(options)));
            store.writer = Some(writer::spawn(store.clone()));
            writer::spawn_checkpointer(store.pool.clone());
        }
        Ok(store)
    }

    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// A connection for one read outside a transaction: `query.fetch_one(&mut *self.reader().await?)`.
    /// SQLite lends a kept connection (see [`readers`]); PostgreSQL the pool's.
    pub(crate) async fn reader(&self) -> StoreResult<readers::Reader> {
        match &self.readers {
            Some(readers) => readers.reader(&self.pool).await,
            None => Ok(readers::Reader::Pooled(self.pool.acquire().await.db()?)),
        }
    }

    /// SQLite: indexes for search the certificates inserted other than through a [`Tx`]
    /// (migration 0590); a `Tx` that inserts one does it before it commits.
    pub(crate) async fn index_pending_certificates(&self) -> StoreResult<()> {
        if self.dialect == Dialect::Sqlite {
            let mut tx = self.begin_tx().await?;
            tx.note_certificate_inserted();
            tx.commit_tx().await?;
        }
        Ok(())
    }

    /// A write transaction of this store's own type (the writer and migrations need it).
    pub(crate) async fn begin_tx(&self) -> StoreResult<Tx> {
        let gate = self.write_gate().await;
        // SQLite: take the write lock at BEGIN, where busy_timeout waits for another process
        // (a CLI job, a replica) to finish. A deferred transaction that read first gets
        // SQLITE_BUSY at its first write, at once, with no wait.
        let inner = match self.dialect {
            Dialect::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await.db()?,
            Dialect::Postgres => self.pool.begin().await.db()?,
        };
        Ok(Tx::new(inner, gate, self.dialect))
    }

    /// SQLite: a write transaction on the group-commit writer's own connection (see [`writer`]).
    pub(crate) async fn begin_on_own(&self, mut connection: sqlx::AnyConnection) -> StoreResult<Tx> {
        let gate = self.write_gate().await;
        connection.execute("BEGIN IMMEDIATE").await.db()?;
        Ok(Tx::on_own_connection(connection, gate, self.dialect))
    }

    /// SQLite: queues this process's write transactions (see `write_gate`).
    async fn write_gate(&self) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        match &self.write_gate {
            Some(gate) => Some(gate.clone().lock_owned().await),
            None => None,
        }
    }

    async fn migrate(&self) -> StoreResult<()> {
        let mut conn = self.pool.acquire().await.db()?;
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)",
        )
        .await.db()?;
        let applied: Vec<i64> =
            sqlx::query_scalar("SELECT version FROM schema_migrations").fetch_all(&mut *conn).await.db()?;
        drop(conn);
        for migration in MIGRATIONS.iter().filter(|m| !applied.contains(&m.version)) {
            let sql = match self.dialect {
                Dialect::Sqlite => migration.sqlite,
                Dialect::Postgres => migration.postgres,
            };
            // Some migrations rebuild an index over every certificate: say so before the wait.
            tracing::info!(version = migration.version, name = migration.name, "applying migration");
            let started = std::time::Instant::now();
            let failed = |source: sqlx::Error| StoreError::Migration {
                version: migration.version,
                name: migration.name,
                message: source.to_string(),
            };
            let mut tx = self.begin_tx().await?;
            sqlx::raw_sql(sql).execute(tx.conn().await?).await.map_err(failed)?;
            sqlx::query("INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)")
                .bind(migration.version)
                .bind(migration.name)
                .bind(chrono::Utc::now().timestamp_millis())
                .execute(tx.conn().await?)
                .await
                .map_err(failed)?;
            tx.commit_tx().await?;
            tracing::info!(
                version = migration.version,
                name = migration.name,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "applied migration"
            );
        }
        Ok(())
    }
}

impl ports::Tx for Tx {}

#[async_trait]
impl trellis_core::unit_of_work::ChangeTx for Tx {
    async fn commit(self: Box<Self>) -> StoreResult<()> {
        self.commit_tx().await
    }

    /// On SQLite, one query text holding every insert (SQLite runs each statement of a text,
    /// binding `$n` across them): one round trip to the connection's thread instead of one per
    /// row. PostgreSQL prepares one statement per text: one insert each.
    async fn insert_rows(&mut self, rows: &[ports::NewRow<'_>]) -> StoreResult<()> {
        use ports::NewRow;
        if self.dialect != Dialect::Sqlite || rows.len() < 2 {
            return ports::insert_each(self, rows).await;
        }
        let mut sql = String::new();
        let mut rows_sql = String::new();
        let mut first = 1;
        for row in rows {
            let (insert, count) = match row {
                NewRow::Issued(_) => (insert_sql(pki::INSERT_ISSUED, first), pki::INSERT_ISSUED.1),
                NewRow::Audit(_) => (insert_sql(audit::INSERT_AUDIT, first), audit::INSERT_AUDIT.1),
                NewRow::Event(_) => (outbox::insert_event_sql(first), outbox::EVENT_PARAMETERS),
            };
            rows_sql.push_str(&insert);
            rows_sql.push_str(";\n");
            first += count;
        }
        // A held certificate insert goes first in the text, its values after the rows' ones.
        let held = self.take_held();
        if let Some(held) = &held {
            sql.push_str(&(held.sql)(first));
            sql.push_str(";\n");
        }
        sql.push_str(&rows_sql);
        let sql = self.opening_sql(&sql);
        let mut query = sqlx::query(&sql);
        for row in rows {
            query = match row {
                NewRow::Issued(record) => pki::bind_issued(query, record),
                NewRow::Audit(entry) => audit::bind_audit(query, entry),
                NewRow::Event(event) => outbox::bind_event(query, event),
            };
        }
        if let Some(held) = held {
            query = held.bind(query);
        }
        self.fetch_opening(query).await?;
        Ok(())
    }
}

/// `insert` (an `INSERT INTO … (columns)` and its number of values) with its `VALUES`,
/// numbered from `$first`.
pub(crate) fn insert_sql((insert, count): (&str, usize), first: usize) -> String {
    let values: Vec<String> = (first..first + count).map(|n| format!("${n}")).collect();
    format!("{insert} VALUES ({})", values.join(", "))
}

#[async_trait]
impl trellis_core::unit_of_work::GroupCommit<dyn ports::Tx> for Store {
    async fn write_erased(&self, job: ports::ErasedJob) -> Result<Box<dyn std::any::Any + Send>, Error> {
        self.write(move |tx: &mut Tx| job(tx)).await
    }
}

#[async_trait]
impl ports::Store for Store {
    async fn begin(&self) -> StoreResult<Box<dyn ports::Tx>> {
        Ok(Box::new(self.begin_tx().await?))
    }

    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await.db()?;
        Ok(())
    }

    async fn close(&self) {
        self.pool.close().await;
        if let Some(connection) = &self.writer_connection {
            connection.close().await;
        }
    }
}

/// sqlx needs `mode=rwc` to create a missing SQLite file; the directory must exist too.
fn sqlite_url(url: &str) -> String {
    let path = url.trim_start_matches("sqlite://").trim_start_matches("sqlite:");
    let file = path.split('?').next().unwrap_or(path);
    if file != ":memory:" {
        if let Some(dir) = std::path::Path::new(file).parent() {
            if !dir.as_os_str().is_empty() {
                let _ = std::fs::create_dir_all(dir);
            }
        }
    }
    if url.contains("mode=") {
        url.to_string()
    } else if url.contains('?') {
        format!("{url}&mode=rwc")
    } else {
        format!("{url}?mode=rwc")
    }
}

/// A value bound to a dynamically built statement.
pub(crate) enum Bind {
    Int(i64),
    Text(String),
    OptionalInt(Option<i64>),
    OptionalText(Option<String>),
}

pub(crate) type AnyQuery<'q> = sqlx::query::Query<'q, Any, sqlx::any::AnyArguments<'q>>;

fn bind_all<'q>(mut query: AnyQuery<'q>, binds: &'q [Bind]) -> AnyQuery<'q> {
    for bind in binds {
        query = match bind {
            Bind::Int(value) => query.bind(*value),
            Bind::Text(value) => query.bind(value.as_str()),
            Bind::OptionalInt(value) => query.bind(*value),
            Bind::OptionalText(value) => query.bind(value.as_deref()),
        };
    }
    query
}

/// As [`bind_all`], moving the values into the query.
pub(crate) fn bind_owned(mut query: AnyQuery<'_>, binds: Vec<Bind>) -> AnyQuery<'_> {
    for bind in binds {
        query = match bind {
            Bind::Int(value) => query.bind(value),
            Bind::Text(value) => query.bind(value),
            Bind::OptionalInt(value) => query.bind(value),
            Bind::OptionalText(value) => query.bind(value),
        };
    }
    query
}

impl Store {
    /// A newest-first window of `table` rows of one workspace, optionally only those whose
    /// `column` equals a value (an empty value filters nothing) and meeting `condition`.
    #[allow(clippy::too_many_arguments, reason = "the parts of one SELECT; a builder would only rename them")]
    async fn workspace_page<T>(
        &self,
        columns: &str,
        table: &str,
        workspace_id: &str,
        equals: Option<(&str, &str)>,
        condition: Option<&str>,
        page: trellis_core::pagination::PageRequest,
        map: fn(&sqlx::any::AnyRow) -> StoreResult<T>,
    ) -> StoreResult<trellis_core::pagination::Page<T>> {
        let mut clauses = vec!["workspace_id = $1".to_owned()];
        let mut binds = vec![Bind::Text(workspace_id.to_owned())];
        if let Some((column, value)) = equals.filter(|(_, value)| !value.is_empty()) {
            binds.push(Bind::Text(value.to_owned()));
            clauses.push(format!("{column} = ${}", binds.len()));
        }
        clauses.extend(condition.map(str::to_owned));
        self.fetch_page(columns, table, &clauses.join(" AND "), "id DESC", &binds, page, map).await
    }

    /// One list window: the number of matches, then `page` of them in `order_by` order.
    /// `where_clause` refers to `binds` as `$1..$n`.
    #[allow(clippy::too_many_arguments, reason = "the parts of one SELECT; a builder would only rename them")]
    async fn fetch_page<T>(
        &self,
        select: &str,
        from: &str,
        where_clause: &str,
        order_by: &str,
        binds: &[Bind],
        page: trellis_core::pagination::PageRequest,
        map: fn(&sqlx::any::AnyRow) -> StoreResult<T>,
    ) -> StoreResult<trellis_core::pagination::Page<T>> {
        use sqlx::Row;
        // Count no further than needed: exact up to EXACT_TOTAL_LIMIT matches (or the end of the
        // requested window, if deeper), a lower bound beyond, flagged by `totalExact`. An
        // unbounded COUNT(*) over a large audit log would cost more than the page itself.
        let count_cap = crate::certificates::EXACT_TOTAL_LIMIT.max(page.offset.saturating_add(page.limit));
        let count_sql = format!(
            "SELECT COUNT(*) FROM (SELECT 1 FROM {from} WHERE {where_clause} LIMIT ${}) AS capped",
            binds.len() + 1
        );
        let counted: i64 = bind_all(sqlx::query(&count_sql), binds)
            .bind(count_cap.saturating_add(1))
            .fetch_one(&mut *self.reader().await?)
            .await
            .db()?
            .try_get(0)
            .db()?;
        let total_exact = counted <= count_cap;
        let total = counted.min(count_cap);
        let list_sql = format!(
            "SELECT {select} FROM {from} WHERE {where_clause} ORDER BY {order_by} LIMIT ${} OFFSET ${}",
            binds.len() + 1,
            binds.len() + 2
        );
        let rows = bind_all(sqlx::query(&list_sql), binds)
            .bind(page.limit)
            .bind(page.offset)
            .fetch_all(&mut *self.reader().await?)
            .await
            .db()?;
        let items = rows.iter().map(map).collect::<StoreResult<Vec<_>>>()?;
        Ok(trellis_core::pagination::Page { items, total, total_exact, request: page })
    }
}

/// Maps a JSON text column, tolerating legacy or hand-edited rows.
fn json_column(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or(serde_json::Value::Null)
}

fn bool_column(value: i64) -> bool {
    value != 0
}

/// Parses a state column (`what` names it in the error): a name the enum does not know is
/// corrupt data, reported, never a panic.
fn state_column<T>(row: &sqlx::any::AnyRow, what: &str, parse: fn(&str) -> Option<T>) -> StoreResult<T> {
    let text: String = sqlx::Row::try_get(row, "status").db()?;
    parse(&text).ok_or_else(|| StoreError::Corrupt(format!("{what} status `{text}`")))
}

/// Hides the secrets of a database URL: the password of `scheme://user:password@host/db` and
/// the values of `password`-like query parameters (`?password=…`, `sslpassword=…`).
pub fn redact_url(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let base = match (base.find("://"), base.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let userinfo = &base[scheme_end + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}://{}:***@{}", &base[..scheme_end], user, &base[at + 1..])
        }
        _ => base.to_string(),
    };
    let Some(query) = query else { return base };
    let query: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, _)) if key.to_ascii_lowercase().contains("pass") => format!("{key}=***"),
            _ => pair.to_string(),
        })
        .collect();
    format!("{base}?{}", query.join("&"))
}

#[cfg(test)]
mod redact_tests {
    use super::redact_url;

    #[test]
    fn passwords_are_hidden_in_userinfo_and_query() {
        assert_eq!(redact_url("postgres://u:secret@h/db"), "postgres://u:***@h/db");
        assert_eq!(
            redact_url("postgres://h/db?user=u&password=secret&sslmode=require"),
            "postgres://h/db?user=u&password=***&sslmode=require"
        );
        assert_eq!(redact_url("postgres://u:s@h/db?sslpassword=x"), "postgres://u:***@h/db?sslpassword=***");
        assert_eq!(redact_url("sqlite://./data/trellis.db"), "sqlite://./data/trellis.db");
    }
}

/// Stores for the store's own tests: a fresh database on the PostgreSQL test cluster when
/// `TRELLIS_TEST_POSTGRES_URL` is set (the PostgreSQL pass of `make test`), else a SQLite file.
#[cfg(test)]
pub(crate) mod testing {
    use sqlx::Connection;

    use super::Store;

    pub(crate) async fn store() -> (tempfile::TempDir, Store) {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let dir = tempfile::tempdir().expect("tempdir");
        let url = match std::env::var("TRELLIS_TEST_POSTGRES_URL") {
            Ok(admin) if !admin.is_empty() => {
                sqlx::any::install_default_drivers();
                let name = format!(
                    "trellis_store_{}_{}",
                    std::process::id(),
                    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                );
                let mut conn = sqlx::AnyConnection::connect(&admin).await.expect("connect to the test cluster");
                sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut conn).await.expect("create database");
                let base = admin.rsplit_once('/').map(|(base, _)| base).unwrap_or(&admin);
                format!("{base}/{name}")
            }
            _ => format!("sqlite://{}", dir.path().join("store.db").display()),
        };
        (dir, Store::open(&url).await.expect("store opens"))
    }
}
