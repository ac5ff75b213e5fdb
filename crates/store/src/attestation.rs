//! Devices, attestation policies, nonces (consumed by a conditional UPDATE), pending AK
//! enrollments, TPM trust roots and attestation records. Binary TPM structures are base64 TEXT.

use async_trait::async_trait;
use base64::Engine as _;
use sqlx::any::AnyRow;
use sqlx::Row;

use trellis_core::attestation::devices::{Device, DeviceStatus};
use trellis_core::attestation::enrollment::PendingEnrollment;
use trellis_core::attestation::nonces::Nonce;
use trellis_core::attestation::policies::Policy;
use trellis_core::attestation::provision::AttestationRecord;
use trellis_core::attestation::trust::TrustRoot;
use trellis_core::pagination::{Page, PageRequest};
use trellis_core::plugins::TpmClock;
use trellis_core::ports::{AttestationReads, AttestationWrites};

use crate::{bool_column, json_column, state_column, Bind, DbResult, Store, StoreError, StoreResult, Tx};

const DEVICE_COLUMNS: &str = "id, workspace_id, name, device_type, serial, description, status, ak_public, ak_name, \
    ek_public, ek_certificate, ek_chain, ek_manufacturer, last_clock, enrolled_at, last_attested_at, metadata, created_at, updated_at";
const POLICY_COLUMNS: &str = "id, workspace_id, name, description, device_type, expected_pcrs, required_pcr_banks, \
    required_pcrs, allowed_ek_manufacturers, max_attestation_age_seconds, require_bound_csr_key, require_secure_boot, \
    enabled, created_at, updated_at";
const ROOT_COLUMNS: &str =
    "id, workspace_id, name, certificate_pem, subject, manufacturer, fingerprint_sha256, not_after, created_at";
const RECORD_COLUMNS: &str =
    "id, workspace_id, device_id, kind, policy_id, passed, trust_score, failures, verified_pcrs, \
    ek_manufacturer, certificate_id, nonce, claims, created_at";

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn unb64(column: &str, text: Option<String>) -> StoreResult<Option<Vec<u8>>> {
    text.map(|t| {
        base64::engine::general_purpose::STANDARD
            .decode(t)
            .map_err(|_| StoreError::Corrupt(format!("{column} is not base64")))
    })
    .transpose()
}

fn chain_text(chain: &[Vec<u8>]) -> String {
    serde_json::to_string(&chain.iter().map(|c| b64(c)).collect::<Vec<_>>()).unwrap_or_else(|_| "[]".into())
}

fn chain_column(text: &str) -> StoreResult<Vec<Vec<u8>>> {
    let items: Vec<String> = serde_json::from_str(text).map_err(|_| StoreError::Corrupt("ek_chain".into()))?;
    items.into_iter().map(|i| unb64("ek_chain", Some(i)).map(Option::unwrap_or_default)).collect()
}

fn clock_text(clock: Option<TpmClock>) -> Option<String> {
    clock.map(|c| {
        serde_json::json!({ "clock": c.clock, "resetCount": c.reset_count, "restartCount": c.restart_count, "safe": c.safe })
            .to_string()
    })
}

fn clock_column(text: Option<String>) -> Option<TpmClock> {
    let value: serde_json::Value = serde_json::from_str(&text?).ok()?;
    Some(TpmClock {
        clock: value["clock"].as_u64()?,
        reset_count: u32::try_from(value["resetCount"].as_u64()?).ok()?,
        restart_count: u32::try_from(value["restartCount"].as_u64()?).ok()?,
        safe: value["safe"].as_bool()?,
    })
}

fn device_from_row(row: &AnyRow) -> StoreResult<Device> {
    let chain: String = row.try_get("ek_chain").db()?;
    let metadata: String = row.try_get("metadata").db()?;
    let ak_name: Option<String> = row.try_get("ak_name").db()?;
    Ok(Device {
        id: row.try_get("id").db()?,
        workspace_id: row.try_get("workspace_id").db()?,
        name: row.try_get("name").db()?,
        device_type: row.try_get("device_type").db()?,
        serial: row.try_get("serial").db()?,
        description: row.try_get("description").db()?,
        status: state_column(row, "device", DeviceStatus::parse)?,
        ak_public: unb64("ak_public", row.try_get("ak_public").db()?)?,
        ak_name: ak_name.map(|h| hex::decode(h).map_err(|_| StoreError::Corrupt("ak_name".into()))).transpose()?,
        ek_public: unb64("ek_public", row.try_get("ek_public").db()?)?,
        ek_certificate: unb64("ek_certificate", row.try_get("ek_certificate").db()?)?,
        ek_chain: chain_column(&chain)?,
        ek_manufacturer: row.try_get("ek_manufacturer").db()?,
        last_clock: clock_column(row.try_get("last_clock").db()?),
        enrolled_at: row.try_get("enrolled_at").db()?,
        last_attested_at: row.try_get("last_attested_at").db()?,
        metadata: json_column(&metadata),
        created_at: row.try_get("created_at").db()?,
        updated_at: row.try_get("updated_at").db()?,
    })
}

fn policy_from_row(row: &AnyRow) -> StoreResult<Policy> {
    let text = |column: &str| -> StoreResult<String> { row.try_get(column).db() };
    let corrupt = |column: &str| StoreError::Corrupt(format!("attestation policy {column}"));
    Ok(Policy {
        id: row.try_get("id").db()?,
        workspace_id: row.try_get("workspace_id").db()?,
        name: row.try_get("name").db()?,
        description: row.try_get("description").db()?,
        device_type: row.try_get("device_type").db()?,
        expected_pcrs: serde_json::from_str(&text("expected_pcrs")?).map_err(|_| corrupt("expected_pcrs"))?,
        required_pcr_banks: serde_json::from_str(&text("required_pcr_banks")?)
            .map_err(|_| corrupt("required_pcr_banks"))?,
        required_pcrs: serde_json::from_str(&text("required_pcrs")?).map_err(|_| corrupt("required_pcrs"))?,
        allowed_ek_manufacturers: serde_json::from_str(&text("allowed_ek_manufacturers")?)
            .map_err(|_| corrupt("allowed_ek_manufacturers"))?,
        max_attestation_age_seconds: row.try_get("max_attestation_age_seconds").db()?,
        require_bound_csr_key: bool_column(row.try_get("require_bound_csr_key").db()?),
        require_secure_boot: bool_column(row.try_get("require_secure_boot").db()?),
        enabled: bool_column(row.try_get("enabled").db()?),
        created_at: row.try_get("created_at").db()?,
        updated_at: row.try_get("updated_at").db()?,
    })
}

fn root_from_row(row: &AnyRow) -> StoreResult<TrustRoot> {
    Ok(TrustRoot {
        id: row.try_get("id").db()?,
        workspace_id: row.try_get("workspace_id").db()?,
        name: row.try_get("name").db()?,
        certificate_pem: row.try_get("certificate_pem").db()?,
        subject: row.try_get("subject").db()?,
        manufacturer: row.try_get("manufacturer").db()?,
        fingerprint_sha256: row.try_get("fingerprint_sha256").db()?,
        not_after: row.try_get("not_after").db()?,
        created_at: row.try_get("created_at").db()?,
    })
}

fn record_from_row(row: &AnyRow) -> StoreResult<AttestationRecord> {
    let failures: String = row.try_get("failures").db()?;
    let pcrs: String = row.try_get("verified_pcrs").db()?;
    let claims: String = row.try_get("claims").db()?;
    Ok(AttestationRecord {
        id: row.try_get("id").db()?,
        workspace_id: row.try_get("workspace_id").db()?,
        device_id: row.try_get("device_id").db()?,
        kind: row.try_get("kind").db()?,
        policy_id: row.try_get("policy_id").db()?,
        passed: bool_column(row.try_get("passed").db()?),
        trust_score: row.try_get("trust_score").db()?,
        failures: serde_json::from_str(&failures).unwrap_or_default(),
        verified_pcrs: json_column(&pcrs),
        ek_manufacturer: row.try_get("ek_manufacturer").db()?,
        certificate_id: row.try_get("certificate_id").db()?,
        nonce: row.try_get("nonce").db()?,
        claims: json_column(&claims),
        created_at: row.try_get("created_at").db()?,
    })
}

fn nonce_from_row(row: &AnyRow) -> StoreResult<Nonce> {
    Ok(Nonce {
        nonce: row.try_get("nonce").db()?,
        workspace_id: row.try_get("workspace_id").db()?,
        device_id: row.try_get("device_id").db()?,
        purpose: row.try_get("purpose").db()?,
        issued_at: row.try_get("issued_at").db()?,
        expires_at: row.try_get("expires_at").db()?,
        consumed_at: row.try_get("consumed_at").db()?,
    })
}

fn json_text<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".into())
}

#[async_trait]
impl AttestationReads for Store {
    async fn find_device(&self, workspace_id: &str, id: i64) -> StoreResult<Option<Device>> {
        let sql = format!("SELECT {DEVICE_COLUMNS} FROM iot_devices WHERE workspace_id = $1 AND id = $2");
        let row =
            sqlx::query(&sql).bind(workspace_id).bind(id).fetch_optional(&mut *self.reader().await?).await.db()?;
        row.as_ref().map(device_from_row).transpose()
    }

    async fn list_devices(&self, workspace_id: &str, page: PageRequest) -> StoreResult<Page<Device>> {
        let binds = [Bind::Text(workspace_id.to_owned())];
        self.fetch_page(DEVICE_COLUMNS, "iot_devices", "workspace_id = $1", "id DESC", &binds, page, device_from_row)
            .await
    }

    async fn find_attestation_policy(&self, workspace_id: &str, id: i64) -> StoreResult<Option<Policy>> {
        let sql = format!("SELECT {POLICY_COLUMNS} FROM attestation_policies WHERE workspace_id = $1 AND id = $2");
        let row =
            sqlx::query(&sql).bind(workspace_id).bind(id).fetch_optional(&mut *self.reader().await?).await.db()?;
        row.as_ref().map(policy_from_row).transpose()
    }

    async fn list_attestation_policies(&self, workspace_id: &str) -> StoreResult<Vec<Policy>> {
        let sql =
            format!("SELECT {POLICY_COLUMNS} FROM attestation_policies WHERE workspace_id = $1 ORDER BY id LIMIT 1000");
        let rows = sqlx::query(&sql).bind(workspace_id).fetch_all(&mut *self.reader().await?).await.db()?;
        rows.iter().map(policy_from_row).collect()
    }

    async fn list_trust_roots(&self, workspace_id: &str) -> StoreResult<Vec<TrustRoot>> {
        let sql = format!("SELECT {ROOT_COLUMNS} FROM tpm_trust_roots WHERE workspace_id = $1 ORDER BY id LIMIT 1000");
        let rows = sqlx::query(&sql).bind(workspace_id).fetch_all(&mut *self.reader().await?).await.db()?;
        rows.iter().map(root_from_row).collect()
    }

    async fn list_attestation_records(
        &self,
        workspace_id: &str,
        device_id: i64,
        limit: i64,
    ) -> StoreResult<Vec<AttestationRecord>> {
        let sql = format!(
            "SELECT {RECORD_COLUMNS} FROM attestation_records WHERE workspace_id = $1 AND device_id = $2 ORDER BY id DESC LIMIT $3"
        );
        let rows = sqlx::query(&sql)
            .bind(workspace_id)
            .bind(device_id)
            .bind(limit)
            .fetch_all(&mut *self.reader().await?)
            .await
            .db()?;
        rows.iter().map(record_from_row).collect()
    }
}

#[async_trait]
impl AttestationWrites for Tx {
    async fn insert_device(&mut self, d: &Device) -> StoreResult<Device> {
        let sql = format!(
            "INSERT INTO iot_devices (workspace_id, name, device_type, serial, description, status, ak_public, ak_name, \
             ek_public, ek_certificate, ek_chain, ek_manufacturer, last_clock, enrolled_at, last_attested_at, metadata, \
             created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18) \
             RETURNING {DEVICE_COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(&d.workspace_id)
            .bind(&d.name)
            .bind(d.device_type.as_deref())
            .bind(d.serial.as_deref())
            .bind(d.description.as_deref())
            .bind(d.status.as_str())
            .bind(d.ak_public.as_deref().map(b64))
            .bind(d.ak_name.as_deref().map(hex::encode))
            .bind(d.ek_public.as_deref().map(b64))
            .bind(d.ek_certificate.as_deref().map(b64))
            .bind(chain_text(&d.ek_chain))
            .bind(d.ek_manufacturer.as_deref())
            .bind(clock_text(d.last_clock))
            .bind(d.enrolled_at)
            .bind(d.last_attested_at)
            .bind(d.metadata.to_string())
            .bind(d.created_at)
            .bind(d.updated_at)
            .fetch_one(self.conn().await?)
            .await
            .db()?;
        device_from_row(&row)
    }

    async fn update_device(&mut self, d: &Device) -> StoreResult<bool> {
        let done = sqlx::query(
            "UPDATE iot_devices SET name = $3, device_type = $4, serial = $5, description = $6, status = $7, \
             ak_public = $8, ak_name = $9, ek_public = $10, ek_certificate = $11, ek_chain = $12, ek_manufacturer = $13, \
             last_clock = $14, enrolled_at = $15, last_attested_at = $16, metadata = $17, updated_at = $18 \
             WHERE workspace_id = $1 AND id = $2",
        )
        .bind(&d.workspace_id)
        .bind(d.id)
        .bind(&d.name)
        .bind(d.device_type.as_deref())
        .bind(d.serial.as_deref())
        .bind(d.description.as_deref())
        .bind(d.status.as_str())
        .bind(d.ak_public.as_deref().map(b64))
        .bind(d.ak_name.as_deref().map(hex::encode))
        .bind(d.ek_public.as_deref().map(b64))
        .bind(d.ek_certificate.as_deref().map(b64))
        .bind(chain_text(&d.ek_chain))
        .bind(d.ek_manufacturer.as_deref())
        .bind(clock_text(d.last_clock))
        .bind(d.enrolled_at)
        .bind(d.last_attested_at)
        .bind(d.metadata.to_string())
        .bind(d.updated_at)
        .execute(self.conn().await?)
        .await
        .db()?;
        Ok(done.rows_affected() > 0)
    }

    async fn delete_device(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool> {
        let done = sqlx::query("DELETE FROM iot_devices WHERE workspace_id = $1 AND id = $2")
            .bind(workspace_id)
            .bind(id)
            .execute(self.conn().await?)
            .await
            .db()?;
        if done.rows_affected() > 0 {
            for table in ["attestation_nonces", "attestation_enrollments"] {
                sqlx::query(&format!("DELETE FROM {table} WHERE workspace_id = $1 AND device_id = $2"))
                    .bind(workspace_id)
                    .bind(id)
                    .execute(self.conn().await?)
                    .await
                    .db()?;
            }
        }
        Ok(done.rows_affected() > 0)
    }

    async fn set_device_attestation(
        &mut self,
        workspace_id: &str,
        id: i64,
        status: DeviceStatus,
        at: i64,
        clock: Option<TpmClock>,
    ) -> StoreResult<()> {
        sqlx::query(
            "UPDATE iot_devices SET status = CASE WHEN status = 'disabled' THEN status ELSE $3 END, last_attested_at = $4, \
             last_clock = COALESCE($5, last_clock), updated_at = $4 WHERE workspace_id = $1 AND id = $2",
        )
        .bind(workspace_id)
        .bind(id)
        .bind(status.as_str())
        .bind(at)
        .bind(clock_text(clock))
        .execute(self.conn().await?)
        .await
        .db()?;
        Ok(())
    }

    async fn insert_attestation_policy(&mut self, p: &Policy) -> StoreResult<Policy> {
        let sql = format!(
            "INSERT INTO attestation_policies (workspace_id, name, description, device_type, expected_pcrs, \
             required_pcr_banks, required_pcrs, allowed_ek_manufacturers, max_attestation_age_seconds, \
             require_bound_csr_key, require_secure_boot, enabled, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) RETURNING {POLICY_COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(&p.workspace_id)
            .bind(&p.name)
            .bind(p.description.as_deref())
            .bind(p.device_type.as_deref())
            .bind(json_text(&p.expected_pcrs))
            .bind(json_text(&p.required_pcr_banks))
            .bind(json_text(&p.required_pcrs))
            .bind(json_text(&p.allowed_ek_manufacturers))
            .bind(p.max_attestation_age_seconds)
            .bind(i64::from(p.require_bound_csr_key))
            .bind(i64::from(p.require_secure_boot))
            .bind(i64::from(p.enabled))
            .bind(p.created_at)
            .bind(p.updated_at)
            .fetch_one(self.conn().await?)
            .await
            .db()?;
        policy_from_row(&row)
    }

    async fn update_attestation_policy(&mut self, p: &Policy) -> StoreResult<bool> {
        let done = sqlx::query(
            "UPDATE attestation_policies SET name = $3, description = $4, device_type = $5, expected_pcrs = $6, \
             required_pcr_banks = $7, required_pcrs = $8, allowed_ek_manufacturers = $9, max_attestation_age_seconds = $10, \
             require_bound_csr_key = $11, require_secure_boot = $12, enabled = $13, updated_at = $14 \
             WHERE workspace_id = $1 AND id = $2",
        )
        .bind(&p.workspace_id)
        .bind(p.id)
        .bind(&p.name)
        .bind(p.description.as_deref())
        .bind(p.device_type.as_deref())
        .bind(json_text(&p.expected_pcrs))
        .bind(json_text(&p.required_pcr_banks))
        .bind(json_text(&p.required_pcrs))
        .bind(json_text(&p.allowed_ek_manufacturers))
        .bind(p.max_attestation_age_seconds)
        .bind(i64::from(p.require_bound_csr_key))
        .bind(i64::from(p.require_secure_boot))
        .bind(i64::from(p.enabled))
        .bind(p.updated_at)
        .execute(self.conn().await?)
        .await
        .db()?;
        Ok(done.rows_affected() > 0)
    }

    async fn delete_attestation_policy(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool> {
        let done = sqlx::query("DELETE FROM attestation_policies WHERE workspace_id = $1 AND id = $2")
            .bind(workspace_id)
            .bind(id)
            .execute(self.conn().await?)
            .await
            .db()?;
        Ok(done.rows_affected() > 0)
    }

    async fn insert_nonce(&mut self, n: &Nonce) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO attestation_nonces (nonce, workspace_id, device_id, purpose, issued_at, expires_at, consumed_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(&n.nonce)
        .bind(&n.workspace_id)
        .bind(n.device_id)
        .bind(&n.purpose)
        .bind(n.issued_at)
        .bind(n.expires_at)
        .bind(n.consumed_at)
        .execute(self.conn().await?)
        .await
        .db()?;
        Ok(())
    }

    async fn find_nonce(&mut self, workspace_id: &str, nonce: &str) -> StoreResult<Option<Nonce>> {
        let row = sqlx::query(
            "SELECT nonce, workspace_id, device_id, purpose, issued_at, expires_at, consumed_at FROM attestation_nonces \
             WHERE workspace_id = $1 AND nonce = $2",
        )
        .bind(workspace_id)
        .bind(nonce)
        .fetch_optional(self.conn().await?)
        .await
        .db()?;
        row.as_ref().map(nonce_from_row).transpose()
    }

    async fn consume_nonce(&mut self, workspace_id: &str, nonce: &str, at: i64) -> StoreResult<bool> {
        let done = sqlx::query(
            "UPDATE attestation_nonces SET consumed_at = $3 WHERE workspace_id = $1 AND nonce = $2 AND consumed_at IS NULL",
        )
        .bind(workspace_id)
        .bind(nonce)
        .bind(at)
        .execute(self.conn().await?)
        .await
        .db()?;
        Ok(done.rows_affected() == 1)
    }

    async fn put_enrollment(&mut self, e: &PendingEnrollment) -> StoreResult<()> {
        sqlx::query("DELETE FROM attestation_enrollments WHERE device_id = $1")
            .bind(e.device_id)
            .execute(self.conn().await?)
            .await
            .db()?;
        sqlx::query(
            "INSERT INTO attestation_enrollments (device_id, workspace_id, secret_sha256, ak_public, ak_name, ek_public, \
             ek_certificate, ek_chain, ek_manufacturer, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        )
        .bind(e.device_id)
        .bind(&e.workspace_id)
        .bind(&e.secret_sha256)
        .bind(b64(&e.ak_public))
        .bind(hex::encode(&e.ak_name))
        .bind(b64(&e.ek_public))
        .bind(e.ek_certificate.as_deref().map(b64))
        .bind(chain_text(&e.ek_chain))
        .bind(e.ek_manufacturer.as_deref())
        .bind(e.created_at)
        .bind(e.expires_at)
        .execute(self.conn().await?)
        .await
        .db()?;
        Ok(())
    }

    async fn take_enrollment(&mut self, workspace_id: &str, device_id: i64) -> StoreResult<Option<PendingEnrollment>> {
        let row = sqlx::query(
            "DELETE FROM attestation_enrollments WHERE workspace_id = $1 AND device_id = $2 RETURNING device_id, workspace_id, \
             secret_sha256, ak_public, ak_name, ek_public, ek_certificate, ek_chain, ek_manufacturer, created_at, expires_at",
        )
        .bind(workspace_id)
        .bind(device_id)
        .fetch_optional(self.conn().await?)
        .await
        .db()?;
        let Some(row) = row else { return Ok(None) };
        let chain: String = row.try_get("ek_chain").db()?;
        let ak_name: String = row.try_get("ak_name").db()?;
        Ok(Some(PendingEnrollment {
            device_id: row.try_get("device_id").db()?,
            workspace_id: row.try_get("workspace_id").db()?,
            secret_sha256: row.try_get("secret_sha256").db()?,
            ak_public: unb64("ak_public", row.try_get("ak_public").db()?)?.unwrap_or_default(),
            ak_name: hex::decode(ak_name).map_err(|_| StoreError::Corrupt("ak_name".into()))?,
            ek_public: unb64("ek_public", row.try_get("ek_public").db()?)?.unwrap_or_default(),
            ek_certificate: unb64("ek_certificate", row.try_get("ek_certificate").db()?)?,
            ek_chain: chain_column(&chain)?,
            ek_manufacturer: row.try_get("ek_manufacturer").db()?,
            created_at: row.try_get("created_at").db()?,
            expires_at: row.try_get("expires_at").db()?,
        }))
    }

    async fn insert_trust_root(&mut self, r: &TrustRoot) -> StoreResult<TrustRoot> {
        let sql = format!(
            "INSERT INTO tpm_trust_roots (workspace_id, name, certificate_pem, subject, manufacturer, fingerprint_sha256, \
             not_after, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING {ROOT_COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(&r.workspace_id)
            .bind(&r.name)
            .bind(&r.certificate_pem)
            .bind(&r.subject)
            .bind(r.manufacturer.as_deref())
            .bind(&r.fingerprint_sha256)
            .bind(r.not_after)
            .bind(r.created_at)
            .fetch_one(self.conn().await?)
            .await
            .db()?;
        root_from_row(&row)
    }

    async fn delete_trust_root(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool> {
        let done = sqlx::query("DELETE FROM tpm_trust_roots WHERE workspace_id = $1 AND id = $2")
            .bind(workspace_id)
            .bind(id)
            .execute(self.conn().await?)
            .await
            .db()?;
        Ok(done.rows_affected() > 0)
    }

    async fn insert_attestation_record(&mut self, r: &AttestationRecord) -> StoreResult<AttestationRecord> {
        let sql = format!(
            "INSERT INTO attestation_records (workspace_id, device_id, kind, policy_id, passed, trust_score, failures, \
             verified_pcrs, ek_manufacturer, certificate_id, nonce, claims, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) RETURNING {RECORD_COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(&r.workspace_id)
            .bind(r.device_id)
            .bind(&r.kind)
            .bind(r.policy_id)
            .bind(i64::from(r.passed))
            .bind(r.trust_score)
            .bind(json_text(&r.failures))
            .bind(r.verified_pcrs.to_string())
            .bind(r.ek_manufacturer.as_deref())
            .bind(r.certificate_id)
            .bind(r.nonce.as_deref())
            .bind(r.claims.to_string())
            .bind(r.created_at)
            .fetch_one(self.conn().await?)
            .await
            .db()?;
        record_from_row(&row)
    }
}
