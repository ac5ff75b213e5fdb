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

/// A self-signed certificate valid from `not_before` to `not_after` (Unix seconds).
fn certificate(is_ca: bool, not_before: i64, not_after: i64) -> String {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(rcgen::DnType::CommonName, "Probe Test Root");
    if is_ca {
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    }
    params.not_before = rcgen::date_time_ymd(1970, 1, 1) + std::time::Duration::from_secs(not_before as u64);
    params.not_after = rcgen::date_time_ymd(1970, 1, 1) + std::time::Duration::from_secs(not_after as u64);
    let key = rcgen::KeyPair::generate().unwrap();
    params.self_signed(&key).unwrap().pem()
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

#[test]
fn validate_config_refuses_unusable_roots_but_not_expired_ones() {
    let leaf = Config { root_certificate: Some(certificate(false, 0, NOW)), ..Config::default() };
    assert!(
        matches!(CaProbe::validate_config(&leaf), Err(PluginError::InvalidConfig(issues)) if issues[0].field == "/rootCertificate")
    );
    let garbage = Config {
        root_certificate: Some("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----".into()),
        ..Config::default()
    };
    assert!(CaProbe::validate_config(&garbage).is_err());
    let expired = Config { root_certificate: Some(certificate(true, 0, 100)), ..Config::default() };
    assert!(CaProbe::validate_config(&expired).is_ok());
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
