//! The connector's own tests, native (`cargo test`): the SDK's harness fakes the host.

use rest_ca_connector::{Config, RestCa};
use serde_json::json;
use trellis_plugin_sdk::prelude::*;
use trellis_plugin_sdk::testing;

fn config() -> Config {
    testing::config(json!({"url": "https://ca.example", "apiKey": "k-123"})).expect("config")
}

#[test]
fn the_api_key_is_declared_secret() {
    assert_eq!(testing::secret_fields::<Config>(), [("/apiKey".to_owned(), false)]);
}

#[test]
fn issue_posts_the_csr_with_the_key_and_returns_the_pem() {
    testing::http::respond("POST", "https://ca.example/sign", 200, "-----BEGIN CERTIFICATE-----\n…");
    let request = IssueRequest::for_test("-----BEGIN CERTIFICATE REQUEST-----", &["a.example"], 30);
    let outcome = RestCa::issue(&testing::context("ca_1"), &config(), &request).expect("issued");
    let IssueOutcome::Issued(certificate) = outcome else { panic!("issued at once") };
    assert!(certificate.certificate_pem().starts_with("-----BEGIN CERTIFICATE-----"));
    let sent = &testing::http::requests()[0];
    assert_eq!(sent.header("authorization").as_deref(), Some("Bearer k-123"));
    assert_eq!(sent.json()["days"], 30);
}

#[test]
fn a_refused_key_is_unauthorized_and_a_dead_health_check_fails_the_test() {
    testing::http::respond("POST", "https://ca.example/sign", 401, "no");
    let request = IssueRequest::for_test("csr", &["a.example"], 30);
    let err = RestCa::issue(&testing::context("ca_1"), &config(), &request).expect_err("refused");
    assert_eq!(err.to_string(), "unauthorized: the CA refused the API key");
    testing::http::respond("GET", "https://ca.example/health", 503, "down");
    let report = RestCa::test_connection(&testing::context("ca_1"), &config()).expect("report");
    assert!(!report.success());
}
