//! What the work that spans areas needs of storage: the areas' reads it combines, and one
//! transaction over the inventory and the internal CA's ledger (a revocation reaches both).

use async_trait::async_trait;

use crate::auth::port::AuthReads;
use crate::cas::port::CaReads;
use crate::certificates::port::{CertificateReads, CertificateWrites};
use crate::pki::port::{PkiReads, PkiWrites};
use crate::store_error::StoreResult;
use crate::unit_of_work::ChangeTx;

/// A transaction of a revocation: the inventory, its revocation requests and the internal CA's
/// ledger, and (as a [`ChangeTx`]) a unit of work's rows and the commit. The full transaction
/// is one.
pub trait LifecycleTx: ChangeTx + CertificateWrites + PkiWrites {}

impl<T: ?Sized + ChangeTx + CertificateWrites + PkiWrites> LifecycleTx for T {}

/// What the work that spans areas reads: certificates, CAs, the internal CA's ledger, and the
/// members who decide revocation requests. The full store is one (`crate::ports`).
#[async_trait]
pub trait LifecycleStore: CertificateReads + CaReads + PkiReads + AuthReads + Send + Sync {
    async fn begin_lifecycle(&self) -> StoreResult<Box<dyn LifecycleTx>>;
}
