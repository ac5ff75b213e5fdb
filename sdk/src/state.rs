//! Small persistent key/value state, private to this plugin in the calling workspace.

use crate::bindings::imports::trellis::plugin::state as raw;
use crate::PluginError;

pub use raw::StateError;

/// Reads a value; `None` when it was never set.
pub fn get(key: &str) -> Result<Option<Vec<u8>>, StateError> {
    raw::get(key)
}

/// Creates or replaces a value.
pub fn set(key: &str, value: &[u8]) -> Result<(), StateError> {
    raw::set(key, value)
}

/// Removes a value; removing a missing key is not an error.
pub fn delete(key: &str) -> Result<(), StateError> {
    raw::delete(key)
}

/// Reads a JSON value.
pub fn get_json<T: serde::de::DeserializeOwned>(key: &str) -> Result<Option<T>, PluginError> {
    let Some(bytes) = get(key)? else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|err| PluginError::internal(format!("state {key} is not valid JSON: {err}")))
}

/// Stores a value as JSON.
pub fn set_json<T: serde::Serialize>(key: &str, value: &T) -> Result<(), PluginError> {
    let bytes = serde_json::to_vec(value)
        .map_err(|err| PluginError::internal(format!("cannot serialize state {key}: {err}")))?;
    Ok(set(key, &bytes)?)
}

impl From<StateError> for PluginError {
    fn from(err: StateError) -> PluginError {
        match err {
            StateError::QuotaExceeded(limit) => {
                PluginError::internal(format!("plugin state quota of {limit} bytes exceeded"))
            }
            StateError::Unavailable(message) => {
                PluginError::upstream(None, format!("plugin state unavailable: {message}"), true)
            }
        }
    }
}
