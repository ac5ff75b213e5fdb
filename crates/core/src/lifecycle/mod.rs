//! Use cases that span areas, above them: each area (the inventory in `certificates`, the CA
//! registry in `cas`, `issuance`, `discovery`) depends on none of these, and these call the
//! areas' own use cases and ports. Edges between the areas stay one way: `certificates` knows
//! neither `cas` nor `issuance`, and `cas` knows neither `certificates` nor `discovery`.
//!
//! - [`revocation`]: revoke = the CA (its connector) + the internal CA's ledger + the inventory,
//!   gated by the certificate's template (`revocationRequiresApproval`, failing closed).
//! - [`revocation_requests`]: revocations that wait for someone else's approval.
//! - [`cas`]: create a CA, then scan it (`scanCertificates`); whether a certificate's CA can
//!   renew it (auto-renewal).

pub mod cas;
mod deps;
pub mod port;
pub mod revocation;
pub mod revocation_requests;

#[cfg(test)]
mod revocation_tests;

pub use self::cas::{create_ca_and_scan, set_auto_renewal};
pub use self::deps::LifecycleDeps;
pub use self::revocation::{revoke, Revocation};
