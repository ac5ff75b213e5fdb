//! The host imports of contract 0.1 (`types`, `logging`, `state`), for 0.1 components.
//! State of a 0.1 call is workspace-wide: 0.1 calls carry no record.

use crate::bindings::v0_1::{logging, state, wit_types};
use crate::call::{CallState, MAX_STATE_KEY};
use crate::StateError;

impl wit_types::Host for CallState {}

crate::call::impl_logging_host!();

fn state_error(err: StateError) -> state::StateError {
    match err {
        StateError::QuotaExceeded(quota) => state::StateError::QuotaExceeded(quota),
        StateError::Unavailable(message) => state::StateError::Unavailable(message),
    }
}

impl state::Host for CallState {
    async fn get(&mut self, key: String) -> wasmtime::Result<Result<Option<Vec<u8>>, state::StateError>> {
        if key.len() > MAX_STATE_KEY {
            return Ok(Ok(None));
        }
        Ok(self.state_store.get(&self.scope, &key).await.map_err(state_error))
    }

    async fn set(&mut self, key: String, value: Vec<u8>) -> wasmtime::Result<Result<(), state::StateError>> {
        if key.len() > MAX_STATE_KEY {
            return Ok(Err(state::StateError::Unavailable(format!("state keys are at most {MAX_STATE_KEY} bytes"))));
        }
        Ok(self.state_store.set(&self.scope, &key, value, self.state_quota).await.map_err(state_error))
    }

    async fn delete(&mut self, key: String) -> wasmtime::Result<Result<(), state::StateError>> {
        Ok(self.state_store.delete(&self.scope, &key).await.map_err(state_error))
    }
}
