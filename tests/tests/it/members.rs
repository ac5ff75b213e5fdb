//! Members API and CLI (issue 25, item 4): who belongs to a workspace, with which role.

use serde_json::{json, Value};
use trellis_tests::{Client, Server};

/// The admin's workspace id.
async fn admin_workspace(admin: &Client) -> String {
    let me = admin.get("/api/auth/user").await;
    me.body["data"]["currentWorkspaceId"].as_str().expect("current workspace").to_string()
}

/// A user with a workspace of their own, signed in; answers the client and the user id.
async fn person(server: &Server, email: &str) -> (Client, String) {
    let (client, _) = server.new_user(email).await;
    let me = client.get("/api/auth/user").await;
    (client, me.body["data"]["id"].as_str().expect("user id").to_string())
}

/// Days since 1970-01-01 of an RFC 3339 timestamp's date (Howard Hinnant's days_from_civil).
fn day_number(timestamp: &str) -> i64 {
    let part = |range: std::ops::Range<usize>| timestamp.get(range).and_then(|t| t.parse::<i64>().ok()).unwrap_or(0);
    let (y, m, d) = (part(0..4), part(5..7), part(8..10));
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468
}

fn actions(audit: &Value) -> Vec<String> {
    audit["data"].as_array().into_iter().flatten().filter_map(|e| e["action"].as_str().map(str::to_string)).collect()
}

#[tokio::test]
async fn an_owner_adds_changes_and_removes_a_member() {
    let server = Server::start();
    let admin = server.admin().await;
    let ws = admin_workspace(&admin).await;
    let (bob, bob_id) = person(&server, "bob@example.com").await;
    let bob_in_ws = bob.with_header("X-Workspace-Id", &ws);
    // Not a member yet: bob cannot select the workspace.
    assert_eq!(bob_in_ws.get("/api/certificates").await.status, 403);

    let added = admin
        .post(&format!("/api/workspaces/{ws}/members"), json!({ "email": "Bob@Example.com", "role": "viewer" }))
        .await;
    assert_eq!(added.status, 201, "{}", added.body);
    assert_eq!(added.body["data"]["status"], "added");
    assert_eq!(added.body["data"]["member"]["userId"], bob_id.as_str());
    assert_eq!(added.body["data"]["member"]["role"], "viewer");
    let again = admin
        .post(&format!("/api/workspaces/{ws}/members"), json!({ "email": "bob@example.com", "role": "member" }))
        .await;
    assert_eq!((again.status, again.error_code()), (409, "CONFLICT"));

    let listed = admin.get(&format!("/api/workspaces/{ws}/members")).await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert_eq!(listed.body["total"], 2);
    let bob_row = listed.body["data"].as_array().and_then(|rows| rows.iter().find(|m| m["userId"] == bob_id.as_str()));
    let bob_row = bob_row.unwrap_or_else(|| panic!("bob listed: {}", listed.body));
    assert_eq!(bob_row["email"], "bob@example.com");
    assert!(bob_row["firstName"].is_string() && bob_row["joinedAt"].is_string(), "{bob_row}");

    // A viewer reads but does not write; the role change counts from the next request.
    let pem = trellis_tests::certs::Spec::tls("members.example.com").pem();
    assert_eq!(bob_in_ws.get("/api/certificates").await.status, 200);
    assert_eq!(bob_in_ws.post("/api/certificates", json!({ "certificate": pem })).await.status, 403);
    let changed = admin.patch(&format!("/api/workspaces/{ws}/members/{bob_id}"), json!({ "role": "member" })).await;
    assert_eq!(changed.status, 200, "{}", changed.body);
    assert_eq!(changed.body["data"]["role"], "member");
    assert_eq!(bob_in_ws.post("/api/certificates", json!({ "certificate": pem })).await.status, 201);

    let removed = admin.delete(&format!("/api/workspaces/{ws}/members/{bob_id}")).await;
    assert_eq!(removed.status, 204, "{}", removed.body);
    assert_eq!(bob_in_ws.get("/api/certificates").await.status, 403, "the session lost the workspace at once");
    let gone = admin.delete(&format!("/api/workspaces/{ws}/members/{bob_id}")).await;
    assert_eq!((gone.status, gone.error_code()), (404, "NOT_FOUND"));

    let audit = admin.get("/api/audit-logs?targetType=user").await;
    let audited = actions(&audit.body);
    for action in ["member.added", "member.role_changed", "member.removed"] {
        assert!(audited.iter().any(|a| a == action), "{action} in {audited:?}");
    }
}

#[tokio::test]
async fn a_member_without_members_write_is_refused() {
    let server = Server::start();
    let admin = server.admin().await;
    let ws = admin_workspace(&admin).await;
    let admin_id = admin.get("/api/auth/user").await.body["data"]["id"].as_str().unwrap_or_default().to_string();
    let carol = server.new_member("carol@example.com", &ws, "member").await;
    assert_eq!(carol.get(&format!("/api/workspaces/{ws}/members")).await.status, 200, "members see who is there");
    let refused = [
        carol
            .post(&format!("/api/workspaces/{ws}/members"), json!({ "email": "x@example.com", "role": "owner" }))
            .await,
        carol.patch(&format!("/api/workspaces/{ws}/members/{admin_id}"), json!({ "role": "viewer" })).await,
        carol.delete(&format!("/api/workspaces/{ws}/members/{admin_id}")).await,
    ];
    for res in refused {
        assert_eq!((res.status, res.error_code()), (403, "INSUFFICIENT_SCOPE"), "{}", res.body);
    }
    // A key without members:write is refused alike; one with members:read reads.
    let reader = server.key_client(&["members:read"]).await;
    assert_eq!(reader.get(&format!("/api/workspaces/{ws}/members")).await.status, 200);
    let res = reader
        .post(&format!("/api/workspaces/{ws}/members"), json!({ "email": "x@example.com", "role": "viewer" }))
        .await;
    assert_eq!((res.status, res.error_code()), (403, "INSUFFICIENT_SCOPE"));
}

#[tokio::test]
async fn a_workspace_keeps_its_last_owner() {
    let server = Server::start();
    let admin = server.admin().await;
    let ws = admin_workspace(&admin).await;
    let admin_id = admin.get("/api/auth/user").await.body["data"]["id"].as_str().unwrap_or_default().to_string();
    let demote = admin.patch(&format!("/api/workspaces/{ws}/members/{admin_id}"), json!({ "role": "member" })).await;
    assert_eq!((demote.status, demote.error_code()), (409, "LAST_OWNER"), "{}", demote.body);
    let remove = admin.delete(&format!("/api/workspaces/{ws}/members/{admin_id}")).await;
    assert_eq!((remove.status, remove.error_code()), (409, "LAST_OWNER"));
    // With a second owner, the first may step down.
    let (_, dana_id) = person(&server, "dana@example.com").await;
    let add = admin
        .post(&format!("/api/workspaces/{ws}/members"), json!({ "email": "dana@example.com", "role": "owner" }))
        .await;
    assert_eq!(add.status, 201, "{}", add.body);
    let demote = admin.patch(&format!("/api/workspaces/{ws}/members/{admin_id}"), json!({ "role": "viewer" })).await;
    assert_eq!(demote.status, 200, "{}", demote.body);
    // dana is now the last owner.
    let dana = server.login("dana@example.com", "password-123").await.with_header("X-Workspace-Id", &ws);
    let res = dana.delete(&format!("/api/workspaces/{ws}/members/{dana_id}")).await;
    assert_eq!((res.status, res.error_code()), (409, "LAST_OWNER"));
}

#[tokio::test]
async fn a_removed_members_session_and_api_keys_are_refused_at_once() {
    let server = Server::start();
    let admin = server.admin().await;
    let ws = admin_workspace(&admin).await;
    let (erin, erin_id) = person(&server, "erin@example.com").await;
    let add = admin
        .post(&format!("/api/workspaces/{ws}/members"), json!({ "email": "erin@example.com", "role": "owner" }))
        .await;
    assert_eq!(add.status, 201, "{}", add.body);
    let erin_in_ws = erin.with_header("X-Workspace-Id", &ws);
    let made = erin_in_ws
        .post(
            "/api/api-keys",
            json!({ "name": "erin's", "scopes": ["certificates:read", "members:read", "members:write"] }),
        )
        .await;
    assert_eq!(made.status, 201, "{}", made.body);
    let key = Client::new(&server, made.body["data"]["key"].as_str().map(str::to_string));
    assert_eq!(key.get("/api/certificates").await.status, 200);

    // A key acts for its maker: demoting erin takes members:write from her key at its next use.
    let demote = admin.patch(&format!("/api/workspaces/{ws}/members/{erin_id}"), json!({ "role": "member" })).await;
    assert_eq!(demote.status, 200, "{}", demote.body);
    let res =
        key.post(&format!("/api/workspaces/{ws}/members"), json!({ "email": "z@example.com", "role": "viewer" })).await;
    assert_eq!((res.status, res.error_code()), (403, "INSUFFICIENT_SCOPE"));
    assert_eq!(key.get(&format!("/api/workspaces/{ws}/members")).await.status, 200);

    let removed = admin.delete(&format!("/api/workspaces/{ws}/members/{erin_id}")).await;
    assert_eq!(removed.status, 204, "{}", removed.body);
    assert_eq!(key.get("/api/certificates").await.status, 401, "the removed member's key is gone");
    assert_eq!(erin_in_ws.get("/api/certificates").await.status, 403, "the session lost the workspace");
    // Her own workspace still works, and lists no more the one she left.
    let own = erin.get("/api/workspaces").await;
    assert_eq!(own.status, 200);
    assert!(own.body["data"].as_array().is_some_and(|w| w.iter().all(|w| w["id"] != ws.as_str())), "{}", own.body);
    let keys = admin.get("/api/api-keys").await;
    assert!(keys.body["data"].as_array().is_some_and(|k| k.iter().all(|k| k["name"] != "erin's")), "{}", keys.body);
    let audit = admin.get("/api/audit-logs?action=api_key.deleted").await;
    assert_eq!(audit.body["data"][0]["details"]["reason"], "member_removed", "{}", audit.body);
}

#[tokio::test]
async fn an_invitation_is_redeemed_when_the_user_is_created() {
    let server = Server::start();
    let admin = server.admin().await;
    let ws = admin_workspace(&admin).await;
    let invited = admin
        .post(&format!("/api/workspaces/{ws}/members"), json!({ "email": "gil@example.com", "role": "member" }))
        .await;
    assert_eq!(invited.status, 201, "{}", invited.body);
    assert_eq!(invited.body["data"]["status"], "invited");
    let invitation = &invited.body["data"]["invitation"];
    assert_eq!(invitation["email"], "gil@example.com");
    assert_eq!(invitation["role"], "member");
    let (created, expires) =
        (invitation["createdAt"].as_str().unwrap_or_default(), invitation["expiresAt"].as_str().unwrap_or_default());
    assert_eq!(created.get(10..), expires.get(10..), "same time of day: {invitation}");
    assert_eq!(day_number(expires) - day_number(created), 14, "{invitation}");
    let pending = admin.get(&format!("/api/workspaces/{ws}/invitations")).await;
    assert_eq!((pending.status, pending.body["total"].clone()), (200, json!(1)), "{}", pending.body);

    // A withdrawn invitation is not redeemed.
    let other = admin
        .post(&format!("/api/workspaces/{ws}/members"), json!({ "email": "hal@example.com", "role": "viewer" }))
        .await;
    let other_id = other.body["data"]["invitation"]["id"].as_str().unwrap_or_default().to_string();
    assert_eq!(admin.delete(&format!("/api/workspaces/{ws}/invitations/{other_id}")).await.status, 204);
    assert_eq!(admin.delete(&format!("/api/workspaces/{ws}/invitations/{other_id}")).await.status, 404);

    let (gil, _) = person(&server, "gil@example.com").await;
    let workspaces = gil.get("/api/workspaces").await;
    let joined = workspaces.body["data"].as_array().and_then(|w| w.iter().find(|w| w["id"] == ws.as_str()).cloned());
    assert_eq!(joined.map(|w| w["role"].clone()), Some(json!("member")), "{}", workspaces.body);
    let (hal, _) = person(&server, "hal@example.com").await;
    assert_eq!(hal.with_header("X-Workspace-Id", &ws).get("/api/certificates").await.status, 403);
    let pending = admin.get(&format!("/api/workspaces/{ws}/invitations")).await;
    assert_eq!(pending.body["total"], 0, "{}", pending.body);
    let audited = actions(&admin.get("/api/audit-logs?targetType=invitation").await.body);
    for action in ["invitation.created", "invitation.deleted", "invitation.redeemed"] {
        assert!(audited.iter().any(|a| a == action), "{action} in {audited:?}");
    }
}

#[tokio::test]
async fn another_workspaces_id_is_not_found() {
    let server = Server::start();
    let admin = server.admin().await;
    let ws = admin_workspace(&admin).await;
    let (ivy, _) = person(&server, "ivy@example.com").await;
    let ivy_ws = admin_workspace(&ivy).await;
    let paths = [format!("/api/workspaces/{ivy_ws}/members"), format!("/api/workspaces/{ivy_ws}/invitations")];
    for path in &paths {
        let res = admin.get(path).await;
        assert_eq!((res.status, res.error_code()), (404, "NOT_FOUND"), "{path}: {}", res.body);
    }
    let res = admin.post(&paths[0], json!({ "email": "admin2@example.com", "role": "owner" })).await;
    assert_eq!(res.status, 404);
    let key = server.key_client(&["members:read", "members:write"]).await;
    assert_eq!(key.get(&paths[0]).await.status, 404, "a key reaches its own workspace only");
    assert_eq!(key.get(&format!("/api/workspaces/{ws}/members")).await.status, 200);
    assert_eq!(admin.get("/api/workspaces/ws_nonexistent/members").await.status, 404);
    // A session names any workspace it belongs to in the path, acting with that role there.
    let add = admin
        .post(&format!("/api/workspaces/{ws}/members"), json!({ "email": "ivy@example.com", "role": "viewer" }))
        .await;
    assert_eq!(add.status, 201);
    assert_eq!(ivy.get(&format!("/api/workspaces/{ws}/members")).await.status, 200);
    let res =
        ivy.post(&format!("/api/workspaces/{ws}/members"), json!({ "email": "x@example.com", "role": "viewer" })).await;
    assert_eq!((res.status, res.error_code()), (403, "INSUFFICIENT_SCOPE"), "a viewer there, whatever her own role");
}

#[tokio::test]
async fn bad_input_is_a_validation_error() {
    let server = Server::start();
    let admin = server.admin().await;
    let ws = admin_workspace(&admin).await;
    let path = format!("/api/workspaces/{ws}/members");
    for (body, field) in [
        (json!({ "email": "jo@example.com", "role": "admin" }), Some("role")),
        (json!({ "email": "not an address", "role": "viewer" }), Some("email")),
        (json!({ "email": "jo@example.com" }), None),
        (json!({ "email": "jo@example.com", "role": "viewer", "extra": 1 }), None),
    ] {
        let res = admin.post(&path, body.clone()).await;
        assert_eq!((res.status, res.error_code()), (400, "VALIDATION_ERROR"), "{body}: {}", res.body);
        if let Some(field) = field {
            assert_eq!(res.body["error"]["details"]["field"], field, "{}", res.body);
        }
    }
    let admin_id = admin.get("/api/auth/user").await.body["data"]["id"].as_str().unwrap_or_default().to_string();
    let res = admin.patch(&format!("{path}/{admin_id}"), json!({ "role": "OWNER" })).await;
    assert_eq!((res.status, res.error_code()), (400, "VALIDATION_ERROR"));
}

#[tokio::test]
async fn the_cli_lists_adds_changes_and_removes() {
    let server = Server::start();
    let admin = server.admin().await;
    let ws = admin_workspace(&admin).await;
    let (_, kim_id) = person(&server, "kim@example.com").await;
    let added =
        server.cli(&["members", "add", "--workspace", "default", "--email", "kim@example.com", "--role", "viewer"]);
    let added = added.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(added["status"], "added");
    assert_eq!(added["member"]["userId"], kim_id.as_str());
    let invited = server.cli(&["members", "add", "--workspace", &ws, "--email", "lee@example.com", "--role", "member"]);
    assert_eq!(invited.unwrap_or_else(|e| panic!("{e}"))["status"], "invited");
    let listed = server.cli(&["members", "list", "--workspace", "default"]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(listed["members"].as_array().map(Vec::len), Some(2), "{listed}");
    assert_eq!(listed["invitations"][0]["email"], "lee@example.com", "{listed}");
    let changed =
        server.cli(&["members", "set-role", "--workspace", &ws, "--user", "kim@example.com", "--role", "owner"]);
    assert_eq!(changed.unwrap_or_else(|e| panic!("{e}"))["role"], "owner");
    let removed = server.cli(&["members", "remove", "--workspace", "default", "--user", &kim_id]);
    assert_eq!(removed.unwrap_or_else(|e| panic!("{e}"))["removed"], kim_id.as_str());
    // The last owner stays, with a clear message and a failing exit status.
    let refused = server.cli_raw(&["members", "remove", "--workspace", "default", "--user", "admin@example.com"]);
    let refused = refused.unwrap_or_else(|e| panic!("{e}"));
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("at least one owner"), "{stderr}");
    let unknown =
        server.cli_raw(&["members", "list", "--workspace", "no-such-workspace"]).unwrap_or_else(|e| panic!("{e}"));
    assert!(!unknown.status.success());
    // Audited as the operator.
    let audit = admin.get("/api/audit-logs?actorId=cli&targetType=user").await;
    let audited = actions(&audit.body);
    for action in ["member.added", "member.role_changed", "member.removed"] {
        assert!(audited.iter().any(|a| a == action), "{action} in {audited:?}");
    }
}

/// An invitation waiting for an address whose account already exists (made by a path that does
/// not redeem, such as an identity provider's sign-in before it did) is redeemed at the next
/// password sign-in.
#[tokio::test]
async fn a_password_sign_in_redeems_a_waiting_invitation() {
    let server = Server::start();
    let admin = server.admin().await;
    let ws = admin_workspace(&admin).await;
    let (_, _) = person(&server, "nia@example.com").await;
    let far = 4_102_444_800_000_i64; // 2100-01-01
    server.sql(&format!(
        "INSERT INTO workspace_invitations (id, workspace_id, email, role, invited_by, created_at, expires_at) \
         VALUES ('inv_waiting', '{ws}', 'nia@example.com', 'viewer', 'cli', 0, {far})"
    ));
    let nia = server.login("nia@example.com", "password-123").await;
    let workspaces = nia.get("/api/workspaces").await;
    let joined = workspaces.body["data"].as_array().and_then(|w| w.iter().find(|w| w["id"] == ws.as_str()).cloned());
    assert_eq!(joined.map(|w| w["role"].clone()), Some(json!("viewer")), "{}", workspaces.body);
    assert_eq!(server.sql("SELECT COUNT(*) FROM workspace_invitations"), "0");
    let audited = actions(&admin.get("/api/audit-logs?action=invitation.redeemed").await.body);
    assert_eq!(audited.len(), 1, "{audited:?}");
}
