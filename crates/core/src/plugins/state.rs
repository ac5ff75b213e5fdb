//! Per-plugin, per-record key/value state behind the `trellis:plugin/state` import.
//! The runtime only knows this trait; the service backs it with the database.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

/// Where a value (or keystore key) lives: one plugin (by id, across its versions) serving one
/// record of one workspace. Contract 0.1 calls carry no record: their `record_id` is empty,
/// which makes the scope workspace-wide as it was.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StateScope {
    pub plugin_id: String,
    pub workspace_id: String,
    pub record_id: String,
}

impl StateScope {
    /// Associated data that binds a value sealed for this scope to it and to `name` (a state
    /// key, a keystore label) under `purpose`: sealed bytes copied to another row do not open.
    pub fn sealing_context(&self, purpose: &str, name: &str) -> Vec<u8> {
        [
            purpose.as_bytes(),
            self.plugin_id.as_bytes(),
            self.workspace_id.as_bytes(),
            self.record_id.as_bytes(),
            name.as_bytes(),
        ]
        .join(&0u8)
    }
}

/// Why a state operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("plugin state quota of {0} bytes exceeded")]
    QuotaExceeded(u64),
    #[error("plugin state unavailable: {0}")]
    Unavailable(String),
}

/// Boxed future returned by [`PluginStateStore`] methods (object safe, `Send`).
pub type StateFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StateError>> + Send + 'a>>;

/// Storage for plugin state. Implementations must be cheap to call concurrently.
pub trait PluginStateStore: Send + Sync + 'static {
    /// Reads one value.
    fn get<'a>(&'a self, scope: &'a StateScope, key: &'a str) -> StateFuture<'a, Option<Vec<u8>>>;
    /// Creates or replaces one value; `quota` bounds the scope's total size in bytes.
    fn set<'a>(&'a self, scope: &'a StateScope, key: &'a str, value: Vec<u8>, quota: u64) -> StateFuture<'a, ()>;
    /// Removes one value.
    fn delete<'a>(&'a self, scope: &'a StateScope, key: &'a str) -> StateFuture<'a, ()>;
    /// Keys starting with `prefix`, in byte order, after `after`, at most `limit`.
    fn list_keys<'a>(
        &'a self,
        scope: &'a StateScope,
        prefix: &'a str,
        after: Option<&'a str>,
        limit: u32,
    ) -> StateFuture<'a, Vec<String>>;
    /// Replaces `key`'s value with `new` (`None` deletes) if it currently equals `expected`
    /// (`None`: absent); returns whether it did. Atomic against concurrent callers.
    fn compare_and_swap<'a>(
        &'a self,
        scope: &'a StateScope,
        key: &'a str,
        expected: Option<Vec<u8>>,
        new: Option<Vec<u8>>,
        quota: u64,
    ) -> StateFuture<'a, bool>;
}

/// Process-local state, for tests and single-node development.
#[derive(Debug, Default)]
pub struct InMemoryStateStore {
    values: Mutex<HashMap<StateScope, BTreeMap<String, Vec<u8>>>>,
}

impl InMemoryStateStore {
    fn with_scope<T>(&self, scope: &StateScope, f: impl FnOnce(&mut BTreeMap<String, Vec<u8>>) -> T) -> T {
        // A panic while holding the lock cannot leave a half-written map, so poisoning is ignored.
        let mut values = self.values.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        f(values.entry(scope.clone()).or_default())
    }
}

impl PluginStateStore for InMemoryStateStore {
    fn get<'a>(&'a self, scope: &'a StateScope, key: &'a str) -> StateFuture<'a, Option<Vec<u8>>> {
        let value = self.with_scope(scope, |map| map.get(key).cloned());
        Box::pin(async move { Ok(value) })
    }

    fn set<'a>(&'a self, scope: &'a StateScope, key: &'a str, value: Vec<u8>, quota: u64) -> StateFuture<'a, ()> {
        let result = self.with_scope(scope, |map| {
            let others: usize = map.iter().filter(|(k, _)| k.as_str() != key).map(|(k, v)| k.len() + v.len()).sum();
            if (others + key.len() + value.len()) as u64 > quota {
                return Err(StateError::QuotaExceeded(quota));
            }
            map.insert(key.to_owned(), value);
            Ok(())
        });
        Box::pin(async move { result })
    }

    fn delete<'a>(&'a self, scope: &'a StateScope, key: &'a str) -> StateFuture<'a, ()> {
        self.with_scope(scope, |map| map.remove(key));
        Box::pin(async move { Ok(()) })
    }

    fn list_keys<'a>(
        &'a self,
        scope: &'a StateScope,
        prefix: &'a str,
        after: Option<&'a str>,
        limit: u32,
    ) -> StateFuture<'a, Vec<String>> {
        let keys = self.with_scope(scope, |map| {
            map.keys()
                .filter(|k| k.starts_with(prefix) && after.is_none_or(|after| k.as_str() > after))
                .take(limit as usize)
                .cloned()
                .collect()
        });
        Box::pin(async move { Ok(keys) })
    }

    fn compare_and_swap<'a>(
        &'a self,
        scope: &'a StateScope,
        key: &'a str,
        expected: Option<Vec<u8>>,
        new: Option<Vec<u8>>,
        quota: u64,
    ) -> StateFuture<'a, bool> {
        let result = self.with_scope(scope, |map| {
            if map.get(key) != expected.as_ref() {
                return Ok(false);
            }
            match new {
                Some(value) => {
                    let others: usize =
                        map.iter().filter(|(k, _)| k.as_str() != key).map(|(k, v)| k.len() + v.len()).sum();
                    if (others + key.len() + value.len()) as u64 > quota {
                        return Err(StateError::QuotaExceeded(quota));
                    }
                    map.insert(key.to_owned(), value);
                }
                None => {
                    map.remove(key);
                }
            }
            Ok(true)
        });
        Box::pin(async move { result })
    }
}
