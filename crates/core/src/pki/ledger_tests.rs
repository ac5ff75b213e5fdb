//! The ledger's fallbacks without a database: a row nobody disposed of waits in the backlog
//! (dropping does no I/O), the backlog writes it once, and repeats are no-ops.

use std::sync::Arc;

use super::*;
use crate::ports::Store;
use crate::testing::MemoryStore;

fn record(serial: &str) -> IssuedRecord {
    IssuedRecord {
        id: 0,
        ca_id: 7,
        workspace_id: "ws_a".into(),
        serial_number: serial.into(),
        certificate_pem: String::new(),
        not_after: 0,
        issued_at: 0,
        revoked_at: None,
        revocation_reason: None,
    }
}

fn recorded(store: &MemoryStore) -> Vec<String> {
    let mut serials: Vec<String> = store.snapshot().issued.into_iter().map(|r| r.serial_number).collect();
    serials.sort();
    serials
}

/// A request that goes away (its future dropped) after the signature: the row left in the slot,
/// and the one the slot refused, wait in the backlog; nothing is written until it is drained.
#[tokio::test]
async fn an_undisposed_row_waits_in_the_backlog_until_recorded() {
    let store = MemoryStore::default();
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let backlog = LedgerBacklog::shared();
    let slot = LedgerSlot::default();
    assert!(slot.put(Unrecorded::new(record("0a"), shared.clone(), backlog.clone())).is_ok());
    let refused = slot.put(Unrecorded::new(record("0b"), shared.clone(), backlog.clone()));
    assert!(refused.is_err(), "a slot holds one row");
    drop(refused);
    drop(slot);

    assert_eq!(backlog.len(), 2);
    assert!(recorded(&store).is_empty(), "dropping writes nothing");

    assert_eq!(backlog.record(shared.as_ref()).await.unwrap_or_else(|err| panic!("record: {err}")), 2);
    assert!(backlog.is_empty());
    assert_eq!(recorded(&store), ["0a", "0b"]);
    assert_eq!(backlog.record(shared.as_ref()).await.unwrap_or_else(|err| panic!("again: {err}")), 0);
}

/// A row written by its transaction, or on its own, never reaches the backlog; writing a row
/// that is there already (same CA and serial) is a no-op, from the backlog too.
#[tokio::test]
async fn disposed_rows_skip_the_backlog_and_repeats_are_no_ops() {
    let store = MemoryStore::default();
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let backlog = LedgerBacklog::shared();

    Unrecorded::new(record("0a"), shared.clone(), backlog.clone()).committed();
    Unrecorded::new(record("0b"), shared.clone(), backlog.clone())
        .record_now()
        .await
        .unwrap_or_else(|err| panic!("record: {err}"));
    assert!(backlog.is_empty());
    assert_eq!(recorded(&store), ["0b"]);

    Unrecorded::new(record("0b"), shared.clone(), backlog.clone())
        .record_now()
        .await
        .unwrap_or_else(|err| panic!("repeat: {err}"));
    drop(Unrecorded::new(record("0b"), shared.clone(), backlog.clone()));
    drop(Unrecorded::new(record("0c"), shared.clone(), backlog.clone()));
    assert_eq!(backlog.record(shared.as_ref()).await.unwrap_or_else(|err| panic!("backlog: {err}")), 2);
    assert_eq!(recorded(&store), ["0b", "0c"]);
}
