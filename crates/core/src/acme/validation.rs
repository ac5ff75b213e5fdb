//! Challenge validation, off the request path: a challenge the client posted is `processing`
//! in the store, and a task (or, after a replica stopped mid-way, the jobs tick through
//! [`resume_stale`]) asks the [`super::ChallengeValidator`] port, then records the outcome on
//! the challenge and its authorization. Also [`screen`], newOrder's policy check.

use sha2::{Digest, Sha256};

use super::jws::b64;
use super::problem::{Problem, ProblemType};
use super::AcmeDeps;
use super::{
    Account, Authorization, AuthorizationStatus, Challenge, ChallengeStatus, DirectoryConfig, Identifier,
    ValidationFailure,
};
use crate::plugins::{
    combine, Combined, EvaluationRequest, IssuanceSource, Requester, RequesterKind, Subject, SubjectAltName, SubjectKey,
};

/// Validates the challenge `challenge_id` (claimed `processing` by the caller) and records the
/// outcome. Failures are recorded on the challenge, never raised.
pub async fn run(ctx: &AcmeDeps, challenge_id: &str) {
    if let Err(err) = validate(ctx, challenge_id).await {
        tracing::error!(challenge_id, detail = %err.detail, "ACME challenge validation could not be recorded");
    }
}

/// [`run`] for a challenge the caller has just claimed `processing`, with its authorization
/// and account as the caller read them (the challenge POST: no need to read them again).
/// Returns the challenge as recorded, when this call recorded the outcome.
pub async fn run_claimed(
    ctx: &AcmeDeps,
    challenge: Challenge,
    authz: Authorization,
    account: Account,
) -> Option<Challenge> {
    let challenge_id = challenge.id.clone();
    match check(ctx, challenge, authz, account).await {
        Ok(recorded) => recorded,
        Err(err) => {
            tracing::error!(challenge_id, detail = %err.detail, "ACME challenge validation could not be recorded");
            None
        }
    }
}

async fn validate(ctx: &AcmeDeps, challenge_id: &str) -> Result<(), Problem> {
    let Some(acme) = ctx.acme.as_deref() else { return Ok(()) };
    let Some(challenge) = acme.challenge(challenge_id).await? else { return Ok(()) };
    if challenge.status != ChallengeStatus::Processing {
        return Ok(());
    }
    let Some(authz) = find_authz(ctx, &challenge.authz_id).await? else { return Ok(()) };
    let Some(account) = acme.account(authz.ca_id, &authz.account_id).await? else { return Ok(()) };
    check(ctx, challenge, authz, account).await.map(|_| ())
}

/// Asks the validator about `challenge` (claimed `processing`) and records the outcome: the
/// challenge as recorded, or none when another validator recorded it first.
async fn check(
    ctx: &AcmeDeps,
    mut challenge: Challenge,
    authz: Authorization,
    account: Account,
) -> Result<Option<Challenge>, Problem> {
    let challenge_id = challenge.id.clone();
    let challenge_id = challenge_id.as_str();
    let Some(acme) = ctx.acme.as_deref() else { return Ok(None) };
    let key_authorization = format!("{}.{}", challenge.token, account.thumbprint);
    let validator = ctx.acme_validator.clone();
    let outcome = match challenge.kind.as_str() {
        "http-01" => validator.http01(&authz.identifier, &challenge.token, &key_authorization).await,
        "dns-01" => {
            let digest = b64(&Sha256::digest(key_authorization.as_bytes()));
            validator.dns01(&authz.identifier.value, &digest).await
        }
        "tls-alpn-01" => validator.tls_alpn01(&authz.identifier, &key_authorization).await,
        other => Err(ValidationFailure::IncorrectResponse(format!("unknown challenge type {other}"))),
    };
    let now = ctx.now_millis();
    challenge.updated_at = now;
    let authz_status = match outcome {
        Ok(()) => {
            challenge.status = ChallengeStatus::Valid;
            challenge.validated_at = Some(now);
            AuthorizationStatus::Valid
        }
        Err(failure) => {
            let (kind, detail) = match failure {
                ValidationFailure::Connection(d) => (ProblemType::Connection, d),
                ValidationFailure::Dns(d) => (ProblemType::Dns, d),
                ValidationFailure::Tls(d) => (ProblemType::Tls, d),
                ValidationFailure::IncorrectResponse(d) => (ProblemType::IncorrectResponse, d),
            };
            tracing::info!(challenge_id, identifier = %authz.identifier.value, kind = kind.name(), %detail, "ACME challenge failed");
            challenge.status = ChallengeStatus::Invalid;
            challenge.error = Some(Problem::new(kind, detail).document());
            AuthorizationStatus::Invalid
        }
    };
    Ok(acme.record_validation(&challenge, ChallengeStatus::Processing, authz_status).await?.then_some(challenge))
}

async fn find_authz(ctx: &AcmeDeps, id: &str) -> Result<Option<super::Authorization>, Problem> {
    let Some(acme) = ctx.acme.as_deref() else { return Ok(None) };
    Ok(acme.authorization_by_id(id).await?)
}

/// Challenges a stopped replica left `processing` for over a minute are validated again (the
/// jobs tick calls this). Returns how many were picked up.
pub async fn resume_stale(ctx: &AcmeDeps) -> usize {
    let Some(acme) = ctx.acme.as_deref() else { return 0 };
    let stale = match acme.stale_processing_challenges(ctx.now_millis() - 60_000).await {
        Ok(stale) => stale,
        Err(err) => {
            tracing::error!(error = %err, "listing stale ACME challenges failed");
            return 0;
        }
    };
    for challenge in &stale {
        run(ctx, &challenge.id).await;
    }
    stale.len()
}

/// newOrder's checks of the identifiers: a challenge type of the directory must be able to
/// validate each, and the workspace's issuance policies must not deny it. Policies judge a whole
/// request, key included, and the key is not known before finalize: an identifier is refused
/// here only when the policies deny it with an EC P-256 key and with an RSA-2048 key alike (a
/// denial that is about the name, not the key); finalize judges the real request again.
pub async fn screen(
    ctx: &AcmeDeps,
    config: &DirectoryConfig,
    account: &Account,
    identifiers: &[Identifier],
) -> Result<(), Problem> {
    let mut rejected = Vec::new();
    for identifier in identifiers {
        let (_, wildcard) = identifier.base();
        let usable = config.challenge_types.iter().any(|t| match t.as_str() {
            "dns-01" => identifier.kind == "dns",
            _ => !wildcard,
        });
        if !usable {
            rejected.push(super::Subproblem {
                kind: ProblemType::RejectedIdentifier,
                detail: "no challenge type of this directory can validate it".into(),
                identifier: identifier.clone(),
            });
        }
    }
    if !rejected.is_empty() {
        return Err(Problem::new(ProblemType::RejectedIdentifier, "some identifiers cannot be validated")
            .with_subproblems(rejected));
    }
    let ca = crate::cas::service::find(ctx.store.as_ref(), &config.workspace_id, config.ca_id).await?;
    let template =
        crate::issuance::templates::resolve(&ctx.issuance, &config.workspace_id, config.default_template.as_deref())
            .await?;
    let requester = Requester {
        kind: RequesterKind::ApiKey,
        id: format!("acme:{}", account.id),
        display_name: Some("ACME account".into()),
    };
    let keys = [("ec", 256, Some("p256")), ("rsa", 2048, None)];
    // Listed once for every identifier and key; none enabled (the common case) means nothing
    // to judge.
    let policies: Vec<_> = crate::issuance::policies::in_force(&ctx.issuance, &config.workspace_id)
        .await?
        .into_iter()
        .filter(|p| p.enabled)
        .collect();
    if policies.is_empty() {
        return Ok(());
    }
    for identifier in identifiers {
        let name = match identifier.value.parse::<std::net::IpAddr>() {
            Ok(ip) => SubjectAltName::Ip(ip),
            Err(_) => SubjectAltName::Dns(identifier.value.clone()),
        };
        let mut reasons = Vec::new();
        let mut denied_for_every_key = true;
        for (algorithm, size_bits, curve) in keys {
            let request = EvaluationRequest {
                ca_type: ca.ca_type.clone(),
                ca_id: ca.id.to_string(),
                template: Some(template.id.clone()),
                subject: Subject { common_name: Some(identifier.value.clone()), ..Subject::default() },
                subject_alt_names: vec![name.clone()],
                key: SubjectKey {
                    algorithm: algorithm.into(),
                    size_bits,
                    curve: curve.map(str::to_owned),
                    server_generated: false,
                },
                validity_days: template.default_validity_days,
                requester: requester.clone(),
                source: IssuanceSource::Api,
            };
            let decisions = crate::issuance::policies::evaluate_listed(
                &ctx.issuance,
                &config.workspace_id,
                policies.clone(),
                &request,
            )
            .await?;
            match combine(template.default_validity_days, decisions) {
                Combined::Denied(denied) => reasons = denied,
                _ => denied_for_every_key = false,
            }
        }
        if denied_for_every_key && !reasons.is_empty() {
            let detail = reasons.iter().map(|r| format!("{}: {}", r.code, r.message)).collect::<Vec<_>>().join("; ");
            rejected.push(super::Subproblem {
                kind: ProblemType::RejectedIdentifier,
                detail: format!("an issuance policy denies it ({detail})"),
                identifier: identifier.clone(),
            });
        }
    }
    if rejected.is_empty() {
        Ok(())
    } else {
        // The detail names each identifier and why: clients show the detail, not always the
        // subproblems.
        let each = rejected.iter().map(|r| format!("{}: {}", r.identifier.value, r.detail)).collect::<Vec<_>>();
        Err(Problem::new(
            ProblemType::RejectedIdentifier,
            format!("an issuance policy denies some identifiers ({})", each.join("; ")),
        )
        .with_subproblems(rejected))
    }
}
