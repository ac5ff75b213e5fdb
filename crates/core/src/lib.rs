//! Trellis's domain: what a certificate, a workspace, a plugin call or an audit row is, the use
//! cases that change them, and the ports those use cases need (storage, the plugin sandbox,
//! time, randomness). Nothing here knows HTTP, SQL or wasmtime: Cargo enforces it, since none
//! of them is a dependency of this crate.
//!
//! Data flows one way: `trellis-http` calls the use cases here with a [`auth::Caller`]; the use
//! cases call the ports, which `trellis-store` and `trellis-plugin-host` implement.

pub mod acme;
pub mod approvals;
pub mod attestation;
pub mod audit;
pub mod auth;
pub mod caller;
pub mod cas;
pub mod certificates;
pub mod clock;
pub mod context;
pub mod crypto;
pub mod discovery;
pub mod domain_claims;
pub mod error;
pub mod events;
pub mod ids;
pub mod issuance;
pub mod lifecycle;
pub mod pagination;
pub mod pki;
pub mod plugins;
pub mod ports;
pub mod principal;
pub mod state;
pub mod store_error;
pub mod ttl_cache;
pub mod unit_of_work;
pub mod validation;
pub mod webhooks;

#[cfg(test)]
mod testing;

pub use crate::context::{Context, Settings, SharedContext};
pub use crate::error::{Entity, Error, Result};
