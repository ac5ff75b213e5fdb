//! Rows read often and changed rarely, kept in memory for at most [`TTL_MS`]: the ACME
//! server's directories and accounts (`acme::cache`), and the API keys, CA records and policy
//! lists of `context::ReadCaches`.
//!
//! Staleness has two bounds:
//! - **This replica:** a write through it forgets the entry once committed, and a read that
//!   began before that forget does not keep what it read (each forget moves a generation, and
//!   a read keeps its row only if the generation has not moved since it began). So this
//!   replica never serves a row older than its own last write.
//! - **Other replicas** (PostgreSQL, several instances; a CLI job): their writes are seen here
//!   once the entry is [`TTL_MS`] old, when it is read again.
//!
//! Absent rows are never kept: a new key, account or directory is found at once everywhere.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// How long another replica's change may go unseen here.
pub const TTL_MS: i64 = 2_000;
/// Entries kept at most per map; when full, the map starts over.
const MAX_ENTRIES: usize = 10_000;

struct Entry<V> {
    read_at: i64,
    value: V,
}

/// A map of rows, each served while younger than [`TTL_MS`].
pub struct TtlMap<K, V> {
    entries: Mutex<HashMap<K, Entry<V>>>,
    generation: AtomicU64,
}

impl<K, V> Default for TtlMap<K, V> {
    fn default() -> Self {
        TtlMap { entries: Mutex::new(HashMap::new()), generation: AtomicU64::new(0) }
    }
}

impl<K: Hash + Eq, V: Clone> TtlMap<K, V> {
    /// The kept row for `key` if it was read less than [`TTL_MS`] before `now`; else `load`s it
    /// and keeps it (unless absent, or unless a forget ran while it loaded).
    pub async fn get_or_load<E, F, Fut>(&self, key: K, now: i64, load: F) -> Result<Option<V>, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Option<V>, E>>,
    {
        if let Some(value) = self.fresh(&key, now) {
            return Ok(Some(value));
        }
        let generation = self.generation.load(Ordering::Acquire);
        let value = load().await?;
        if let Some(value) = &value {
            self.keep(generation, key, value.clone(), now);
        }
        Ok(value)
    }

    /// Changes the kept row for `key`, if any, in place (a write this replica made whose
    /// result it knows, such as a key's last use).
    pub fn update(&self, key: &K, change: impl FnOnce(&mut V)) {
        if let Ok(mut entries) = self.entries.lock() {
            if let Some(entry) = entries.get_mut(key) {
                change(&mut entry.value);
            }
        }
    }

    /// Drops the row for `key`: call it after the write that changed it commits.
    pub fn forget(&self, key: &K) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        if let Ok(mut entries) = self.entries.lock() {
            entries.remove(key);
        }
    }

    /// Drops every row: for a write whose effect on the keys is not known one by one (a member
    /// removed: which keys did they make?).
    pub fn forget_all(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        if let Ok(mut entries) = self.entries.lock() {
            entries.clear();
        }
    }

    fn fresh(&self, key: &K, now: i64) -> Option<V> {
        let entries = self.entries.lock().ok()?;
        entries.get(key).filter(|e| now >= e.read_at && now - e.read_at < TTL_MS).map(|e| e.value.clone())
    }

    fn keep(&self, generation: u64, key: K, value: V, read_at: i64) {
        if let Ok(mut entries) = self.entries.lock() {
            // Checked under the lock: a forget takes it too, after moving the generation.
            if self.generation.load(Ordering::Acquire) != generation {
                return;
            }
            if entries.len() >= MAX_ENTRIES {
                entries.clear();
            }
            entries.insert(key, Entry { read_at, value });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn load(map: &TtlMap<&'static str, u32>, now: i64, row: Option<u32>) -> Option<u32> {
        map.get_or_load("k", now, || async move { Ok::<_, ()>(row) }).await.expect("loads")
    }

    #[tokio::test]
    async fn a_row_is_served_until_it_is_ttl_old_then_read_again() {
        let map = TtlMap::default();
        assert_eq!(load(&map, 1_000, Some(1)).await, Some(1));
        assert_eq!(load(&map, 1_000 + TTL_MS - 1, Some(2)).await, Some(1), "kept");
        assert_eq!(load(&map, 1_000 + TTL_MS, Some(2)).await, Some(2), "read again at the TTL");
        // A clock that went back does not make an entry fresh forever.
        assert_eq!(load(&map, 0, Some(3)).await, Some(3));
    }

    #[tokio::test]
    async fn absent_rows_are_not_kept_and_forgotten_rows_are_read_again() {
        let map = TtlMap::default();
        assert_eq!(load(&map, 0, None).await, None);
        assert_eq!(load(&map, 1, Some(1)).await, Some(1), "an absent row is looked up again");
        map.update(&"k", |v| *v = 7);
        assert_eq!(load(&map, 2, Some(1)).await, Some(7), "updated in place");
        map.forget(&"k");
        assert_eq!(load(&map, 3, Some(2)).await, Some(2));
        map.forget_all();
        assert_eq!(load(&map, 4, Some(3)).await, Some(3));
    }

    /// A read that began before a write's forget does not keep its (older) row.
    #[tokio::test]
    async fn a_read_racing_a_forget_is_not_kept() {
        let map = TtlMap::default();
        let read = map
            .get_or_load("k", 0, || async {
                map.forget(&"k"); // the write commits while this read is in flight
                Ok::<_, ()>(Some(1))
            })
            .await;
        assert_eq!(read, Ok(Some(1)), "the read itself answers");
        assert_eq!(load(&map, 1, Some(2)).await, Some(2), "but the next read goes to the store");
    }
}
