//! Discovery scans.

use async_trait::async_trait;
use sqlx::any::AnyRow;
use sqlx::Row;

use trellis_core::certificates::Certificate;
use trellis_core::discovery::{FindingOutcome, KnownCertificate, Scan, ScanFinding, ScanStatus, FINDING_ACTIONS};
use trellis_core::pagination::{Page, PageRequest};
use trellis_core::ports::{DiscoveryReads, DiscoveryWrites};

use crate::certificates::{certificate_from_row, CERTIFICATE_COLUMNS};
use crate::{state_column, DbResult, Dialect, Store, StoreResult, Tx};
use trellis_core::ports::StoreError;

const SCAN_COLUMNS: &str =
    "id, workspace_id, scan_type, ca_id, status, found, new_count, updated_count, failed_count, \
    error, requested_by, created_at, started_at, finished_at, heartbeat_at, targets, total_targets, \
    done_targets, failures";

fn json_list<T: serde::de::DeserializeOwned>(text: &str) -> StoreResult<Vec<T>> {
    serde_json::from_str(text).map_err(|err| StoreError::Corrupt(format!("a scan column is not a JSON list: {err}")))
}

fn scan_from_row(row: &AnyRow) -> StoreResult<Scan> {
    Ok(Scan {
        id: row.try_get("id").db()?,
        workspace_id: row.try_get("workspace_id").db()?,
        scan_type: row.try_get("scan_type").db()?,
        ca_id: row.try_get("ca_id").db()?,
        status: state_column(row, "discovery scan", ScanStatus::parse)?,
        found: row.try_get("found").db()?,
        new_count: row.try_get("new_count").db()?,
        updated_count: row.try_get("updated_count").db()?,
        failed_count: row.try_get("failed_count").db()?,
        error: row.try_get("error").db()?,
        requested_by: row.try_get("requested_by").db()?,
        created_at: row.try_get("created_at").db()?,
        started_at: row.try_get("started_at").db()?,
        finished_at: row.try_get("finished_at").db()?,
        heartbeat_at: row.try_get("heartbeat_at").db()?,
        targets: json_list(&row.try_get::<String, _>("targets").db()?)?,
        total: row.try_get("total_targets").db()?,
        done: row.try_get("done_targets").db()?,
        failures: json_list(&row.try_get::<String, _>("failures").db()?)?,
    })
}

#[async_trait]
impl DiscoveryReads for Store {
    async fn find_scan(&self, workspace_id: &str, id: i64) -> StoreResult<Option<Scan>> {
        let sql = format!("SELECT {SCAN_COLUMNS} FROM discovery_scans WHERE workspace_id = $1 AND id = $2");
        let row =
            sqlx::query(&sql).bind(workspace_id).bind(id).fetch_optional(&mut *self.reader().await?).await.db()?;
        row.as_ref().map(scan_from_row).transpose()
    }

    async fn list_scans(
        &self,
        workspace_id: &str,
        scan_type: Option<&str>,
        status: Option<&str>,
        page: PageRequest,
    ) -> StoreResult<Page<Scan>> {
        let scan_type = scan_type.map(|scan_type| ("scan_type", scan_type));
        // The domain admits only the five state names, so the value is a known literal.
        let status = status.and_then(ScanStatus::parse).map(|s| format!("status = '{}'", s.as_str()));
        self.workspace_page(
            SCAN_COLUMNS,
            "discovery_scans",
            workspace_id,
            scan_type,
            status.as_deref(),
            page,
            scan_from_row,
        )
        .await
    }

    async fn known_certificates(
        &self,
        workspace_id: &str,
        fingerprints: &[String],
    ) -> StoreResult<Vec<KnownCertificate>> {
        if fingerprints.is_empty() {
            return Ok(Vec::new());
        }
        let placeholders: Vec<String> = (2..fingerprints.len() + 2).map(|n| format!("${n}")).collect();
        let sql = format!(
            "SELECT id, fingerprint_sha256, revoked, ca_id FROM certificates \
             WHERE workspace_id = $1 AND fingerprint_sha256 IN ({})",
            placeholders.join(", ")
        );
        let mut query = sqlx::query(&sql).bind(workspace_id);
        for fingerprint in fingerprints {
            query = query.bind(fingerprint.as_str());
        }
        let rows = query.fetch_all(&mut *self.reader().await?).await.db()?;
        rows.iter()
            .map(|row| {
                Ok(KnownCertificate {
                    id: row.try_get("id").db()?,
                    fingerprint_sha256: row.try_get("fingerprint_sha256").db()?,
                    revoked: crate::bool_column(row.try_get("revoked").db()?),
                    ca_id: row.try_get("ca_id").db()?,
                })
            })
            .collect()
    }

    async fn scan_findings(
        &self,
        workspace_id: &str,
        scan_id: i64,
        since: i64,
        page: PageRequest,
    ) -> StoreResult<Page<ScanFinding>> {
        let mut reader = self.reader().await?;
        // The record's rows go with their certificate (ON DELETE CASCADE), so the count is of
        // certificates still in the inventory.
        let total: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM discovery_scan_certificates WHERE workspace_id = $1 AND scan_id = $2",
        )
        .bind(workspace_id)
        .bind(scan_id)
        .fetch_one(&mut *reader)
        .await
        .db()?;
        if total == 0 {
            // No record: a scan from before migration 0580 (or one that found nothing, which
            // its traces show as nothing too).
            drop(reader);
            return self.traced_findings(workspace_id, scan_id, since, page).await;
        }
        // The page is cut from the record by its primary key (scan_id, certificate_id).
        let sql = format!(
            "SELECT {CERTIFICATE_COLUMNS}, f.finding_outcome FROM certificates JOIN ( \
               SELECT certificate_id, outcome AS finding_outcome FROM discovery_scan_certificates \
               WHERE workspace_id = $1 AND scan_id = $2 ORDER BY certificate_id LIMIT $3 OFFSET $4 \
             ) f ON f.certificate_id = certificates.id \
             WHERE certificates.workspace_id = $1 ORDER BY certificates.id"
        );
        let rows = sqlx::query(&sql)
            .bind(workspace_id)
            .bind(scan_id)
            .bind(page.limit)
            .bind(page.offset)
            .fetch_all(&mut *reader)
            .await
            .db()?;
        let items = rows
            .iter()
            .map(|row| {
                let outcome: String = row.try_get("finding_outcome").db()?;
                let outcome = FindingOutcome::parse(&outcome)
                    .ok_or_else(|| StoreError::Corrupt(format!("scan finding outcome `{outcome}`")))?;
                Ok(ScanFinding { certificate: certificate_from_row(row)?, outcome })
            })
            .collect::<StoreResult<Vec<_>>>()?;
        Ok(Page { items, total, total_exact: true, request: page })
    }
}

impl Store {
    /// The findings of a scan that kept no record of them (run before migration 0580), read
    /// from what it left elsewhere: audit rows (created, updated, revoked by the scan) and
    /// usage records (a known certificate first seen at an endpoint) name the scan. A known
    /// certificate it saw again unchanged left nothing, so it is not listed.
    async fn traced_findings(
        &self,
        workspace_id: &str,
        scan_id: i64,
        since: i64,
        page: PageRequest,
    ) -> StoreResult<Page<ScanFinding>> {
        // The scan's id as text, as each dialect reads a JSON member of a TEXT column.
        let member = |column: &str, name: &str| match self.dialect() {
            Dialect::Sqlite => format!("CAST(json_extract({column}, '$.{name}') AS TEXT)"),
            Dialect::Postgres => format!("({column}::jsonb ->> '{name}')"),
        };
        let actions: Vec<String> = FINDING_ACTIONS.iter().map(|a| format!("'{a}'")).collect();
        // Audit rows (created, updated, revoked by the scan) and usage records (a known
        // certificate first seen at an endpoint) name the scan; certificates deleted since are
        // left out. Bounded below by the scan's creation, which the audit index serves.
        // (Each placeholder first appears in its number's order: SQLite numbers them so.)
        let found = format!(
            "SELECT h.certificate_id, CAST(MAX(h.is_new) AS BIGINT) AS is_new FROM ( \
               SELECT CAST(target_id AS BIGINT) AS certificate_id, \
                      CASE WHEN action = 'certificate.created' THEN 1 ELSE 0 END AS is_new \
               FROM audit_logs WHERE workspace_id = $1 AND {audit_scan} = $2 AND created_at >= $3 \
                 AND target_type = 'certificate' AND action IN ({actions}) \
               UNION ALL \
               SELECT certificate_id, 0 AS is_new FROM certificate_usage \
               WHERE workspace_id = $1 AND {usage_scan} = $2 AND created_at >= $3 \
             ) h WHERE EXISTS (SELECT 1 FROM certificates c WHERE c.workspace_id = $1 AND c.id = h.certificate_id) \
             GROUP BY h.certificate_id",
            actions = actions.join(", "),
            audit_scan = member("details", "scanId"),
            usage_scan = member("metadata", "scanId"),
        );
        let scan = scan_id.to_string();
        let mut reader = self.reader().await?;
        let total: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM ({found}) f"))
            .bind(workspace_id)
            .bind(scan.as_str())
            .bind(since)
            .fetch_one(&mut *reader)
            .await
            .db()?;
        let rows = sqlx::query(&format!("{found} ORDER BY h.certificate_id LIMIT $4 OFFSET $5"))
            .bind(workspace_id)
            .bind(scan.as_str())
            .bind(since)
            .bind(page.limit)
            .bind(page.offset)
            .fetch_all(&mut *reader)
            .await
            .db()?;
        let mut items = Vec::with_capacity(rows.len());
        for row in &rows {
            let id: i64 = row.try_get("certificate_id").db()?;
            let new: i64 = row.try_get("is_new").db()?;
            let sql = format!("SELECT {CERTIFICATE_COLUMNS} FROM certificates WHERE workspace_id = $1 AND id = $2");
            let found = sqlx::query(&sql).bind(workspace_id).bind(id).fetch_optional(&mut *reader).await.db()?;
            // Deleted between the two reads: left out, like one deleted before.
            if let Some(found) = found {
                let outcome = if new != 0 { FindingOutcome::New } else { FindingOutcome::Updated };
                items.push(ScanFinding { certificate: certificate_from_row(&found)?, outcome });
            }
        }
        Ok(Page { items, total, total_exact: true, request: page })
    }
}

#[async_trait]
impl DiscoveryWrites for Tx {
    async fn insert_scan(&mut self, scan: &Scan) -> StoreResult<Scan> {
        let sql = format!(
            "INSERT INTO discovery_scans (workspace_id, scan_type, ca_id, status, requested_by, created_at, targets) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {SCAN_COLUMNS}"
        );
        let targets = serde_json::to_string(&scan.targets).map_err(|err| StoreError::Corrupt(err.to_string()))?;
        let row = sqlx::query(&sql)
            .bind(scan.workspace_id.as_str())
            .bind(scan.scan_type.as_str())
            .bind(scan.ca_id)
            .bind(scan.status.as_str())
            .bind(scan.requested_by.as_str())
            .bind(scan.created_at)
            .bind(targets)
            .fetch_one(self.conn().await?)
            .await
            .db()?;
        scan_from_row(&row)
    }

    async fn tls_scans_counted(&mut self, workspace_id: &str, since: i64) -> StoreResult<Vec<Scan>> {
        // Serialises scan starts per workspace; NO KEY UPDATE leaves inserts referencing the
        // workspace (their foreign key's KEY SHARE lock) unblocked.
        if self.dialect == crate::Dialect::Postgres {
            sqlx::query("SELECT id FROM workspaces WHERE id = $1 FOR NO KEY UPDATE")
                .bind(workspace_id)
                .fetch_optional(self.conn().await?)
                .await
                .db()?;
        }
        let sql = format!(
            "SELECT {SCAN_COLUMNS} FROM discovery_scans WHERE workspace_id = $1 AND scan_type = 'tls_endpoints' \
             AND (status IN ('pending', 'running') OR created_at > $2)"
        );
        let rows = sqlx::query(&sql).bind(workspace_id).bind(since).fetch_all(self.conn().await?).await.db()?;
        rows.iter().map(scan_from_row).collect()
    }

    async fn claim_scan(&mut self, only: Option<i64>, now: i64, stale_before: i64) -> StoreResult<Option<Scan>> {
        // The outer condition is re-evaluated on the locked row, so one replica claims a scan.
        let claimable = "(status = 'pending' AND ($2 = 0 OR id = $2)) \
            OR (status = 'running' AND $2 = 0 AND heartbeat_at < $3)";
        let sql = format!(
            "UPDATE discovery_scans SET status = 'running', started_at = COALESCE(started_at, $1), heartbeat_at = $1 \
             WHERE id IN (SELECT id FROM discovery_scans WHERE {claimable} ORDER BY id LIMIT 1) AND ({claimable}) \
             RETURNING {SCAN_COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(now)
            .bind(only.unwrap_or(0))
            .bind(stale_before)
            .fetch_optional(self.conn().await?)
            .await
            .db()?;
        row.as_ref().map(scan_from_row).transpose()
    }

    async fn update_scan_progress(&mut self, scan: &Scan) -> StoreResult<bool> {
        let failures = serde_json::to_string(&scan.failures).map_err(|err| StoreError::Corrupt(err.to_string()))?;
        let updated = sqlx::query(
            "UPDATE discovery_scans SET found = $2, new_count = $3, updated_count = $4, failed_count = $5, heartbeat_at = $6, \
                total_targets = $7, done_targets = $8, failures = $9 \
             WHERE id = $1 AND status = 'running'",
        )
        .bind(scan.id)
        .bind(scan.found)
        .bind(scan.new_count)
        .bind(scan.updated_count)
        .bind(scan.failed_count)
        .bind(scan.heartbeat_at)
        .bind(scan.total)
        .bind(scan.done)
        .bind(failures)
        .execute(self.conn().await?)
        .await
        .db()?;
        Ok(updated.rows_affected() > 0)
    }

    async fn finish_scan(&mut self, scan: &Scan) -> StoreResult<bool> {
        let failures = serde_json::to_string(&scan.failures).map_err(|err| StoreError::Corrupt(err.to_string()))?;
        let updated = sqlx::query(
            "UPDATE discovery_scans SET status = $2, error = $3, finished_at = $4, found = $5, new_count = $6, \
                updated_count = $7, failed_count = $8, total_targets = $9, done_targets = $10, failures = $11 \
             WHERE id = $1 AND status = 'running'",
        )
        .bind(scan.id)
        .bind(scan.status.as_str())
        .bind(scan.error.as_deref())
        .bind(scan.finished_at)
        .bind(scan.found)
        .bind(scan.new_count)
        .bind(scan.updated_count)
        .bind(scan.failed_count)
        .bind(scan.total)
        .bind(scan.done)
        .bind(failures)
        .execute(self.conn().await?)
        .await
        .db()?;
        Ok(updated.rows_affected() > 0)
    }

    async fn cancel_scan(&mut self, workspace_id: &str, id: i64, at: i64) -> StoreResult<Option<Scan>> {
        let sql = format!(
            "UPDATE discovery_scans SET status = 'cancelled', finished_at = $3 \
             WHERE workspace_id = $1 AND id = $2 AND status IN ('pending', 'running') RETURNING {SCAN_COLUMNS}"
        );
        let row =
            sqlx::query(&sql).bind(workspace_id).bind(id).bind(at).fetch_optional(self.conn().await?).await.db()?;
        row.as_ref().map(scan_from_row).transpose()
    }

    async fn find_certificate_by_fingerprint(
        &mut self,
        workspace_id: &str,
        fingerprint_sha256: &str,
    ) -> StoreResult<Option<Certificate>> {
        let sql = format!(
            "SELECT {CERTIFICATE_COLUMNS} FROM certificates WHERE workspace_id = $1 AND fingerprint_sha256 = $2"
        );
        let row = sqlx::query(&sql)
            .bind(workspace_id)
            .bind(fingerprint_sha256)
            .fetch_optional(self.conn().await?)
            .await
            .db()?;
        row.as_ref().map(certificate_from_row).transpose()
    }

    async fn link_certificate_ca(&mut self, workspace_id: &str, id: i64, ca_id: i64, at: i64) -> StoreResult<bool> {
        let updated = sqlx::query(
            "UPDATE certificates SET ca_id = $3, updated_at = $4 WHERE workspace_id = $1 AND id = $2 AND ca_id IS NULL",
        )
        .bind(workspace_id)
        .bind(id)
        .bind(ca_id)
        .bind(at)
        .execute(self.conn().await?)
        .await
        .db()?;
        Ok(updated.rows_affected() > 0)
    }

    async fn record_scan_certificates(
        &mut self,
        workspace_id: &str,
        scan_id: i64,
        found: &[(i64, FindingOutcome)],
        at: i64,
    ) -> StoreResult<()> {
        if found.is_empty() {
            return Ok(());
        }
        let rows: Vec<String> =
            (0..found.len()).map(|i| format!("($1, $2, $3, ${}, ${})", 4 + 2 * i, 5 + 2 * i)).collect();
        // Seen again by the same scan (another endpoint, a rerun): the stronger outcome stays,
        // new > updated > unchanged. (The caller lists each certificate once: PostgreSQL
        // refuses to update one row twice in a statement. Placeholders first appear in their
        // number's order: SQLite numbers them so.)
        let sql = format!(
            "INSERT INTO discovery_scan_certificates (workspace_id, scan_id, created_at, certificate_id, outcome) \
             VALUES {} \
             ON CONFLICT (scan_id, certificate_id) DO UPDATE SET outcome = excluded.outcome \
             WHERE discovery_scan_certificates.outcome = 'unchanged' OR excluded.outcome = 'new'",
            rows.join(", ")
        );
        let mut query = sqlx::query(&sql).bind(workspace_id).bind(scan_id).bind(at);
        for (certificate_id, outcome) in found {
            query = query.bind(*certificate_id).bind(outcome.as_str());
        }
        query.execute(self.conn().await?).await.db()?;
        Ok(())
    }

    async fn has_usage(
        &mut self,
        workspace_id: &str,
        certificate_id: i64,
        host: &str,
        port: Option<i64>,
    ) -> StoreResult<bool> {
        let row = sqlx::query(
            "SELECT 1 FROM certificate_usage WHERE workspace_id = $1 AND certificate_id = $2 AND host = $3 \
             AND COALESCE(port, -1) = COALESCE($4, -1) LIMIT 1",
        )
        .bind(workspace_id)
        .bind(certificate_id)
        .bind(host)
        .bind(port)
        .fetch_optional(self.conn().await?)
        .await
        .db()?;
        Ok(row.is_some())
    }
}

#[cfg(test)]
mod tests {
    use trellis_core::discovery::COMPLETED;
    use trellis_core::ports::{DiscoveryReads as _, DiscoveryWrites as _};

    use super::*;

    async fn exec(store: &Store, sql: &str) {
        sqlx::query(sql).execute(&store.pool).await.unwrap_or_else(|err| panic!("{sql}: {err}"));
    }

    async fn certificate(store: &Store, id: i64) {
        sqlx::query(
            "INSERT INTO certificates (id, workspace_id, common_name, issuer, subject, serial_number, not_before, \
             expires_at, signature_algorithm, key_algorithm, fingerprint_sha256, usage_category, issuance_source, \
             certificate_pem, created_at, updated_at) \
             VALUES ($1, 'ws', $2, 'CN=CA', $3, $4, 0, 1, 'SHA256-ECDSA', 'EC', $5, 'TLS', 'external', '', 0, 0)",
        )
        .bind(id)
        .bind(format!("c{id}.example.com"))
        .bind(format!("CN=c{id}.example.com"))
        .bind(format!("{id:X}"))
        .bind(format!("{id:064x}"))
        .execute(&store.pool)
        .await
        .expect("certificate");
    }

    async fn findings(
        store: &Store,
        workspace: &str,
        scan: i64,
        limit: i64,
        offset: i64,
    ) -> (i64, Vec<(i64, &'static str)>) {
        let page = store
            .scan_findings(workspace, scan, 0, PageRequest { limit, offset })
            .await
            .unwrap_or_else(|err| panic!("findings: {err}"));
        (page.total, page.items.iter().map(|f| (f.certificate.id, f.outcome.as_str())).collect())
    }

    /// A scan's record lists every certificate it saw, known and unchanged ones too, paged by
    /// certificate, the strongest outcome kept; deleted certificates drop out; a scan without
    /// a record (before migration 0580) is read from its audit rows.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_scans_record_lists_what_it_saw_and_older_scans_their_traces() {
        use FindingOutcome::{New, Unchanged, Updated};
        let (_dir, store) = crate::testing::store().await;
        exec(&store, "INSERT INTO workspaces (id, name, created_at, updated_at) VALUES ('ws', 'ws', 0, 0)").await;
        exec(&store, "INSERT INTO workspaces (id, name, created_at, updated_at) VALUES ('other', 'other', 0, 0)").await;
        for id in [1, 2] {
            let sql = format!(
                "INSERT INTO discovery_scans (id, workspace_id, scan_type, status, requested_by, created_at, targets) \
                 VALUES ({id}, 'ws', 'ca_certs', 'completed', 'user:u', 0, '[]')"
            );
            exec(&store, &sql).await;
        }
        for id in 1..=4 {
            certificate(&store, id).await;
        }
        let mut tx = store.begin_tx().await.expect("tx");
        tx.record_scan_certificates("ws", 1, &[(1, New), (2, Updated), (3, Unchanged)], 10).await.expect("record");
        tx.commit_tx().await.expect("commit");
        // Seen again (a rerun): a weaker outcome does not overwrite a stronger one.
        let mut tx = store.begin_tx().await.expect("tx");
        let again = [(1, Unchanged), (2, Unchanged), (3, Updated), (4, Unchanged)];
        tx.record_scan_certificates("ws", 1, &again, 20).await.expect("record again");
        tx.commit_tx().await.expect("commit");

        let all = findings(&store, "ws", 1, 50, 0).await;
        assert_eq!(all, (4, vec![(1, "new"), (2, "updated"), (3, "updated"), (4, "unchanged")]));
        assert_eq!(findings(&store, "ws", 1, 2, 2).await, (4, vec![(3, "updated"), (4, "unchanged")]));
        assert_eq!(findings(&store, "other", 1, 50, 0).await, (0, vec![]), "another workspace sees none");

        exec(&store, "DELETE FROM certificates WHERE id = 4").await;
        assert_eq!(findings(&store, "ws", 1, 50, 0).await, (3, vec![(1, "new"), (2, "updated"), (3, "updated")]));

        // Scan 2 has no record: its audit rows and usage records say what it found.
        exec(
            &store,
            "INSERT INTO audit_logs (workspace_id, actor_type, actor_id, action, target_type, target_id, details, created_at) \
             VALUES ('ws', 'system', 'discovery', 'certificate.created', 'certificate', '2', '{\"scanId\": 2}', 5), \
                    ('ws', 'system', 'discovery', 'certificate.updated', 'certificate', '1', '{\"scanId\": 2}', 5), \
                    ('ws', 'system', 'discovery', 'certificate.created', 'certificate', '3', '{\"scanId\": 1}', 5)",
        )
        .await;
        assert_eq!(findings(&store, "ws", 2, 50, 0).await, (2, vec![(1, "updated"), (2, "new")]));

        // Deleting the scan's workspace takes its record along.
        exec(&store, "DELETE FROM workspaces WHERE id = 'ws'").await;
        let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM discovery_scan_certificates")
            .fetch_one(&store.pool)
            .await
            .expect("count");
        assert_eq!(left, 0);
    }

    /// A state name the domain does not know is reported as corrupt data, not carried on or
    /// panicked on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unknown_stored_status_is_corrupt_data() {
        let (_dir, store) = crate::testing::store().await;
        sqlx::query("INSERT INTO workspaces (id, name, created_at, updated_at) VALUES ('ws', 'ws', 0, 0)")
            .execute(&store.pool)
            .await
            .expect("workspace");
        for (id, status) in [(1_i64, "completed"), (2, "exploded")] {
            sqlx::query(
                "INSERT INTO discovery_scans (id, workspace_id, scan_type, status, requested_by, created_at, targets) \
                 VALUES ($1, 'ws', 'tls_endpoints', $2, 'user:u', 0, '[]')",
            )
            .bind(id)
            .bind(status)
            .execute(&store.pool)
            .await
            .expect("scan");
        }
        let known = store.find_scan("ws", 1).await.expect("a known status reads").expect("scan 1");
        assert_eq!(known.status, COMPLETED);
        match store.find_scan("ws", 2).await {
            Err(StoreError::Corrupt(message)) => assert_eq!(message, "discovery scan status `exploded`"),
            other => panic!("expected corrupt data, got {other:?}"),
        }
    }
}
