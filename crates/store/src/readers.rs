//! Connections for single reads (SQLite only), kept without sqlx's test on release.
//!
//! sqlx 0.8's pool pings every connection it gets back (`PoolConnection::return_to_pool`),
//! in a spawned task: for SQLite that is a second round trip to the connection's worker
//! thread after every query, two more thread wake-ups and a task, for a link that cannot go
//! stale. The issuance path reads three times per request (API key, CA, policies), and the
//! wake-ups showed as a large share of the server's CPU under load (docs/benchmarks.md,
//! "Issuance"). A [`Reader`] comes from a small free list instead and goes back to it on drop.
//!
//! A reader dropped while its query still runs (a cancelled request) goes back all the same:
//! the connection's worker finishes or abandons that command before it takes the next one,
//! and a single read holds no transaction open. When every kept connection is out, a reader
//! falls back to the pool, so that a caller holding one reader while asking for another can
//! never wait on itself.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use sqlx::any::AnyConnectOptions;
use sqlx::pool::PoolConnection;
use sqlx::Any;
use sqlx::AnyConnection;

use crate::{DbResult, StoreResult};

/// The kept connections and how many are open (idle or lent).
pub(crate) struct ReadConnections {
    idle: Mutex<Vec<AnyConnection>>,
    open: AtomicUsize,
    max: usize,
    options: AnyConnectOptions,
}

impl ReadConnections {
    pub(crate) fn new(options: AnyConnectOptions, max: usize) -> Arc<Self> {
        Arc::new(ReadConnections { idle: Mutex::new(Vec::new()), open: AtomicUsize::new(0), max, options })
    }

    fn take_idle(&self) -> Option<AnyConnection> {
        self.idle.lock().map(|mut idle| idle.pop()).unwrap_or_default()
    }

    /// Reserves a slot for a new connection, if there is one.
    fn reserve(&self) -> bool {
        self.open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.max).then_some(n + 1)).is_ok()
    }

    fn give_back(&self, conn: AnyConnection) {
        match self.idle.lock() {
            Ok(mut idle) => idle.push(conn),
            // A poisoned list loses this connection (closed on drop); the slot frees.
            Err(_) => {
                self.open.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// A connection for one read: a kept one, a new kept one, or else one from `pool`.
    pub(crate) async fn reader(self: &Arc<Self>, pool: &sqlx::AnyPool) -> StoreResult<Reader> {
        if let Some(conn) = self.take_idle() {
            return Ok(Reader::Kept { conn: Some(conn), home: self.clone() });
        }
        if self.reserve() {
            return match crate::sqlite_connection(&self.options).await {
                Ok(conn) => Ok(Reader::Kept { conn: Some(conn), home: self.clone() }),
                Err(err) => {
                    self.open.fetch_sub(1, Ordering::AcqRel);
                    Err(err)
                }
            };
        }
        Ok(Reader::Pooled(pool.acquire().await.db()?))
    }
}

/// A connection lent for one read; use it as `&mut *reader`.
pub(crate) enum Reader {
    Kept { conn: Option<AnyConnection>, home: Arc<ReadConnections> },
    Pooled(PoolConnection<Any>),
}

impl Deref for Reader {
    type Target = AnyConnection;

    fn deref(&self) -> &AnyConnection {
        match self {
            // `conn` is `None` only inside `drop`.
            Reader::Kept { conn: Some(conn), .. } => conn,
            Reader::Kept { conn: None, .. } => unreachable!("a kept reader's connection is taken only on drop"),
            Reader::Pooled(conn) => conn,
        }
    }
}

impl DerefMut for Reader {
    fn deref_mut(&mut self) -> &mut AnyConnection {
        match self {
            Reader::Kept { conn: Some(conn), .. } => conn,
            Reader::Kept { conn: None, .. } => unreachable!("a kept reader's connection is taken only on drop"),
            Reader::Pooled(conn) => conn,
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        if let Reader::Kept { conn, home } = self {
            if let Some(conn) = conn.take() {
                home.give_back(conn);
            }
        }
    }
}
