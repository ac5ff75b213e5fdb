//! Small persistent key/value state, private to this plugin serving the call's record
//! (`CallContext::record_id`): an account URL, an order per idempotency key, a cursor. The
//! host encrypts it at rest. Not for private keys: use [`crate::keystore`]. In native builds
//! the state lives in [`crate::testing`]'s fake, per test thread.

// `Ok(backend::…?)` converts the host's error type in the component; natively the fake
// returns this module's type already.
#![allow(clippy::needless_question_mark)]

use crate::PluginError;

/// Why a state operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StateError {
    /// The record's state would exceed its quota (bytes).
    QuotaExceeded(u64),
    /// The key is empty, over 256 bytes, or holds control characters.
    InvalidKey(String),
    /// The host's storage is temporarily unavailable.
    Unavailable(String),
}

impl std::fmt::Display for StateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StateError::QuotaExceeded(quota) => write!(f, "plugin state quota of {quota} bytes exceeded"),
            StateError::InvalidKey(message) => write!(f, "invalid state key {message}"),
            StateError::Unavailable(message) => write!(f, "plugin state unavailable: {message}"),
        }
    }
}

impl std::error::Error for StateError {}

impl From<StateError> for PluginError {
    fn from(err: StateError) -> PluginError {
        match err {
            StateError::Unavailable(_) => PluginError::upstream(None, err.to_string(), true),
            _ => PluginError::internal(err.to_string()),
        }
    }
}

#[cfg(target_arch = "wasm32")]
mod backend {
    pub(super) use crate::bindings::imports::trellis::plugin::state::*;

    impl From<StateError> for super::StateError {
        fn from(err: StateError) -> super::StateError {
            match err {
                StateError::QuotaExceeded(quota) => super::StateError::QuotaExceeded(quota),
                StateError::InvalidKey(message) => super::StateError::InvalidKey(message),
                StateError::Unavailable(message) => super::StateError::Unavailable(message),
            }
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
use crate::testing::state as backend;

/// Reads a value; `None` when never set.
pub fn get(key: &str) -> Result<Option<Vec<u8>>, StateError> {
    Ok(backend::get(key)?)
}

/// Creates or replaces a value.
pub fn set(key: &str, value: &[u8]) -> Result<(), StateError> {
    Ok(backend::set(key, value)?)
}

/// Removes a value; removing a missing key is not an error.
pub fn delete(key: &str) -> Result<(), StateError> {
    Ok(backend::delete(key)?)
}

/// Keys starting with `prefix`, in byte order, after `after`, at most `limit`.
pub fn list_keys(prefix: &str, after: Option<&str>, limit: u32) -> Result<Vec<String>, StateError> {
    Ok(backend::list_keys(prefix, after, limit)?)
}

/// Replaces `key`'s value with `new` (`None` deletes) only if it is `expected` now (`None`:
/// absent); returns whether it did. Use it where two calls for one record may race.
pub fn compare_and_swap(key: &str, expected: Option<&[u8]>, new: Option<&[u8]>) -> Result<bool, StateError> {
    Ok(backend::compare_and_swap(key, expected, new)?)
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
