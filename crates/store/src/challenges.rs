//! ACME HTTP-01 answers (`ChallengeAnswers`), shared by every replica through the database.

use sqlx::Row;
use trellis_core::plugins::challenges::{ChallengeAnswers, Http01Answer, PresentOutcome, Served};
use trellis_core::plugins::{StateFuture, StateScope};

use crate::plugins::unavailable;
use crate::{DbResult, Store, StoreResult};

/// The HTTP-01 answers of every connector, in the database.
#[derive(Clone)]
pub struct DbChallengeAnswers {
    store: Store,
}

impl DbChallengeAnswers {
    pub fn new(store: Store) -> Self {
        DbChallengeAnswers { store }
    }

    async fn store_answer(
        &self,
        scope: &StateScope,
        answer: &Http01Answer,
        now_ms: i64,
        max: u32,
    ) -> StoreResult<PresentOutcome> {
        let owner = sqlx::query("SELECT plugin_id, workspace_id, record_id FROM acme_http01_answers WHERE token = $1")
            .bind(&answer.token)
            .fetch_optional(&mut *self.store.reader().await?)
            .await
            .db()?;
        if owner.is_none() {
            let held = crate::plugins::rows_in_scope(&self.store, "acme_http01_answers", scope).await?;
            if held >= i64::from(max) {
                return Ok(PresentOutcome::QuotaExceeded);
            }
        }
        // The conditional upsert keeps a token with the record that presented it first, even
        // when two records race for it.
        let done = sqlx::query(
            "INSERT INTO acme_http01_answers (token, key_authorization, domain, plugin_id, workspace_id, record_id, presented_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (token) DO UPDATE SET key_authorization = excluded.key_authorization, domain = excluded.domain, \
             presented_at = excluded.presented_at \
             WHERE acme_http01_answers.plugin_id = excluded.plugin_id AND acme_http01_answers.workspace_id = excluded.workspace_id \
             AND acme_http01_answers.record_id = excluded.record_id",
        )
        .bind(&answer.token)
        .bind(&answer.key_authorization)
        .bind(&answer.domain)
        .bind(&scope.plugin_id)
        .bind(&scope.workspace_id)
        .bind(&scope.record_id)
        .bind(now_ms)
        .execute(&self.store.pool)
        .await
        .db()?;
        Ok(if done.rows_affected() == 1 { PresentOutcome::Presented } else { PresentOutcome::TokenTaken })
    }
}

impl ChallengeAnswers for DbChallengeAnswers {
    fn present<'a>(
        &'a self,
        scope: &'a StateScope,
        answer: &'a Http01Answer,
        now_ms: i64,
        max: u32,
    ) -> StateFuture<'a, PresentOutcome> {
        Box::pin(async move { self.store_answer(scope, answer, now_ms, max).await.map_err(unavailable) })
    }

    fn cleanup<'a>(&'a self, scope: &'a StateScope, token: &'a str) -> StateFuture<'a, ()> {
        Box::pin(async move {
            sqlx::query(
                "DELETE FROM acme_http01_answers WHERE token = $1 AND plugin_id = $2 AND workspace_id = $3 AND record_id = $4",
            )
            .bind(token)
            .bind(&scope.plugin_id)
            .bind(&scope.workspace_id)
            .bind(&scope.record_id)
            .execute(&self.store.pool)
            .await
            .db()
            .map(|_| ())
            .map_err(unavailable)
        })
    }

    fn lookup<'a>(&'a self, token: &'a str, not_before_ms: i64) -> StateFuture<'a, Option<Served>> {
        Box::pin(async move {
            let row = sqlx::query(
                "SELECT domain, key_authorization FROM acme_http01_answers WHERE token = $1 AND presented_at >= $2",
            )
            .bind(token)
            .bind(not_before_ms)
            .fetch_optional(&mut *self.store.reader().await.map_err(unavailable)?)
            .await
            .db()
            .map_err(unavailable)?;
            row.map(|row| {
                Ok(Served {
                    domain: row.try_get("domain").db().map_err(unavailable)?,
                    key_authorization: row.try_get("key_authorization").db().map_err(unavailable)?,
                })
            })
            .transpose()
        })
    }

    fn purge<'a>(&'a self, before_ms: i64) -> StateFuture<'a, u64> {
        Box::pin(async move {
            sqlx::query("DELETE FROM acme_http01_answers WHERE presented_at < $1")
                .bind(before_ms)
                .execute(&self.store.pool)
                .await
                .db()
                .map(|done| done.rows_affected())
                .map_err(unavailable)
        })
    }
}

#[cfg(test)]
mod tests {
    use trellis_core::plugins::challenges::{answer_for, present, ChallengeAnswers, ChallengeError, Http01Answer};
    use trellis_core::plugins::StateScope;

    use super::DbChallengeAnswers;

    const HOST: Option<&str> = Some("example.com:80");

    fn scope(record: &str) -> StateScope {
        StateScope { plugin_id: "p".into(), workspace_id: "w".into(), record_id: record.into() }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn answers_are_shared_through_the_database_and_stay_with_their_record() {
        let (_dir, store) = crate::testing::store().await;
        let answers = DbChallengeAnswers::new(store.clone());
        let answer =
            Http01Answer { domain: "example.com".into(), token: "tok".into(), key_authorization: "tok.thumb".into() };
        present(&answers, &scope("ca_1"), &answer, 1_000).await.expect("present");
        present(&answers, &scope("ca_1"), &answer, 2_000).await.expect("present again");
        // A second handle (another replica) serves it.
        let replica = DbChallengeAnswers::new(store);
        assert_eq!(answer_for(&replica, "tok", HOST, 2_500).await.expect("lookup").as_deref(), Some("tok.thumb"));
        assert_eq!(answer_for(&replica, "tok", Some("other.example"), 2_500).await.expect("lookup"), None);
        assert_eq!(present(&answers, &scope("ca_2"), &answer, 3_000).await, Err(ChallengeError::TokenTaken));
        answers.cleanup(&scope("ca_2"), "tok").await.expect("foreign cleanup is a no-op");
        assert!(answer_for(&replica, "tok", HOST, 3_000).await.expect("lookup").is_some());
        assert_eq!(answers.purge(2_001).await.expect("purge"), 1);
        assert_eq!(answer_for(&replica, "tok", HOST, 3_000).await.expect("lookup"), None);
    }
}
