//! `/api/domain-claims` and `/api/admin/domain-claims`: the names a workspace may have ACME
//! challenge answers presented for.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::ApiResult;
use crate::extract::{Authenticated, Json};
use crate::{created, data, Data};
use trellis_core::clock::rfc3339;
use trellis_core::context::SharedContext;
use trellis_core::domain_claims::{self, DomainClaim};

pub fn routes() -> Router<SharedContext> {
    Router::new()
        .route("/api/domain-claims", get(list_claims).post(create_claim))
        .route("/api/domain-claims/{id}", get(get_claim).delete(delete_claim))
        .route("/api/domain-claims/{id}/verify", post(verify_claim))
        .route("/api/admin/domain-claims", post(assign_claim))
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerificationDto {
    record_name: String,
    record_type: &'static str,
    value: String,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DomainClaimDto {
    id: String,
    workspace_id: String,
    domain: String,
    /// `pending` until verified (TXT record) or assigned (instance administrator).
    status: &'static str,
    /// `dns` or `admin`, once verified.
    method: Option<String>,
    /// Publish this TXT record, then `POST …/verify`.
    verification: VerificationDto,
    verified_at: Option<String>,
    created_at: String,
}

fn dto(claim: DomainClaim) -> DomainClaimDto {
    DomainClaimDto {
        verification: VerificationDto {
            record_name: claim.record_name(),
            record_type: "TXT",
            value: claim.token.clone(),
        },
        status: if claim.verified_at.is_some() { "verified" } else { "pending" },
        id: claim.id,
        workspace_id: claim.workspace_id,
        domain: claim.domain,
        method: claim.method,
        verified_at: claim.verified_at.map(rfc3339),
        created_at: rfc3339(claim.created_at),
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimBody {
    /// A DNS name of at least two labels; the last starts with a letter (never an IP address).
    #[schema(
        min_length = 3,
        max_length = 253,
        pattern = "^([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?\\.)+[a-zA-Z]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$"
    )]
    domain: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AssignBody {
    workspace_id: String,
    /// A DNS name of at least two labels; the last starts with a letter (never an IP address).
    #[schema(
        min_length = 3,
        max_length = 253,
        pattern = "^([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?\\.)+[a-zA-Z]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$"
    )]
    domain: String,
}

/// The workspace's domain claims.
#[utoipa::path(get, path = "/api/domain-claims", tag = "domain-claims",
    responses((status = 200, body = Data<Vec<DomainClaimDto>>)))]
async fn list_claims(State(ctx): State<SharedContext>, Authenticated(caller): Authenticated) -> ApiResult<Response> {
    let claims = domain_claims::list(&ctx.domain_claim_deps(), &caller).await?;
    Ok(data(claims.into_iter().map(dto).collect::<Vec<_>>()).into_response())
}

/// Claims a domain (and the names under it) for the workspace: pending until verified.
#[utoipa::path(post, path = "/api/domain-claims", tag = "domain-claims", request_body = ClaimBody,
    responses((status = 201, body = Data<DomainClaimDto>), (status = 400, description = "Not a DNS name"),
        (status = 409, description = "Verified by another workspace")))]
async fn create_claim(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Json(body): Json<ClaimBody>,
) -> ApiResult<Response> {
    Ok(created(dto(domain_claims::create(&ctx.domain_claim_deps(), &caller, &body.domain).await?)))
}

/// One claim.
#[utoipa::path(get, path = "/api/domain-claims/{id}", tag = "domain-claims",
    responses((status = 200, body = Data<DomainClaimDto>), (status = 404, description = "No such claim")))]
async fn get_claim(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    Ok(data(dto(domain_claims::get(&ctx.domain_claim_deps(), &caller, &id).await?)).into_response())
}

/// Looks for the claim's TXT record and marks the claim verified.
#[utoipa::path(post, path = "/api/domain-claims/{id}/verify", tag = "domain-claims",
    responses((status = 200, body = Data<DomainClaimDto>), (status = 409, description = "The TXT record does not hold the token yet, no DNS resolver is configured, or another workspace verified the name")))]
async fn verify_claim(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    Ok(data(dto(domain_claims::verify(&ctx.domain_claim_deps(), &caller, &id).await?)).into_response())
}

/// Gives up a claim.
#[utoipa::path(delete, path = "/api/domain-claims/{id}", tag = "domain-claims",
    responses((status = 204, description = "Deleted"), (status = 404, description = "No such claim")))]
async fn delete_claim(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    domain_claims::delete(&ctx.domain_claim_deps(), &caller, &id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Instance administrators: assigns a domain to a workspace, verified at once (overlapping
/// verified claims of other workspaces are removed).
#[utoipa::path(post, path = "/api/admin/domain-claims", tag = "domain-claims", request_body = AssignBody,
    responses((status = 201, body = Data<DomainClaimDto>), (status = 403, description = "Not an instance administrator"),
        (status = 404, description = "No such workspace")))]
async fn assign_claim(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Json(body): Json<AssignBody>,
) -> ApiResult<Response> {
    Ok(created(dto(domain_claims::assign(&ctx.domain_claim_deps(), &caller, &body.workspace_id, &body.domain).await?)))
}
