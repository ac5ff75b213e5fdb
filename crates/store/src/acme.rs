//! The ACME server's storage (`AcmeStore`): directories, nonces, EAB keys, accounts, orders,
//! authorizations and challenges, shared by every replica. Nonces and EAB bindings are
//! consumed by conditional statements, so each happens once whichever replica asks.
//!
//! Reads take the store's kept read connections (`Store::reader`), not the pool: an ACME
//! request reads three to five times (directory, account, order, authorization, challenges)
//! and the pool's ping on release would double the round trips to SQLite's connection threads
//! (the issuance path's finding, docs/benchmarks.md; the ACME server's, "ACME server against
//! OpenBao").

use async_trait::async_trait;
use sqlx::any::AnyRow;
use sqlx::Row;
use trellis_core::acme::jws::Jwk;
use trellis_core::acme::{Account, AcmeStore, Authorization, Challenge, DirectoryConfig, EabKey, Identifier, Order};
use trellis_core::ports::StoreError;

use crate::{DbResult, Store, StoreResult};

/// The ACME server's rows, in the database.
#[derive(Clone)]
pub struct DbAcme {
    store: Store,
}

impl DbAcme {
    pub fn new(store: Store) -> Self {
        DbAcme { store }
    }
}

fn corrupt(what: &str) -> StoreError {
    StoreError::Database(format!("stored ACME {what} is unreadable"))
}

fn json_text<T: serde::de::DeserializeOwned>(row: &AnyRow, column: &str) -> StoreResult<T> {
    let text: String = row.try_get(column).db()?;
    serde_json::from_str(&text).map_err(|_| corrupt(column))
}

fn optional_json(row: &AnyRow, column: &str) -> StoreResult<Option<serde_json::Value>> {
    let text: Option<String> = row.try_get(column).db()?;
    text.map(|t| serde_json::from_str(&t).map_err(|_| corrupt(column))).transpose()
}

fn to_text<T: serde::Serialize>(value: &T) -> StoreResult<String> {
    serde_json::to_string(value).map_err(|err| StoreError::Database(err.to_string()))
}

const DIRECTORY: &str = "ca_id, workspace_id, enabled, external_account_required, default_template, profiles, \
                         challenge_types, order_lifetime_seconds, updated_at";
const EAB: &str = "id, workspace_id, ca_id, name, key_id, hmac_sealed, account_id, revoked_at, created_at";
const ACCOUNT: &str = "id, workspace_id, ca_id, thumbprint, jwk, status, contact, eab_key_id, created_at";
const ORDER: &str = "id, workspace_id, ca_id, account_id, status, identifiers, authorizations, profile, not_before, \
                     not_after, expires_at, error, certificate_id, certificate_pem, fingerprint, request_id, created_at, \
                     cert_id, replaces";
const AUTHZ: &str = "id, ca_id, account_id, identifier_type, identifier, wildcard, status, expires_at, created_at";
const CHALLENGE: &str = "id, authz_id, kind, token, status, validated_at, error, updated_at";

fn directory(row: &AnyRow) -> StoreResult<DirectoryConfig> {
    Ok(DirectoryConfig {
        ca_id: row.try_get("ca_id").db()?,
        workspace_id: row.try_get("workspace_id").db()?,
        enabled: row.try_get::<i64, _>("enabled").db()? != 0,
        external_account_required: row.try_get::<i64, _>("external_account_required").db()? != 0,
        default_template: row.try_get("default_template").db()?,
        profiles: json_text(row, "profiles")?,
        challenge_types: json_text(row, "challenge_types")?,
        order_lifetime_seconds: row.try_get("order_lifetime_seconds").db()?,
        updated_at: row.try_get("updated_at").db()?,
    })
}

fn eab(row: &AnyRow) -> StoreResult<EabKey> {
    Ok(EabKey {
        id: row.try_get("id").db()?,
        workspace_id: row.try_get("workspace_id").db()?,
        ca_id: row.try_get("ca_id").db()?,
        name: row.try_get("name").db()?,
        key_id: row.try_get("key_id").db()?,
        hmac_sealed: row.try_get("hmac_sealed").db()?,
        account_id: row.try_get("account_id").db()?,
        revoked_at: row.try_get("revoked_at").db()?,
        created_at: row.try_get("created_at").db()?,
    })
}

fn account(row: &AnyRow) -> StoreResult<Account> {
    let jwk: serde_json::Value = json_text(row, "jwk")?;
    Ok(Account {
        id: row.try_get("id").db()?,
        workspace_id: row.try_get("workspace_id").db()?,
        ca_id: row.try_get("ca_id").db()?,
        thumbprint: row.try_get("thumbprint").db()?,
        jwk: Jwk::from_value(&jwk).map_err(|_| corrupt("account key"))?,
        status: row.try_get("status").db()?,
        contact: json_text(row, "contact")?,
        eab_key_id: row.try_get("eab_key_id").db()?,
        created_at: row.try_get("created_at").db()?,
    })
}

fn identifiers_from(value: serde_json::Value) -> StoreResult<Vec<Identifier>> {
    let list = value.as_array().ok_or_else(|| corrupt("identifiers"))?;
    list.iter()
        .map(|v| {
            Ok(Identifier {
                kind: v.get("type").and_then(|t| t.as_str()).ok_or_else(|| corrupt("identifiers"))?.to_owned(),
                value: v.get("value").and_then(|t| t.as_str()).ok_or_else(|| corrupt("identifiers"))?.to_owned(),
            })
        })
        .collect()
}

fn order(row: &AnyRow) -> StoreResult<Order> {
    Ok(Order {
        id: row.try_get("id").db()?,
        workspace_id: row.try_get("workspace_id").db()?,
        ca_id: row.try_get("ca_id").db()?,
        account_id: row.try_get("account_id").db()?,
        status: row.try_get("status").db()?,
        identifiers: identifiers_from(json_text(row, "identifiers")?)?,
        authorizations: json_text(row, "authorizations")?,
        profile: row.try_get("profile").db()?,
        not_before: row.try_get("not_before").db()?,
        not_after: row.try_get("not_after").db()?,
        expires_at: row.try_get("expires_at").db()?,
        error: optional_json(row, "error")?,
        certificate_id: row.try_get("certificate_id").db()?,
        certificate_pem: row.try_get("certificate_pem").db()?,
        fingerprint: row.try_get("fingerprint").db()?,
        request_id: request_id_from(row)?,
        cert_id: row.try_get("cert_id").db()?,
        replaces: row.try_get("replaces").db()?,
        created_at: row.try_get("created_at").db()?,
    })
}

/// `acme_orders.request_id` is a TEXT column (0520) holding a certificate request's integer id:
/// written as its decimal text, read back and parsed, so both dialects store and decode it (a
/// bound i64 is refused by PostgreSQL's TEXT and not decodable from SQLite's TEXT affinity).
fn request_id_to_text(id: Option<i64>) -> Option<String> {
    id.map(|id| id.to_string())
}

fn request_id_from(row: &AnyRow) -> StoreResult<Option<i64>> {
    let text: Option<String> = row.try_get("request_id").db()?;
    text.map(|t| t.parse().map_err(|_| corrupt("request_id"))).transpose()
}

fn authz(row: &AnyRow) -> StoreResult<Authorization> {
    Ok(Authorization {
        id: row.try_get("id").db()?,
        ca_id: row.try_get("ca_id").db()?,
        account_id: row.try_get("account_id").db()?,
        identifier: Identifier { kind: row.try_get("identifier_type").db()?, value: row.try_get("identifier").db()? },
        wildcard: row.try_get::<i64, _>("wildcard").db()? != 0,
        status: row.try_get("status").db()?,
        expires_at: row.try_get("expires_at").db()?,
        created_at: row.try_get("created_at").db()?,
    })
}

fn challenge(row: &AnyRow) -> StoreResult<Challenge> {
    Ok(Challenge {
        id: row.try_get("id").db()?,
        authz_id: row.try_get("authz_id").db()?,
        kind: row.try_get("kind").db()?,
        token: row.try_get("token").db()?,
        status: row.try_get("status").db()?,
        validated_at: row.try_get("validated_at").db()?,
        error: optional_json(row, "error")?,
        updated_at: row.try_get("updated_at").db()?,
    })
}

impl DbAcme {
    /// The CA's one order matching `condition` on `$2` (the certID columns of ARI).
    async fn order_where(&self, condition: &str, ca_id: i64, value: &str) -> StoreResult<Option<Order>> {
        sqlx::query(&format!("SELECT {ORDER} FROM acme_orders WHERE ca_id = $1 AND {condition}"))
            .bind(ca_id)
            .bind(value)
            .fetch_optional(&mut *self.store.reader().await?)
            .await
            .db()?
            .as_ref()
            .map(order)
            .transpose()
    }

    async fn one<T>(&self, sql: &str, binds: &[&str], map: fn(&AnyRow) -> StoreResult<T>) -> StoreResult<Option<T>> {
        let mut query = sqlx::query(sql);
        for bind in binds {
            query = query.bind(*bind);
        }
        query.fetch_optional(&mut *self.store.reader().await?).await.db()?.as_ref().map(map).transpose()
    }
}

#[async_trait]
impl AcmeStore for DbAcme {
    async fn directory(&self, ca_id: i64) -> StoreResult<Option<DirectoryConfig>> {
        sqlx::query(&format!("SELECT {DIRECTORY} FROM acme_directories WHERE ca_id = $1"))
            .bind(ca_id)
            .fetch_optional(&mut *self.store.reader().await?)
            .await
            .db()?
            .as_ref()
            .map(directory)
            .transpose()
    }

    async fn put_directory(&self, c: &DirectoryConfig) -> StoreResult<()> {
        // Both dialects take the same upsert.
        let conflict = "ON CONFLICT (ca_id) DO UPDATE SET enabled = excluded.enabled, \
            external_account_required = excluded.external_account_required, \
            default_template = excluded.default_template, profiles = excluded.profiles, \
            challenge_types = excluded.challenge_types, \
            order_lifetime_seconds = excluded.order_lifetime_seconds, updated_at = excluded.updated_at";
        sqlx::query(&format!(
            "INSERT INTO acme_directories ({DIRECTORY}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) {conflict}"
        ))
        .bind(c.ca_id)
        .bind(&c.workspace_id)
        .bind(i64::from(c.enabled))
        .bind(i64::from(c.external_account_required))
        .bind(&c.default_template)
        .bind(to_text(&c.profiles)?)
        .bind(to_text(&c.challenge_types)?)
        .bind(c.order_lifetime_seconds)
        .bind(c.updated_at)
        .execute(&self.store.pool)
        .await
        .db()
        .map(|_| ())
    }

    async fn insert_nonce(&self, nonce: &str, expires_at: i64) -> StoreResult<()> {
        sqlx::query("INSERT INTO acme_nonces (nonce, expires_at) VALUES ($1, $2)")
            .bind(nonce)
            .bind(expires_at)
            .execute(&self.store.pool)
            .await
            .db()
            .map(|_| ())
    }

    async fn consume_nonce(&self, nonce: &str, now: i64) -> StoreResult<bool> {
        // One statement (every ACME POST runs it): the nonce goes, and expired nonces with it
        // (both by index); the nonce was good when it came back unexpired.
        let gone =
            sqlx::query("DELETE FROM acme_nonces WHERE nonce = $1 OR expires_at <= $2 RETURNING nonce, expires_at")
                .bind(nonce)
                .bind(now)
                .fetch_all(&self.store.pool)
                .await
                .db()?;
        for row in &gone {
            if row.try_get::<String, _>("nonce").db()? == nonce {
                return Ok(row.try_get::<i64, _>("expires_at").db()? > now);
            }
        }
        Ok(false)
    }

    async fn insert_eab_key(&self, k: &EabKey) -> StoreResult<()> {
        sqlx::query(&format!("INSERT INTO acme_eab_keys ({EAB}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"))
            .bind(&k.id)
            .bind(&k.workspace_id)
            .bind(k.ca_id)
            .bind(&k.name)
            .bind(&k.key_id)
            .bind(&k.hmac_sealed)
            .bind(&k.account_id)
            .bind(k.revoked_at)
            .bind(k.created_at)
            .execute(&self.store.pool)
            .await
            .db()
            .map(|_| ())
    }

    async fn eab_key_by_key_id(&self, key_id: &str) -> StoreResult<Option<EabKey>> {
        self.one(&format!("SELECT {EAB} FROM acme_eab_keys WHERE key_id = $1"), &[key_id], eab).await
    }

    async fn eab_keys(&self, workspace_id: &str) -> StoreResult<Vec<EabKey>> {
        let rows =
            sqlx::query(&format!("SELECT {EAB} FROM acme_eab_keys WHERE workspace_id = $1 ORDER BY created_at, id"))
                .bind(workspace_id)
                .fetch_all(&mut *self.store.reader().await?)
                .await
                .db()?;
        rows.iter().map(eab).collect()
    }

    async fn revoke_eab_key(&self, workspace_id: &str, id: &str, at: i64) -> StoreResult<bool> {
        let done = sqlx::query(
            "UPDATE acme_eab_keys SET revoked_at = $1 WHERE id = $2 AND workspace_id = $3 AND revoked_at IS NULL",
        )
        .bind(at)
        .bind(id)
        .bind(workspace_id)
        .execute(&self.store.pool)
        .await
        .db()?;
        Ok(done.rows_affected() == 1)
    }

    async fn bind_eab_key(&self, id: &str, account_id: &str) -> StoreResult<bool> {
        let done = sqlx::query(
            "UPDATE acme_eab_keys SET account_id = $1 WHERE id = $2 AND account_id IS NULL AND revoked_at IS NULL",
        )
        .bind(account_id)
        .bind(id)
        .execute(&self.store.pool)
        .await
        .db()?;
        Ok(done.rows_affected() == 1)
    }

    async fn unbind_eab_key(&self, id: &str, account_id: &str) -> StoreResult<()> {
        sqlx::query("UPDATE acme_eab_keys SET account_id = NULL WHERE id = $1 AND account_id = $2")
            .bind(id)
            .bind(account_id)
            .execute(&self.store.pool)
            .await
            .db()
            .map(|_| ())
    }

    async fn insert_account(&self, a: &Account) -> StoreResult<()> {
        sqlx::query(&format!("INSERT INTO acme_accounts ({ACCOUNT}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"))
            .bind(&a.id)
            .bind(&a.workspace_id)
            .bind(a.ca_id)
            .bind(&a.thumbprint)
            .bind(a.jwk.to_value().to_string())
            .bind(&a.status)
            .bind(to_text(&a.contact)?)
            .bind(&a.eab_key_id)
            .bind(a.created_at)
            .execute(&self.store.pool)
            .await
            .db()
            .map(|_| ())
    }

    async fn account(&self, ca_id: i64, id: &str) -> StoreResult<Option<Account>> {
        sqlx::query(&format!("SELECT {ACCOUNT} FROM acme_accounts WHERE id = $1 AND ca_id = $2"))
            .bind(id)
            .bind(ca_id)
            .fetch_optional(&mut *self.store.reader().await?)
            .await
            .db()?
            .as_ref()
            .map(account)
            .transpose()
    }

    async fn account_in_workspace(&self, workspace_id: &str, id: &str) -> StoreResult<Option<Account>> {
        self.one(
            &format!("SELECT {ACCOUNT} FROM acme_accounts WHERE id = $1 AND workspace_id = $2"),
            &[id, workspace_id],
            account,
        )
        .await
    }

    async fn account_by_thumbprint(&self, ca_id: i64, thumbprint: &str) -> StoreResult<Option<Account>> {
        sqlx::query(&format!("SELECT {ACCOUNT} FROM acme_accounts WHERE ca_id = $1 AND thumbprint = $2"))
            .bind(ca_id)
            .bind(thumbprint)
            .fetch_optional(&mut *self.store.reader().await?)
            .await
            .db()?
            .as_ref()
            .map(account)
            .transpose()
    }

    async fn accounts(&self, workspace_id: &str) -> StoreResult<Vec<Account>> {
        let rows = sqlx::query(&format!(
            "SELECT {ACCOUNT} FROM acme_accounts WHERE workspace_id = $1 ORDER BY created_at, id"
        ))
        .bind(workspace_id)
        .fetch_all(&mut *self.store.reader().await?)
        .await
        .db()?;
        rows.iter().map(account).collect()
    }

    async fn update_account(&self, a: &Account) -> StoreResult<()> {
        sqlx::query("UPDATE acme_accounts SET thumbprint = $1, jwk = $2, status = $3, contact = $4 WHERE id = $5")
            .bind(&a.thumbprint)
            .bind(a.jwk.to_value().to_string())
            .bind(&a.status)
            .bind(to_text(&a.contact)?)
            .bind(&a.id)
            .execute(&self.store.pool)
            .await
            .db()
            .map(|_| ())
    }

    async fn insert_order(&self, o: &Order) -> StoreResult<()> {
        let identifiers: Vec<serde_json::Value> = o.identifiers.iter().map(Identifier::to_value).collect();
        sqlx::query(&format!(
            "INSERT INTO acme_orders ({ORDER}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, \
             $15, $16, $17, $18, $19)"
        ))
        .bind(&o.id)
        .bind(&o.workspace_id)
        .bind(o.ca_id)
        .bind(&o.account_id)
        .bind(&o.status)
        .bind(to_text(&identifiers)?)
        .bind(to_text(&o.authorizations)?)
        .bind(&o.profile)
        .bind(&o.not_before)
        .bind(&o.not_after)
        .bind(o.expires_at)
        .bind(o.error.as_ref().map(|e| e.to_string()))
        .bind(o.certificate_id)
        .bind(&o.certificate_pem)
        .bind(&o.fingerprint)
        .bind(request_id_to_text(o.request_id))
        .bind(o.created_at)
        .bind(&o.cert_id)
        .bind(&o.replaces)
        .execute(&self.store.pool)
        .await
        .db()
        .map(|_| ())
    }

    async fn order(&self, ca_id: i64, id: &str) -> StoreResult<Option<Order>> {
        sqlx::query(&format!("SELECT {ORDER} FROM acme_orders WHERE id = $1 AND ca_id = $2"))
            .bind(id)
            .bind(ca_id)
            .fetch_optional(&mut *self.store.reader().await?)
            .await
            .db()?
            .as_ref()
            .map(order)
            .transpose()
    }

    async fn order_by_fingerprint(&self, ca_id: i64, fingerprint: &str) -> StoreResult<Option<Order>> {
        sqlx::query(&format!("SELECT {ORDER} FROM acme_orders WHERE ca_id = $1 AND fingerprint = $2"))
            .bind(ca_id)
            .bind(fingerprint)
            .fetch_optional(&mut *self.store.reader().await?)
            .await
            .db()?
            .as_ref()
            .map(order)
            .transpose()
    }

    async fn update_order(&self, o: &Order) -> StoreResult<()> {
        sqlx::query(
            "UPDATE acme_orders SET status = $1, error = $2, certificate_id = $3, certificate_pem = $4, \
             fingerprint = $5, request_id = $6, cert_id = $7 WHERE id = $8",
        )
        .bind(&o.status)
        .bind(o.error.as_ref().map(|e| e.to_string()))
        .bind(o.certificate_id)
        .bind(&o.certificate_pem)
        .bind(&o.fingerprint)
        .bind(request_id_to_text(o.request_id))
        .bind(&o.cert_id)
        .bind(&o.id)
        .execute(&self.store.pool)
        .await
        .db()
        .map(|_| ())
    }

    async fn order_by_cert_id(&self, ca_id: i64, cert_id: &str) -> StoreResult<Option<Order>> {
        self.order_where("cert_id = $2", ca_id, cert_id).await
    }

    async fn replacing_order(&self, ca_id: i64, cert_id: &str) -> StoreResult<Option<Order>> {
        self.order_where("replaces = $2 AND status <> 'invalid'", ca_id, cert_id).await
    }

    async fn count_orders_since(&self, account_id: &str, since: i64) -> StoreResult<i64> {
        let row = sqlx::query("SELECT COUNT(*) AS n FROM acme_orders WHERE account_id = $1 AND created_at >= $2")
            .bind(account_id)
            .bind(since)
            .fetch_one(&mut *self.store.reader().await?)
            .await
            .db()?;
        row.try_get::<i64, _>("n").db()
    }

    async fn order_ids(&self, account_id: &str) -> StoreResult<Vec<String>> {
        let rows = sqlx::query("SELECT id FROM acme_orders WHERE account_id = $1 ORDER BY created_at, id")
            .bind(account_id)
            .fetch_all(&mut *self.store.reader().await?)
            .await
            .db()?;
        rows.iter().map(|r| r.try_get::<String, _>("id").db()).collect()
    }

    async fn insert_authorization(&self, a: &Authorization) -> StoreResult<()> {
        sqlx::query(&format!("INSERT INTO acme_authorizations ({AUTHZ}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"))
            .bind(&a.id)
            .bind(a.ca_id)
            .bind(&a.account_id)
            .bind(&a.identifier.kind)
            .bind(&a.identifier.value)
            .bind(i64::from(a.wildcard))
            .bind(&a.status)
            .bind(a.expires_at)
            .bind(a.created_at)
            .execute(&self.store.pool)
            .await
            .db()
            .map(|_| ())
    }

    async fn authorization(&self, ca_id: i64, id: &str) -> StoreResult<Option<Authorization>> {
        sqlx::query(&format!("SELECT {AUTHZ} FROM acme_authorizations WHERE id = $1 AND ca_id = $2"))
            .bind(id)
            .bind(ca_id)
            .fetch_optional(&mut *self.store.reader().await?)
            .await
            .db()?
            .as_ref()
            .map(authz)
            .transpose()
    }

    async fn authorization_by_id(&self, id: &str) -> StoreResult<Option<Authorization>> {
        self.one(&format!("SELECT {AUTHZ} FROM acme_authorizations WHERE id = $1"), &[id], authz).await
    }

    async fn reusable_authorization(
        &self,
        account_id: &str,
        identifier: &Identifier,
        wildcard: bool,
        now: i64,
    ) -> StoreResult<Option<Authorization>> {
        sqlx::query(&format!(
            "SELECT {AUTHZ} FROM acme_authorizations WHERE account_id = $1 AND identifier_type = $2 AND identifier = $3 \
             AND wildcard = $4 AND status = 'valid' AND expires_at > $5 ORDER BY expires_at DESC LIMIT 1"
        ))
        .bind(account_id)
        .bind(&identifier.kind)
        .bind(&identifier.value)
        .bind(i64::from(wildcard))
        .bind(now)
        .fetch_optional(&mut *self.store.reader().await?)
        .await
        .db()?
        .as_ref()
        .map(authz)
        .transpose()
    }

    async fn update_authorization_status(&self, id: &str, status: &str) -> StoreResult<()> {
        sqlx::query("UPDATE acme_authorizations SET status = $1 WHERE id = $2")
            .bind(status)
            .bind(id)
            .execute(&self.store.pool)
            .await
            .db()
            .map(|_| ())
    }

    async fn count_pending_authorizations(&self, account_id: &str, now: i64) -> StoreResult<i64> {
        let row = sqlx::query(
            "SELECT COUNT(*) AS n FROM acme_authorizations WHERE account_id = $1 AND status = 'pending' AND expires_at > $2",
        )
        .bind(account_id)
        .bind(now)
        .fetch_one(&mut *self.store.reader().await?)
        .await
        .db()?;
        row.try_get::<i64, _>("n").db()
    }

    async fn insert_challenge(&self, c: &Challenge) -> StoreResult<()> {
        sqlx::query(&format!("INSERT INTO acme_challenges ({CHALLENGE}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"))
            .bind(&c.id)
            .bind(&c.authz_id)
            .bind(&c.kind)
            .bind(&c.token)
            .bind(&c.status)
            .bind(c.validated_at)
            .bind(c.error.as_ref().map(|e| e.to_string()))
            .bind(c.updated_at)
            .execute(&self.store.pool)
            .await
            .db()
            .map(|_| ())
    }

    async fn challenge(&self, id: &str) -> StoreResult<Option<Challenge>> {
        self.one(&format!("SELECT {CHALLENGE} FROM acme_challenges WHERE id = $1"), &[id], challenge).await
    }

    async fn challenges(&self, authz_id: &str) -> StoreResult<Vec<Challenge>> {
        let rows = sqlx::query(&format!("SELECT {CHALLENGE} FROM acme_challenges WHERE authz_id = $1 ORDER BY kind"))
            .bind(authz_id)
            .fetch_all(&mut *self.store.reader().await?)
            .await
            .db()?;
        rows.iter().map(challenge).collect()
    }

    async fn update_challenge(&self, c: &Challenge, from: &str) -> StoreResult<bool> {
        let done = sqlx::query(
            "UPDATE acme_challenges SET status = $1, validated_at = $2, error = $3, updated_at = $4 \
             WHERE id = $5 AND status = $6",
        )
        .bind(&c.status)
        .bind(c.validated_at)
        .bind(c.error.as_ref().map(|e| e.to_string()))
        .bind(c.updated_at)
        .bind(&c.id)
        .bind(from)
        .execute(&self.store.pool)
        .await
        .db()?;
        Ok(done.rows_affected() == 1)
    }

    async fn stale_processing_challenges(&self, before: i64) -> StoreResult<Vec<Challenge>> {
        let rows = sqlx::query(&format!(
            "SELECT {CHALLENGE} FROM acme_challenges WHERE status = 'processing' AND updated_at < $1 LIMIT 100"
        ))
        .bind(before)
        .fetch_all(&mut *self.store.reader().await?)
        .await
        .db()?;
        rows.iter().map(challenge).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(id: &str, replaces: Option<&str>) -> Order {
        Order {
            id: id.into(),
            workspace_id: "ws".into(),
            ca_id: 7,
            account_id: "acct_1".into(),
            status: "pending".into(),
            identifiers: vec![Identifier { kind: "dns".into(), value: "a.example.test".into() }],
            authorizations: Vec::new(),
            profile: None,
            not_before: None,
            not_after: None,
            expires_at: 1,
            error: None,
            certificate_id: None,
            certificate_pem: None,
            fingerprint: None,
            request_id: None,
            cert_id: None,
            replaces: replaces.map(str::to_owned),
            created_at: 1,
        }
    }

    /// RFC 9773 §5's "once" is the database's: a second live order replacing the same
    /// certificate is a uniqueness violation, an `invalid` one frees the certificate.
    #[tokio::test]
    async fn a_certificate_is_replaced_once_while_the_replacement_lives() {
        let (_dir, store) = crate::testing::store().await;
        let acme = DbAcme::new(store);
        acme.insert_order(&order("order_plain_1", None)).await.expect("no replaces");
        acme.insert_order(&order("order_plain_2", None)).await.expect("many orders replace nothing");
        let mut first = order("order_r1", Some("aki.serial"));
        acme.insert_order(&first).await.expect("the first replacement");
        let second = acme.insert_order(&order("order_r2", Some("aki.serial"))).await;
        assert!(matches!(second, Err(StoreError::Unique(_))), "{second:?}");
        acme.insert_order(&order("order_other", Some("aki.other"))).await.expect("another certificate");
        assert_eq!(
            acme.replacing_order(7, "aki.serial").await.expect("read").map(|o| o.id).as_deref(),
            Some("order_r1")
        );

        first.status = "invalid".into();
        acme.update_order(&first).await.expect("invalid");
        assert!(acme.replacing_order(7, "aki.serial").await.expect("read").is_none());
        acme.insert_order(&order("order_r3", Some("aki.serial"))).await.expect("a failed replacement frees it");

        let mut issued = order("order_issued", None);
        issued.cert_id = Some("aki.issued".into());
        issued.status = "valid".into();
        acme.insert_order(&issued).await.expect("issued");
        assert_eq!(
            acme.order_by_cert_id(7, "aki.issued").await.expect("read").map(|o| o.id).as_deref(),
            Some("order_issued")
        );
        assert!(acme.order_by_cert_id(8, "aki.issued").await.expect("read").is_none(), "another CA's");
    }

    /// A nonce is good once, before it expires; consuming any nonce sweeps the expired ones.
    #[tokio::test]
    async fn a_nonce_is_consumed_once_and_expired_ones_go_with_any_consume() {
        let (_dir, store) = crate::testing::store().await;
        let acme = DbAcme::new(store.clone());
        let now = 1_000_000;
        acme.insert_nonce("fresh", now + 60_000).await.expect("insert");
        acme.insert_nonce("stale", now - 1).await.expect("insert");
        acme.insert_nonce("edge", now).await.expect("insert");
        acme.insert_nonce("other", now + 60_000).await.expect("insert");

        assert!(acme.consume_nonce("fresh", now).await.expect("consume"), "a fresh nonce is good");
        assert!(!acme.consume_nonce("fresh", now).await.expect("consume"), "and only once");
        assert!(!acme.consume_nonce("edge", now).await.expect("consume"), "a nonce expiring now is not good");
        assert!(!acme.consume_nonce("unknown", now).await.expect("consume"), "an unknown nonce is not good");
        let left: Vec<String> = sqlx::query_scalar("SELECT nonce FROM acme_nonces ORDER BY nonce")
            .fetch_all(&store.pool)
            .await
            .expect("list");
        assert_eq!(left, vec!["other".to_owned()], "expired nonces were swept, the unused fresh one stays");
        assert!(acme.consume_nonce("other", now + 59_999).await.expect("consume"));
    }
}
