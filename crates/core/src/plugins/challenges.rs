//! ACME HTTP-01 answers presented by connectors through the `challenge-solver` import
//! (contract 0.2) and served by the host's challenge listener (`TRELLIS_ACME_HTTP01_LISTEN`) at
//! `http://<domain>/.well-known/acme-challenge/<token>`. Stored in the database so that every
//! replica answers whichever one the CA's validation request reaches.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::state::{StateError, StateFuture, StateScope};

/// Challenges one record may have presented at once.
pub const MAX_CHALLENGES_PER_RECORD: u32 = 100;
/// Presented answers older than this are removed even if never cleaned up (a plugin that
/// trapped leaves nothing served for long).
pub const CHALLENGE_LIFETIME_MS: i64 = 3_600_000;

/// An HTTP-01 answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Http01Answer {
    /// The identifier being validated.
    pub domain: String,
    /// The CA's token (base64url).
    pub token: String,
    /// `token.thumbprint`: the body served.
    pub key_authorization: String,
}

/// Why an answer cannot be presented.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChallengeError {
    #[error("{0}")]
    Invalid(String),
    #[error("the token is presented for another record")]
    TokenTaken,
    #[error("at most {0} challenges per record at once")]
    QuotaExceeded(u32),
    #[error(transparent)]
    Storage(#[from] StateError),
}

fn base64url(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl Http01Answer {
    /// Checks the answer the way a CA will use it: a base64url token, a key authorization of
    /// `token.thumbprint`, a plausible identifier.
    pub fn validate(&self) -> Result<(), ChallengeError> {
        if !base64url(&self.token) || self.token.len() > 256 {
            return Err(ChallengeError::Invalid("the token must be 1-256 base64url characters".into()));
        }
        let thumbprint = self.key_authorization.strip_prefix(&self.token).and_then(|rest| rest.strip_prefix('.'));
        if !thumbprint.is_some_and(|t| base64url(t) && t.len() <= 128) {
            return Err(ChallengeError::Invalid("the key authorization must be `<token>.<thumbprint>`".into()));
        }
        let domain_ok = !self.domain.is_empty()
            && self.domain.len() <= 253
            && self.domain.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'*'));
        if !domain_ok {
            return Err(ChallengeError::Invalid("the domain must be a DNS name or an IP address".into()));
        }
        Ok(())
    }
}

/// A stored answer as the listener sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    /// The identifier it was presented for.
    pub domain: String,
    pub key_authorization: String,
}

/// The name a request's `Host` header asks for: port stripped, lower-case, no trailing dot
/// (`[v6]` keeps its brackets off).
pub fn host_name(host: &str) -> String {
    let host = host.trim();
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or_default()
    } else {
        host.rsplit_once(':').map_or(
            host,
            |(name, port)| {
                if port.bytes().all(|b| b.is_ascii_digit()) {
                    name
                } else {
                    host
                }
            },
        )
    };
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// Whether `present` stored the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PresentOutcome {
    Presented,
    TokenTaken,
    QuotaExceeded,
}

/// Where answers live (the store implements it; replicas share it).
pub trait ChallengeAnswers: Send + Sync + 'static {
    /// Stores (or, for the same scope, re-stores) an answer, unless the token belongs to another
    /// scope or the scope holds `max` answers already.
    fn present<'a>(
        &'a self,
        scope: &'a StateScope,
        answer: &'a Http01Answer,
        now_ms: i64,
        max: u32,
    ) -> StateFuture<'a, PresentOutcome>;
    /// Removes the scope's answer for `token`, if any.
    fn cleanup<'a>(&'a self, scope: &'a StateScope, token: &'a str) -> StateFuture<'a, ()>;
    /// The answer presented for `token` after `not_before_ms`, if any.
    fn lookup<'a>(&'a self, token: &'a str, not_before_ms: i64) -> StateFuture<'a, Option<Served>>;
    /// Removes answers presented before `before_ms`; returns how many.
    fn purge<'a>(&'a self, before_ms: i64) -> StateFuture<'a, u64>;
}

/// Presents `answer` for `scope`.
pub async fn present(
    answers: &dyn ChallengeAnswers,
    scope: &StateScope,
    answer: &Http01Answer,
    now_ms: i64,
) -> Result<(), ChallengeError> {
    answer.validate()?;
    match answers.present(scope, answer, now_ms, MAX_CHALLENGES_PER_RECORD).await? {
        PresentOutcome::Presented => Ok(()),
        PresentOutcome::TokenTaken => Err(ChallengeError::TokenTaken),
        PresentOutcome::QuotaExceeded => Err(ChallengeError::QuotaExceeded(MAX_CHALLENGES_PER_RECORD)),
    }
}

/// What the listener serves for `token` asked for on `host` (the request's `Host` header) now:
/// a live answer presented for that very name, or nothing. An answer is never served on
/// another name: a CA validating some other domain that points at the shared listener must
/// not find a token presented for this one.
pub async fn answer_for(
    answers: &dyn ChallengeAnswers,
    token: &str,
    host: Option<&str>,
    now_ms: i64,
) -> Result<Option<String>, StateError> {
    if !base64url(token) || token.len() > 256 {
        return Ok(None);
    }
    let Some(host) = host.map(host_name) else { return Ok(None) };
    let served = answers.lookup(token, now_ms - CHALLENGE_LIFETIME_MS).await?;
    Ok(served.filter(|s| s.domain.trim_end_matches('.').eq_ignore_ascii_case(&host)).map(|s| s.key_authorization))
}

/// Answers in process memory, for tests.
#[derive(Debug, Default)]
pub struct InMemoryChallengeAnswers {
    answers: Mutex<BTreeMap<String, (StateScope, Served, i64)>>,
}

impl InMemoryChallengeAnswers {
    fn with<T>(&self, f: impl FnOnce(&mut BTreeMap<String, (StateScope, Served, i64)>) -> T) -> T {
        f(&mut self.answers.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }
}

impl ChallengeAnswers for InMemoryChallengeAnswers {
    fn present<'a>(
        &'a self,
        scope: &'a StateScope,
        answer: &'a Http01Answer,
        now_ms: i64,
        max: u32,
    ) -> StateFuture<'a, PresentOutcome> {
        let outcome = self.with(|answers| {
            if let Some((owner, _, _)) = answers.get(&answer.token) {
                if owner != scope {
                    return PresentOutcome::TokenTaken;
                }
            } else if answers.values().filter(|(owner, _, _)| owner == scope).count() >= max as usize {
                return PresentOutcome::QuotaExceeded;
            }
            let served = Served { domain: answer.domain.clone(), key_authorization: answer.key_authorization.clone() };
            answers.insert(answer.token.clone(), (scope.clone(), served, now_ms));
            PresentOutcome::Presented
        });
        Box::pin(async move { Ok(outcome) })
    }

    fn cleanup<'a>(&'a self, scope: &'a StateScope, token: &'a str) -> StateFuture<'a, ()> {
        self.with(|answers| {
            if answers.get(token).is_some_and(|(owner, _, _)| owner == scope) {
                answers.remove(token);
            }
        });
        Box::pin(async move { Ok(()) })
    }

    fn lookup<'a>(&'a self, token: &'a str, not_before_ms: i64) -> StateFuture<'a, Option<Served>> {
        let found = self.with(|answers| {
            answers.get(token).filter(|(_, _, at)| *at >= not_before_ms).map(|(_, served, _)| served.clone())
        });
        Box::pin(async move { Ok(found) })
    }

    fn purge<'a>(&'a self, before_ms: i64) -> StateFuture<'a, u64> {
        let removed = self.with(|answers| {
            let before = answers.len();
            answers.retain(|_, (_, _, at)| *at >= before_ms);
            (before - answers.len()) as u64
        });
        Box::pin(async move { Ok(removed) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(record: &str) -> StateScope {
        StateScope { plugin_id: "io.example.acme".into(), workspace_id: "ws".into(), record_id: record.into() }
    }

    fn answer(token: &str) -> Http01Answer {
        Http01Answer { domain: "example.com".into(), token: token.into(), key_authorization: format!("{token}.thumb") }
    }

    #[tokio::test]
    async fn answers_are_served_until_cleaned_up_or_stale_and_stay_with_their_record() {
        let answers = InMemoryChallengeAnswers::default();
        present(&answers, &scope("ca_1"), &answer("tok-1"), 1_000).await.unwrap();
        present(&answers, &scope("ca_1"), &answer("tok-1"), 2_000).await.unwrap();
        assert_eq!(answer_for(&answers, "tok-1", HOST, 3_000).await.unwrap().as_deref(), Some("tok-1.thumb"));
        assert_eq!(present(&answers, &scope("ca_2"), &answer("tok-1"), 3_000).await, Err(ChallengeError::TokenTaken));
        // Another record cannot clean it up either.
        answers.cleanup(&scope("ca_2"), "tok-1").await.unwrap();
        assert!(answer_for(&answers, "tok-1", HOST, 3_000).await.unwrap().is_some());
        answers.cleanup(&scope("ca_1"), "tok-1").await.unwrap();
        assert_eq!(answer_for(&answers, "tok-1", HOST, 3_000).await.unwrap(), None);

        present(&answers, &scope("ca_1"), &answer("tok-2"), 0).await.unwrap();
        assert_eq!(answer_for(&answers, "tok-2", HOST, CHALLENGE_LIFETIME_MS + 1).await.unwrap(), None, "stale");
        assert_eq!(answers.purge(1).await.unwrap(), 1);
    }

    #[tokio::test]
    async fn malformed_answers_are_refused() {
        let answers = InMemoryChallengeAnswers::default();
        for bad in [
            Http01Answer { token: "a/../b".into(), ..answer("x") },
            Http01Answer { key_authorization: "other.thumb".into(), ..answer("tok") },
            Http01Answer { domain: "bad domain".into(), ..answer("tok") },
        ] {
            assert!(
                matches!(present(&answers, &scope("ca_1"), &bad, 0).await, Err(ChallengeError::Invalid(_))),
                "{bad:?}"
            );
        }
        assert_eq!(answer_for(&answers, "../etc", HOST, 0).await.unwrap(), None);
    }

    const HOST: Option<&str> = Some("example.com");

    #[tokio::test]
    async fn an_answer_is_served_only_on_the_host_it_was_presented_for() {
        let answers = InMemoryChallengeAnswers::default();
        present(&answers, &scope("ca_1"), &answer("tok"), 0).await.unwrap();
        for host in ["example.com", "EXAMPLE.com:5002", "example.com.", "example.com:80"] {
            assert_eq!(
                answer_for(&answers, "tok", Some(host), 1).await.unwrap().as_deref(),
                Some("tok.thumb"),
                "{host}"
            );
        }
        for host in [None, Some("b.example"), Some("www.example.com"), Some("127.0.0.1:80"), Some("example.com.evil")] {
            assert_eq!(answer_for(&answers, "tok", host, 1).await.unwrap(), None, "{host:?}");
        }
        assert_eq!(host_name("[::1]:80"), "::1");
    }
}
