//! The connector against the SDK's fakes: configuration checks, the requests it sends and how
//! Vault's answers map to errors. The real API is exercised against OpenBao in
//! tests/tests/it/vault.rs.

use serde_json::json;
use trellis_plugin_sdk::testing::{self, http::respond};

use super::*;

const ADDR: &str = "https://vault.example:8200";
const CSR: &str = "-----BEGIN CERTIFICATE REQUEST-----\nAQID\n-----END CERTIFICATE REQUEST-----";
const LEAF: &str = "-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----";
const ROOT: &str = "-----BEGIN CERTIFICATE-----\nBAUG\n-----END CERTIFICATE-----";

fn cfg(value: Value) -> Config {
    testing::config(value).unwrap()
}

fn issues(value: Value) -> Vec<String> {
    match VaultPki::validate_config(&cfg(value)) {
        Ok(()) => Vec::new(),
        Err(PluginError::InvalidConfig(issues)) => issues.into_iter().map(|i| i.field).collect(),
        Err(other) => panic!("{other}"),
    }
}

#[test]
fn configuration_is_checked_member_by_member() {
    testing::reset();
    assert!(issues(json!({ "vaultAddr": ADDR, "role": "web", "token": "t" })).is_empty());
    assert!(issues(json!({})).is_empty(), "a probe-era record with no credentials stays valid");
    assert!(issues(json!({ "rootCertificate": ROOT })).is_empty(), "probe-era members are kept");
    assert_eq!(issues(json!({ "authMethod": "token" })), vec!["/token"]);
    assert_eq!(issues(json!({ "authMethod": "approle", "roleId": "r" })), vec!["/secretId"]);
    assert_eq!(issues(json!({ "authMethod": "ldap" })), vec!["/authMethod"]);
    assert_eq!(issues(json!({ "token": "t", "secretId": "s" })), vec!["/secretId"]);
    assert_eq!(
        issues(
            json!({ "vaultAddr": "ftp://x", "pkiPath": "../sys", "role": "a/b", "namespace": "a//b", "token": "t" })
        ),
        vec!["/vaultAddr", "/pkiPath", "/role", "/namespace"]
    );
}

#[test]
fn secrets_are_marked_for_the_host() {
    let secrets: Vec<String> = testing::secret_fields::<Config>().into_iter().map(|(p, _)| p).collect();
    assert_eq!(secrets, vec!["/secretId".to_owned(), "/token".to_owned()]);
}

#[test]
fn issue_signs_under_the_role_and_returns_the_chain() {
    testing::reset();
    let answer =
        json!({ "data": { "certificate": LEAF, "ca_chain": [ROOT], "serial_number": "0a:bc" }, "warnings": null });
    respond("POST", &format!("{ADDR}/v1/pki/issuer/int/sign/web"), 200, answer.to_string());
    let config = cfg(json!({ "role": "web", "issuerRef": "int", "token": "s.tok", "namespace": "team" }));
    let ctx = CallContext::for_record("ca_1").with_endpoint(ADDR);
    let request = IssueRequest::for_test(CSR, &["a.example.com", "b.example.com"], 30);
    let IssueOutcome::Issued(issued) = VaultPki::issue(&ctx, &config, &request).unwrap() else { panic!("pending") };
    assert_eq!(issued.ca_reference(), Some("0a:bc"));
    let sent = testing::http::requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].header("x-vault-token").as_deref(), Some("s.tok"));
    assert_eq!(sent[0].header("x-vault-namespace").as_deref(), Some("team"));
    let body = sent[0].json();
    assert_eq!(body["alt_names"], "a.example.com,b.example.com");
    assert_eq!(body["ttl"], "720h");
    assert!(!testing::logs().join("\n").contains("s.tok"), "the token is never logged");

    // A retry under the same idempotency key reads the certificate back instead of signing again.
    respond("GET", &format!("{ADDR}/v1/pki/cert/0a:bc"), 200, answer.to_string());
    let IssueOutcome::Issued(again) = VaultPki::issue(&ctx, &config, &request).unwrap() else { panic!("pending") };
    assert_eq!(again.ca_reference(), Some("0a:bc"));
    assert_eq!(testing::http::requests().last().map(|r| r.method.clone()).as_deref(), Some("GET"));
}

#[test]
fn vault_errors_map_to_what_to_fix() {
    testing::reset();
    let ctx = CallContext::for_record("ca_1").with_endpoint(ADDR);
    let config = cfg(json!({ "role": "web", "token": "s.tok" }));
    let mut request = IssueRequest::for_test(CSR, &["a.other.org"], 30);
    let url = format!("{ADDR}/v1/pki/sign/web");
    let cases = [
        (400, json!({ "errors": ["common name a.other.org not allowed by this role"] })),
        (403, json!({ "errors": ["permission denied"] })),
        (503, json!({ "errors": ["Vault is sealed"] })),
        (400, json!({ "errors": ["unknown role: web"] })),
    ];
    for (status, body) in &cases {
        respond("POST", &url, *status, body.to_string());
    }
    let mut got = Vec::new();
    for i in 0..cases.len() {
        request.idempotency_key = format!("key-{i}");
        got.push(VaultPki::issue(&ctx, &config, &request).unwrap_err());
    }
    assert!(matches!(&got[0], PluginError::Rejected(m) if m.contains("not allowed by this role")), "{:?}", got[0]);
    assert!(matches!(&got[1], PluginError::Unauthorized(m) if m.contains("update on pki/sign/web")), "{:?}", got[1]);
    assert!(matches!(&got[2], PluginError::Upstream { retryable: true, .. }), "{:?}", got[2]);
    assert!(matches!(&got[3], PluginError::InvalidConfig(_)), "{:?}", got[3]);
}

#[test]
fn an_unreachable_vault_is_retryable_and_a_denied_one_is_not() {
    testing::reset();
    let ctx = CallContext::for_record("ca_1").with_endpoint(ADDR);
    let config = cfg(json!({ "role": "web", "token": "s.tok" }));
    let request = IssueRequest::for_test(CSR, &["a.example.com"], 30);
    let url = format!("{ADDR}/v1/pki/sign/web");
    testing::http::fail("POST", &url, http::HttpError::Transport("connection refused".into()));
    let err = VaultPki::issue(&ctx, &config, &request).unwrap_err();
    assert!(
        matches!(&err, PluginError::Upstream { retryable: true, message, .. } if message.contains("unreachable")),
        "{err:?}"
    );
    testing::reset();
    testing::http::fail("POST", &url, http::HttpError::Denied);
    let err = VaultPki::issue(&ctx, &config, &request).unwrap_err();
    assert!(matches!(&err, PluginError::Upstream { retryable: false, .. }), "{err:?}");
}

#[test]
fn approle_logins_are_cached_until_half_their_ttl() {
    testing::reset();
    let ctx = CallContext::for_record("ca_1").with_endpoint(ADDR);
    let config = cfg(json!({ "authMethod": "approle", "roleId": "rid", "secretId": "sid" }));
    respond(
        "POST",
        &format!("{ADDR}/v1/auth/approle/login"),
        200,
        json!({ "auth": { "client_token": "s.login", "lease_duration": 3600 } }).to_string(),
    );
    respond("POST", &format!("{ADDR}/v1/pki/revoke"), 200, json!({ "data": {} }).to_string());
    let revoke = RevokeRequest::for_test("0abc", RevocationReason::Superseded);
    VaultPki::revoke(&ctx, &config, &revoke).unwrap();
    VaultPki::revoke(&ctx, &config, &revoke).unwrap();
    let sent = testing::http::requests();
    let logins = sent.iter().filter(|r| r.url.ends_with("/login")).count();
    assert_eq!(logins, 1, "the second call uses the cached token");
    assert_eq!(sent.last().and_then(|r| r.header("x-vault-token")).as_deref(), Some("s.login"));
    assert_eq!(sent.last().map(|r| r.json()["serial_number"].clone()), Some(json!("0a:bc")));
}

#[test]
fn serials_are_written_as_vault_names_them() {
    assert_eq!(colon_serial("abc").as_deref(), Some("0a:bc"));
    assert_eq!(colon_serial("40:72:3A").as_deref(), Some("40:72:3a"));
    assert_eq!(colon_serial("xyz"), None);
}
