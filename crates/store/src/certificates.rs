//! Certificates, usage records and machine identities.

use crate::DbResult;
use sqlx::any::AnyRow;
use sqlx::Row;

use crate::tx::HeldInsert;
use crate::{
    bind_all, bind_owned, bool_column, json_column, state_column, Bind, Dialect, Store, StoreError, StoreResult, Tx,
};
use async_trait::async_trait;
use std::collections::BTreeMap;
use trellis_core::certificates::revocation_requests::{RevocationRequest, RevocationStatus};
use trellis_core::certificates::{
    Certificate, CertificateFilter, CertificateOrder, CertificateUpdate, IssuanceSource, MachineIdentity,
    NewCertificate, Statistics, Status, UsageRecord, EXPIRING_WINDOW_MS,
};
use trellis_core::pagination::{Page, PageRequest};
use trellis_core::ports::{CertificateReads, CertificateWrites};

pub(crate) const CERTIFICATE_COLUMNS: &str = "id, workspace_id, common_name, issuer, subject, serial_number, not_before, expires_at, \
    signature_algorithm, signature_hash, key_algorithm, key_size, fingerprint_sha256, usage_category, subject_alt_names, \
    is_ca, issuance_source, auto_renewal, location, metadata, ca_id, machine_identity_id, revoked, revoked_at, \
    revocation_reason, certificate_pem, chain_pem, issuance_template, csr_pem, renewed_by_id, renewal_error, CAST(CASE WHEN private_key_sealed IS NULL THEN 0 ELSE 1 END AS BIGINT) AS has_private_key, \
    created_at, updated_at";

/// The list omits the PEM (lists never return it), which keeps pages cheap to read.
const LIST_COLUMNS: &str = "id, workspace_id, common_name, issuer, subject, serial_number, not_before, expires_at, \
    signature_algorithm, signature_hash, key_algorithm, key_size, fingerprint_sha256, usage_category, subject_alt_names, \
    is_ca, issuance_source, auto_renewal, location, metadata, ca_id, machine_identity_id, revoked, revoked_at, \
    revocation_reason, '' AS certificate_pem, CAST(NULL AS TEXT) AS chain_pem, issuance_template, \
    CAST(NULL AS TEXT) AS csr_pem, renewed_by_id, renewal_error, CAST(CASE WHEN private_key_sealed IS NULL THEN 0 ELSE 1 END AS BIGINT) AS has_private_key, \
    created_at, updated_at";

/// Prefixes every plain column of a column list with `c.`, keeping expressions and aliases.
fn qualified_columns(columns: &str) -> String {
    columns
        .split(", ")
        .map(|column| {
            let column = column.trim();
            if column.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_') {
                format!("c.{column}")
            } else {
                column.replace("private_key_sealed", "c.private_key_sealed")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) fn certificate_from_row(row: &AnyRow) -> StoreResult<Certificate> {
    let source: String = row.try_get("issuance_source").db()?;
    let sans: String = row.try_get("subject_alt_names").db()?;
    let metadata: String = row.try_get("metadata").db()?;
    Ok(Certificate {
        id: row.try_get("id").db()?,
        workspace_id: row.try_get("workspace_id").db()?,
        common_name: row.try_get("common_name").db()?,
        issuer: row.try_get("issuer").db()?,
        subject: row.try_get("subject").db()?,
        serial_number: row.try_get("serial_number").db()?,
        not_before: row.try_get("not_before").db()?,
        expires_at: row.try_get("expires_at").db()?,
        signature_algorithm: row.try_get("signature_algorithm").db()?,
        signature_hash: row.try_get("signature_hash").db()?,
        key_algorithm: row.try_get("key_algorithm").db()?,
        key_size: row.try_get("key_size").db()?,
        fingerprint_sha256: row.try_get("fingerprint_sha256").db()?,
        usage_category: row.try_get("usage_category").db()?,
        subject_alt_names: serde_json::from_str(&sans).unwrap_or_default(),
        is_ca: bool_column(row.try_get("is_ca").db()?),
        issuance_source: IssuanceSource::parse(&source)
            .ok_or_else(|| StoreError::Corrupt(format!("issuance_source `{source}`")))?,
        auto_renewal: bool_column(row.try_get("auto_renewal").db()?),
        location: row.try_get("location").db()?,
        metadata: json_column(&metadata),
        ca_id: row.try_get("ca_id").db()?,
        machine_identity_id: row.try_get("machine_identity_id").db()?,
        revoked: bool_column(row.try_get("revoked").db()?),
        revoked_at: row.try_get("revoked_at").db()?,
        revocation_reason: row.try_get("revocation_reason").db()?,
        certificate_pem: row.try_get("certificate_pem").db()?,
        chain_pem: row.try_get("chain_pem").db()?,
        issuance_template: row.try_get("issuance_template").db()?,
        csr_pem: row.try_get("csr_pem").db()?,
        renewed_by_id: row.try_get("renewed_by_id").db()?,
        renewal_error: row.try_get("renewal_error").db()?,
        has_private_key: bool_column(row.try_get("has_private_key").db()?),
        created_at: row.try_get("created_at").db()?,
        updated_at: row.try_get("updated_at").db()?,
    })
}

/// The width of a `certificate_expiry_tally` bucket: one UTC day (migration 0560).
const TALLY_DAY_MS: i64 = 86_400_000;

/// Lists report exact totals up to this many matches; beyond it, `total` is this number and
/// flagged inexact. Counting a million matches would cost more than the page itself.
pub const EXACT_TOTAL_LIMIT: i64 = 10_000;

/// A search counts by walking at most this many trigram-index matches, newest first: the cost
/// of a total stays bounded however common the term. Beyond it the total is a lower bound.
pub const SEARCH_COUNT_SCAN_LIMIT: i64 = 1_000;

/// The trigram index keys a certificate by `workspace number << 40 | id` (migration 0002), so a
/// workspace's entries form one rowid range; this is the id part.
const SEARCH_ID_MASK: i64 = (1 << 40) - 1;

/// `s.rowid` within the workspace's range of the trigram index, as bound integers: SQLite
/// evaluates the bounds of a virtual-table scan before every scan, so scalar subqueries in
/// their place cost ~0.2 ms per query on a million rows.
fn search_range_clause(binds: &mut Vec<Bind>, workspace_number: i64) -> String {
    let low = workspace_number << 40;
    binds.push(Bind::Int(low));
    binds.push(Bind::Int(low | SEARCH_ID_MASK));
    format!("s.rowid BETWEEN ${} AND ${}", binds.len() - 1, binds.len())
}

/// The parts of a certificate list query. Columns are qualified with `c.`.
struct CertificateQuery {
    from: &'static str,
    /// Every condition except the trigram `MATCH`.
    where_clause: String,
    /// The bind number of the trigram search term, when the search goes through the index.
    fts_term: Option<usize>,
    order_by: &'static str,
    binds: Vec<Bind>,
}

/// Whether the query feeds an ordered page or a count; on SQLite the two want different plans.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Purpose {
    Page,
    Count,
}

/// Builds the certificate list query; `$1` is always the workspace.
///
/// On SQLite the plan is steered: a search walks the trigram index in descending rowid order
/// (`CROSS JOIN` keeps it the outer loop) and a page without search walks
/// `certificates_recent` backwards, so `LIMIT` stops early instead of sorting every match.
/// The unary `+` keeps the planner off `certificates_status` for pages in creation order;
/// counts use it, and so do pages sorted by expiry: with a status filter, that index's range
/// is already in expiry order (ties by rowid), without one `certificates_expiry_order` is.
fn certificate_query(
    dialect: Dialect,
    workspace_id: &str,
    filter: &CertificateFilter,
    purpose: Purpose,
) -> CertificateQuery {
    let fts = dialect == Dialect::Sqlite && filter.search.as_ref().is_some_and(|s| s.chars().count() >= 3);
    let hint = if dialect == Dialect::Sqlite && purpose == Purpose::Page && filter.order == CertificateOrder::Newest {
        "+"
    } else {
        ""
    };
    let mut clauses = vec!["c.workspace_id = $1".to_string()];
    let mut binds = vec![Bind::Text(workspace_id.to_string())];
    let mut fts_term = None;
    let mut push = |clause: &str, values: Vec<Bind>, binds: &mut Vec<Bind>| {
        let mut clause = clause.replace("{hint}", hint);
        for (i, value) in values.into_iter().enumerate() {
            binds.push(value);
            clause = clause.replace(&format!("${{{i}}}"), &format!("${}", binds.len()));
        }
        clauses.push(clause);
    };
    if let Some(status) = filter.status {
        let soon = filter.now.saturating_add(EXPIRING_WINDOW_MS);
        match status {
            Status::Revoked => push("{hint}c.revoked = 1", vec![], &mut binds),
            Status::Expired => {
                push("{hint}c.revoked = 0 AND {hint}c.expires_at <= ${0}", vec![Bind::Int(filter.now)], &mut binds)
            }
            Status::Expiring => push(
                "{hint}c.revoked = 0 AND {hint}c.expires_at > ${0} AND {hint}c.expires_at <= ${1}",
                vec![Bind::Int(filter.now), Bind::Int(soon)],
                &mut binds,
            ),
            Status::Active => {
                push("{hint}c.revoked = 0 AND {hint}c.expires_at > ${0}", vec![Bind::Int(soon)], &mut binds)
            }
        }
    }
    if let Some(search) = &filter.search {
        let pattern = format!("%{}%", search.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_"));
        match dialect {
            // The trigram index answers terms of three or more characters; shorter
            // terms fall back to LIKE, which SQLite compares case-insensitively for ASCII.
            Dialect::Sqlite if fts => {
                binds.push(Bind::Text(format!("\"{}\"", search.replace('"', "\"\""))));
                fts_term = Some(binds.len());
            }
            Dialect::Sqlite => push(
                "(c.common_name LIKE ${0} ESCAPE '\\' OR c.issuer LIKE ${0} ESCAPE '\\')",
                vec![Bind::Text(pattern)],
                &mut binds,
            ),
            Dialect::Postgres => push(
                "(c.common_name ILIKE ${0} ESCAPE '\\' OR c.issuer ILIKE ${0} ESCAPE '\\')",
                vec![Bind::Text(pattern)],
                &mut binds,
            ),
        }
    }
    if let Some(algorithm) = &filter.signature_algorithm {
        push(
            "(c.signature_algorithm = ${0} OR c.signature_hash = ${0} OR c.key_algorithm = ${0})",
            vec![Bind::Text(algorithm.clone())],
            &mut binds,
        );
    }
    if let Some(algorithm) = &filter.key_algorithm {
        push("c.key_algorithm = ${0}", vec![Bind::Text(algorithm.clone())], &mut binds);
    }
    if let Some(usage) = &filter.usage_category {
        push("c.usage_category = ${0}", vec![Bind::Text(usage.clone())], &mut binds);
    }
    if let Some(source) = filter.issuance_source {
        push("c.issuance_source = ${0}", vec![Bind::Text(source.as_str().to_string())], &mut binds);
    }
    if let Some(ca_id) = filter.ca_id {
        push("c.ca_id = ${0}", vec![Bind::Int(ca_id)], &mut binds);
    }
    // Every order ends on the id (unique), so offset paging neither skips nor repeats a row.
    let by_expiry = match filter.order {
        CertificateOrder::Newest => None,
        CertificateOrder::ExpiresSoonest => Some("c.expires_at, c.id"),
        CertificateOrder::ExpiresLatest => Some("c.expires_at DESC, c.id DESC"),
    };
    let (from, order_by) = if fts {
        // Each match is checked in the narrow certificates_probe index (id, status columns,
        // workspace) before its full row is read: a broad term with a rare status stays cheap.
        (
            "certificates_search s CROSS JOIN certificates c INDEXED BY certificates_probe \
             ON c.id = (s.rowid & 1099511627775) AND c.workspace_id = $1",
            // A search sorted by expiry sorts its matches (the trigram index knows no expiry).
            by_expiry.unwrap_or("s.rowid DESC"),
        )
    } else {
        ("certificates c", by_expiry.unwrap_or("c.id DESC"))
    };
    CertificateQuery { from, where_clause: clauses.join(" AND "), fts_term, order_by, binds }
}

impl Store {
    /// The workspace's number in the SQLite trigram index (migration 0002); `None` if there is
    /// no such workspace. Numbers never change, so each is read once per process.
    pub(crate) async fn workspace_number(&self, workspace_id: &str) -> StoreResult<Option<i64>> {
        if let Some(number) = self.workspace_numbers.lock().ok().and_then(|known| known.get(workspace_id).copied()) {
            return Ok(Some(number));
        }
        let number: Option<Option<i64>> = sqlx::query_scalar("SELECT number FROM workspaces WHERE id = $1")
            .bind(workspace_id)
            .fetch_optional(&mut *self.reader().await?)
            .await
            .db()?;
        let Some(Some(number)) = number else { return Ok(None) };
        if let Ok(mut known) = self.workspace_numbers.lock() {
            known.insert(workspace_id.to_string(), number);
        }
        Ok(Some(number))
    }
}

#[async_trait]
impl CertificateReads for Store {
    async fn find_certificate(&self, workspace_id: &str, id: i64) -> StoreResult<Option<Certificate>> {
        let sql = format!("SELECT {CERTIFICATE_COLUMNS} FROM certificates WHERE workspace_id = $1 AND id = $2");
        let row =
            sqlx::query(&sql).bind(workspace_id).bind(id).fetch_optional(&mut *self.reader().await?).await.db()?;
        row.as_ref().map(certificate_from_row).transpose()
    }

    /// One page of the workspace's certificates, newest first (creation order, i.e. id) or by
    /// expiry (ties by id).
    /// The total is exact up to [`EXACT_TOTAL_LIMIT`] matches, and for trigram searches
    /// as long as the term matches at most [`SEARCH_COUNT_SCAN_LIMIT`] certificates.
    async fn list_certificates(
        &self,
        workspace_id: &str,
        filter: &CertificateFilter,
        page: PageRequest,
    ) -> StoreResult<Page<Certificate>> {
        let mut list = certificate_query(self.dialect, workspace_id, filter, Purpose::Page);
        let workspace_number = match list.fts_term {
            Some(_) => match self.workspace_number(workspace_id).await? {
                Some(number) => number,
                None => return Ok(Page { items: Vec::new(), total: 0, total_exact: true, request: page }),
            },
            None => 0,
        };
        let where_clause = match list.fts_term {
            Some(term) => format!(
                "s.certificates_search MATCH ${term} AND {} AND {}",
                search_range_clause(&mut list.binds, workspace_number),
                list.where_clause
            ),
            None => list.where_clause,
        };
        let n = list.binds.len();
        let list_sql = format!(
            "SELECT {} FROM {} WHERE {} ORDER BY {} LIMIT ${} OFFSET ${}",
            qualified_columns(LIST_COLUMNS),
            list.from,
            where_clause,
            list.order_by,
            n + 1,
            n + 2
        );
        let rows = bind_all(sqlx::query(&list_sql), &list.binds)
            .bind(page.limit)
            .bind(page.offset)
            .fetch_all(&mut *self.reader().await?)
            .await
            .db()?;
        let items = rows.iter().map(certificate_from_row).collect::<StoreResult<Vec<_>>>()?;
        // A short page that is not past the end is the last one: its end is the total,
        // and the (costlier) count is skipped. Selective searches mostly end here.
        let returned = items.len() as i64;
        if returned < page.limit && (returned > 0 || page.offset == 0) {
            return Ok(Page { items, total: page.offset + returned, total_exact: true, request: page });
        }
        let mut count = certificate_query(self.dialect, workspace_id, filter, Purpose::Count);
        let (total, total_exact) = match count.fts_term {
            Some(term) => {
                let count_sql = format!(
                    "SELECT COUNT(*), COALESCE(SUM(CASE WHEN {} THEN 1 ELSE 0 END), 0) \
                     FROM (SELECT rowid FROM certificates_search s WHERE s.certificates_search MATCH ${term} \
                           AND {} ORDER BY rowid DESC LIMIT {}) AS m \
                     LEFT JOIN certificates c INDEXED BY certificates_probe \
                       ON c.id = (m.rowid & {SEARCH_ID_MASK}) AND c.workspace_id = $1",
                    count.where_clause,
                    search_range_clause(&mut count.binds, workspace_number),
                    SEARCH_COUNT_SCAN_LIMIT + 1
                );
                let row =
                    bind_all(sqlx::query(&count_sql), &count.binds).fetch_one(&mut *self.reader().await?).await.db()?;
                let (scanned, hits): (i64, i64) = (row.try_get(0).db()?, row.try_get(1).db()?);
                (hits, scanned <= SEARCH_COUNT_SCAN_LIMIT)
            }
            None => {
                let count_sql = format!(
                    "SELECT COUNT(*) FROM (SELECT 1 FROM {} WHERE {} LIMIT {}) AS matches",
                    count.from,
                    count.where_clause,
                    EXACT_TOTAL_LIMIT + 1
                );
                let matches: i64 = bind_all(sqlx::query(&count_sql), &count.binds)
                    .fetch_one(&mut *self.reader().await?)
                    .await
                    .db()?
                    .try_get(0)
                    .db()?;
                (matches.min(EXACT_TOTAL_LIMIT), matches <= EXACT_TOTAL_LIMIT)
            }
        };
        // A bounded count may not reach the page itself; the page proves at least this many.
        let total = if returned > 0 { total.max(page.offset + returned) } else { total };
        Ok(Page { items, total, total_exact, request: page })
    }

    /// Read from the tallies migration 0560 keeps (a few thousand rows at most, whatever the
    /// inventory's size) plus, for each instant a status depends on, the certificates expiring
    /// earlier that same UTC day (a short range of `certificates_status`).
    async fn certificate_statistics(&self, workspace_id: &str, now: i64) -> StoreResult<Statistics> {
        let soon = now.saturating_add(EXPIRING_WINDOW_MS);
        let week = now.saturating_add(7 * 24 * 3600 * 1000);
        let mut binds = vec![Bind::Text(workspace_id.to_string())];
        // Live (not revoked) certificates expiring at or before `at`: whole days from the
        // tally, the part of `at`'s own day from the index.
        let mut up_to = |at: i64| {
            binds.push(Bind::Int(at.div_euclid(TALLY_DAY_MS)));
            binds.push(Bind::Int(at.div_euclid(TALLY_DAY_MS).saturating_mul(TALLY_DAY_MS)));
            binds.push(Bind::Int(at));
            let n = binds.len();
            format!(
                "(SELECT CAST(COALESCE(SUM(n), 0) AS BIGINT) FROM certificate_expiry_tally \
                  WHERE workspace_id = $1 AND revoked = 0 AND expiry_day < ${}) + \
                 (SELECT COUNT(*) FROM certificates \
                  WHERE workspace_id = $1 AND revoked = 0 AND expires_at >= ${} AND expires_at <= ${})",
                n - 2,
                n - 1,
                n
            )
        };
        let (by_now, by_soon, by_week) = (up_to(now), up_to(soon), up_to(week));
        let sql = format!(
            "SELECT CAST(COALESCE(SUM(n), 0) AS BIGINT), \
                    CAST(COALESCE(SUM(CASE WHEN revoked = 1 THEN n ELSE 0 END), 0) AS BIGINT), \
                    {by_now}, {by_soon}, {by_week} \
             FROM certificate_expiry_tally WHERE workspace_id = $1"
        );
        let row = bind_all(sqlx::query(&sql), &binds).fetch_one(&mut *self.reader().await?).await.db()?;
        let (total, revoked, by_now, by_soon, by_week): (i64, i64, i64, i64, i64) = (
            row.try_get(0).db()?,
            row.try_get(1).db()?,
            row.try_get(2).db()?,
            row.try_get(3).db()?,
            row.try_get(4).db()?,
        );
        let live = total - revoked;
        let mut stats = Statistics {
            total,
            by_status: vec![
                (Status::Active, live - by_soon),
                (Status::Expiring, by_soon - by_now),
                (Status::Expired, by_now),
                (Status::Revoked, revoked),
            ],
            expiring_within_7_days: by_week - by_now,
            ..Default::default()
        };
        let facets = sqlx::query(
            "SELECT auto_renewal, usage_category, issuance_source, key_algorithm, n FROM certificate_facet_tally \
             WHERE workspace_id = $1 AND n > 0",
        )
        .bind(workspace_id)
        .fetch_all(&mut *self.reader().await?)
        .await
        .db()?;
        let (mut usage, mut source, mut algorithm) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
        for row in &facets {
            let n: i64 = row.try_get(4).db()?;
            if bool_column(row.try_get(0).db()?) {
                stats.auto_renewal_enabled += n;
            }
            *usage.entry(row.try_get::<String, _>(1).db()?).or_insert(0) += n;
            *source.entry(row.try_get::<String, _>(2).db()?).or_insert(0) += n;
            *algorithm.entry(row.try_get::<String, _>(3).db()?).or_insert(0) += n;
        }
        stats.by_usage_category = usage.into_iter().collect();
        stats.by_issuance_source = source.into_iter().collect();
        stats.by_key_algorithm = algorithm.into_iter().collect();
        Ok(stats)
    }

    /// One range count of `certificates_status` (workspace, revoked, expires_at) per bucket:
    /// the cost follows the certificates in the window, not the inventory. Counting each
    /// bucket's range is several times cheaper than grouping the window's rows by an
    /// expression (which SQLite sorts through a temporary b-tree: ~30 ms of CPU for the 80,000
    /// certificates of 90 days at a million rows, against ~5 ms).
    async fn expiry_histogram(
        &self,
        workspace_id: &str,
        now: i64,
        bucket_ms: i64,
        buckets: i64,
    ) -> StoreResult<Vec<(i64, i64)>> {
        let bucket_ms = bucket_ms.max(1);
        // Buckets past the last representable instant would overflow the bounds' arithmetic.
        let buckets = buckets.clamp(0, ((i64::MAX - now.max(0)) / bucket_ms - 1).max(0));
        if buckets == 0 {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(
            "WITH RECURSIVE b(i) AS (SELECT CAST(0 AS BIGINT) UNION ALL SELECT i + 1 FROM b WHERE i + 1 < $4) \
             SELECT i, (SELECT COUNT(*) FROM certificates \
                        WHERE workspace_id = $1 AND revoked = 0 \
                          AND expires_at > $2 + i * $3 AND expires_at <= $2 + (i + 1) * $3) \
             FROM b",
        )
        .bind(workspace_id)
        .bind(now)
        .bind(bucket_ms)
        .bind(buckets)
        .fetch_all(&mut *self.reader().await?)
        .await
        .db()?;
        rows.iter().map(|row| Ok((row.try_get(0).db()?, row.try_get(1).db()?))).collect()
    }

    async fn list_usage(
        &self,
        workspace_id: &str,
        certificate_id: Option<i64>,
        page: PageRequest,
    ) -> StoreResult<Page<UsageRecord>> {
        let mut where_clause = "workspace_id = $1".to_string();
        let mut binds = vec![Bind::Text(workspace_id.to_string())];
        if let Some(certificate_id) = certificate_id {
            where_clause.push_str(" AND certificate_id = $2");
            binds.push(Bind::Int(certificate_id));
        }
        let select = "id, workspace_id, certificate_id, host, port, service, location, metadata, created_at";
        let order = "created_at DESC, id DESC";
        self.fetch_page(select, "certificate_usage", &where_clause, order, &binds, page, usage_from_row).await
    }

    async fn list_identities(&self, workspace_id: &str, page: PageRequest) -> StoreResult<Page<MachineIdentity>> {
        let binds = [Bind::Text(workspace_id.to_string())];
        let order = "m.created_at DESC, m.id DESC";
        self.fetch_page(IDENTITY_COLUMNS, IDENTITY_FROM, "m.workspace_id = $1", order, &binds, page, identity_from_row)
            .await
    }

    async fn find_identity(&self, workspace_id: &str, id: i64) -> StoreResult<Option<MachineIdentity>> {
        let sql = format!("SELECT {IDENTITY_COLUMNS} FROM {IDENTITY_FROM} WHERE m.workspace_id = $1 AND m.id = $2");
        let row =
            sqlx::query(&sql).bind(workspace_id).bind(id).fetch_optional(&mut *self.reader().await?).await.db()?;
        row.as_ref().map(identity_from_row).transpose()
    }

    async fn list_revocation_requests(
        &self,
        workspace_id: &str,
        status: Option<&str>,
        page: PageRequest,
    ) -> StoreResult<Page<RevocationRequest>> {
        let status = status.map(|status| ("status", status));
        let map = revocation_request_from_row;
        self.workspace_page(REVOCATION_COLUMNS, "revocation_requests", workspace_id, status, None, page, map).await
    }
}

const IDENTITY_COLUMNS: &str = "m.id, m.workspace_id, m.name, m.kind, m.description, m.metadata, m.created_at, m.updated_at, \
    (SELECT COUNT(*) FROM certificates c WHERE c.workspace_id = m.workspace_id AND c.machine_identity_id = m.id) AS certificate_count";
const IDENTITY_FROM: &str = "machine_identities m";

fn identity_from_row(row: &AnyRow) -> StoreResult<MachineIdentity> {
    let metadata: String = row.try_get("metadata").db()?;
    Ok(MachineIdentity {
        id: row.try_get("id").db()?,
        workspace_id: row.try_get("workspace_id").db()?,
        name: row.try_get("name").db()?,
        kind: row.try_get("kind").db()?,
        description: row.try_get("description").db()?,
        metadata: json_column(&metadata),
        certificate_count: row.try_get("certificate_count").db()?,
        created_at: row.try_get("created_at").db()?,
        updated_at: row.try_get("updated_at").db()?,
    })
}

fn usage_from_row(row: &AnyRow) -> StoreResult<UsageRecord> {
    let metadata: String = row.try_get("metadata").db()?;
    Ok(UsageRecord {
        id: row.try_get("id").db()?,
        workspace_id: row.try_get("workspace_id").db()?,
        certificate_id: row.try_get("certificate_id").db()?,
        host: row.try_get("host").db()?,
        port: row.try_get("port").db()?,
        service: row.try_get("service").db()?,
        location: row.try_get("location").db()?,
        metadata: json_column(&metadata),
        created_at: row.try_get("created_at").db()?,
    })
}

/// SQLite: indexes the certificates noted since the last flush, in one statement (migration
/// 0590). Run before a commit that inserted certificates, and when the store opens (rows a
/// tool inserted behind its back).
macro_rules! search_pending_flush {
    () => {
        "INSERT INTO certificates_search (rowid, common_name, issuer) \
         SELECT w.number * 1099511627776 + c.id, c.common_name, c.issuer \
         FROM certificates_search_pending p JOIN certificates c ON c.id = p.id JOIN workspaces w ON w.id = c.workspace_id; \
         DELETE FROM certificates_search_pending;"
    };
}
pub(crate) const SEARCH_PENDING_FLUSH: &str = search_pending_flush!();
/// The same, then `COMMIT`: one round trip for the group-commit writer's end of a batch.
pub(crate) const SEARCH_PENDING_FLUSH_AND_COMMIT: &str = concat!(search_pending_flush!(), " COMMIT");

/// The columns a certificate insert sets, in the order of [`certificate_values`].
const INSERTED_COLUMNS: &str = "workspace_id, common_name, issuer, subject, serial_number, not_before, expires_at, \
    signature_algorithm, signature_hash, key_algorithm, key_size, fingerprint_sha256, usage_category, \
    subject_alt_names, is_ca, issuance_source, auto_renewal, location, metadata, certificate_pem, created_at, updated_at, \
    expiring_notified_at, expired_notified_at, ca_id, chain_pem, private_key_sealed, issuance_template, csr_pem, \
    renew_before_ms";

/// Which value (0-based, of [`certificate_values`]) each of [`INSERTED_COLUMNS`] takes: the
/// creation instant is also the update instant, and one value marks both expiry notices.
const INSERTED_VALUES: [usize; 30] =
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 20, 21, 21, 22, 23, 24, 25, 26, 27];

/// How many values [`certificate_values`] gives.
const INSERTED_VALUE_COUNT: usize = INSERTED_VALUES[INSERTED_VALUES.len() - 1] + 1;

/// `INSERT INTO certificates`, its values numbered from `$first`; with `id`, the id is the
/// value after them.
fn certificate_insert_sql(first: usize, with_id: bool) -> String {
    use std::fmt::Write;
    // Written into one buffer: this runs for every issued certificate.
    let mut sql = String::with_capacity(INSERTED_COLUMNS.len() + 8 * INSERTED_VALUES.len() + 64);
    sql.push_str("INSERT INTO certificates (");
    sql.push_str(INSERTED_COLUMNS);
    if with_id {
        sql.push_str(", id");
    }
    sql.push_str(") VALUES (");
    let numbers = INSERTED_VALUES.iter().map(|value| first + value);
    for (i, number) in numbers.chain(with_id.then_some(first + INSERTED_VALUE_COUNT)).enumerate() {
        let separator = if i == 0 { "" } else { ", " };
        let _ = write!(sql, "{separator}${number}");
    }
    sql.push(')');
    sql
}

/// A held certificate insert's text (its id is its last value).
fn held_certificate_insert_sql(first: usize) -> String {
    certificate_insert_sql(first, true)
}

/// The values of a certificate insert, owned, in the order of [`INSERTED_VALUES`].
fn certificate_values(new: &NewCertificate<'_>) -> Vec<Bind> {
    let parsed = new.parsed;
    let text = |value: &str| Bind::Text(value.to_owned());
    let optional_text = |value: Option<&str>| Bind::OptionalText(value.map(str::to_owned));
    let integer = Bind::Int;
    vec![
        text(new.workspace_id),
        text(&parsed.common_name),
        text(&parsed.issuer),
        text(&parsed.subject),
        text(&parsed.serial_number),
        integer(parsed.not_before),
        integer(parsed.expires_at),
        text(&parsed.signature_algorithm),
        optional_text(parsed.signature_hash.as_deref()),
        text(&parsed.key_algorithm),
        Bind::OptionalInt(parsed.key_size),
        text(&parsed.fingerprint_sha256),
        text(parsed.usage_category.as_str()),
        Bind::Text(serde_json::to_string(&parsed.subject_alt_names).unwrap_or_else(|_| "[]".into())),
        integer(i64::from(parsed.is_ca)),
        text(new.issuance_source.as_str()),
        integer(i64::from(new.auto_renewal)),
        optional_text(new.location),
        Bind::Text(new.metadata.to_string()),
        text(&parsed.pem),
        integer(new.created_at),
        Bind::OptionalInt(new.expiry_announced.then_some(new.created_at)),
        Bind::OptionalInt(new.ca_id),
        optional_text(new.chain_pem),
        optional_text(new.private_key_sealed),
        optional_text(new.issuance_template),
        optional_text(new.csr_pem),
        Bind::OptionalInt(new.renew_before_ms),
    ]
}

#[async_trait]
impl CertificateWrites for Tx {
    async fn insert_certificate(&mut self, new: &NewCertificate<'_>) -> StoreResult<Certificate> {
        self.send_held().await?;
        self.note_certificate_inserted();
        // Only the id comes back: the rest of the row is what was bound, and decoding it again
        // (thirty-odd columns looked up by name) was CPU on the group-commit writer's path.
        // The statement also opens the group-commit job's savepoint when that is owed.
        let sql = self.opening_sql(&format!("{} RETURNING id", certificate_insert_sql(1, false)));
        let rows = self.fetch_opening(bind_owned(sqlx::query(&sql), certificate_values(new))).await?;
        let id: i64 = rows
            .first()
            .ok_or(StoreError::Database("the certificate insert returned no id".into()))?
            .try_get(0)
            .db()?;
        self.certificate_inserted(id);
        Ok(new.inserted(id))
    }

    async fn insert_new_certificate(&mut self, new: &NewCertificate<'_>) -> StoreResult<Certificate> {
        let Some(id) = self.holdable_certificate_id() else {
            return self.insert_certificate(new).await;
        };
        self.note_certificate_inserted();
        let mut values = certificate_values(new);
        values.push(Bind::Int(id));
        self.hold_certificate(id, HeldInsert { sql: held_certificate_insert_sql, values });
        Ok(new.inserted(id))
    }

    async fn find_certificate(&mut self, workspace_id: &str, id: i64) -> StoreResult<Option<Certificate>> {
        let sql = format!("SELECT {CERTIFICATE_COLUMNS} FROM certificates WHERE workspace_id = $1 AND id = $2");
        let row = sqlx::query(&sql).bind(workspace_id).bind(id).fetch_optional(self.conn().await?).await.db()?;
        row.as_ref().map(certificate_from_row).transpose()
    }

    async fn find_private_key(&mut self, workspace_id: &str, id: i64) -> StoreResult<Option<String>> {
        let row = sqlx::query("SELECT private_key_sealed FROM certificates WHERE workspace_id = $1 AND id = $2")
            .bind(workspace_id)
            .bind(id)
            .fetch_optional(self.conn().await?)
            .await
            .db()?;
        Ok(match row {
            Some(row) => row.try_get::<Option<String>, _>(0).db()?,
            None => None,
        })
    }

    /// Applies `update` and returns the new row, or `None` if the certificate is not in the workspace.
    async fn update_certificate(
        &mut self,
        workspace_id: &str,
        id: i64,
        update: &CertificateUpdate<'_>,
        now: i64,
    ) -> StoreResult<Option<Certificate>> {
        let mut sets = vec!["updated_at = $3".to_string()];
        let mut binds: Vec<Bind> = Vec::new();
        let mut set = |column: &str, value: Bind, binds: &mut Vec<Bind>| {
            binds.push(value);
            sets.push(format!("{column} = ${}", binds.len() + 3));
        };
        if let Some(enabled) = update.auto_renewal {
            set("auto_renewal", Bind::Int(i64::from(enabled)), &mut binds);
        }
        if let Some(location) = update.location {
            set("location", Bind::OptionalText(location.map(str::to_owned)), &mut binds);
        }
        if let Some(metadata) = update.metadata {
            set("metadata", Bind::Text(metadata.to_string()), &mut binds);
        }
        if let Some(source) = update.issuance_source {
            set("issuance_source", Bind::Text(source.as_str().to_string()), &mut binds);
        }
        if let Some(identity) = update.machine_identity_id {
            set("machine_identity_id", Bind::Int(identity), &mut binds);
        }
        if let Some((at, reason)) = update.revoke {
            set("revoked", Bind::Int(1), &mut binds);
            set("revoked_at", Bind::Int(at), &mut binds);
            set("revocation_reason", Bind::Text(reason.to_string()), &mut binds);
        }
        let sql = format!(
            "UPDATE certificates SET {} WHERE workspace_id = $1 AND id = $2 RETURNING {CERTIFICATE_COLUMNS}",
            sets.join(", ")
        );
        let query = bind_all(sqlx::query(&sql).bind(workspace_id).bind(id).bind(now), &binds);
        let row = query.fetch_optional(self.conn().await?).await.db()?;
        row.as_ref().map(certificate_from_row).transpose()
    }

    async fn delete_certificate(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool> {
        let done = sqlx::query("DELETE FROM certificates WHERE workspace_id = $1 AND id = $2")
            .bind(workspace_id)
            .bind(id)
            .execute(self.conn().await?)
            .await
            .db()?;
        Ok(done.rows_affected() > 0)
    }

    async fn insert_usage(&mut self, record: &UsageRecord) -> StoreResult<UsageRecord> {
        let row = sqlx::query(
            "INSERT INTO certificate_usage (workspace_id, certificate_id, host, port, service, location, metadata, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             RETURNING id, workspace_id, certificate_id, host, port, service, location, metadata, created_at",
        )
        .bind(record.workspace_id.as_str())
        .bind(record.certificate_id)
        .bind(record.host.as_str())
        .bind(record.port)
        .bind(record.service.as_deref())
        .bind(record.location.as_deref())
        .bind(record.metadata.to_string())
        .bind(record.created_at)
        .fetch_one(self.conn().await?)
        .await.db()?;
        usage_from_row(&row)
    }

    async fn insert_identity(&mut self, identity: &MachineIdentity) -> StoreResult<MachineIdentity> {
        let row = sqlx::query(
            "INSERT INTO machine_identities (workspace_id, name, kind, description, metadata, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $6) \
             RETURNING id, workspace_id, name, kind, description, metadata, created_at, updated_at, CAST(0 AS BIGINT) AS certificate_count",
        )
        .bind(identity.workspace_id.as_str())
        .bind(identity.name.as_str())
        .bind(identity.kind.as_str())
        .bind(identity.description.as_deref())
        .bind(identity.metadata.to_string())
        .bind(identity.created_at)
        .fetch_one(self.conn().await?)
        .await.db()?;
        identity_from_row(&row)
    }

    async fn delete_identity(&mut self, workspace_id: &str, id: i64) -> StoreResult<bool> {
        sqlx::query(
            "UPDATE certificates SET machine_identity_id = NULL WHERE workspace_id = $1 AND machine_identity_id = $2",
        )
        .bind(workspace_id)
        .bind(id)
        .execute(self.conn().await?)
        .await
        .db()?;
        let done = sqlx::query("DELETE FROM machine_identities WHERE workspace_id = $1 AND id = $2")
            .bind(workspace_id)
            .bind(id)
            .execute(self.conn().await?)
            .await
            .db()?;
        Ok(done.rows_affected() > 0)
    }

    /// Marks up to `limit` certificates that passed `expiresAt` as notified and returns them.
    /// The re-check in the outer WHERE makes concurrent scanners (replicas) claim each row once.
    async fn claim_expired(&mut self, now: i64, limit: i64) -> StoreResult<Vec<Certificate>> {
        let sql = format!(
            "UPDATE certificates SET expired_notified_at = $1, expiring_notified_at = COALESCE(expiring_notified_at, $1) \
             WHERE id IN (SELECT id FROM certificates WHERE revoked = 0 AND expired_notified_at IS NULL AND expires_at <= $1 \
                          ORDER BY expires_at LIMIT $2) \
               AND expired_notified_at IS NULL \
             RETURNING {CERTIFICATE_COLUMNS}"
        );
        let rows = sqlx::query(&sql).bind(now).bind(limit).fetch_all(self.conn().await?).await.db()?;
        rows.iter().map(certificate_from_row).collect()
    }

    /// Like [`Tx::claim_expired`] for certificates that entered the expiring window.
    async fn claim_expiring(&mut self, now: i64, limit: i64) -> StoreResult<Vec<Certificate>> {
        let sql = format!(
            "UPDATE certificates SET expiring_notified_at = $1 \
             WHERE id IN (SELECT id FROM certificates WHERE revoked = 0 AND expired_notified_at IS NULL \
                          AND expiring_notified_at IS NULL AND expires_at > $1 AND expires_at <= $2 \
                          ORDER BY expires_at LIMIT $3) \
               AND expiring_notified_at IS NULL \
             RETURNING {CERTIFICATE_COLUMNS}"
        );
        let rows = sqlx::query(&sql)
            .bind(now)
            .bind(now.saturating_add(EXPIRING_WINDOW_MS))
            .bind(limit)
            .fetch_all(self.conn().await?)
            .await
            .db()?;
        rows.iter().map(certificate_from_row).collect()
    }

    async fn insert_revocation_request(&mut self, request: &RevocationRequest) -> StoreResult<RevocationRequest> {
        let sql = format!(
            "INSERT INTO revocation_requests (workspace_id, certificate_id, reason, status, requested_by, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $6) RETURNING {REVOCATION_COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(request.workspace_id.as_str())
            .bind(request.certificate_id)
            .bind(request.reason.as_str())
            .bind(request.status.as_str())
            .bind(request.requested_by.as_str())
            .bind(request.created_at)
            .fetch_one(self.conn().await?)
            .await
            .db()?;
        revocation_request_from_row(&row)
    }

    async fn find_revocation_request(&mut self, workspace_id: &str, id: i64) -> StoreResult<Option<RevocationRequest>> {
        let sql = format!("SELECT {REVOCATION_COLUMNS} FROM revocation_requests WHERE workspace_id = $1 AND id = $2");
        let row = sqlx::query(&sql).bind(workspace_id).bind(id).fetch_optional(self.conn().await?).await.db()?;
        row.as_ref().map(revocation_request_from_row).transpose()
    }

    async fn update_revocation_request(
        &mut self,
        request: &RevocationRequest,
        from: RevocationStatus,
    ) -> StoreResult<Option<RevocationRequest>> {
        let sql = format!(
            "UPDATE revocation_requests SET status = $3, decided_by = $4, decided_at = $5, decision_reason = $6, error = $7, \
                updated_at = $8 WHERE workspace_id = $1 AND id = $2 AND status = $9 RETURNING {REVOCATION_COLUMNS}"
        );
        let row = sqlx::query(&sql)
            .bind(request.workspace_id.as_str())
            .bind(request.id)
            .bind(request.status.as_str())
            .bind(request.decided_by.as_deref())
            .bind(request.decided_at)
            .bind(request.decision_reason.as_deref())
            .bind(request.error.as_deref())
            .bind(request.updated_at)
            .bind(from.as_str())
            .fetch_optional(self.conn().await?)
            .await
            .db()?;
        row.as_ref().map(revocation_request_from_row).transpose()
    }
}

const REVOCATION_COLUMNS: &str =
    "id, workspace_id, certificate_id, reason, status, requested_by, decided_by, decided_at, \
    decision_reason, error, created_at, updated_at";

fn revocation_request_from_row(row: &AnyRow) -> StoreResult<RevocationRequest> {
    Ok(RevocationRequest {
        id: row.try_get("id").db()?,
        workspace_id: row.try_get("workspace_id").db()?,
        certificate_id: row.try_get("certificate_id").db()?,
        reason: row.try_get("reason").db()?,
        status: state_column(row, "revocation request", RevocationStatus::parse)?,
        requested_by: row.try_get("requested_by").db()?,
        decided_by: row.try_get("decided_by").db()?,
        decided_at: row.try_get("decided_at").db()?,
        decision_reason: row.try_get("decision_reason").db()?,
        error: row.try_get("error").db()?,
        created_at: row.try_get("created_at").db()?,
        updated_at: row.try_get("updated_at").db()?,
    })
}

#[cfg(test)]
mod tests {
    use trellis_core::ports::{CertificateReads as _, CertificateWrites as _};

    use super::*;

    const DAY: i64 = 86_400_000;
    /// A fixed "now" a little after midnight UTC, so instants fall on both sides of day edges.
    const NOW: i64 = 1_800_000_000_000 - 1_800_000_000_000 % DAY + 3_600_000;

    /// A value per column, numbered from `first` as `INSERTED_VALUES` maps them, the id last.
    #[test]
    fn a_certificate_insert_numbers_a_value_per_column() {
        assert_eq!(
            certificate_insert_sql(3, true),
            format!(
                "INSERT INTO certificates ({}, id) VALUES ({}, $31)",
                INSERTED_COLUMNS,
                INSERTED_VALUES.map(|v| format!("${}", v + 3)).join(", ")
            )
        );
        let plain = certificate_insert_sql(1, false);
        assert!(plain.ends_with("$27, $28)"), "{plain}");
        assert_eq!(plain.matches('$').count(), INSERTED_COLUMNS.split(',').count());
    }

    struct Row {
        id: i64,
        expires_at: i64,
        revoked: bool,
        ca_id: Option<i64>,
        auto_renewal: bool,
        key_algorithm: &'static str,
    }

    async fn insert(store: &Store, workspace: &str, row: &Row) {
        sqlx::query(
            "INSERT INTO certificates (id, workspace_id, common_name, issuer, subject, serial_number, not_before, \
             expires_at, signature_algorithm, key_algorithm, fingerprint_sha256, usage_category, issuance_source, \
             auto_renewal, ca_id, revoked, certificate_pem, created_at, updated_at) \
             VALUES ($1, $2, $3, 'CN=Tally CA', $4, $5, 0, $6, 'SHA256-ECDSA', $7, $8, 'TLS', 'external', $9, $10, $11, '', 0, 0)",
        )
        .bind(row.id)
        .bind(workspace)
        .bind(format!("c{}.example.com", row.id))
        .bind(format!("CN=c{}.example.com", row.id))
        .bind(format!("{:X}", row.id))
        .bind(row.expires_at)
        .bind(row.key_algorithm)
        .bind(format!("{workspace}-{:064x}", row.id))
        .bind(i64::from(row.auto_renewal))
        .bind(row.ca_id)
        .bind(i64::from(row.revoked))
        .execute(&store.pool)
        .await
        .expect("certificate");
    }

    async fn search(store: &Store, term: &str) -> Vec<i64> {
        let filter = CertificateFilter { search: Some(term.into()), now: NOW, ..Default::default() };
        walk(store, &filter, 50).await
    }

    /// SQLite indexes a transaction's new certificates at its commit (migration 0590). A row
    /// renamed or deleted before that commit must leave the contentless index consistent: no
    /// stale name, no ghost, and FTS5's own integrity check passes. PostgreSQL passes the same.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn search_sees_every_committed_change_of_certificates_new_in_the_transaction() {
        let (_dir, store) = crate::testing::store().await;
        workspaces(&store).await;
        let row = |id| Row {
            id,
            expires_at: NOW + DAY,
            revoked: false,
            ca_id: None,
            auto_renewal: false,
            key_algorithm: "EC",
        };
        // Committed and indexed before the transaction under test.
        insert(&store, "ws", &row(1)).await;
        store.index_pending_certificates().await.expect("search index");

        let mut tx = store.begin_tx().await.expect("tx");
        for id in [2, 3, 4] {
            sqlx::query(
                "INSERT INTO certificates (id, workspace_id, common_name, issuer, subject, serial_number, not_before, \
                 expires_at, signature_algorithm, key_algorithm, fingerprint_sha256, usage_category, issuance_source, \
                 certificate_pem, created_at, updated_at) \
                 VALUES ($1, 'ws', $2, 'CN=Queue CA', 'CN=x', $3, 0, $4, 'SHA256-ECDSA', 'EC', $3, 'TLS', 'external', '', 0, 0)",
            )
            .bind(id)
            .bind(format!("queued{id}.example.com"))
            .bind(format!("{id:064x}"))
            .bind(NOW + DAY)
            .execute(tx.conn().await.expect("conn"))
            .await
            .expect("insert");
        }
        tx.note_certificate_inserted();
        let rename = "UPDATE certificates SET common_name = $1 WHERE id = $2";
        for (name, id) in [("renamed3.example.com", 3), ("renamed1.example.com", 1)] {
            sqlx::query(rename).bind(name).bind(id).execute(tx.conn().await.expect("conn")).await.expect("rename");
        }
        sqlx::query("DELETE FROM certificates WHERE id = 4")
            .execute(tx.conn().await.expect("conn"))
            .await
            .expect("delete");
        tx.commit_tx().await.expect("commit");

        assert_eq!(search(&store, "queued2").await, vec![2]);
        assert_eq!(search(&store, "queued3").await, Vec::<i64>::new(), "the old name of a renamed new row");
        assert_eq!(search(&store, "renamed3").await, vec![3]);
        assert_eq!(search(&store, "queued4").await, Vec::<i64>::new(), "a new row deleted before the commit");
        assert_eq!(search(&store, "renamed1").await, vec![1]);
        assert_eq!(search(&store, "c1.example").await, Vec::<i64>::new(), "the old name of an indexed row");
        if store.dialect == Dialect::Sqlite {
            let queued: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM certificates_search_pending")
                .fetch_one(&store.pool)
                .await
                .expect("queue");
            assert_eq!(queued, 0);
            sqlx::query("INSERT INTO certificates_search (certificates_search) VALUES ('integrity-check')")
                .execute(&store.pool)
                .await
                .expect("the search index is consistent");
        }
    }

    async fn workspaces(store: &Store) {
        for id in ["ws", "other"] {
            sqlx::query("INSERT INTO workspaces (id, name, created_at, updated_at) VALUES ($1, $1, 0, 0)")
                .bind(id)
                .execute(&store.pool)
                .await
                .expect("workspace");
        }
    }

    /// Rows whose expiries repeat (ties broken by id), on both sides of `NOW`, of two CAs.
    fn rows() -> Vec<Row> {
        let expiries = [5 * DAY, -2 * DAY, 5 * DAY, 40 * DAY, -2 * DAY, 5 * DAY, 10 * DAY, 40 * DAY, 3 * DAY];
        expiries
            .iter()
            .enumerate()
            .map(|(i, offset)| Row {
                id: i as i64 + 1,
                expires_at: NOW + offset,
                revoked: i == 6,
                ca_id: Some(if i % 3 == 0 { 7 } else { 8 }),
                auto_renewal: i % 2 == 0,
                key_algorithm: if i % 4 == 0 { "RSA" } else { "ECDSA" },
            })
            .collect()
    }

    /// Every page of `limit` rows, in order.
    async fn walk(store: &Store, filter: &CertificateFilter, limit: i64) -> Vec<i64> {
        let mut ids = Vec::new();
        for page in 1.. {
            let request = PageRequest::new(Some(page), Some(limit), None, limit).expect("page");
            let found = store.list_certificates("ws", filter, request).await.expect("list");
            ids.extend(found.items.iter().map(|c| c.id));
            if (found.items.len() as i64) < limit {
                break;
            }
        }
        ids
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn expiry_orders_are_total_filter_by_ca_and_page_without_skipping_or_repeating() {
        let (_dir, store) = crate::testing::store().await;
        workspaces(&store).await;
        let rows = rows();
        for row in &rows {
            insert(&store, "ws", row).await;
        }
        // Another workspace's certificates never show.
        insert(
            &store,
            "other",
            &Row {
                id: 100,
                expires_at: NOW,
                revoked: false,
                ca_id: Some(7),
                auto_renewal: false,
                key_algorithm: "RSA",
            },
        )
        .await;
        store.index_pending_certificates().await.expect("search index");
        let expected = |keep: &dyn Fn(&Row) -> bool, order: CertificateOrder| {
            let mut kept: Vec<&Row> = rows.iter().filter(|r| keep(r)).collect();
            match order {
                CertificateOrder::Newest => kept.sort_by_key(|r| std::cmp::Reverse(r.id)),
                CertificateOrder::ExpiresSoonest => kept.sort_by_key(|r| (r.expires_at, r.id)),
                CertificateOrder::ExpiresLatest => kept.sort_by_key(|r| std::cmp::Reverse((r.expires_at, r.id))),
            }
            kept.iter().map(|r| r.id).collect::<Vec<_>>()
        };
        for order in [CertificateOrder::Newest, CertificateOrder::ExpiresSoonest, CertificateOrder::ExpiresLatest] {
            for limit in [1, 2, 4, 100] {
                let all = CertificateFilter { order, now: NOW, ..Default::default() };
                assert_eq!(walk(&store, &all, limit).await, expected(&|_| true, order), "{order:?} by {limit}");
                let of_ca = CertificateFilter { order, ca_id: Some(7), now: NOW, ..Default::default() };
                assert_eq!(
                    walk(&store, &of_ca, limit).await,
                    expected(&|r| r.ca_id == Some(7), order),
                    "{order:?} of CA 7 by {limit}"
                );
                let active = CertificateFilter { order, status: Some(Status::Active), now: NOW, ..Default::default() };
                assert_eq!(
                    walk(&store, &active, limit).await,
                    expected(&|r| !r.revoked && r.expires_at > NOW + EXPIRING_WINDOW_MS, order),
                    "{order:?} active by {limit}"
                );
                let expiring = CertificateFilter {
                    order,
                    status: Some(Status::Expiring),
                    ca_id: Some(8),
                    search: Some("example".into()),
                    now: NOW,
                    ..Default::default()
                };
                assert_eq!(
                    walk(&store, &expiring, limit).await,
                    expected(
                        &|r| !r.revoked
                            && r.ca_id == Some(8)
                            && r.expires_at > NOW
                            && r.expires_at <= NOW + EXPIRING_WINDOW_MS,
                        order
                    ),
                    "{order:?} expiring of CA 8, searched, by {limit}"
                );
            }
        }
        let none = CertificateFilter { ca_id: Some(9), now: NOW, ..Default::default() };
        assert!(walk(&store, &none, 10).await.is_empty());
    }

    /// The statistics computed the slow way, from the rows themselves.
    fn counted(rows: &[Row], now: i64) -> (i64, [i64; 4], i64, i64, Vec<(String, i64)>) {
        let soon = now + EXPIRING_WINDOW_MS;
        let live = |r: &&Row| !r.revoked;
        let by_status = [
            rows.iter().filter(live).filter(|r| r.expires_at > soon).count() as i64,
            rows.iter().filter(live).filter(|r| r.expires_at > now && r.expires_at <= soon).count() as i64,
            rows.iter().filter(live).filter(|r| r.expires_at <= now).count() as i64,
            rows.iter().filter(|r| r.revoked).count() as i64,
        ];
        let week = rows.iter().filter(live).filter(|r| r.expires_at > now && r.expires_at <= now + 7 * DAY).count();
        let renewing = rows.iter().filter(|r| r.auto_renewal).count();
        let mut algorithms = BTreeMap::new();
        for r in rows {
            *algorithms.entry(r.key_algorithm.to_string()).or_insert(0) += 1;
        }
        (rows.len() as i64, by_status, week as i64, renewing as i64, algorithms.into_iter().collect())
    }

    async fn assert_statistics(store: &Store, rows: &[Row], now: i64) {
        // The expiry timeline: one count per day after `now`, revoked certificates left out.
        let histogram = store.expiry_histogram("ws", now, DAY, 45).await.expect("histogram");
        let expected: Vec<(i64, i64)> = (0..45)
            .map(|i| {
                let within =
                    |r: &&Row| !r.revoked && r.expires_at > now + i * DAY && r.expires_at <= now + (i + 1) * DAY;
                (i, rows.iter().filter(within).count() as i64)
            })
            .collect();
        assert_eq!(histogram, expected, "histogram at {now}");
        let stats = store.certificate_statistics("ws", now).await.expect("statistics");
        let (total, by_status, week, renewing, algorithms) = counted(rows, now);
        assert_eq!(stats.total, total, "total at {now}");
        let statuses: Vec<i64> = stats.by_status.iter().map(|(_, n)| *n).collect();
        assert_eq!(statuses, by_status.to_vec(), "active, expiring, expired, revoked at {now}");
        assert_eq!(stats.expiring_within_7_days, week, "within 7 days at {now}");
        assert_eq!(stats.auto_renewal_enabled, renewing);
        assert_eq!(stats.by_key_algorithm, algorithms);
        assert_eq!(stats.by_usage_category, if total > 0 { vec![("TLS".to_string(), total)] } else { vec![] });
    }

    /// The tallies the triggers keep give the counts of the rows, at instants on day edges and
    /// inside days, after inserts, a revocation, a changed expiry and facet, and deletes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn statistics_from_the_tallies_match_the_rows_through_every_change() {
        let (_dir, store) = crate::testing::store().await;
        workspaces(&store).await;
        let mut rows = rows();
        // On a day edge, a millisecond either side of it, and before 1970 (negative instants).
        for (id, expires_at) in
            [(20, NOW - NOW % DAY), (21, NOW - NOW % DAY - 1), (22, NOW + DAY - NOW % DAY), (23, -DAY - 5)]
        {
            rows.push(Row {
                id,
                expires_at,
                revoked: false,
                ca_id: None,
                auto_renewal: false,
                key_algorithm: "ED25519",
            });
        }
        for row in &rows {
            insert(&store, "ws", row).await;
        }
        insert(
            &store,
            "other",
            &Row { id: 100, expires_at: NOW, revoked: true, ca_id: None, auto_renewal: true, key_algorithm: "RSA" },
        )
        .await;
        let instants = [NOW, NOW - NOW % DAY, NOW - NOW % DAY - 1, NOW + 29 * DAY + 1, -DAY - 5, -DAY - 6, 0];
        for now in instants {
            assert_statistics(&store, &rows, now).await;
        }
        // Revoke one, move one's expiry to another day, switch one's auto-renewal and key.
        let mut tx = store.begin_tx().await.expect("tx");
        let update = CertificateUpdate { revoke: Some((NOW, "keyCompromise")), ..Default::default() };
        tx.update_certificate("ws", 2, &update, NOW).await.expect("revoke");
        tx.commit_tx().await.expect("commit");
        rows[1].revoked = true;
        sqlx::query("UPDATE certificates SET expires_at = $1 WHERE id = 4")
            .bind(NOW + 2 * DAY)
            .execute(&store.pool)
            .await
            .expect("expiry");
        rows[3].expires_at = NOW + 2 * DAY;
        sqlx::query("UPDATE certificates SET auto_renewal = 1, key_algorithm = 'ED448' WHERE id = 2")
            .execute(&store.pool)
            .await
            .expect("facets");
        rows[1].auto_renewal = true;
        rows[1].key_algorithm = "ED448";
        for now in instants {
            assert_statistics(&store, &rows, now).await;
        }
        // Deletes, the last certificate included.
        for id in rows.iter().map(|r| r.id).collect::<Vec<_>>() {
            let mut tx = store.begin_tx().await.expect("tx");
            assert!(tx.delete_certificate("ws", id).await.expect("delete"));
            tx.commit_tx().await.expect("commit");
            rows.retain(|r| r.id != id);
            assert_statistics(&store, &rows, NOW).await;
        }
    }

    /// A certificate of `fingerprint`, as parsed (the store trusts what it is given).
    fn parsed(fingerprint: &str) -> trellis_core::certificates::ParsedCertificate {
        trellis_core::certificates::ParsedCertificate {
            common_name: format!("{fingerprint}.example.com"),
            subject: format!("CN={fingerprint}.example.com"),
            issuer: "CN=Held Insert CA".into(),
            serial_number: fingerprint.to_ascii_uppercase(),
            not_before: NOW,
            expires_at: NOW + 90 * DAY,
            signature_algorithm: "SHA256-ECDSA".into(),
            signature_hash: Some("SHA-256".into()),
            key_algorithm: "ECDSA".into(),
            key_size: Some(256),
            fingerprint_sha256: fingerprint.into(),
            usage_category: trellis_core::certificates::UsageCategory::Tls,
            subject_alt_names: vec![format!("{fingerprint}.example.com")],
            is_ca: false,
            der: Vec::new(),
            pem: format!("pem of {fingerprint}"),
        }
    }

    #[derive(Debug)]
    enum Outcome {
        Store(StoreError),
        Refused,
    }

    impl From<StoreError> for Outcome {
        fn from(error: StoreError) -> Self {
            Outcome::Store(error)
        }
    }

    /// What a job does after inserting its just-issued certificate.
    #[derive(Clone, Copy)]
    enum Then {
        /// Its audit row and event, in one text with the held insert.
        Record,
        /// Refuses: nothing of it may stay.
        Refuse,
        /// Nothing: the insert is still held when the job returns.
        Return,
    }

    async fn issue(store: &Store, fingerprint: String, then: Then) -> Result<i64, Outcome> {
        store
            .write(move |tx: &mut Tx| {
                Box::pin(async move {
                    use trellis_core::unit_of_work::{ChangeTx as _, NewRow};
                    let (parsed, metadata) = (parsed(&fingerprint), serde_json::json!({}));
                    let new = NewCertificate {
                        workspace_id: "ws",
                        parsed: &parsed,
                        issuance_source: IssuanceSource::Internal,
                        auto_renewal: false,
                        location: None,
                        metadata: &metadata,
                        created_at: NOW,
                        expiry_announced: false,
                        ca_id: Some(1),
                        chain_pem: None,
                        private_key_sealed: None,
                        issuance_template: Some("web_server"),
                        csr_pem: None,
                        renew_before_ms: None,
                    };
                    let certificate = tx.insert_new_certificate(&new).await?;
                    let target = certificate.id.to_string();
                    let details = serde_json::json!({ "fingerprint": fingerprint });
                    let audit = trellis_core::audit::NewAuditEntry {
                        workspace_id: Some("ws"),
                        actor_type: "system",
                        actor_id: "test",
                        action: "certificate.issued",
                        target_type: "certificate",
                        target_id: Some(&target),
                        request_id: None,
                        details: &details,
                        created_at: NOW,
                    };
                    let event = trellis_core::events::NewEvent {
                        workspace_id: "ws",
                        event_type: trellis_core::events::EventType::CertificateCreated,
                        payload: &details,
                        created_at: NOW,
                    };
                    match then {
                        Then::Record => tx.insert_rows(&[NewRow::Audit(audit), NewRow::Event(event)]).await?,
                        Then::Refuse => return Err(Outcome::Refused),
                        Then::Return => {}
                    }
                    Ok(certificate.id)
                })
            })
            .await
    }

    /// A just-issued certificate's insert travels with the job's next statement (SQLite's group
    /// commit): the id each job is told is its row's, its audit row names it, a duplicate
    /// fails only its own job (as `Unique`, which issuance reports as a 409), a job that
    /// refuses after the insert leaves nothing, and an insert still held when its job returns
    /// is written all the same. Concurrent jobs, so that batches hold several of each.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_held_certificate_insert_keeps_its_id_and_fails_only_its_own_job() {
        let (_dir, store) = crate::testing::store().await;
        let store = std::sync::Arc::new(store);
        workspaces(&store).await;
        issue(&store, "taken".into(), Then::Record).await.expect("the first certificate");
        let mut tasks = Vec::new();
        for i in 0..120 {
            let store = store.clone();
            let (fingerprint, then) = match i % 6 {
                1 => ("taken".to_owned(), Then::Record),
                3 => (format!("refused{i:03}"), Then::Refuse),
                5 => (format!("returned{i:03}"), Then::Return),
                _ => (format!("recorded{i:03}"), Then::Record),
            };
            tasks.push(tokio::spawn(async move {
                let outcome = issue(&store, fingerprint.clone(), then).await;
                (fingerprint, outcome)
            }));
        }
        let mut stored = BTreeMap::new();
        for task in tasks {
            let (fingerprint, outcome) = task.await.expect("task");
            match (fingerprint.as_str(), outcome) {
                ("taken", Err(Outcome::Store(StoreError::Unique(_)))) => {}
                (refused, Err(Outcome::Refused)) if refused.starts_with("refused") => {}
                (_, Ok(id)) => {
                    stored.insert(fingerprint, id);
                }
                (fingerprint, outcome) => panic!("{fingerprint}: {outcome:?}"),
            }
        }
        assert_eq!(stored.len(), 80);
        if store.dialect == Dialect::Sqlite {
            assert!(crate::tx::HELD_INSERTS.load(std::sync::atomic::Ordering::Relaxed) > 0, "no insert was held");
        }
        let rows: Vec<(i64, String)> =
            sqlx::query_as("SELECT id, fingerprint_sha256 FROM certificates WHERE fingerprint_sha256 <> 'taken'")
                .fetch_all(&store.pool)
                .await
                .expect("rows");
        let rows: BTreeMap<String, i64> = rows.into_iter().map(|(id, fingerprint)| (fingerprint, id)).collect();
        assert_eq!(rows, stored, "every job was told its row's id, and only kept jobs have rows");
        for (fingerprint, id) in &stored {
            let audited: Vec<String> = sqlx::query_scalar("SELECT target_id FROM audit_logs WHERE details LIKE $1")
                .bind(format!("%\"{fingerprint}\"%"))
                .fetch_all(&store.pool)
                .await
                .expect("audit");
            let expected = if fingerprint.starts_with("returned") { vec![] } else { vec![id.to_string()] };
            assert_eq!(audited, expected, "{fingerprint}");
        }
        // Ids stay SQLite's own afterwards: a plain insert gets the next one.
        let next = issue(&store, "after".into(), Then::Record).await.expect("after");
        assert!(stored.values().all(|id| *id < next), "{next}");
    }
}
