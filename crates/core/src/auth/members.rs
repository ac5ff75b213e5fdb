//! Who belongs to a workspace: members, their roles, invitations (issue 25, item 4).
//!
//! Rules: only a caller with `members:write` in the workspace changes its membership; a
//! workspace never loses its last owner (`LAST_OWNER`, 409); an unknown e-mail becomes an
//! invitation that the next sign-in or creation of a user with that e-mail redeems
//! ([`redeem_invitations`]). Removing a member deletes the API keys they made there, and their
//! sessions stop reaching the workspace at once because a session's role is read per request.

use crate::audit::Audit;
use crate::auth::AuthDeps;
use crate::auth::{Actor, Caller, Role, Scope, User};
use crate::error::{Entity, Error, Result};
use crate::ids::{UserId, WorkspaceId};
use crate::pagination::{Page, PageRequest};
use crate::principal::Principal;
use crate::unit_of_work::Target;

/// How long an invitation waits to be redeemed: long enough for a colleague back from two
/// weeks off, short enough that a mistyped address does not grant access months later.
pub const INVITATION_LIFETIME_DAYS: i64 = 14;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub user_id: UserId,
    pub email: String,
    pub first_name: String,
    pub role: Role,
    pub joined_at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invitation {
    /// `inv_…`.
    pub id: String,
    pub workspace_id: WorkspaceId,
    /// Normalised (trimmed, lower case), as users' e-mails are stored.
    pub email: String,
    pub role: Role,
    /// The user (or `cli`) who invited.
    pub invited_by: String,
    pub created_at: i64,
    pub expires_at: i64,
}

/// What `POST …/members` did.
#[derive(Debug, Clone)]
pub enum Added {
    /// The e-mail belongs to a user: they are a member now.
    Member(Member),
    /// Nobody has that e-mail yet: the invitation waits for them.
    Invitation(Invitation),
}

/// The operator at the command line, acting with every scope in the workspace named by its id
/// or by its name (which must then name exactly one workspace).
/// The workspaces `reference` names: the one with that id, else every one with that name (names
/// need not be unique).
pub(crate) async fn workspaces_named(ctx: &AuthDeps, reference: &str) -> Result<Vec<crate::auth::Workspace>> {
    if let Some(found) = ctx.store.find_workspace(reference).await? {
        return Ok(vec![found]);
    }
    Ok(ctx.store.find_workspaces_by_name(reference.trim()).await?)
}

pub async fn operator_in(ctx: &AuthDeps, workspace: &str) -> Result<Caller> {
    let mut named = workspaces_named(ctx, workspace).await?;
    let workspace_id = match named.len() {
        0 => return Err(Error::NotFound(Entity::Workspace)),
        1 => named.remove(0).id,
        n => {
            let ids: Vec<String> = named.into_iter().map(|w| w.id.into_string()).collect();
            return Err(Error::Conflict(format!(
                "{n} workspaces are named `{workspace}`: give one of their ids ({})",
                ids.join(", ")
            )));
        }
    };
    Ok(Caller {
        actor: Actor::System,
        workspace_id,
        scopes: Scope::ALL.to_vec(),
        instance_admin: true,
        request_id: String::new(),
    })
}

/// A user id, or the e-mail of a user (the command line's convenience).
pub async fn user_id_of(ctx: &AuthDeps, id_or_email: &str) -> Result<UserId> {
    if id_or_email.contains('@') {
        let email = super::service::normalize_email(id_or_email)?;
        let (user, _) = ctx.store.find_user_credentials(&email).await?.ok_or(Error::NotFound(Entity::Member))?;
        return Ok(user.id);
    }
    Ok(UserId::from(id_or_email))
}

/// The caller acting in the workspace named by the path. A session user may name any workspace
/// they belong to (acting with that membership's role); an API key only its own. Any other
/// workspace is 404, as another workspace's records are everywhere.
pub async fn caller_in(ctx: &AuthDeps, caller: &Caller, workspace_id: &str) -> Result<Caller> {
    if caller.workspace_id.as_str() == workspace_id {
        return Ok(caller.clone());
    }
    let Some(user_id) = caller.user_id() else {
        return Err(Error::NotFound(Entity::Workspace));
    };
    let workspace_id = WorkspaceId::from(workspace_id);
    let role = ctx.store.find_membership(&workspace_id, user_id).await?.ok_or(Error::NotFound(Entity::Workspace))?;
    Ok(Caller { workspace_id, scopes: role.scopes(), ..caller.clone() })
}

pub fn parse_role(text: &str) -> Result<Role> {
    Role::parse(text.trim()).ok_or_else(|| {
        Error::validation_with(
            format!("Invalid field `role`: must be one of owner, member, viewer (got `{text}`)"),
            serde_json::json!({ "field": "role", "allowed": ["owner", "member", "viewer"] }),
        )
    })
}

fn last_owner() -> Error {
    Error::LastOwner
}

pub async fn list_members(ctx: &AuthDeps, caller: &Caller, page: PageRequest) -> Result<Page<Member>> {
    caller.require(Scope::MembersRead)?;
    Ok(ctx.store.list_members(&caller.workspace_id, page).await?)
}

pub async fn list_invitations(ctx: &AuthDeps, caller: &Caller, page: PageRequest) -> Result<Page<Invitation>> {
    caller.require(Scope::MembersRead)?;
    Ok(ctx.store.list_invitations(&caller.workspace_id, ctx.now_millis(), page).await?)
}

/// Adds the user with `email` to the caller's workspace, or invites the address.
pub async fn add(ctx: &AuthDeps, caller: &Caller, email: &str, role: &str) -> Result<Added> {
    caller.require(Scope::MembersWrite)?;
    let email = super::service::normalize_email(email)?;
    let role = parse_role(role)?;
    let now = ctx.now_millis();
    let workspace_id = caller.workspace_id.clone();
    let mut change = ctx.change(Audit::of(caller), Some(&workspace_id)).await?;
    if !change.tx().lock_workspace(&workspace_id).await? {
        return Err(Error::NotFound(Entity::Workspace));
    }
    if let Some(user) = change.tx().find_user_by_email(&email).await? {
        if change.tx().find_member(&workspace_id, &user.id).await?.is_some() {
            return Err(Error::Conflict(format!("{email} is already a member of this workspace")));
        }
        change.tx().add_member(&workspace_id, &user.id, role, now).await?;
        if user.current_workspace_id.is_none() {
            change.tx().set_current_workspace(&user.id, &workspace_id).await?;
        }
        change.audit(
            "member.added",
            Target::new("user", &user.id),
            serde_json::json!({ "email": email, "role": role.as_str() }),
        );
        change.commit().await?;
        return Ok(Added::Member(Member {
            user_id: user.id,
            email: user.email,
            first_name: user.first_name,
            role,
            joined_at: now,
        }));
    }
    let invitation = Invitation {
        id: ctx.new_id("inv_"),
        workspace_id: workspace_id.clone(),
        email,
        role,
        invited_by: caller.actor.principal().id,
        created_at: now,
        expires_at: now + INVITATION_LIFETIME_DAYS * 24 * 3600 * 1000,
    };
    // Inviting the same address again replaces the invitation (new role, new lifetime).
    change.tx().put_invitation(&invitation).await?;
    change.audit(
        "invitation.created",
        Target::new("invitation", &invitation.id),
        serde_json::json!({
            "email": invitation.email,
            "role": role.as_str(),
            "expiresAt": crate::clock::rfc3339(invitation.expires_at),
        }),
    );
    change.commit().await?;
    Ok(Added::Invitation(invitation))
}

/// Changes a member's role; demoting the last owner is refused.
pub async fn set_role(ctx: &AuthDeps, caller: &Caller, user_id: &UserId, role: &str) -> Result<Member> {
    caller.require(Scope::MembersWrite)?;
    let role = parse_role(role)?;
    let workspace_id = caller.workspace_id.clone();
    let mut change = ctx.change(Audit::of(caller), Some(&workspace_id)).await?;
    change.tx().lock_workspace(&workspace_id).await?;
    let member = change.tx().find_member(&workspace_id, user_id).await?.ok_or(Error::NotFound(Entity::Member))?;
    if member.role == role {
        return Ok(member);
    }
    if member.role == Role::Owner && change.tx().count_owners(&workspace_id).await? <= 1 {
        return Err(last_owner());
    }
    change.tx().set_member_role(&workspace_id, user_id, role).await?;
    change.audit(
        "member.role_changed",
        Target::new("user", user_id),
        serde_json::json!({ "email": member.email, "from": member.role.as_str(), "to": role.as_str() }),
    );
    change.commit().await?;
    crate::auth::forget_key_grants(ctx);
    Ok(Member { role, ..member })
}

/// Removes a member: their sessions lose the workspace at the next request, and the API keys
/// they made in it are deleted in the same transaction (a key acts for its maker, who is gone).
pub async fn remove(ctx: &AuthDeps, caller: &Caller, user_id: &UserId) -> Result<()> {
    caller.require(Scope::MembersWrite)?;
    let workspace_id = caller.workspace_id.clone();
    let mut change = ctx.change(Audit::of(caller), Some(&workspace_id)).await?;
    change.tx().lock_workspace(&workspace_id).await?;
    let member = change.tx().find_member(&workspace_id, user_id).await?.ok_or(Error::NotFound(Entity::Member))?;
    if member.role == Role::Owner && change.tx().count_owners(&workspace_id).await? <= 1 {
        return Err(last_owner());
    }
    change.tx().remove_member(&workspace_id, user_id).await?;
    change.tx().leave_current_workspace(user_id, &workspace_id).await?;
    let keys = change.tx().delete_user_api_keys(&workspace_id, user_id).await?;
    for key in &keys {
        change.audit(
            "api_key.deleted",
            Target::new("api_key", key),
            serde_json::json!({ "reason": "member_removed", "userId": user_id }),
        );
    }
    change.audit(
        "member.removed",
        Target::new("user", user_id),
        serde_json::json!({ "email": member.email, "role": member.role.as_str(), "apiKeysDeleted": keys.len() }),
    );
    change.commit().await?;
    crate::auth::forget_key_grants(ctx);
    Ok(())
}

/// Withdraws a pending invitation.
pub async fn delete_invitation(ctx: &AuthDeps, caller: &Caller, invitation_id: &str) -> Result<()> {
    caller.require(Scope::MembersWrite)?;
    let workspace_id = caller.workspace_id.clone();
    let mut change = ctx.change(Audit::of(caller), Some(&workspace_id)).await?;
    let invitation = change
        .tx()
        .delete_invitation(&workspace_id, invitation_id)
        .await?
        .ok_or(Error::NotFound(Entity::Invitation))?;
    change.audit(
        "invitation.deleted",
        Target::new("invitation", invitation_id),
        serde_json::json!({ "email": invitation.email, "role": invitation.role.as_str() }),
    );
    change.commit().await?;
    Ok(())
}

/// Redeems the invitations waiting for `user`'s e-mail: the user joins each inviting workspace
/// with the invited role (a membership they already have is left as it is), and the
/// invitations are gone, expired ones too. Called after every password sign-in, after
/// `trellis user create`, and by the OIDC sign-in's just-in-time user creation. Answers the
/// workspaces joined. The e-mail must be one the caller has verified (a password login proves
/// nothing about the address beyond what the operator typed at creation; an IdP's unverified
/// `email` claim must not be passed here).
pub async fn redeem_invitations(ctx: &AuthDeps, user: &User, request_id: Option<&str>) -> Result<Vec<WorkspaceId>> {
    let now = ctx.now_millis();
    let actor = Audit::by(Principal::user(user.id.as_str()), request_id.map(str::to_owned));
    // With nothing to redeem this is one DELETE by the indexed e-mail, beside the session row a
    // sign-in writes anyway.
    let mut change = ctx.change(actor, None).await?;
    let invitations = change.tx().take_invitations(&user.email, now).await?;
    let mut joined = Vec::new();
    let mut current = user.current_workspace_id.clone();
    for invitation in invitations {
        let workspace_id = invitation.workspace_id.clone();
        let details = serde_json::json!({
            "workspaceId": workspace_id,
            "email": invitation.email,
            "role": invitation.role.as_str(),
            "invitedBy": invitation.invited_by,
        });
        change.audit_in(&workspace_id, "invitation.redeemed", Target::new("invitation", &invitation.id), details);
        if change.tx().find_member(&workspace_id, &user.id).await?.is_some() {
            continue;
        }
        change.tx().add_member(&workspace_id, &user.id, invitation.role, now).await?;
        change.audit_in(
            &workspace_id,
            "member.added",
            Target::new("user", &user.id),
            serde_json::json!({ "email": user.email, "role": invitation.role.as_str(), "invitationId": invitation.id }),
        );
        if current.is_none() {
            change.tx().set_current_workspace(&user.id, &workspace_id).await?;
            current = Some(workspace_id.clone());
        }
        joined.push(workspace_id);
    }
    change.commit().await?;
    Ok(joined)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::fake::MembershipRow;
    use crate::auth::{ApiKey, KeyKind, Workspace};
    use crate::testing::{context, MemoryStore};

    const NOW: &str = "2026-11-28T12:00:00Z";

    fn user(id: &str, email: &str, current: Option<&str>) -> User {
        User {
            id: id.into(),
            email: email.into(),
            first_name: id.trim_start_matches("usr_").into(),
            is_admin: false,
            current_workspace_id: current.map(Into::into),
            created_at: 0,
        }
    }

    /// `ws_a`: alice owns, bob is a member (with a key). `ws_b`: carol owns. dave has no workspace.
    fn store() -> MemoryStore {
        let store = MemoryStore::default();
        store.edit(|t| {
            for id in ["ws_a", "ws_b"] {
                t.workspaces.push(Workspace { id: id.into(), name: id.into(), role: None, created_at: 0 });
            }
            t.users.push(user("usr_alice", "alice@example.com", Some("ws_a")));
            t.users.push(user("usr_bob", "bob@example.com", Some("ws_a")));
            t.users.push(user("usr_carol", "carol@example.com", Some("ws_b")));
            t.users.push(user("usr_dave", "dave@example.com", None));
            t.memberships.push(MembershipRow::manual("ws_a", "usr_alice", Role::Owner, 1));
            t.memberships.push(MembershipRow::manual("ws_a", "usr_bob", Role::Member, 2));
            t.memberships.push(MembershipRow::manual("ws_b", "usr_carol", Role::Owner, 3));
            t.memberships.push(MembershipRow::manual("ws_b", "usr_bob", Role::Viewer, 4));
            t.api_keys.push(ApiKey {
                id: "key_bob".into(),
                workspace_id: "ws_a".into(),
                name: "bob's".into(),
                kind: KeyKind::Client,
                prefix: "ck_0000000".into(),
                scopes: vec![Scope::CertificatesRead],
                created_by: Some("usr_bob".into()),
                created_at: 0,
                last_used_at: None,
            });
        });
        store
    }

    fn signed_in(id: &str, workspace: &str, role: Role) -> Caller {
        Caller {
            actor: Actor::User { id: id.into(), email: format!("{id}@example.com") },
            workspace_id: workspace.into(),
            scopes: role.scopes(),
            instance_admin: false,
            request_id: "req_test".into(),
        }
    }

    fn page() -> PageRequest {
        PageRequest::new(None, None, None, 50).unwrap_or_else(|_| unreachable!())
    }

    fn actions(store: &MemoryStore) -> Vec<(Option<String>, String)> {
        store.snapshot().audit.into_iter().map(|a| (a.workspace_id, a.action)).collect()
    }

    #[tokio::test]
    async fn the_last_owner_can_be_neither_demoted_nor_removed() {
        let store = store();
        let ctx = context(store.clone(), NOW);
        let alice = signed_in("usr_alice", "ws_a", Role::Owner);
        let demote = set_role(&ctx.auth_deps(), &alice, &"usr_alice".into(), "member").await;
        assert!(matches!(demote, Err(Error::LastOwner)), "{demote:?}");
        let remove = remove(&ctx.auth_deps(), &alice, &"usr_alice".into()).await;
        assert!(matches!(remove, Err(Error::LastOwner)), "{remove:?}");
        // With a second owner, the first may step down.
        set_role(&ctx.auth_deps(), &alice, &"usr_bob".into(), "owner").await.unwrap_or_else(|e| panic!("{e}"));
        let alice_now =
            set_role(&ctx.auth_deps(), &alice, &"usr_alice".into(), "viewer").await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(alice_now.role, Role::Viewer);
        assert_eq!(
            ctx.store.find_membership(&"ws_a".into(), &"usr_bob".into()).await.ok().flatten(),
            Some(Role::Owner)
        );
        assert!(actions(&store).iter().filter(|(_, a)| a == "member.role_changed").count() == 2);
    }

    #[tokio::test]
    async fn removal_deletes_the_members_keys_and_moves_their_current_workspace() {
        let store = store();
        let ctx = context(store.clone(), NOW);
        let alice = signed_in("usr_alice", "ws_a", Role::Owner);
        remove(&ctx.auth_deps(), &alice, &"usr_bob".into()).await.unwrap_or_else(|e| panic!("{e}"));
        let tables = store.snapshot();
        assert!(tables.api_keys.is_empty(), "bob's key in ws_a is deleted");
        assert!(!tables
            .memberships
            .iter()
            .any(|m| m.workspace_id.as_str() == "ws_a" && m.user_id.as_str() == "usr_bob"));
        let bob = tables.users.iter().find(|u| u.id.as_str() == "usr_bob").cloned();
        assert_eq!(bob.and_then(|b| b.current_workspace_id).map(|w| w.to_string()).as_deref(), Some("ws_b"));
        let audited: Vec<String> = actions(&store).into_iter().map(|(_, a)| a).collect();
        assert_eq!(audited, ["api_key.deleted", "member.removed"]);
        // Removing again: not a member any more.
        assert!(matches!(
            remove(&ctx.auth_deps(), &alice, &"usr_bob".into()).await,
            Err(Error::NotFound(Entity::Member))
        ));
    }

    #[tokio::test]
    async fn membership_changes_need_members_write() {
        let ctx = context(store(), NOW);
        let bob = signed_in("usr_bob", "ws_a", Role::Member);
        assert!(list_members(&ctx.auth_deps(), &bob, page()).await.is_ok(), "members see who is there");
        for result in [
            add(&ctx.auth_deps(), &bob, "eve@example.com", "owner").await.map(|_| ()),
            set_role(&ctx.auth_deps(), &bob, &"usr_bob".into(), "owner").await.map(|_| ()),
            remove(&ctx.auth_deps(), &bob, &"usr_alice".into()).await,
        ] {
            assert!(matches!(result, Err(Error::MissingScope("members:write"))), "{result:?}");
        }
    }

    #[tokio::test]
    async fn another_workspace_is_not_found_and_its_members_untouched() {
        let ctx = context(store(), NOW);
        let alice = signed_in("usr_alice", "ws_a", Role::Owner);
        // alice is no member of ws_b: the path's workspace does not exist for her.
        assert!(matches!(caller_in(&ctx.auth_deps(), &alice, "ws_b").await, Err(Error::NotFound(Entity::Workspace))));
        // carol belongs to ws_b only: from ws_a she is not a member to change.
        let result = set_role(&ctx.auth_deps(), &alice, &"usr_carol".into(), "viewer").await;
        assert!(matches!(result, Err(Error::NotFound(Entity::Member))), "{result:?}");
        // A session user acts in another workspace of theirs with that membership's role.
        let bob = signed_in("usr_bob", "ws_a", Role::Member);
        let in_b = caller_in(&ctx.auth_deps(), &bob, "ws_b").await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(in_b.scopes, Role::Viewer.scopes());
        // An API key never reaches beyond its own workspace.
        let key =
            Caller { actor: Actor::ApiKey { id: "key_x".into(), kind: KeyKind::Client, owner: None }, ..alice.clone() };
        assert!(matches!(caller_in(&ctx.auth_deps(), &key, "ws_b").await, Err(Error::NotFound(Entity::Workspace))));
        let members = list_members(&ctx.auth_deps(), &alice, page()).await.unwrap_or_else(|e| panic!("{e}"));
        let ids: Vec<&str> = members.items.iter().map(|m| m.user_id.as_str()).collect();
        assert_eq!(ids, ["usr_bob", "usr_alice"], "ws_a's members only, newest first");
    }

    #[tokio::test]
    async fn an_existing_user_is_added_and_an_unknown_address_invited_then_redeemed() {
        let store = store();
        let ctx = context(store.clone(), NOW);
        let alice = signed_in("usr_alice", "ws_a", Role::Owner);
        // dave exists: added at once, and ws_a becomes his current workspace (he had none).
        let added =
            add(&ctx.auth_deps(), &alice, " Dave@Example.com ", "viewer").await.unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(&added, Added::Member(m) if m.user_id.as_str() == "usr_dave" && m.role == Role::Viewer));
        assert!(matches!(add(&ctx.auth_deps(), &alice, "dave@example.com", "member").await, Err(Error::Conflict(_))));
        // eve does not: invited.
        let Ok(Added::Invitation(invitation)) = add(&ctx.auth_deps(), &alice, "eve@example.com", "member").await else {
            panic!("an invitation")
        };
        assert_eq!(invitation.expires_at - invitation.created_at, INVITATION_LIFETIME_DAYS * 86_400_000);
        let pending = list_invitations(&ctx.auth_deps(), &alice, page()).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(pending.items.len(), 1);
        // carol invites eve to ws_b too; eve's account then redeems both.
        let carol = signed_in("usr_carol", "ws_b", Role::Owner);
        add(&ctx.auth_deps(), &carol, "eve@example.com", "viewer").await.unwrap_or_else(|e| panic!("{e}"));
        let eve = user("usr_eve", "eve@example.com", None);
        store.edit(|t| t.users.push(eve.clone()));
        let joined = redeem_invitations(&ctx.auth_deps(), &eve, None).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(joined.len(), 2);
        assert_eq!(
            ctx.store.find_membership(&"ws_a".into(), &"usr_eve".into()).await.ok().flatten(),
            Some(Role::Member)
        );
        assert_eq!(
            ctx.store.find_membership(&"ws_b".into(), &"usr_eve".into()).await.ok().flatten(),
            Some(Role::Viewer)
        );
        let tables = store.snapshot();
        assert!(tables.invitations.is_empty(), "redeemed invitations are gone");
        let eve_now = tables.users.iter().find(|u| u.id.as_str() == "usr_eve").cloned();
        assert!(eve_now.and_then(|u| u.current_workspace_id).is_some());
        // Each workspace's log shows the redemption.
        let redeemed: Vec<_> = actions(&store).into_iter().filter(|(_, a)| a == "invitation.redeemed").collect();
        assert_eq!(redeemed.len(), 2);
        assert!(redeemed.iter().any(|(w, _)| w.as_deref() == Some("ws_a")));
        assert!(redeemed.iter().any(|(w, _)| w.as_deref() == Some("ws_b")));
        // Nothing left: redeeming again joins nothing.
        assert!(redeem_invitations(&ctx.auth_deps(), &eve, None).await.unwrap_or_default().is_empty());
    }

    #[tokio::test]
    async fn an_expired_invitation_is_not_redeemed_and_a_deleted_one_neither() {
        let store = store();
        let alice = signed_in("usr_alice", "ws_a", Role::Owner);
        let ctx = context(store.clone(), "2026-11-01T00:00:00Z");
        add(&ctx.auth_deps(), &alice, "eve@example.com", "member").await.unwrap_or_else(|e| panic!("{e}"));
        let Ok(Added::Invitation(withdrawn)) = add(&ctx.auth_deps(), &alice, "frank@example.com", "member").await
        else {
            panic!("an invitation")
        };
        delete_invitation(&ctx.auth_deps(), &alice, &withdrawn.id).await.unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            delete_invitation(&ctx.auth_deps(), &alice, &withdrawn.id).await,
            Err(Error::NotFound(Entity::Invitation))
        ));
        // 27 days later eve's invitation (14 days) has expired.
        let later = context(store.clone(), NOW);
        assert!(list_invitations(&later.auth_deps(), &alice, page())
            .await
            .map(|p| p.items.is_empty())
            .unwrap_or(false));
        for (id, email) in [("usr_eve", "eve@example.com"), ("usr_frank", "frank@example.com")] {
            let person = user(id, email, None);
            store.edit(|t| t.users.push(person.clone()));
            assert!(redeem_invitations(&later.auth_deps(), &person, None).await.unwrap_or_default().is_empty());
        }
        assert!(store.snapshot().invitations.is_empty(), "the expired invitation is cleared at redemption");
    }

    #[tokio::test]
    async fn bad_roles_and_addresses_are_validation_errors() {
        let ctx = context(store(), NOW);
        let alice = signed_in("usr_alice", "ws_a", Role::Owner);
        for (email, role) in [("eve@example.com", "admin"), ("not-an-address", "member"), ("", "viewer")] {
            let result = add(&ctx.auth_deps(), &alice, email, role).await;
            assert!(matches!(result, Err(Error::Validation { .. })), "{email} {role}: {result:?}");
        }
        let result = set_role(&ctx.auth_deps(), &alice, &"usr_bob".into(), "Owner").await;
        assert!(matches!(result, Err(Error::Validation { .. })), "{result:?}");
    }
}
