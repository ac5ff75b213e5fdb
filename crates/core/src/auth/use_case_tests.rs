//! Use cases of sign-in and API keys, over the whole fake of the auth port (`super::fake`).

use super::fake::MembershipRow;
use super::members;
use super::*;
use crate::error::Error;
use crate::testing::{context, MemoryStore};

const NOW: &str = "2026-03-01T12:00:00Z";
/// A week and a second after `NOW`: sessions opened at `NOW` have expired.
const AFTER_A_WEEK: &str = "2026-03-08T12:00:01Z";

fn ok<T, E: std::fmt::Display>(result: std::result::Result<T, E>) -> T {
    result.unwrap_or_else(|e| panic!("{e}"))
}

fn new_user(email: &str, workspace_name: &str) -> NewUser {
    NewUser {
        email: email.into(),
        password: "correct horse battery".into(),
        first_name: "Alice".into(),
        workspace_name: workspace_name.into(),
        admin: false,
    }
}

#[tokio::test]
async fn a_session_authenticates_in_the_users_workspaces_until_it_expires_or_signs_out() {
    let store = MemoryStore::default();
    let ctx = context(store.clone(), NOW);
    let (alice, home) = ok(create_user(&ctx.auth_deps(), new_user(" Alice@Example.com ", "Alice's")).await);
    assert_eq!(alice.email, "alice@example.com", "emails are kept normalised");
    let (_, elsewhere) = ok(create_user(&ctx.auth_deps(), new_user("bob@example.com", "Bob's")).await);

    let wrong = login(&ctx.auth_deps(), "alice@example.com", "not her password", "192.0.2.1", "req_1").await;
    assert!(matches!(wrong, Err(Error::Unauthorized)), "{:?}", wrong.err());
    let unknown = login(&ctx.auth_deps(), "nobody@example.com", "correct horse battery", "192.0.2.1", "req_2").await;
    assert!(matches!(unknown, Err(Error::Unauthorized)), "{:?}", unknown.err());

    let session = ok(login(&ctx.auth_deps(), "ALICE@example.com", "correct horse battery", "192.0.2.1", "req_3").await);
    let tables = store.snapshot();
    assert!(
        tables.sessions.iter().all(|s| s.token_hash != session.token) && tables.sessions.len() == 1,
        "the store keeps the session's digest, never its token"
    );
    assert!(tables.password_hashes.values().all(|hash| !hash.contains("correct horse")));

    let (user, caller) = ok(authenticate_session(&ctx.auth_deps(), &session.token, None, "req_4").await);
    assert_eq!(user.id, alice.id);
    assert_eq!(caller.workspace_id, home.id, "without X-Workspace-Id: the current workspace");
    assert_eq!(caller.scopes, Role::Owner.scopes());
    let foreign = authenticate_session(&ctx.auth_deps(), &session.token, Some(elsewhere.id.as_str()), "req_5").await;
    assert!(matches!(foreign, Err(Error::Forbidden(_))), "another user's workspace: {foreign:?}");

    let a_week_later = context(store.clone(), AFTER_A_WEEK);
    let expired = authenticate_session(&a_week_later.auth_deps(), &session.token, None, "req_6").await;
    assert!(matches!(expired, Err(Error::Unauthorized)), "{expired:?}");
    let next =
        ok(login(&a_week_later.auth_deps(), "alice@example.com", "correct horse battery", "192.0.2.1", "req_7").await);
    assert_eq!(store.snapshot().sessions.len(), 1, "the next sign-in sweeps the user's expired session");
    ok(logout(&a_week_later.auth_deps(), &next.token).await);
    let signed_out = authenticate_session(&a_week_later.auth_deps(), &next.token, None, "req_8").await;
    assert!(matches!(signed_out, Err(Error::Unauthorized)), "{signed_out:?}");
}

/// `ws_a`, owned by alice and carol.
fn two_owners() -> MemoryStore {
    let store = MemoryStore::default();
    store.edit(|t| {
        t.workspaces.push(Workspace { id: "ws_a".into(), name: "A".into(), role: None, created_at: 0 });
        for (id, joined) in [("usr_alice", 1), ("usr_carol", 2)] {
            t.users.push(User {
                id: id.into(),
                email: format!("{id}@example.com"),
                first_name: id.into(),
                is_admin: false,
                current_workspace_id: Some("ws_a".into()),
                created_at: 0,
            });
            t.memberships.push(MembershipRow::manual("ws_a", id, Role::Owner, joined));
        }
    });
    store
}

fn owner_in_a(id: &str) -> Caller {
    Caller {
        actor: Actor::User { id: id.into(), email: format!("{id}@example.com") },
        workspace_id: "ws_a".into(),
        scopes: Role::Owner.scopes(),
        instance_admin: false,
        request_id: "req_test".into(),
    }
}

#[tokio::test]
async fn an_api_key_holds_no_more_than_its_maker_holds_now() {
    let store = two_owners();
    let ctx = context(store.clone(), NOW);
    let alice = owner_in_a("usr_alice");
    let wanted = NewApiKey {
        name: "deploy".into(),
        scopes: vec!["certificates:read".into(), "certificates:write".into(), "members:write".into()],
        kind: KeyKind::Client,
    };
    let (key, secret) = ok(create_api_key(&ctx.auth_deps(), &alice, wanted).await);
    assert!(secret.starts_with("ck_") && secret.starts_with(&key.prefix));
    assert!(store.snapshot().api_key_hashes.values().all(|hash| hash != &secret), "kept as a digest");

    let as_key = ok(authenticate_key(&ctx.auth_deps(), &secret, "req_1").await);
    assert_eq!(as_key.workspace_id.as_str(), "ws_a");
    assert_eq!(as_key.scopes, [Scope::CertificatesRead, Scope::CertificatesWrite, Scope::MembersWrite]);
    assert!(matches!(&as_key.actor, Actor::ApiKey { owner: Some(maker), .. } if maker.as_str() == "usr_alice"));
    assert_eq!(store.snapshot().api_keys[0].last_used_at, Some(ctx.now_millis()), "first use is stamped");

    // Demoted to member: the key loses what a member lacks at its next request.
    let carol = owner_in_a("usr_carol");
    ok(members::set_role(&ctx.auth_deps(), &carol, &"usr_alice".into(), "member").await);
    let demoted = ok(authenticate_key(&ctx.auth_deps(), &secret, "req_2").await);
    assert_eq!(demoted.scopes, [Scope::CertificatesRead, Scope::CertificatesWrite]);

    // A membership ended by another path than removal (which deletes the keys): refused.
    store.edit(|t| t.memberships.retain(|m| m.user_id.as_str() != "usr_alice"));
    forget_key_grants(&ctx.auth_deps());
    let orphan = authenticate_key(&ctx.auth_deps(), &secret, "req_3").await;
    assert!(matches!(orphan, Err(Error::Unauthorized)), "{orphan:?}");

    for malformed in ["", "ck_short", &secret.to_uppercase(), &format!("xk_{}", &secret[3..])] {
        let refused = authenticate_key(&ctx.auth_deps(), malformed, "req_4").await;
        assert!(matches!(refused, Err(Error::Unauthorized)), "{malformed}: {refused:?}");
    }
}

#[tokio::test]
async fn a_key_grants_only_what_its_maker_holds_and_its_kind_allows() {
    let store = two_owners();
    let ctx = context(store.clone(), NOW);
    let mut viewer = owner_in_a("usr_carol");
    viewer.scopes = Role::Viewer.scopes();
    viewer.scopes.push(Scope::ApiKeysWrite);
    let beyond = NewApiKey { name: "x".into(), scopes: vec!["certificates:write".into()], kind: KeyKind::Client };
    let refused = create_api_key(&ctx.auth_deps(), &viewer, beyond).await;
    assert!(matches!(refused, Err(Error::Forbidden(_))), "{refused:?}");

    let alice = owner_in_a("usr_alice");
    let agent_managing_trust =
        NewApiKey { name: "agent".into(), scopes: vec!["attestation:manage".into()], kind: KeyKind::Agent };
    let refused = create_api_key(&ctx.auth_deps(), &alice, agent_managing_trust).await;
    assert!(matches!(refused, Err(Error::Validation { .. })), "{refused:?}");
    assert!(store.snapshot().api_keys.is_empty(), "nothing is stored for a refused key");

    let listed = NewApiKey { name: "ci".into(), scopes: vec!["cas:read".into()], kind: KeyKind::Agent };
    let (key, _) = ok(create_api_key(&ctx.auth_deps(), &alice, listed).await);
    ok(delete_api_key(&ctx.auth_deps(), &alice, &key.id).await);
    let again = delete_api_key(&ctx.auth_deps(), &alice, &key.id).await;
    assert!(matches!(again, Err(Error::NotFound(_))), "{again:?}");
    let audited: Vec<String> = store.snapshot().audit.into_iter().map(|a| a.action).collect();
    assert_eq!(audited, ["api_key.created", "api_key.deleted"]);
}
