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
        not_after: crate::clock::UnixMillis::default(),
        issued_at: crate::clock::UnixMillis::default(),
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
    let shared: Arc<dyn PkiStore> = Arc::new(Arc::new(store.clone()) as Arc<dyn Store>);
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
    let shared: Arc<dyn PkiStore> = Arc::new(Arc::new(store.clone()) as Arc<dyn Store>);
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

mod through_the_service {
    //! The backlog as `InternalPki` keeps it: a row the issuance never took is written before
    //! the PKI's next signature, and by the jobs tick.

    use std::sync::Arc;

    use serde_json::json;
    use trellis_pki::{CertificateProfile, KeyAlgorithm, KeyUsage, Subject, SubjectAltName};

    use crate::pki::{
        AuthoritySpec, InternalPki, LedgerSlot, NewAuthoritySpec, PkiCore, PkiGrant, PkiPort, SignPermit,
    };
    use crate::testing::{context, MemoryStore};

    fn profile() -> CertificateProfile {
        CertificateProfile {
            subject: Subject { common_name: Some("backlog.example".into()), ..Subject::default() },
            subject_alt_names: vec![SubjectAltName::Dns("backlog.example".into())],
            key_usages: vec![KeyUsage::DigitalSignature],
            extended_key_usages: vec!["1.3.6.1.5.5.7.3.1".into()],
            validity_days: 30,
        }
    }

    fn csr() -> Vec<u8> {
        let key = rcgen::KeyPair::generate().unwrap_or_else(|err| panic!("key: {err}"));
        let params = rcgen::CertificateParams::new(vec!["backlog.example".to_owned()])
            .unwrap_or_else(|err| panic!("params: {err}"));
        params.serialize_request(&key).unwrap_or_else(|err| panic!("csr: {err}")).der().to_vec()
    }

    fn grant(csr_der: &[u8], ledger: Option<LedgerSlot>) -> PkiGrant {
        let sign = SignPermit { csr_der: csr_der.to_vec(), profile: profile(), ledger };
        PkiGrant { workspace_id: "ws_a".into(), ca_id: 7, withheld_config: json!({}), sign: Some(sign) }
    }

    /// Signs under a slot nobody takes the row from (the request went away).
    async fn sign_and_abandon(pki: &InternalPki) {
        let csr_der = csr();
        pki.sign_csr(&grant(&csr_der, Some(LedgerSlot::default())), &csr_der, &profile())
            .await
            .unwrap_or_else(|err| panic!("sign: {err}"));
    }

    #[tokio::test]
    async fn abandoned_rows_are_written_before_the_next_signature_and_by_the_jobs_tick() {
        let store = MemoryStore::default();
        let ctx = context(store.clone(), "2026-11-24T12:00:00Z");
        let pki = InternalPki::new(
            Arc::new(ctx.store.clone()),
            ctx.master_key.clone(),
            ctx.clock.clone(),
            ctx.entropy.clone(),
            "https://trellis.example",
        );
        let spec = NewAuthoritySpec {
            subject: Subject { common_name: Some("Backlog Root".into()), ..Subject::default() },
            key_algorithm: KeyAlgorithm::EcdsaP256,
            validity_days: 365,
            path_length: None,
        };
        let setup = PkiGrant { sign: None, ..grant(&[], None) };
        pki.create_authority(&setup, AuthoritySpec::Root(spec)).await.unwrap_or_else(|err| panic!("root: {err}"));

        sign_and_abandon(&pki).await;
        assert_eq!(pki.ledger_backlog().len(), 1);
        assert!(store.snapshot().issued.is_empty(), "abandoning a row writes nothing");

        // The next signature (here one without a slot, recorded before it returns) writes the
        // backlog first.
        let csr_der = csr();
        pki.sign_csr(&grant(&csr_der, None), &csr_der, &profile()).await.unwrap_or_else(|err| panic!("sign: {err}"));
        assert!(pki.ledger_backlog().is_empty());
        assert_eq!(store.snapshot().issued.len(), 2);

        sign_and_abandon(&pki).await;
        let recorded = PkiPort::record_ledger_backlog(&pki).await.unwrap_or_else(|err| panic!("tick: {err}"));
        assert_eq!(recorded, 1);
        assert_eq!(store.snapshot().issued.len(), 3);
        assert_eq!(PkiPort::record_ledger_backlog(&pki).await.unwrap_or_else(|err| panic!("tick: {err}")), 0);
    }
}
