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
use trellis_core::acme::{
    Account, AccountStatus, AcmeStore, Authorization, AuthorizationStatus, Challenge, ChallengeStatus, DirectoryConfig,
    EabKey, Identifier, Order, OrderStatus,
};
use trellis_core::ports::StoreError;

use crate::{state_column, DbResult, Store, StoreResult};

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
        status: state_column(row, "ACME account", AccountStatus::parse)?,
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
        status: state_column(row, "ACME order", OrderStatus::parse)?,
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
        status: state_column(row, "ACME authorization", AuthorizationStatus::parse)?,
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
        status: state_column(row, "ACME challenge", ChallengeStatus::parse)?,
        validated_at: row.try_get("validated_at").db()?,
        error: optional_json(row, "error")?,
        updated_at: row.try_get("updated_at").db()?,
    })
}

const INSERT_ORDER: (&str, usize) = (
    "INSERT INTO acme_orders (id, workspace_id, ca_id, account_id, status, identifiers, authorizations, profile, \
     not_before, not_after, expires_at, error, certificate_id, certificate_pem, fingerprint, request_id, created_at, \
     cert_id, replaces)",
    19,
);
const INSERT_AUTHZ: (&str, usize) = (
    "INSERT INTO acme_authorizations (id, ca_id, account_id, identifier_type, identifier, wildcard, status, \
     expires_at, created_at)",
    9,
);
const INSERT_CHALLENGE: (&str, usize) =
    ("INSERT INTO acme_challenges (id, authz_id, kind, token, status, validated_at, error, updated_at)", 8);

/// An order's JSON columns as text, made before binding (serializing can fail).
struct OrderTexts {
    identifiers: String,
    authorizations: String,
    error: Option<String>,
}

impl OrderTexts {
    fn of(o: &Order) -> StoreResult<OrderTexts> {
        let identifiers: Vec<serde_json::Value> = o.identifiers.iter().map(Identifier::to_value).collect();
        Ok(OrderTexts {
            identifiers: to_text(&identifiers)?,
            authorizations: to_text(&o.authorizations)?,
            error: o.error.as_ref().map(|e| e.to_string()),
        })
    }
}

fn bind_order<'q>(query: crate::AnyQuery<'q>, o: &'q Order, texts: &'q OrderTexts) -> crate::AnyQuery<'q> {
    query
        .bind(&o.id)
        .bind(&o.workspace_id)
        .bind(o.ca_id)
        .bind(&o.account_id)
        .bind(o.status.as_str())
        .bind(&texts.identifiers)
        .bind(&texts.authorizations)
        .bind(&o.profile)
        .bind(&o.not_before)
        .bind(&o.not_after)
        .bind(o.expires_at)
        .bind(&texts.error)
        .bind(o.certificate_id)
        .bind(&o.certificate_pem)
        .bind(&o.fingerprint)
        .bind(request_id_to_text(o.request_id))
        .bind(o.created_at)
        .bind(&o.cert_id)
        .bind(&o.replaces)
}

fn bind_authz<'q>(query: crate::AnyQuery<'q>, a: &'q Authorization) -> crate::AnyQuery<'q> {
    query
        .bind(&a.id)
        .bind(a.ca_id)
        .bind(&a.account_id)
        .bind(&a.identifier.kind)
        .bind(&a.identifier.value)
        .bind(i64::from(a.wildcard))
        .bind(a.status.as_str())
        .bind(a.expires_at)
        .bind(a.created_at)
}

fn bind_challenge<'q>(query: crate::AnyQuery<'q>, c: &'q Challenge, error: &'q Option<String>) -> crate::AnyQuery<'q> {
    query
        .bind(&c.id)
        .bind(&c.authz_id)
        .bind(&c.kind)
        .bind(&c.token)
        .bind(c.status.as_str())
        .bind(c.validated_at)
        .bind(error)
        .bind(c.updated_at)
}

impl DbAcme {
    /// One statement of the hot path (a nonce spent, an order or a challenge moved) through the
    /// store's writer; answers the rows it changed. On SQLite a statement on a pooled connection
    /// would bypass the writer's queue and wait out its open transaction in SQLite's busy
    /// handler, which sleeps in steps of up to 100 ms.
    async fn write_one<F>(&self, statement: F) -> StoreResult<u64>
    where
        F: for<'t> FnOnce(
                &'t mut crate::Tx,
            ) -> futures_util::future::BoxFuture<'t, StoreResult<sqlx::any::AnyQueryResult>>
            + Send
            + 'static,
    {
        self.store
            .write(move |tx: &mut crate::Tx| Box::pin(async move { Ok(statement(tx).await?.rows_affected()) }))
            .await
    }

    /// Writes the order's mutable fields, only if its stored status is `from` when given;
    /// answers the rows changed.
    async fn write_order(&self, o: &Order, from: Option<OrderStatus>) -> StoreResult<u64> {
        let o = o.clone();
        self.write_one(move |tx: &mut crate::Tx| {
            Box::pin(async move {
                let sql = match from {
                    Some(_) => format!("{UPDATE_ORDER} WHERE id = $8 AND status = $9"),
                    None => format!("{UPDATE_ORDER} WHERE id = $8"),
                };
                let mut query = bind_order_update(sqlx::query(&sql), &o);
                if let Some(from) = from {
                    query = query.bind(from.as_str());
                }
                query.execute(tx.conn().await?).await.db()
            })
        })
        .await
    }

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

    async fn spend_nonce(&self, nonce: &str, expires_at: i64) -> StoreResult<bool> {
        // One statement per ACME POST: the nonce is recorded as spent; the primary key makes
        // the second spend of a nonce, on any replica, insert nothing.
        let nonce = nonce.to_owned();
        self.write_one(move |tx: &mut crate::Tx| {
            Box::pin(async move {
                sqlx::query(
                    "INSERT INTO acme_nonces (nonce, expires_at) VALUES ($1, $2) ON CONFLICT (nonce) DO NOTHING",
                )
                .bind(&nonce)
                .bind(expires_at)
                .execute(tx.conn().await?)
                .await
                .db()
            })
        })
        .await
        .map(|changed| changed == 1)
    }

    async fn sweep_nonces(&self, now: i64) -> StoreResult<u64> {
        let done = sqlx::query("DELETE FROM acme_nonces WHERE expires_at <= $1")
            .bind(now)
            .execute(&self.store.pool)
            .await
            .db()?;
        Ok(done.rows_affected())
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
            .bind(a.status.as_str())
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
            .bind(a.status.as_str())
            .bind(to_text(&a.contact)?)
            .bind(&a.id)
            .execute(&self.store.pool)
            .await
            .db()
            .map(|_| ())
    }

    async fn insert_order(&self, o: &Order) -> StoreResult<()> {
        let texts = OrderTexts::of(o)?;
        bind_order(sqlx::query(&crate::insert_sql(INSERT_ORDER, 1)), o, &texts)
            .execute(&self.store.pool)
            .await
            .db()
            .map(|_| ())
    }

    async fn insert_order_with_authorizations(
        &self,
        order: &Order,
        authorizations: &[(Authorization, Vec<Challenge>)],
    ) -> StoreResult<()> {
        let order = order.clone();
        let texts = OrderTexts::of(&order)?;
        let rows: Vec<(Authorization, Vec<(Challenge, Option<String>)>)> = authorizations
            .iter()
            .map(|(a, cs)| {
                (a.clone(), cs.iter().map(|c| (c.clone(), c.error.as_ref().map(|e| e.to_string()))).collect())
            })
            .collect();
        self.store
            .write(move |tx: &mut crate::Tx| {
                Box::pin(async move {
                    // SQLite runs every statement of one text, binding `$n` across them: the
                    // whole newOrder is one round trip to the writer's connection thread
                    // (`Tx::insert_rows` does the same). PostgreSQL prepares one statement per
                    // text.
                    let mut texts_sql = Vec::new();
                    let mut next = 1;
                    for (_, challenges) in &rows {
                        texts_sql.push(crate::insert_sql(INSERT_AUTHZ, next));
                        next += INSERT_AUTHZ.1;
                        for _ in challenges {
                            texts_sql.push(crate::insert_sql(INSERT_CHALLENGE, next));
                            next += INSERT_CHALLENGE.1;
                        }
                    }
                    texts_sql.push(crate::insert_sql(INSERT_ORDER, next));
                    if tx.dialect == crate::Dialect::Sqlite {
                        let sql = texts_sql.join(";\n");
                        let mut query = sqlx::query(&sql);
                        for (authz, challenges) in &rows {
                            query = bind_authz(query, authz);
                            for (challenge, error) in challenges {
                                query = bind_challenge(query, challenge, error);
                            }
                        }
                        bind_order(query, &order, &texts).execute(tx.conn().await?).await.db()?;
                        return Ok(());
                    }
                    for (authz, challenges) in &rows {
                        let sql = crate::insert_sql(INSERT_AUTHZ, 1);
                        bind_authz(sqlx::query(&sql), authz).execute(tx.conn().await?).await.db()?;
                        for (challenge, error) in challenges {
                            let sql = crate::insert_sql(INSERT_CHALLENGE, 1);
                            bind_challenge(sqlx::query(&sql), challenge, error).execute(tx.conn().await?).await.db()?;
                        }
                    }
                    let sql = crate::insert_sql(INSERT_ORDER, 1);
                    bind_order(sqlx::query(&sql), &order, &texts).execute(tx.conn().await?).await.db()?;
                    Ok::<_, StoreError>(())
                })
            })
            .await
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
        self.write_order(o, None).await.map(|_| ())
    }

    async fn update_order_from(&self, o: &Order, from: OrderStatus) -> StoreResult<bool> {
        self.write_order(o, Some(from)).await.map(|changed| changed == 1)
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
        bind_authz(sqlx::query(&crate::insert_sql(INSERT_AUTHZ, 1)), a).execute(&self.store.pool).await.db().map(|_| ())
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

    async fn update_authorization_status(&self, id: &str, status: AuthorizationStatus) -> StoreResult<()> {
        sqlx::query("UPDATE acme_authorizations SET status = $1 WHERE id = $2")
            .bind(status.as_str())
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
        let error = c.error.as_ref().map(|e| e.to_string());
        bind_challenge(sqlx::query(&crate::insert_sql(INSERT_CHALLENGE, 1)), c, &error)
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

    async fn update_challenge(&self, c: &Challenge, from: ChallengeStatus) -> StoreResult<bool> {
        let c = c.clone();
        self.write_one(move |tx: &mut crate::Tx| {
            Box::pin(async move {
                bind_challenge_update(sqlx::query(UPDATE_CHALLENGE), &c, from).execute(tx.conn().await?).await.db()
            })
        })
        .await
        .map(|changed| changed == 1)
    }

    async fn record_validation(
        &self,
        c: &Challenge,
        from: ChallengeStatus,
        authz_status: AuthorizationStatus,
    ) -> StoreResult<bool> {
        let c = c.clone();
        self.store
            .write(move |tx: &mut crate::Tx| {
                Box::pin(async move {
                    let moved = bind_challenge_update(sqlx::query(UPDATE_CHALLENGE), &c, from)
                        .execute(tx.conn().await?)
                        .await
                        .db()?
                        .rows_affected()
                        == 1;
                    if moved {
                        sqlx::query("UPDATE acme_authorizations SET status = $1 WHERE id = $2")
                            .bind(authz_status.as_str())
                            .bind(&c.authz_id)
                            .execute(tx.conn().await?)
                            .await
                            .db()?;
                    }
                    Ok::<_, StoreError>(moved)
                })
            })
            .await
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

/// An order's mutable fields, `$1`..`$7`; the caller adds the `WHERE` from `$8` (the id).
const UPDATE_ORDER: &str =
    "UPDATE acme_orders SET status = $1, error = $2, certificate_id = $3, certificate_pem = $4, \
     fingerprint = $5, request_id = $6, cert_id = $7";

fn bind_order_update<'q>(query: crate::AnyQuery<'q>, o: &'q Order) -> crate::AnyQuery<'q> {
    query
        .bind(o.status.as_str())
        .bind(o.error.as_ref().map(|e| e.to_string()))
        .bind(o.certificate_id)
        .bind(&o.certificate_pem)
        .bind(&o.fingerprint)
        .bind(request_id_to_text(o.request_id))
        .bind(&o.cert_id)
        .bind(&o.id)
}

/// A challenge's compare-and-set from the status `$6`.
const UPDATE_CHALLENGE: &str =
    "UPDATE acme_challenges SET status = $1, validated_at = $2, error = $3, updated_at = $4 \
     WHERE id = $5 AND status = $6";

fn bind_challenge_update<'q>(
    query: crate::AnyQuery<'q>,
    c: &'q Challenge,
    from: ChallengeStatus,
) -> crate::AnyQuery<'q> {
    query
        .bind(c.status.as_str())
        .bind(c.validated_at)
        .bind(c.error.as_ref().map(|e| e.to_string()))
        .bind(c.updated_at)
        .bind(&c.id)
        .bind(from.as_str())
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
            status: OrderStatus::Pending,
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

        first.status = OrderStatus::Invalid;
        acme.update_order(&first).await.expect("invalid");
        assert!(acme.replacing_order(7, "aki.serial").await.expect("read").is_none());
        acme.insert_order(&order("order_r3", Some("aki.serial"))).await.expect("a failed replacement frees it");

        let mut issued = order("order_issued", None);
        issued.cert_id = Some("aki.issued".into());
        issued.status = OrderStatus::Valid;
        acme.insert_order(&issued).await.expect("issued");
        assert_eq!(
            acme.order_by_cert_id(7, "aki.issued").await.expect("read").map(|o| o.id).as_deref(),
            Some("order_issued")
        );
        assert!(acme.order_by_cert_id(8, "aki.issued").await.expect("read").is_none(), "another CA's");
    }

    /// A nonce is spent once, whichever replica spends it; the sweep forgets expired ones only.
    #[tokio::test]
    async fn a_nonce_is_spent_once_and_the_sweep_keeps_unexpired_ones() {
        let (_dir, store) = crate::testing::store().await;
        let acme = DbAcme::new(store.clone());
        let other_replica = DbAcme::new(store.clone());
        let now = 1_000_000;
        assert!(acme.spend_nonce("fresh", now + 60_000).await.expect("spend"), "a first spend");
        assert!(!acme.spend_nonce("fresh", now + 60_000).await.expect("spend"), "and only once");
        assert!(!other_replica.spend_nonce("fresh", now + 60_000).await.expect("spend"), "on any replica");
        assert!(acme.spend_nonce("stale", now - 1).await.expect("spend"));
        assert!(acme.spend_nonce("edge", now).await.expect("spend"));
        assert_eq!(acme.sweep_nonces(now).await.expect("sweep"), 2, "the expired ones go");
        let left: Vec<String> = sqlx::query_scalar("SELECT nonce FROM acme_nonces ORDER BY nonce")
            .fetch_all(&store.pool)
            .await
            .expect("list");
        assert_eq!(left, vec!["fresh".to_owned()], "a spent nonce that has not expired stays spent");
        assert!(!acme.spend_nonce("fresh", now + 60_000).await.expect("spend"), "still spent after a sweep");
    }

    fn authz(id: &str) -> Authorization {
        Authorization {
            id: id.into(),
            ca_id: 7,
            account_id: "acct_1".into(),
            identifier: Identifier { kind: "dns".into(), value: "a.example.test".into() },
            wildcard: false,
            status: AuthorizationStatus::Pending,
            expires_at: 10,
            created_at: 1,
        }
    }

    fn challenge(id: &str, authz_id: &str, kind: &str) -> Challenge {
        Challenge {
            id: id.into(),
            authz_id: authz_id.into(),
            kind: kind.into(),
            token: format!("token-{id}"),
            status: ChallengeStatus::Pending,
            validated_at: None,
            error: None,
            updated_at: 1,
        }
    }

    /// newOrder's rows go in together, and not at all when the order is refused (here: a
    /// second live replacement of one certificate).
    #[tokio::test]
    async fn an_order_and_its_authorizations_are_written_all_or_nothing() {
        let (_dir, store) = crate::testing::store().await;
        let acme = DbAcme::new(store);
        let mut first = order("order_1", Some("aki.serial"));
        first.authorizations = vec!["authz_1".into(), "authz_2".into()];
        let rows = vec![
            (
                authz("authz_1"),
                vec![challenge("chall_1", "authz_1", "dns-01"), challenge("chall_2", "authz_1", "http-01")],
            ),
            (authz("authz_2"), vec![challenge("chall_3", "authz_2", "http-01")]),
        ];
        acme.insert_order_with_authorizations(&first, &rows).await.expect("insert");
        let stored = acme.order(7, "order_1").await.expect("read").expect("the order");
        assert_eq!(stored, first);
        assert_eq!(acme.authorization(7, "authz_2").await.expect("read"), Some(authz("authz_2")));
        let kinds: Vec<String> = acme.challenges("authz_1").await.expect("read").into_iter().map(|c| c.kind).collect();
        assert_eq!(kinds, vec!["dns-01".to_owned(), "http-01".to_owned()]);
        assert_eq!(acme.challenge("chall_3").await.expect("read"), Some(challenge("chall_3", "authz_2", "http-01")));

        let second = order("order_2", Some("aki.serial"));
        let refused = acme
            .insert_order_with_authorizations(
                &second,
                &[(authz("authz_3"), vec![challenge("chall_4", "authz_3", "http-01")])],
            )
            .await;
        assert!(matches!(refused, Err(StoreError::Unique(_))), "{refused:?}");
        assert!(acme.authorization(7, "authz_3").await.expect("read").is_none(), "rolled back");
        assert!(acme.challenge("chall_4").await.expect("read").is_none(), "rolled back");
    }

    /// Finalize's claim and a validation's record are compare-and-sets: the second of two
    /// racing callers changes nothing, and an authorization follows only the challenge it moved.
    #[tokio::test]
    async fn claims_of_orders_and_validations_happen_once() {
        let (_dir, store) = crate::testing::store().await;
        let acme = DbAcme::new(store);
        let mut claimed = order("order_claim", None);
        acme.insert_order(&claimed).await.expect("insert");
        claimed.status = OrderStatus::Processing;
        assert!(acme.update_order_from(&claimed, OrderStatus::Pending).await.expect("claim"), "the first claim");
        let mut late = claimed.clone();
        late.status = OrderStatus::Invalid;
        assert!(
            !acme.update_order_from(&late, OrderStatus::Pending).await.expect("claim"),
            "the second finds it moved"
        );
        assert_eq!(acme.order(7, "order_claim").await.expect("read").map(|o| o.status), Some(OrderStatus::Processing));

        acme.insert_order_with_authorizations(
            &order("order_v", None),
            &[(authz("authz_v"), vec![challenge("chall_v", "authz_v", "http-01")])],
        )
        .await
        .expect("insert");
        let mut processing = challenge("chall_v", "authz_v", "http-01");
        processing.status = ChallengeStatus::Processing;
        assert!(acme.update_challenge(&processing, ChallengeStatus::Pending).await.expect("claim"));
        let mut valid = processing.clone();
        valid.status = ChallengeStatus::Valid;
        valid.validated_at = Some(5);
        assert!(acme
            .record_validation(&valid, ChallengeStatus::Processing, AuthorizationStatus::Valid)
            .await
            .expect("record"));
        let mut invalid = processing.clone();
        invalid.status = ChallengeStatus::Invalid;
        assert!(
            !acme
                .record_validation(&invalid, ChallengeStatus::Processing, AuthorizationStatus::Invalid)
                .await
                .expect("record"),
            "recorded once"
        );
        assert_eq!(acme.challenge("chall_v").await.expect("read"), Some(valid));
        let stored = acme.authorization(7, "authz_v").await.expect("read").expect("the authorization");
        assert_eq!(stored.status, AuthorizationStatus::Valid, "the losing validator left the authorization alone");
    }

    /// The cache in front of the store: a write through it is seen at once; another replica's
    /// write is seen once the entry is older than the TTL.
    #[tokio::test]
    async fn the_cached_directory_and_account_follow_writes() {
        use std::sync::Arc;
        use trellis_core::acme::cache::{CachedAcmeStore, TTL_MS};
        use trellis_core::clock::Clock;

        struct Manual(std::sync::Mutex<chrono::DateTime<chrono::Utc>>);
        impl Clock for Manual {
            fn now(&self) -> chrono::DateTime<chrono::Utc> {
                *self.0.lock().expect("clock")
            }
        }
        let (_dir, store) = crate::testing::store().await;
        let db = Arc::new(DbAcme::new(store));
        let clock = Arc::new(Manual(std::sync::Mutex::new(chrono::Utc::now())));
        let cached = CachedAcmeStore::new(db.clone(), clock.clone());
        let advance = |ms: i64| {
            let mut now = clock.0.lock().expect("clock");
            *now += chrono::Duration::milliseconds(ms);
        };

        let mut config = DirectoryConfig::off(7, "ws");
        config.enabled = true;
        cached.put_directory(&config).await.expect("put");
        assert!(cached.directory(7).await.expect("read").expect("row").enabled);
        config.enabled = false;
        cached.put_directory(&config).await.expect("put");
        assert!(!cached.directory(7).await.expect("read").expect("row").enabled, "this replica's write, at once");
        config.enabled = true;
        db.put_directory(&config).await.expect("another replica's write");
        assert!(!cached.directory(7).await.expect("read").expect("row").enabled, "within the TTL");
        advance(TTL_MS);
        assert!(cached.directory(7).await.expect("read").expect("row").enabled, "after it");

        // RFC 7515 A.3's P-256 key: a real point, as a stored account key must be.
        let jwk = Jwk::Ec {
            crv: "P-256".into(),
            x: "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU".into(),
            y: "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0".into(),
        };
        let mut account = Account {
            id: "acct_1".into(),
            workspace_id: "ws".into(),
            ca_id: 7,
            thumbprint: jwk.thumbprint(),
            jwk,
            status: AccountStatus::Valid,
            contact: Vec::new(),
            eab_key_id: None,
            created_at: 1,
        };
        assert!(cached.account(7, "acct_1").await.expect("read").is_none(), "absent");
        db.insert_account(&account).await.expect("another replica's new account");
        assert!(cached.account(7, "acct_1").await.expect("read").is_some(), "found at once: absence is not cached");
        assert!(cached.account(8, "acct_1").await.expect("read").is_none(), "another CA's directory");
        account.status = AccountStatus::Deactivated;
        cached.update_account(&account).await.expect("update");
        assert_eq!(cached.account(7, "acct_1").await.expect("read").expect("row").status, AccountStatus::Deactivated);
        account.status = AccountStatus::Valid;
        db.update_account(&account).await.expect("another replica's update");
        assert_eq!(cached.account(7, "acct_1").await.expect("read").expect("row").status, AccountStatus::Deactivated);
        advance(TTL_MS);
        assert_eq!(cached.account(7, "acct_1").await.expect("read").expect("row").status, AccountStatus::Valid);
    }
}
