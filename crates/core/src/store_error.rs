//! How a storage operation fails, for every area's port. A leaf: an area's port names it
//! without depending on `ports`, which combines the areas' ports into `Store` and `Tx`.

/// Why a storage operation failed. Carries no driver types: the store maps its driver's
/// errors onto these.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open database {url}: {message}")]
    Connect { url: String, message: String },
    #[error("migration {version} ({name}) failed: {message}")]
    Migration { version: i64, name: &'static str, message: String },
    #[error("uniqueness violated: {0}")]
    Unique(String),
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// The database failed or refused the statement; the message is the driver's.
    #[error("database error: {0}")]
    Database(String),
    /// The group-commit transaction a change was part of did not commit.
    #[error("the transaction failed: {0}")]
    BatchFailed(String),
    #[error("a write job panicked; its changes were rolled back")]
    JobPanicked,
    #[error("the database writer has stopped (shutting down)")]
    WriterStopped,
}

pub type StoreResult<T> = Result<T, StoreError>;
