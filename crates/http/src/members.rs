//! `/api/workspaces/{id}/members` and `/api/workspaces/{id}/invitations`: who belongs to a
//! workspace. The rules are `trellis_core::auth::members`'; here the path's workspace becomes the
//! caller's (`members::caller_in`: another workspace is 404).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{delete, get, patch};
use axum::Router;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::error::ApiResult;
use crate::extract::{Authenticated, Json, Query};
use crate::{created, data, list, Data, ListEnvelope, PageParams};
use trellis_core::auth::members::{self, Added};
use trellis_core::auth::{Caller, Invitation, Member};
use trellis_core::clock::rfc3339;
use trellis_core::context::SharedContext;

pub fn routes() -> Router<SharedContext> {
    Router::new()
        .route("/api/workspaces/{id}/members", get(list_members).post(add_member))
        .route("/api/workspaces/{id}/members/{user_id}", patch(set_role).delete(remove_member))
        .route("/api/workspaces/{id}/invitations", get(list_invitations))
        .route("/api/workspaces/{id}/invitations/{invitation_id}", delete(delete_invitation))
}

/// Roles of a workspace member.
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code, reason = "a schema of the accepted strings; the domain parses them")]
pub enum RoleName {
    Owner,
    Member,
    Viewer,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberDto {
    user_id: String,
    email: String,
    first_name: String,
    #[schema(value_type = RoleName)]
    role: String,
    joined_at: String,
}

fn member_dto(member: Member) -> MemberDto {
    MemberDto {
        user_id: member.user_id.into_string(),
        email: member.email,
        first_name: member.first_name,
        role: member.role.as_str().into(),
        joined_at: rfc3339(member.joined_at),
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InvitationDto {
    /// `inv_…`.
    id: String,
    workspace_id: String,
    email: String,
    #[schema(value_type = RoleName)]
    role: String,
    /// The user id (or `cli`) who invited.
    invited_by: String,
    created_at: String,
    /// After this instant the invitation is no longer redeemed (14 days after it was made).
    expires_at: String,
}

fn invitation_dto(invitation: Invitation) -> InvitationDto {
    InvitationDto {
        id: invitation.id,
        workspace_id: invitation.workspace_id.into_string(),
        email: invitation.email,
        role: invitation.role.as_str().into(),
        invited_by: invitation.invited_by,
        created_at: rfc3339(invitation.created_at),
        expires_at: rfc3339(invitation.expires_at),
    }
}

/// What adding did: `added` (a user with that e-mail exists; `member` is set) or `invited`
/// (nobody has it yet; `invitation` is set, redeemed when such a user is created or signs in).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddedDto {
    #[schema(value_type = AddedStatus)]
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    member: Option<MemberDto>,
    #[serde(skip_serializing_if = "Option::is_none")]
    invitation: Option<InvitationDto>,
}

#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code, reason = "a schema of the answered strings")]
pub enum AddedStatus {
    Added,
    Invited,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddMemberBody {
    /// An e-mail address (trimmed and compared in lower case): a local part, `@`, a domain with a
    /// dot, no spaces, at most 254 bytes. Anything else is 400 `VALIDATION_ERROR`.
    email: String,
    #[schema(value_type = RoleName)]
    role: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetRoleBody {
    #[schema(value_type = RoleName)]
    role: String,
}

async fn in_workspace(ctx: &SharedContext, caller: &Caller, workspace_id: &str) -> ApiResult<Caller> {
    Ok(members::caller_in(&ctx.auth_deps(), caller, workspace_id).await?)
}

/// The workspace's members, newest first (scope `members:read`).
#[utoipa::path(get, path = "/api/workspaces/{id}/members", tag = "members", params(PageParams),
    responses((status = 200, body = ListEnvelope<MemberDto>)))]
async fn list_members(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
    Query(page): Query<PageParams>,
) -> ApiResult<axum::Json<ListEnvelope<MemberDto>>> {
    let caller = in_workspace(&ctx, &caller, &id).await?;
    Ok(list(members::list_members(&ctx.auth_deps(), &caller, page.request()?).await?, member_dto))
}

/// Adds the user with this e-mail, or invites the address when no user has it (scope
/// `members:write`). 409 `CONFLICT` when already a member; inviting an address again renews
/// its invitation.
#[utoipa::path(post, path = "/api/workspaces/{id}/members", tag = "members", request_body = AddMemberBody,
    responses((status = 201, body = Data<AddedDto>)))]
async fn add_member(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
    Json(body): Json<AddMemberBody>,
) -> ApiResult<Response> {
    let caller = in_workspace(&ctx, &caller, &id).await?;
    let answer = match members::add(&ctx.auth_deps(), &caller, &body.email, &body.role).await? {
        Added::Member(member) => AddedDto { status: "added", member: Some(member_dto(member)), invitation: None },
        Added::Invitation(invitation) => {
            AddedDto { status: "invited", member: None, invitation: Some(invitation_dto(invitation)) }
        }
    };
    Ok(created(answer))
}

/// Changes a member's role, effective at their next request (scope `members:write`). 409
/// `LAST_OWNER` when it would leave the workspace without an owner.
#[utoipa::path(patch, path = "/api/workspaces/{id}/members/{user_id}", tag = "members", request_body = SetRoleBody,
    responses((status = 200, body = Data<MemberDto>), (status = 409, description = "`LAST_OWNER`: the workspace's only owner cannot be demoted")))]
async fn set_role(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path((id, user_id)): Path<(String, String)>,
    Json(body): Json<SetRoleBody>,
) -> ApiResult<axum::Json<Value>> {
    let caller = in_workspace(&ctx, &caller, &id).await?;
    Ok(data(member_dto(members::set_role(&ctx.auth_deps(), &caller, &user_id.into(), &body.role).await?)))
}

/// Removes a member (scope `members:write`): their sessions lose the workspace at once and the
/// API keys they made in it are deleted. 409 `LAST_OWNER` for the only owner.
#[utoipa::path(delete, path = "/api/workspaces/{id}/members/{user_id}", tag = "members",
    responses((status = 204, description = "Removed"), (status = 409, description = "`LAST_OWNER`: the workspace's only owner cannot be removed")))]
async fn remove_member(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path((id, user_id)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let caller = in_workspace(&ctx, &caller, &id).await?;
    members::remove(&ctx.auth_deps(), &caller, &user_id.into()).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Invitations not yet redeemed nor expired, newest first (scope `members:read`).
#[utoipa::path(get, path = "/api/workspaces/{id}/invitations", tag = "members", params(PageParams),
    responses((status = 200, body = ListEnvelope<InvitationDto>)))]
async fn list_invitations(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
    Query(page): Query<PageParams>,
) -> ApiResult<axum::Json<ListEnvelope<InvitationDto>>> {
    let caller = in_workspace(&ctx, &caller, &id).await?;
    Ok(list(members::list_invitations(&ctx.auth_deps(), &caller, page.request()?).await?, invitation_dto))
}

/// Withdraws an invitation (scope `members:write`).
#[utoipa::path(delete, path = "/api/workspaces/{id}/invitations/{invitation_id}", tag = "members",
    responses((status = 204, description = "Withdrawn")))]
async fn delete_invitation(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path((id, invitation_id)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let caller = in_workspace(&ctx, &caller, &id).await?;
    members::delete_invitation(&ctx.auth_deps(), &caller, &invitation_id).await?;
    Ok(StatusCode::NO_CONTENT)
}
