//! `/api/auth/*`, `/api/workspaces`, `/api/api-keys`.

use axum::extract::{ConnectInfo, Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::Router;
use serde::{Deserialize, Serialize};
use trellis_core::ids::WorkspaceId;
use utoipa::ToSchema;

use crate::error::ApiResult;
use crate::extract::{check_same_origin, session_token, Authenticated, Json, Principal, SessionPerson};
use crate::{created, data, Data, RequestId};
use trellis_core::auth::{self, ApiKey, KeyKind, User, Workspace};
use trellis_core::context::SharedContext;
use trellis_core::error::Error;

pub fn routes() -> Router<SharedContext> {
    Router::new()
        .route("/api/auth/login", post(login))
        .route("/api/auth/logout", post(logout))
        .route("/api/auth/user", get(current_user))
        .route("/api/workspaces", get(list_workspaces).post(create_workspace))
        .route("/api/api-keys", get(list_api_keys).post(create_api_key))
        .route("/api/api-keys/{id}", delete(delete_api_key))
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct LoginBody {
    email: String,
    password: String,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UserDto {
    id: String,
    email: String,
    first_name: String,
    current_workspace_id: Option<String>,
    is_admin: bool,
    /// Present only when the user belongs to no workspace yet (a person signed in through the
    /// identity provider whose groups map to none): what to tell them.
    #[serde(skip_serializing_if = "Option::is_none")]
    notice: Option<String>,
}

impl From<User> for UserDto {
    fn from(user: User) -> Self {
        UserDto {
            id: user.id.into_string(),
            email: user.email,
            first_name: user.first_name,
            current_workspace_id: user.current_workspace_id.map(WorkspaceId::into_string),
            is_admin: user.is_admin,
            notice: None,
        }
    }
}

/// Signs in with email and password and sets the session cookie.
#[utoipa::path(post, path = "/api/auth/login", tag = "auth", request_body = LoginBody,
    responses((status = 200, description = "Signed in; `data: { message, user }`"), (status = 401, description = "Wrong credentials"), (status = 429, description = "Too many failed attempts")))]
async fn login(
    State(ctx): State<SharedContext>,
    ConnectInfo(crate::listener::PeerAddr(peer)): ConnectInfo<crate::listener::PeerAddr>,
    request_id: axum::Extension<RequestId>,
    axum::Extension(settings): axum::Extension<crate::HttpSettings>,
    headers: HeaderMap,
    Json(body): Json<LoginBody>,
) -> ApiResult<Response> {
    let client = settings.client_address(peer.ip(), &headers);
    let session =
        auth::login(&ctx.auth_deps(), &body.email, &body.password, &client.to_string(), &request_id.0 .0).await?;
    let cookie = settings.session_set_cookie(Some(&session.token));
    let body = data(serde_json::json!({ "message": "Login successful", "user": UserDto::from(session.user) }));
    Ok(([(header::SET_COOKIE, cookie)], body).into_response())
}

/// Ends the session and clears the cookie. For a user who signed in through an identity
/// provider with an `end_session_endpoint`, `data.endSessionUrl` is where to send the browser to
/// end the IdP's session too (RP-initiated logout).
#[utoipa::path(post, path = "/api/auth/logout", tag = "auth", responses((status = 200, description = "Signed out; `data: { message, endSessionUrl? }`")))]
async fn logout(
    State(ctx): State<SharedContext>,
    axum::Extension(settings): axum::Extension<crate::HttpSettings>,
    method: axum::http::Method,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let mut end_session_url = None;
    if let Some(token) = session_token(&headers, settings.session_cookie()) {
        check_same_origin(&method, &headers)?;
        end_session_url = trellis_core::auth::oidc::logout(&ctx.auth_deps(), &token).await?;
    }
    let cookie = settings.session_set_cookie(None);
    let mut body = serde_json::json!({ "message": "Logged out" });
    if let Some(url) = end_session_url {
        body["endSessionUrl"] = serde_json::Value::String(url);
    }
    Ok(([(header::SET_COOKIE, cookie)], data(body)).into_response())
}

/// The signed-in user; the workspace reflects `X-Workspace-Id` when given.
#[utoipa::path(get, path = "/api/auth/user", tag = "auth", responses((status = 200, body = Data<UserDto>), (status = 401, description = "No session")))]
async fn current_user(SessionPerson(user, caller): SessionPerson) -> ApiResult<axum::Json<serde_json::Value>> {
    let mut dto = UserDto::from(user);
    match caller {
        Some(caller) => dto.current_workspace_id = Some(caller.workspace_id.into_string()),
        None => {
            dto.current_workspace_id = None;
            dto.notice = Some(
                "No workspace yet: you are signed in, but no group of yours gives access to a workspace. \
                 Ask an administrator to add you to one."
                    .into(),
            );
        }
    }
    Ok(data(dto))
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceDto {
    id: String,
    name: String,
    role: Option<String>,
    created_at: String,
}

impl From<Workspace> for WorkspaceDto {
    fn from(workspace: Workspace) -> Self {
        WorkspaceDto {
            id: workspace.id.into_string(),
            name: workspace.name,
            role: workspace.role.map(|r| r.as_str().to_string()),
            created_at: trellis_core::clock::rfc3339(workspace.created_at),
        }
    }
}

/// Workspaces the caller can act in.
#[utoipa::path(get, path = "/api/workspaces", tag = "workspaces", responses((status = 200, body = Data<Vec<WorkspaceDto>>)))]
async fn list_workspaces(
    State(ctx): State<SharedContext>,
    principal: Principal,
) -> ApiResult<axum::Json<serde_json::Value>> {
    let workspaces = match principal {
        Principal::Key(caller) | Principal::Session(_, Some(caller)) => {
            auth::list_workspaces(&ctx.auth_deps(), &caller).await?
        }
        // Signed in with no workspace yet: the list is empty, not an error.
        Principal::Session(_, None) => Vec::new(),
    };
    Ok(data(workspaces.into_iter().map(WorkspaceDto::from).collect::<Vec<_>>()))
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct CreateWorkspaceBody {
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    name: String,
}

/// Creates a workspace owned by the signed-in user.
#[utoipa::path(post, path = "/api/workspaces", tag = "workspaces", request_body = CreateWorkspaceBody, responses((status = 201, body = Data<WorkspaceDto>)))]
async fn create_workspace(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Json(body): Json<CreateWorkspaceBody>,
) -> ApiResult<Response> {
    let workspace = auth::create_workspace(&ctx.auth_deps(), &caller, &body.name).await?;
    Ok(created(WorkspaceDto::from(workspace)))
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiKeyDto {
    id: String,
    workspace_id: String,
    name: String,
    kind: String,
    /// The first characters of the key, to recognise it.
    prefix: String,
    scopes: Vec<String>,
    created_by: Option<String>,
    created_at: String,
    last_used_at: Option<String>,
    /// The full key: present only in the response that created it.
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<String>,
}

fn api_key_dto(key: ApiKey, secret: Option<String>) -> ApiKeyDto {
    ApiKeyDto {
        id: key.id.into_string(),
        workspace_id: key.workspace_id.into_string(),
        name: key.name,
        kind: key.kind.as_str().into(),
        prefix: key.prefix,
        scopes: key.scopes.iter().map(|s| s.as_str().to_string()).collect(),
        created_by: key.created_by,
        created_at: trellis_core::clock::rfc3339(key.created_at),
        last_used_at: key.last_used_at.map(trellis_core::clock::rfc3339),
        key: secret,
    }
}

/// API keys of the workspace (never their secrets).
#[utoipa::path(get, path = "/api/api-keys", tag = "api-keys", responses((status = 200, body = Data<Vec<ApiKeyDto>>)))]
async fn list_api_keys(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
) -> ApiResult<axum::Json<serde_json::Value>> {
    let keys = auth::list_api_keys(&ctx.auth_deps(), &caller).await?;
    Ok(data(keys.into_iter().map(|k| api_key_dto(k, None)).collect::<Vec<_>>()))
}

#[derive(Debug, Deserialize, ToSchema)]
pub struct CreateApiKeyBody {
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$"
    )]
    name: String,
    /// Scopes the key carries; never more than its creator holds.
    #[schema(value_type = Vec<ScopeName>, min_items = 1)]
    scopes: Vec<String>,
    /// `client` (default, `ck_…`) or `agent` (`ak_…`).
    #[schema(value_type = Option<KeyKindName>)]
    kind: Option<String>,
}

/// The scopes an API key may carry: the domain's list, so the document cannot miss one.
pub struct ScopeName;

impl utoipa::PartialSchema for ScopeName {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .enum_values(Some(trellis_core::auth::Scope::ALL.iter().map(|scope| scope.as_str())))
            .into()
    }
}

impl ToSchema for ScopeName {}

/// Kinds of API key.
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code, reason = "a schema of the accepted strings; the domain parses them")]
pub enum KeyKindName {
    Client,
    Agent,
}

/// Creates a key; the response carries the full key once.
#[utoipa::path(post, path = "/api/api-keys", tag = "api-keys", request_body = CreateApiKeyBody, responses((status = 201, body = Data<ApiKeyDto>)))]
async fn create_api_key(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Json(body): Json<CreateApiKeyBody>,
) -> ApiResult<Response> {
    let kind = match body.kind.as_deref() {
        None => KeyKind::Client,
        Some(text) => KeyKind::parse(text).ok_or_else(|| Error::invalid_field("kind", "must be client or agent"))?,
    };
    let (key, secret) =
        auth::create_api_key(&ctx.auth_deps(), &caller, auth::NewApiKey { name: body.name, scopes: body.scopes, kind })
            .await?;
    Ok(created(api_key_dto(key, Some(secret))))
}

/// Deletes a key; requests with it fail from now on.
#[utoipa::path(delete, path = "/api/api-keys/{id}", tag = "api-keys", responses((status = 204, description = "Deleted"), (status = 404, description = "No such key in this workspace")))]
async fn delete_api_key(
    State(ctx): State<SharedContext>,
    Authenticated(caller): Authenticated,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    auth::delete_api_key(&ctx.auth_deps(), &caller, &id.into()).await?;
    Ok(StatusCode::NO_CONTENT)
}
