use trellis_plugin_sdk::testing;

use super::*;

const NOW: i64 = 1_800_000_000;

fn config(ca_type: &str) -> Config {
    Config { ca_type: Some(ca_type.into()), ..Config::default() }
}

fn ctx(url: &str) -> CallContext {
    testing::context("ca_1").with_endpoint(url)
}

fn status_of(report: &TestReport, name: &str) -> Option<CheckStatus> {
    report.checks().iter().find(|c| c.name == name).map(|c| c.status)
}

#[test]
fn certsrv_401_with_a_challenge_is_reachable() {
    testing::reset();
    testing::http::respond_with_headers(
        "GET",
        "https://adcs.example/certsrv/",
        401,
        &[("WWW-Authenticate", "Negotiate")],
        "",
    );
    let report = run_test(&ctx("https://adcs.example/certsrv"), &config("microsoft_adcs"), NOW);
    assert!(report.success(), "{report:?}");
    testing::reset();
    testing::http::respond("GET", "https://adcs.example/certsrv/", 404, "");
    assert!(!run_test(&ctx("https://adcs.example"), &config("microsoft_adcs"), NOW).success());
}

#[test]
fn unreachable_and_missing_urls_fail() {
    testing::reset();
    testing::http::fail("GET", "https://privateca.googleapis.example", trellis_plugin_sdk::http::HttpError::Timeout);
    let report = run_test(&ctx("https://privateca.googleapis.example"), &config("google_cas"), NOW);
    assert_eq!(status_of(&report, "reachable"), Some(CheckStatus::Fail));
    let report = run_test(&testing::context("ca_1"), &config("aws_acm"), NOW);
    assert_eq!(status_of(&report, "endpoint"), Some(CheckStatus::Fail));
}

/// The root's own cases are the SDK's (`root_certificate`'s tests); here, that both the
/// configuration check and the test use it.
#[test]
fn a_bundled_root_is_checked_when_saved_and_by_the_test() {
    let garbage = Config {
        root_certificate: Some("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----".into()),
        ..config("aws_acm")
    };
    assert!(
        matches!(CaProbe::validate_config(&garbage), Err(PluginError::InvalidConfig(issues)) if issues[0].field == "/rootCertificate")
    );
    assert_eq!(CaProbe::validate_config(&Config { root_certificate: Some(" ".into()), ..config("aws_acm") }), Ok(()));
    let report = run_test(&testing::context("ca_1"), &garbage, NOW);
    assert_eq!(status_of(&report, "root-certificate"), Some(CheckStatus::Fail));
    assert_eq!(report.details()["rootCertificate"], serde_json::Value::Null);
}

#[test]
fn the_commercial_acme_types_are_the_acme_connector_s() {
    // Served by `plugins/acme` since 0.2.0: a type served by both would be ambiguous.
    let names: Vec<&str> = TYPES.iter().map(|(name, _, _)| *name).collect();
    for moved in ["digicert", "sectigo", "globalsign", "entrust", "zerossl", "google_trust_services"] {
        assert!(!names.contains(&moved), "{moved} is served by the ACME connector");
    }
    assert!(names.contains(&"microsoft_adcs"), "AD CS stays probe-only");
}

#[test]
fn describe_declares_the_record_type_member_and_typed_patterns() {
    let schema = testing::config_schema::<Config>();
    assert_eq!(schema["properties"]["caType"]["x-trellis-record-type"], true);
}
