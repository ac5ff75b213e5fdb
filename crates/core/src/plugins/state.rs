//! Per-plugin, per-workspace key/value state behind the `trellis:plugin/state` import.
//! The runtime only knows this trait; the service backs it with the database.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

/// Where a value lives: one plugin (by id, across its versions) in one workspace.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StateScope {
    pub plugin_id: String,
    pub workspace_id: String,
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
}

/// Process-local state, for tests and single-node development.
#[derive(Debug, Default)]
pub struct InMemoryStateStore {
    values: Mutex<HashMap<StateScope, HashMap<String, Vec<u8>>>>,
}

impl InMemoryStateStore {
    fn with_scope<T>(&self, scope: &StateScope, f: impl FnOnce(&mut HashMap<String, Vec<u8>>) -> T) -> T {
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
}
