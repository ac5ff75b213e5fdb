//! The internal PKI's rows: CA key material, the ledger of what each internal CA signed, and the
//! CRL cached per CA. These tables keep their times in seconds (X.509's precision); the records
//! carry [`UnixMillis`], converted here and nowhere else.

use async_trait::async_trait;
use sqlx::any::AnyRow;
use sqlx::Row;
use trellis_core::clock::UnixMillis;
use trellis_core::pagination::{Page, PageRequest};
use trellis_core::pki::{CrlState, IssuedRecord, StoredAuthority, StoredCrl};
use trellis_core::ports::{PkiReads, PkiWrites};

use crate::{DbResult, Store, StoreError, StoreResult, Tx};

/// The insert of a ledger row (without its `VALUES`) and its number of parameters.
pub(crate) const INSERT_ISSUED: (&str, usize) =
    ("INSERT INTO internal_issued (ca_id, workspace_id, serial_number, certificate_pem, not_after, issued_at)", 6);

pub(crate) fn bind_issued<'q>(query: crate::AnyQuery<'q>, record: &'q IssuedRecord) -> crate::AnyQuery<'q> {
    query
        .bind(record.ca_id)
        .bind(record.workspace_id.as_str())
        .bind(record.serial_number.as_str())
        .bind(record.certificate_pem.as_str())
        .bind(record.not_after.as_secs())
        .bind(record.issued_at.as_secs())
}

/// A column of seconds as the instant it names.
fn instant(row: &AnyRow, column: &str) -> StoreResult<UnixMillis> {
    Ok(UnixMillis::from_secs(row.try_get(column).db()?))
}

fn optional_instant(row: &AnyRow, column: &str) -> StoreResult<Option<UnixMillis>> {
    Ok(row.try_get::<Option<i64>, _>(column).db()?.map(UnixMillis::from_secs))
}

const ISSUED_COLUMNS: &str =
    "id, ca_id, workspace_id, serial_number, certificate_pem, not_after, issued_at, revoked_at, revocation_reason";

fn authority_from_row(row: &AnyRow) -> StoreResult<StoredAuthority> {
    Ok(StoredAuthority {
        ca_id: row.try_get("ca_id").db()?,
        workspace_id: row.try_get("workspace_id").db()?,
        certificate_pem: row.try_get("certificate_pem").db()?,
        key_sealed: row.try_get("key_sealed").db()?,
        key_algorithm: row.try_get("key_algorithm").db()?,
        parent_ca_id: row.try_get("parent_ca_id").db()?,
        created_at: instant(row, "created_at")?,
    })
}

fn issued_from_row(row: &AnyRow) -> StoreResult<IssuedRecord> {
    Ok(IssuedRecord {
        id: row.try_get("id").db()?,
        ca_id: row.try_get("ca_id").db()?,
        workspace_id: row.try_get("workspace_id").db()?,
        serial_number: row.try_get("serial_number").db()?,
        certificate_pem: row.try_get("certificate_pem").db()?,
        not_after: instant(row, "not_after")?,
        issued_at: instant(row, "issued_at")?,
        revoked_at: optional_instant(row, "revoked_at")?,
        revocation_reason: row.try_get("revocation_reason").db()?,
    })
}

/// The ledger rows of a serial (`$2`) within a workspace (`$1`): through `internal_issued_serial`,
/// once per internal CA of the workspace, deleted ones included (their authority rows stay). The
/// lookup has no index of its own, which every issuance would pay for (migration 0600).
fn issued_by_serial_sql() -> String {
    format!(
        "SELECT {ISSUED_COLUMNS} FROM internal_issued \
         WHERE ca_id IN (SELECT ca_id FROM internal_authorities WHERE workspace_id = $1) \
         AND workspace_id = $1 AND serial_number = $2 ORDER BY id"
    )
}

#[async_trait]
impl PkiReads for Store {
    async fn find_authority(&self, ca_id: i64) -> StoreResult<Option<StoredAuthority>> {
        let row = sqlx::query(
            "SELECT ca_id, workspace_id, certificate_pem, key_sealed, key_algorithm, parent_ca_id, created_at \
             FROM internal_authorities WHERE ca_id = $1",
        )
        .bind(ca_id)
        .fetch_optional(&mut *self.reader().await?)
        .await
        .db()?;
        row.as_ref().map(authority_from_row).transpose()
    }

    async fn find_issued(&self, ca_id: i64, serial_number: &str) -> StoreResult<Option<IssuedRecord>> {
        let sql = format!("SELECT {ISSUED_COLUMNS} FROM internal_issued WHERE ca_id = $1 AND serial_number = $2");
        let row =
            sqlx::query(&sql).bind(ca_id).bind(serial_number).fetch_optional(&mut *self.reader().await?).await.db()?;
        row.as_ref().map(issued_from_row).transpose()
    }

    async fn list_issued(&self, ca_id: i64, after: i64, limit: i64) -> StoreResult<Vec<IssuedRecord>> {
        let sql =
            format!("SELECT {ISSUED_COLUMNS} FROM internal_issued WHERE ca_id = $1 AND id > $2 ORDER BY id LIMIT $3");
        let rows =
            sqlx::query(&sql).bind(ca_id).bind(after).bind(limit).fetch_all(&mut *self.reader().await?).await.db()?;
        rows.iter().map(issued_from_row).collect()
    }

    async fn list_revoked(&self, ca_id: i64, now: UnixMillis) -> StoreResult<Vec<IssuedRecord>> {
        let sql = format!(
            "SELECT {ISSUED_COLUMNS} FROM internal_issued \
             WHERE ca_id = $1 AND revoked_at IS NOT NULL AND not_after > $2 ORDER BY id"
        );
        let rows =
            sqlx::query(&sql).bind(ca_id).bind(now.as_secs()).fetch_all(&mut *self.reader().await?).await.db()?;
        rows.iter().map(issued_from_row).collect()
    }

    async fn list_workspace_revoked(&self, workspace_id: &str, page: PageRequest) -> StoreResult<Page<IssuedRecord>> {
        let revoked = Some("revoked_at IS NOT NULL");
        self.workspace_page(ISSUED_COLUMNS, "internal_issued", workspace_id, None, revoked, page, issued_from_row).await
    }

    async fn find_issued_by_serial(&self, workspace_id: &str, serial_number: &str) -> StoreResult<Vec<IssuedRecord>> {
        let rows = sqlx::query(&issued_by_serial_sql())
            .bind(workspace_id)
            .bind(serial_number)
            .fetch_all(&mut *self.reader().await?)
            .await
            .db()?;
        rows.iter().map(issued_from_row).collect()
    }

    async fn crl_state(&self, ca_id: i64, with_der: bool) -> StoreResult<CrlState> {
        // The bytes are read only when the caller has no copy of this CRL: the usual read is
        // a few integers.
        let der_column = if with_der { "crl_der" } else { "NULL" };
        let sql = format!(
            "SELECT revocations, crl_revision, crl_number, this_update, next_update, {der_column} AS crl_der \
             FROM internal_crls WHERE ca_id = $1"
        );
        let Some(row) = sqlx::query(&sql).bind(ca_id).fetch_optional(&mut *self.reader().await?).await.db()? else {
            return Ok(CrlState::default());
        };
        let revocations: i64 = row.try_get("revocations").db()?;
        let number: Option<i64> = row.try_get("crl_number").db()?;
        let cached = match number {
            None => None,
            Some(number) => {
                let text: Option<String> = row.try_get("crl_der").db()?;
                let der = match text {
                    Some(text) => base64::Engine::decode(&base64::engine::general_purpose::STANDARD, text)
                        .map_err(|_| StoreError::Corrupt(format!("cached CRL of CA {ca_id}")))?,
                    None => Vec::new(),
                };
                Some(StoredCrl {
                    revision: row.try_get::<Option<i64>, _>("crl_revision").db()?.unwrap_or(-1),
                    number,
                    this_update: optional_instant(&row, "this_update")?.unwrap_or_default(),
                    next_update: optional_instant(&row, "next_update")?.unwrap_or_default(),
                    der,
                })
            }
        };
        Ok(CrlState { revocations, cached })
    }
}

#[async_trait]
impl PkiWrites for Tx {
    async fn insert_authority(&mut self, authority: &StoredAuthority) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO internal_authorities (ca_id, workspace_id, certificate_pem, key_sealed, key_algorithm, \
                parent_ca_id, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(authority.ca_id)
        .bind(authority.workspace_id.as_str())
        .bind(authority.certificate_pem.as_str())
        .bind(authority.key_sealed.as_str())
        .bind(authority.key_algorithm.as_deref())
        .bind(authority.parent_ca_id)
        .bind(authority.created_at.as_secs())
        .execute(self.conn().await?)
        .await
        .db()?;
        Ok(())
    }

    async fn insert_issued(&mut self, record: &IssuedRecord) -> StoreResult<()> {
        let sql = crate::insert_sql(INSERT_ISSUED, 1);
        bind_issued(sqlx::query(&sql), record).execute(self.conn().await?).await.db()?;
        Ok(())
    }

    async fn revoke_issued(
        &mut self,
        ca_id: i64,
        serial_number: &str,
        at: UnixMillis,
        reason: &str,
    ) -> StoreResult<bool> {
        let changed = sqlx::query(
            "UPDATE internal_issued SET revoked_at = $3, revocation_reason = $4 \
             WHERE ca_id = $1 AND serial_number = $2 AND revoked_at IS NULL",
        )
        .bind(ca_id)
        .bind(serial_number)
        .bind(at.as_secs())
        .bind(reason)
        .execute(self.conn().await?)
        .await
        .db()?;
        if changed.rows_affected() > 0 {
            sqlx::query(
                "INSERT INTO internal_crls (ca_id, revocations) VALUES ($1, 1) \
                 ON CONFLICT (ca_id) DO UPDATE SET revocations = internal_crls.revocations + 1",
            )
            .bind(ca_id)
            .execute(self.conn().await?)
            .await
            .db()?;
        }
        let exists: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM internal_issued WHERE ca_id = $1 AND serial_number = $2")
                .bind(ca_id)
                .bind(serial_number)
                .fetch_one(self.conn().await?)
                .await
                .db()?;
        Ok(exists > 0)
    }
    async fn store_crl(&mut self, ca_id: i64, crl: &StoredCrl) -> StoreResult<bool> {
        let der = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &crl.der);
        let stored = sqlx::query(
            "INSERT INTO internal_crls (ca_id, revocations, crl_revision, crl_number, crl_der, this_update, next_update) \
             VALUES ($1, 0, $2, $3, $4, $5, $6) \
             ON CONFLICT (ca_id) DO UPDATE SET crl_revision = excluded.crl_revision, \
                crl_number = excluded.crl_number, crl_der = excluded.crl_der, \
                this_update = excluded.this_update, next_update = excluded.next_update \
             WHERE internal_crls.crl_number IS NULL OR internal_crls.crl_number < excluded.crl_number",
        )
        .bind(ca_id)
        .bind(crl.revision)
        .bind(crl.number)
        .bind(der)
        .bind(crl.this_update.as_secs())
        .bind(crl.next_update.as_secs())
        .execute(self.conn().await?)
        .await
        .db()?;
        Ok(stored.rows_affected() > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn authority(ca_id: i64, workspace_id: &str) -> StoredAuthority {
        StoredAuthority {
            ca_id,
            workspace_id: workspace_id.into(),
            certificate_pem: "pem".into(),
            key_sealed: "sealed".into(),
            key_algorithm: None,
            parent_ca_id: None,
            created_at: UnixMillis::from_secs(1),
        }
    }

    fn issued(ca_id: i64, workspace_id: &str, serial: &str) -> IssuedRecord {
        IssuedRecord {
            id: 0,
            ca_id,
            workspace_id: workspace_id.into(),
            serial_number: serial.into(),
            certificate_pem: format!("{ca_id}/{serial}"),
            not_after: UnixMillis::from_secs(2),
            issued_at: UnixMillis::from_secs(1),
            revoked_at: None,
            revocation_reason: None,
        }
    }

    /// A serial is looked up among the workspace's internal CAs only, a CA whose record is gone
    /// included (its authority row stays), through the ledger's `(ca_id, serial_number)` index.
    #[tokio::test]
    async fn a_serial_is_found_in_every_ledger_of_the_workspace_and_only_there() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&format!("sqlite://{}/pki.db", dir.path().display())).await.unwrap();
        store
            .write(|tx: &mut Tx| {
                Box::pin(async move {
                    for (ca_id, workspace) in [(1, "ws_a"), (2, "ws_a"), (3, "ws_b")] {
                        tx.insert_authority(&authority(ca_id, workspace)).await?;
                    }
                    for (ca_id, workspace, serial) in
                        [(1, "ws_a", "0a"), (2, "ws_a", "0a"), (2, "ws_a", "0b"), (3, "ws_b", "0a")]
                    {
                        tx.insert_issued(&issued(ca_id, workspace, serial)).await?;
                    }
                    Ok::<_, StoreError>(())
                })
            })
            .await
            .unwrap();
        let found = |workspace: &'static str, serial: &'static str| {
            let store = store.clone();
            async move {
                let rows = store.find_issued_by_serial(workspace, serial).await.unwrap();
                rows.into_iter().map(|row| row.certificate_pem).collect::<Vec<_>>()
            }
        };
        assert_eq!(found("ws_a", "0a").await, ["1/0a", "2/0a"]);
        assert_eq!(found("ws_a", "0b").await, ["2/0b"]);
        assert_eq!(found("ws_b", "0a").await, ["3/0a"]);
        assert!(found("ws_b", "0b").await.is_empty());
        assert!(found("ws_c", "0a").await.is_empty());
        let plan = sqlx::query(&format!("EXPLAIN QUERY PLAN {}", issued_by_serial_sql()))
            .bind("ws_a")
            .bind("0a")
            .fetch_all(&store.pool)
            .await
            .unwrap();
        let steps: Vec<String> = plan.iter().map(|row| row.try_get("detail").unwrap()).collect();
        assert!(steps.iter().any(|step| step.contains("internal_issued_serial")), "{steps:?}");
        assert!(!steps.iter().any(|step| step.starts_with("SCAN internal_issued")), "{steps:?}");
    }
}
