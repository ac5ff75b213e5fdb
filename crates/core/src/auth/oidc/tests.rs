//! The rules of the callback that need no IdP: claims, redirects, mappings, the JWKS limit.

use super::*;
use serde_json::json;

fn config() -> OidcConfig {
    OidcConfig {
        issuer: "https://idp.example".into(),
        client_id: "trellis".into(),
        client_secret: "secret".into(),
        scopes: vec!["openid".into()],
        display_name: "IdP".into(),
        groups_claim: "groups".into(),
        redirect_uri: "https://trellis.example/api/auth/oidc/callback".into(),
        post_logout_redirect_uri: "https://trellis.example/".into(),
        role_mappings: Vec::new(),
        clock_skew: Duration::from_secs(60),
        jwks_min_refresh: Duration::from_secs(30),
    }
}

const NOW: i64 = 1_800_000_000;

fn claims() -> serde_json::Value {
    json!({ "iss": "https://idp.example", "aud": "trellis", "sub": "u1", "exp": NOW + 300, "iat": NOW, "nonce": "n1" })
}

fn check(claims: serde_json::Value) -> Result<(), OidcError> {
    check_claims(&config(), &claims, "n1", NOW * 1000)
}

#[test]
fn a_good_token_passes() {
    assert!(check(claims()).is_ok());
    let mut several = claims();
    several["aud"] = json!(["trellis", "other"]);
    several["azp"] = json!("trellis");
    assert!(check(several).is_ok());
}

#[test]
fn each_claim_check_has_its_own_error() {
    let cases: Vec<(&str, serde_json::Value, &str)> = vec![
        ("iss", json!("https://evil.example"), "OIDC_WRONG_ISSUER"),
        ("aud", json!("someone-else"), "OIDC_WRONG_AUDIENCE"),
        ("aud", json!(["trellis", "other"]), "OIDC_MISSING_AZP"),
        ("azp", json!("other"), "OIDC_WRONG_AZP"),
        ("exp", json!(NOW - 61), "OIDC_TOKEN_EXPIRED"),
        ("iat", json!(NOW + 120), "OIDC_BAD_IAT"),
        ("iat", json!(NOW - LOGIN_TTL_SECS - 120), "OIDC_BAD_IAT"),
        ("nonce", json!("other"), "OIDC_WRONG_NONCE"),
        ("sub", json!(""), "OIDC_TOKEN_MALFORMED"),
    ];
    for (claim, value, code) in cases {
        let mut token = claims();
        token[claim] = value;
        assert_eq!(check(token).err().map(|e| e.code()), Some(code), "{claim}");
    }
    let mut no_nonce = claims();
    no_nonce.as_object_mut().map(|o| o.remove("nonce"));
    assert_eq!(check(no_nonce).err().map(|e| e.code()), Some("OIDC_WRONG_NONCE"));
}

#[test]
fn the_skew_is_tolerated() {
    let mut token = claims();
    token["exp"] = json!(NOW - 30);
    token["iat"] = json!(NOW + 30);
    assert!(check(token).is_ok());
}

#[test]
fn redirects_stay_on_this_site() {
    assert_eq!(check_redirect(None).ok().as_deref(), Some("/"));
    assert_eq!(check_redirect(Some("/certificates?x=1")).ok().as_deref(), Some("/certificates?x=1"));
    for bad in ["https://evil.example/", "//evil.example", "/\\evil.example", "evil", "/a b", "/a\nb", "javascript:x"] {
        assert!(check_redirect(Some(bad)).is_err(), "{bad}");
    }
}

#[test]
fn groups_are_a_list_or_one_string() {
    let config = config();
    let one = identity_from(&config, &json!({ "sub": "u", "groups": "admins" })).ok();
    assert_eq!(one.map(|i| i.groups), Some(vec!["admins".to_owned()]));
    let list = identity_from(&config, &json!({ "sub": "u", "groups": ["a", "b", 3] })).ok();
    assert_eq!(list.map(|i| i.groups), Some(vec!["a".to_owned(), "b".to_owned()]));
    let verified = identity_from(&config, &json!({ "sub": "u", "email_verified": "true" })).ok();
    assert_eq!(verified.map(|i| i.email_verified), Some(true));
}

#[test]
fn the_highest_mapped_role_wins_per_workspace() {
    let mapping =
        |group: &str, workspace: &str, role| RoleMapping { group: group.into(), workspace: workspace.into(), role };
    let mappings = vec![
        mapping("viewers", "ops", Role::Viewer),
        mapping("admins", "ops", Role::Owner),
        mapping("devs", "dev", Role::Member),
        mapping("ghosts", "missing", Role::Owner),
    ];
    let groups = vec!["viewers".to_owned(), "admins".to_owned(), "ghosts".to_owned()];
    let desired = desired_memberships(&mappings, &groups, |w| (w != "missing").then(|| WorkspaceId::from(w)));
    assert_eq!(desired, vec![(WorkspaceId::from("ops"), Role::Owner)]);
}

#[test]
fn an_unknown_key_refreshes_at_most_once_per_interval() {
    let mut cache = keys::KeyCache::default();
    cache.load(Vec::new());
    // First unknown kid: a refresh is allowed.
    assert!(matches!(cache.lookup(Some("k2"), 1_000, 30_000, false), Ok(None)));
    // Still unknown after the refresh: refused, no second fetch.
    assert!(matches!(cache.lookup(Some("k2"), 1_000, 30_000, true), Err(OidcError::UnknownKey(_))));
    // Another unknown kid within the interval: refused without a fetch.
    assert!(matches!(cache.lookup(Some("k3"), 20_000, 30_000, false), Err(OidcError::UnknownKey(_))));
    // After the interval: allowed again.
    assert!(matches!(cache.lookup(Some("k3"), 31_000, 30_000, false), Ok(None)));
}

#[test]
fn tokens_with_none_or_hmac_are_refused() {
    use base64::Engine;
    let b64 = |v: serde_json::Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    for alg in ["none", "HS256"] {
        let token = format!("{}.{}.", b64(json!({ "alg": alg })), b64(claims()));
        assert!(keys::header(&token).is_err(), "{alg}");
    }
}
