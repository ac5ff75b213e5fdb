//! Issuance policies, approval requests, workspace templates and the renewal claims.

use async_trait::async_trait;
use sqlx::any::AnyRow;
use sqlx::Row;

use trellis_core::certificates::Certificate;
use trellis_core::issuance::policies::IssuancePolicy;
use trellis_core::issuance::requests::{CertificateRequest, RequestStatus};
use trellis_core::issuance::templates::StoredTemplate;
use trellis_core::pagination::{Page, PageRequest};
use trellis_core::ports::{IssuanceReads, IssuanceWrites};

use crate::certificates::{certificate_from_row, CERTIFICATE_COLUMNS};
use crate::{bool_column, json_column, state_column, DbResult, Dialect, Store, StoreResult, Tx};

const POLICY_COLUMNS: &str = "id, workspace_id, name, policy_type, config, position, enabled, created_at, updated_at";

fn policy_from_row(row: &AnyRow) -> StoreResult<IssuancePolicy> {
    let config: String = row.try_get("config").db()?;
    Ok(IssuancePolicy {
        id: row.try_get("id").db()?,
        workspace_id: row.try_get("workspace_id").db()?,
        name: row.try_get("name").db()?,
        policy_type: row.try_get("policy_type").db()?,
        config: json_column(&config),
        position: row.try_get("position").db()?,
        enabled: bool_column(row.try_get("enabled").db()?),
        created_at: row.try_get("created_at").db()?,
        updated_at: row.try_get("updated_at").db()?,
    })
}

const REQUEST_COLUMNS: &str =
    "id, workspace_id, ca_id, status, request, common_name, reasons, requested_by, decided_by, \
    decided_at, decision_reason, certificate_id, error, created_at, updated_at, status_message, poll_at, \
    poll_attempts, issuing_since, order_sealed, renews_certificate_id, template_snapshot";

fn request_from_row(row: &AnyRow) -> StoreResult<CertificateRequest> {
    let request: String = row.try_get("request").db()?;
    let reasons: String = row.try_get("reasons").db()?;
    Ok(CertificateRequest {
        id: row.try_get("id").db()?,
        workspace_id: row.try_get("workspace_id").db()?,
        ca_id: row.try_get("ca_id").db()?,
        status: state_column(row, "certificate request", RequestStatus::parse)?,
        request: json_column(&request),
        common_name: row.try_get("common_name").db()?,
        reasons: json_column(&reasons),
        requested_by: row.try_get("requested_by").db()?,
        decided_by: row.try_get("decided_by").db()?,
        decided_at: row.try_get("decided_at").db()?,
        decision_reason: row.try_get("decision_reason").db()?,
        certificate_id: row.try_get("certificate_id").db()?,
        error: row.try_get("error").db()?,
        created_at: row.try_get("created_at").db()?,
        updated_at: row.try_get("updated_at").db()?,
        status_message: row.try_get("status_message").db()?,
        poll_at: row.try_get("poll_at").db()?,
        poll_attempts: row.try_get("poll_attempts").db()?,
        issuing_since: row.try_get("issuing_since").db()?,
        order_sealed: row.try_get("order_sealed").db()?,
        renews_certificate_id: row.try_get("renews_certificate_id").db()?,
        template_snapshot: row.try_get::<Option<String>, _>("template_snapshot").db()?.map(|text| json_column(&text)),
    })
}

const TEMPLATE_COLUMNS: &str = "id, workspace_id, name, body, created_at, updated_at";

fn template_from_row(row: &AnyRow) -> StoreResult<StoredTemplate> {
    let body: String = row.try_get("body").db()?;
    Ok(StoredTemplate {
        id: row.try_get("id").db()?,
        workspace_id: row.try_get("workspace_id").db()?,
        name: row.try_get("name").db()?,
        body: json_column(&body),
        created_at: row.try_get("created_at").db()?,
        updated_at: row.try_get("updated_at").db()?,
    })
}

#[async_trait]
impl IssuanceReads for Store {
    async fn list_issuance_policies(&self, workspace_id: &str) -> StoreResult<Vec<IssuancePolicy>> {
        let sql = format!(
            "SELECT {POLICY_COLUMNS} FROM issuance_policies WHERE workspace_id = $1 ORDER BY position, id LIMIT 100"
        );
        let rows = sqlx::query(&sql).bind(workspace_id).fetch_all(&mut *self.reader().await?).await.db()?;
        rows.iter().map(policy_from_row).collect()
    }

    async fn find_request(&self, workspace_id: &str, id: i64) -> StoreResult<Option<CertificateRequest>> {
        let sql = format!("SELECT {REQUEST_COLUMNS} FROM certificate_requests WHERE workspace_id = $1 AND id = $2");
        let row =
            sqlx::query(&sql).bind(workspace_id).bind(id).fetch_optional(&mut *self.reader().await?).await.db()?;
        row.as_ref().map(request_from_row).transpose()
    }

    async fn list_requests(
        &self,
        workspace_id: &str,
        status: Option<&str>,
        page: PageRequest,
    ) -> StoreResult<Page<CertificateRequest>> {
        let status = status.map(|status| ("status", status));
        self.workspace_page(REQUEST_COLUMNS, "certificate_requests", workspace_id, status, None, page, request_from_row)
            .await
    }

    async fn issuing_backlog(&self) -> StoreResult<(i64, Option<i64>)> {
        let row = sqlx::query(
            "SELECT COUNT(*) AS n, MIN(issuing_since) AS oldest FROM certificate_requests WHERE status = 'issuing'",
        )
        .fetch_one(&mut *self.reader().await?)
        .await
        .db()?;
        Ok((row.try_get("n").db()?, row.try_get("oldest").db()?))
    }

    async fn list_templates(&self, workspace_id: &str) -> StoreResult<Vec<StoredTemplate>> {
        let sql = format!(
            "SELECT {TEMPLATE_COLUMNS} FROM certificate_templates WHERE workspace_id = $1 ORDER BY id LIMIT 500"
        );
        let rows = sqlx::query(&sql).bind(workspace_id).fetch_all(&mut *self.reader().await?).await.db()?;
        rows.iter().map(template_from_row).collect()
    }

    async fn find_template(&self, workspace_id: &str, id_or_name: &str) -> StoreResult<Option<StoredTemplate>> {
        let row = match id_or_name.parse::<i64>() {
            Ok(id) => {
                let sql =
                    format!("SELECT {TEMPLATE_COLUMNS} FROM certificate_templates WHERE workspace_id = $1 AND id = $2");
                sqlx::query(&sql).bind(workspace_id).bind(id).fetch_optional(&mut *self.reader().await?).await.db()?
            }
            Err(_) => {
                let sql = format!(
                    "SELECT {TEMPLATE_COLUMNS} FROM certificate_templates WHERE workspace_id = $1 AND name = $2"
                );
                sqlx::query(&sql)
                    .bind(workspace_id)
                    .bind(id_or_name)
                    .fetch_optional(&mut *self.reader().await?)
                    .await
                    .db()?
            }
        };
        row.as_ref().map(template_from_row).transpose()
    }
}

impl Tx {
    /// Writes a request's mutable columns (releasing any poll lease) where `condition` holds,
    /// `$10` bound to `value`.
    async fn write_request(
        &mut self,
        request: &CertificateRequest,
        condition: &str,
        value: &str,
    ) -> StoreResult<Option<CertificateRequest>> {
        let sql = format!(
            "UPDATE certificate_requests SET status = $3, decided_by = $4, decided_at = $5, decision_reason = $6, \
                certificate_id = $7, error = $8, updated_at = $9, status_message = $11, poll_at = $12, \
                poll_attempts = $13, issuing_since = $14, order_sealed = $15, renews_certificate_id = $16, \
                lease_owner = NULL \
             WHERE workspace_id = $1 AND id = $2 AND {condition} RETURNING {REQUEST_COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(request.workspace_id.as_str())
            .bind(request.id)
            .bind(request.status.as_str())
            .bind(request.decided_by.as_deref())
            .bind(request.decided_at)
            .bind(request.decision_reason.as_deref())
            .bind(request.certificate_id)
            .bind(request.error.as_deref())
            .bind(request.updated_at)
            .bind(value)
            .bind(request.status_message.as_deref())
            .bind(request.poll_at)
            .bind(request.poll_attempts)
            .bind(request.issuing_since)
            .bind(request.order_sealed.as_deref())
            .bind(request.renews_certificate_id)
            .fetch_optional(self.conn().await?)
            .await
            .db()?;
        row.as_ref().map(request_from_row).transpose()
    }
}

#[async_trait]
impl IssuanceWrites for Tx {
    async fn insert_issuance_policy(&mut self, policy: &IssuancePolicy) -> StoreResult<IssuancePolicy> {
        let sql = format!(
            "INSERT INTO issuance_policies (workspace_id, name, policy_type, config, position, enabled, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $7) RETURNING {POLICY_COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(policy.workspace_id.as_str())
            .bind(policy.name.as_str())
            .bind(policy.policy_type.as_str())
            .bind(policy.config.to_string())
            .bind(policy.position)
            .bind(i64::from(policy.enabled))
            .bind(policy.created_at)
            .fetch_one(self.conn().await?)
            .await
            .db()?;
        policy_from_row(&row)
    }

    async fn delete_issuance_policy(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool> {
        let deleted = sqlx::query("DELETE FROM issuance_policies WHERE workspace_id = $1 AND id = $2")
            .bind(workspace_id)
            .bind(id)
            .execute(self.conn().await?)
            .await
            .db()?;
        Ok(deleted.rows_affected() > 0)
    }

    async fn set_issuance_policy_config(
        &mut self,
        workspace_id: &str,
        id: i64,
        config: &serde_json::Value,
    ) -> StoreResult<bool> {
        let updated = sqlx::query("UPDATE issuance_policies SET config = $3 WHERE workspace_id = $1 AND id = $2")
            .bind(workspace_id)
            .bind(id)
            .bind(config.to_string())
            .execute(self.conn().await?)
            .await
            .db()?;
        Ok(updated.rows_affected() > 0)
    }

    async fn insert_request(&mut self, request: &CertificateRequest) -> StoreResult<CertificateRequest> {
        let sql = format!(
            "INSERT INTO certificate_requests (workspace_id, ca_id, status, request, common_name, reasons, requested_by, \
                created_at, updated_at, status_message, poll_at, poll_attempts, issuing_since, order_sealed, \
                renews_certificate_id, template_snapshot) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, $9, $10, $11, $12, $13, $14, $15) \
             RETURNING {REQUEST_COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(request.workspace_id.as_str())
            .bind(request.ca_id)
            .bind(request.status.as_str())
            .bind(request.request.to_string())
            .bind(request.common_name.as_deref())
            .bind(request.reasons.to_string())
            .bind(request.requested_by.as_str())
            .bind(request.created_at)
            .bind(request.status_message.as_deref())
            .bind(request.poll_at)
            .bind(request.poll_attempts)
            .bind(request.issuing_since)
            .bind(request.order_sealed.as_deref())
            .bind(request.renews_certificate_id)
            .bind(request.template_snapshot.as_ref().map(serde_json::Value::to_string))
            .fetch_one(self.conn().await?)
            .await
            .db()?;
        request_from_row(&row)
    }

    async fn find_request(&mut self, workspace_id: &str, id: i64) -> StoreResult<Option<CertificateRequest>> {
        let sql = format!("SELECT {REQUEST_COLUMNS} FROM certificate_requests WHERE workspace_id = $1 AND id = $2");
        let row = sqlx::query(&sql).bind(workspace_id).bind(id).fetch_optional(self.conn().await?).await.db()?;
        row.as_ref().map(request_from_row).transpose()
    }

    async fn update_request(
        &mut self,
        request: &CertificateRequest,
        from: RequestStatus,
    ) -> StoreResult<Option<CertificateRequest>> {
        self.write_request(request, "status = $10", from.as_str()).await
    }

    async fn claim_issuing(
        &mut self,
        now: i64,
        lease_owner: &str,
        lease_until: i64,
        limit: i64,
    ) -> StoreResult<Vec<CertificateRequest>> {
        // The due index walked in order; PostgreSQL skips rows another replica holds and checks
        // the condition again on the locked row, so one poller claims a request at a time. The
        // lease moves `poll_at` past the call: a poller that dies lets another take over then.
        let lock = if self.dialect == Dialect::Postgres { " FOR UPDATE SKIP LOCKED" } else { "" };
        let sql = format!(
            "UPDATE certificate_requests SET poll_at = $3, lease_owner = $2, poll_attempts = poll_attempts + 1 \
             WHERE id IN (SELECT id FROM certificate_requests WHERE status = 'issuing' AND poll_at <= $1 \
                ORDER BY poll_at LIMIT $4{lock}) AND status = 'issuing' AND poll_at <= $1 \
             RETURNING {REQUEST_COLUMNS}"
        );
        let rows = sqlx::query(&sql)
            .bind(now)
            .bind(lease_owner)
            .bind(lease_until)
            .bind(limit)
            .fetch_all(self.conn().await?)
            .await
            .db()?;
        rows.iter().map(request_from_row).collect()
    }

    async fn finish_poll(
        &mut self,
        request: &CertificateRequest,
        lease_owner: &str,
    ) -> StoreResult<Option<CertificateRequest>> {
        self.write_request(request, "status = 'issuing' AND lease_owner = $10", lease_owner).await
    }

    async fn insert_template(&mut self, template: &StoredTemplate) -> StoreResult<StoredTemplate> {
        let sql = format!(
            "INSERT INTO certificate_templates (workspace_id, name, body, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $4) RETURNING {TEMPLATE_COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(template.workspace_id.as_str())
            .bind(template.name.as_str())
            .bind(template.body.to_string())
            .bind(template.created_at)
            .fetch_one(self.conn().await?)
            .await
            .db()?;
        template_from_row(&row)
    }

    async fn update_template(&mut self, template: &StoredTemplate) -> StoreResult<Option<StoredTemplate>> {
        let sql = format!(
            "UPDATE certificate_templates SET name = $3, body = $4, updated_at = $5 \
             WHERE workspace_id = $1 AND id = $2 RETURNING {TEMPLATE_COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(template.workspace_id.as_str())
            .bind(template.id)
            .bind(template.name.as_str())
            .bind(template.body.to_string())
            .bind(template.updated_at)
            .fetch_optional(self.conn().await?)
            .await
            .db()?;
        row.as_ref().map(template_from_row).transpose()
    }

    async fn delete_template(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool> {
        let deleted = sqlx::query("DELETE FROM certificate_templates WHERE workspace_id = $1 AND id = $2")
            .bind(workspace_id)
            .bind(id)
            .execute(self.conn().await?)
            .await
            .db()?;
        Ok(deleted.rows_affected() > 0)
    }

    async fn claim_renewals(
        &mut self,
        now: i64,
        default_window_ms: i64,
        claimed_before: i64,
        limit: i64,
    ) -> StoreResult<Vec<Certificate>> {
        // The outer condition is checked again after a concurrent claim commits (PostgreSQL
        // re-evaluates it on the locked row), so a row is claimed by one replica only.
        let claimable = "auto_renewal = 1 AND revoked = 0 AND ca_id IS NOT NULL AND renewed_by_id IS NULL \
            AND expires_at > $1 AND (renew_at <= $1 \
                OR (renew_at IS NULL AND expires_at - COALESCE(renew_before_ms, $2) < $1)) \
            AND (renewal_claimed_at IS NULL OR renewal_claimed_at < $3) \
            AND NOT EXISTS (SELECT 1 FROM certificate_requests r WHERE r.renews_certificate_id = certificates.id \
                AND r.status = 'issuing')";
        let sql = format!(
            "UPDATE certificates SET renewal_claimed_at = $1 \
             WHERE id IN (SELECT id FROM certificates WHERE {claimable} ORDER BY expires_at LIMIT $4) AND {claimable} \
             RETURNING {CERTIFICATE_COLUMNS}"
        );
        let rows = sqlx::query(&sql)
            .bind(now)
            .bind(default_window_ms)
            .bind(claimed_before)
            .bind(limit)
            .fetch_all(self.conn().await?)
            .await
            .db()?;
        rows.iter().map(certificate_from_row).collect()
    }

    async fn claim_renewal_info_checks(
        &mut self,
        now: i64,
        next_check: i64,
        limit: i64,
    ) -> StoreResult<Vec<Certificate>> {
        // Moving the next check forward is the claim: another replica skips the row until then.
        let due = "auto_renewal = 1 AND revoked = 0 AND ca_id IS NOT NULL AND renewed_by_id IS NULL \
            AND expires_at > $1 AND (renewal_info_next_check IS NULL OR renewal_info_next_check <= $1)";
        let lock = if self.dialect == Dialect::Postgres { " FOR UPDATE SKIP LOCKED" } else { "" };
        let sql = format!(
            "UPDATE certificates SET renewal_info_next_check = $2 \
             WHERE id IN (SELECT id FROM certificates WHERE {due} \
                ORDER BY COALESCE(renewal_info_next_check, 0), id LIMIT $3{lock}) AND {due} \
             RETURNING {CERTIFICATE_COLUMNS}"
        );
        let rows = sqlx::query(&sql).bind(now).bind(next_check).bind(limit).fetch_all(self.conn().await?).await.db()?;
        rows.iter().map(certificate_from_row).collect()
    }

    async fn record_renewal_info(
        &mut self,
        workspace_id: &str,
        id: i64,
        renew_at: Option<i64>,
        window: Option<(i64, i64)>,
        next_check: i64,
    ) -> StoreResult<()> {
        sqlx::query(
            "UPDATE certificates SET renewal_info_next_check = $4, \
                renew_at = CASE WHEN renew_at >= $5 AND renew_at <= $6 THEN renew_at ELSE $3 END \
             WHERE workspace_id = $1 AND id = $2",
        )
        .bind(workspace_id)
        .bind(id)
        .bind(renew_at)
        .bind(next_check)
        .bind(window.map(|w| w.0))
        .bind(window.map(|w| w.1))
        .execute(self.conn().await?)
        .await
        .db()?;
        Ok(())
    }

    async fn record_renewal(&mut self, workspace_id: &str, old_id: i64, new_id: i64) -> StoreResult<()> {
        sqlx::query(
            "UPDATE certificates SET renewed_by_id = $3, auto_renewal = 0, renewal_error = NULL \
             WHERE workspace_id = $1 AND id = $2",
        )
        .bind(workspace_id)
        .bind(old_id)
        .bind(new_id)
        .execute(self.conn().await?)
        .await
        .db()?;
        Ok(())
    }

    async fn record_renewal_failure(&mut self, workspace_id: &str, id: i64, error: &str) -> StoreResult<()> {
        sqlx::query("UPDATE certificates SET renewal_error = $3 WHERE workspace_id = $1 AND id = $2")
            .bind(workspace_id)
            .bind(id)
            .bind(error)
            .execute(self.conn().await?)
            .await
            .db()?;
        Ok(())
    }
}
