//! Native tests against the SDK's fakes (`trellis_plugin_sdk::testing`): the configuration's
//! three shapes and its problems, and each operation's mapping onto `pki-core`.

use serde_json::{json, Value};
use trellis_plugin_sdk::pki::AuthoritySpec;
use trellis_plugin_sdk::{testing, CheckStatus, ConfigIssue, KeyUsage, SubjectAltName};

use super::*;

const CA_PEM: &str =
    "-----BEGIN CERTIFICATE-----\nMIIBiTCCAS+gAwIBAgIUHUF2oT4neJodeX1bX5K0Vdlo/3ow\n-----END CERTIFICATE-----\n";

fn config(value: Value) -> Config {
    testing::config(value).expect("parses")
}

/// The (field, message) pairs `validate_config` reports.
fn problems(value: Value) -> Vec<ConfigIssue> {
    match InternalCa::validate_config(&config(value)) {
        Err(PluginError::InvalidConfig(issues)) => issues,
        other => panic!("expected invalid-config, got {other:?}"),
    }
}

fn fields(value: Value) -> Vec<String> {
    problems(value).into_iter().map(|issue| issue.field).collect()
}

fn set_up(value: Value) {
    testing::reset();
    InternalCa::setup(&testing::context("7"), &config(value)).expect("setup");
}

#[test]
fn a_root_needs_only_a_common_name_and_takes_the_defaults() {
    let spec = config(json!({"subject": {"commonName": "Example Root", "country": "de"}})).authority_spec();
    let Ok(AuthoritySpec::Root(root)) = spec else { panic!("a root") };
    assert_eq!(root.subject.common_name.as_deref(), Some("Example Root"));
    assert_eq!(root.subject.country.as_deref(), Some("DE"));
    assert_eq!((root.key_algorithm, root.validity_days, root.path_length), (KeyAlgorithm::EcdsaP256, 3650, None));
}

#[test]
fn an_intermediate_names_its_parent_by_number_or_text() {
    for parent in [json!(12), json!("12")] {
        let spec = config(json!({
            "subject": {"commonName": "Issuing CA"},
            "keyAlgorithm": "rsa-3072",
            "validityDays": 730,
            "pathLength": 0,
            "parentCaId": parent,
        }))
        .authority_spec();
        let Ok(AuthoritySpec::Intermediate { parent_record_id, authority }) = spec else { panic!("an intermediate") };
        assert_eq!(parent_record_id, "12");
        assert_eq!(
            (authority.key_algorithm, authority.validity_days, authority.path_length),
            (KeyAlgorithm::Rsa3072, 730, Some(0))
        );
    }
}

#[test]
fn an_import_points_the_host_at_the_withheld_key() {
    // The host strips `privateKeyPem` before the plugin sees the configuration.
    let spec = config(json!({"certificatePem": CA_PEM})).authority_spec();
    assert_eq!(
        spec,
        Ok(AuthoritySpec::Imported { certificate_pem: CA_PEM.into(), private_key_field: "/privateKeyPem".into() })
    );
    assert_eq!(testing::secret_fields::<Config>(), [("/privateKeyPem".to_owned(), true)]);
}

#[test]
fn every_problem_is_reported_with_its_field() {
    let issues = problems(json!({
        "subject": {"organization": "Example", "country": "Germany"},
        "keyAlgorithm": "dsa-1024",
        "validityDays": 0,
        "parentCaId": " ",
    }));
    let reported: Vec<&str> = issues.iter().map(|i| i.field.as_str()).collect();
    assert_eq!(reported, ["/subject/commonName", "/subject/country", "/keyAlgorithm", "/validityDays", "/parentCaId"]);
    assert!(
        issues[2].message.contains("ecdsa-p256, ecdsa-p384, ed25519, rsa-2048, rsa-3072, rsa-4096"),
        "{:?}",
        issues[2]
    );
    assert_eq!(
        fields(json!({"subject": {"commonName": "CA", "country": "Germany"}, "validityDays": 36501})),
        ["/subject/country", "/validityDays"]
    );
    assert_eq!(fields(json!({})), ["/subject"]);
    assert_eq!(fields(json!({"subject": {"commonName": "  "}})), ["/subject/commonName"]);
}

#[test]
fn an_import_takes_nothing_of_a_new_ca_and_only_pem() {
    assert_eq!(
        fields(json!({"certificatePem": CA_PEM, "subject": {"commonName": "CA"}, "keyAlgorithm": "ed25519"})),
        ["/subject", "/keyAlgorithm"]
    );
    assert_eq!(fields(json!({"certificatePem": "MIIBiTCCAS+gAwIBAgIU"})), ["/certificatePem"]);
    let csr = "-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE REQUEST-----\n";
    assert_eq!(fields(json!({"certificatePem": csr})), ["/certificatePem"]);
}

#[test]
fn the_schema_lists_the_key_algorithms_and_refuses_unknown_members() {
    let schema = testing::config_schema::<Config>();
    let names: Vec<&str> = KEY_ALGORITHMS.iter().map(|(name, _)| *name).collect();
    assert_eq!(schema["properties"]["keyAlgorithm"]["enum"], json!(names));
    assert_eq!(schema["additionalProperties"], json!(false));
    assert!(testing::config::<Config>(json!({"subject": {"cn": "x"}})).is_err());
}

#[test]
fn setup_creates_the_ca_once_and_repeats_harmlessly() {
    let root = json!({"subject": {"commonName": "Example Root"}, "keyAlgorithm": "ed25519"});
    set_up(root.clone());
    InternalCa::setup(&testing::context("7"), &config(root)).expect("a repeated setup succeeds");
    let Some(AuthoritySpec::Root(created)) = testing::pki::created_with() else { panic!("a root") };
    assert_eq!(created.key_algorithm, KeyAlgorithm::Ed25519);
    let bad = InternalCa::setup(&testing::context("7"), &config(json!({"subject": {}})));
    assert!(matches!(bad, Err(PluginError::InvalidConfig(_))), "{bad:?}");
}

#[test]
fn the_connection_test_reports_the_ca_and_its_expiry() {
    testing::reset();
    let report = InternalCa::test_connection(&testing::context("7"), &config(json!({}))).expect("report");
    assert!(!report.success());
    assert!(report.checks()[0].message.contains("has not been set up"), "{:?}", report.checks());

    set_up(json!({"subject": {"commonName": "Example Root"}}));
    let report = InternalCa::test_connection(&testing::context("7"), &config(json!({}))).expect("report");
    assert!(report.success());
    let details = report.details();
    assert_eq!(details["subject"], "CN=Example Root");
    assert_eq!(details["keyAlgorithm"], "ecdsa-p256");
    assert!(matches!(details["daysUntilExpiry"].as_i64(), Some(3649 | 3650)), "{details}");
    assert!(details["expiresAt"].as_str().is_some_and(|t| t.ends_with('Z') && t.len() == 20), "{details}");
    assert!(details.get("parentCaId").is_none());

    let now = now();
    testing::pki::set_validity(now - 86_400, now + 10 * 86_400);
    let report = InternalCa::test_connection(&testing::context("7"), &config(json!({}))).expect("report");
    assert!(report.success());
    assert_eq!(report.checks()[1].status, CheckStatus::Warn);
    testing::pki::set_validity(now - 86_400, now - 60);
    let report = InternalCa::test_connection(&testing::context("7"), &config(json!({}))).expect("report");
    assert!(!report.success());
    assert!(report.checks()[1].message.starts_with("expired at"));
    assert_eq!(report.details()["daysUntilExpiry"], -1);
}

#[test]
fn an_intermediate_reports_its_parent_as_an_id() {
    set_up(json!({"subject": {"commonName": "Issuing CA"}, "parentCaId": 12}));
    let report = InternalCa::test_connection(&testing::context("7"), &config(json!({}))).expect("report");
    assert_eq!(report.details()["parentCaId"], 12);
}

#[test]
fn issuance_signs_the_request_as_resolved_and_revocation_and_discovery_follow() {
    set_up(json!({"subject": {"commonName": "Example Root"}}));
    let ctx = testing::context("7");
    let mut request = IssueRequest::for_test("", &["a.example", "b.example"], 90);
    request.csr_der = b"csr".to_vec();
    request.profile.key_usages = vec![KeyUsage::DigitalSignature];
    request.profile.subject.organization = Some("Example".into());

    let IssueOutcome::Issued(issued) = InternalCa::issue(&ctx, &config(json!({})), &request).expect("issued") else {
        panic!("issued at once")
    };
    assert_eq!(testing::pki::signed_profiles(), [request.profile.clone()]);
    assert_eq!(issued.ca_reference(), Some("01"));
    assert_eq!(issued.certificate_pem(), pki::certificate_pem(b"csr"));
    assert!(matches!(&request.profile.subject_alt_names[1], SubjectAltName::Dns(name) if name == "b.example"));

    let fetched = InternalCa::fetch_certificate(&ctx, &config(json!({})), "01").expect("fetched");
    assert_eq!(fetched.certificate_pem(), issued.certificate_pem());
    let missing = InternalCa::fetch_certificate(&ctx, &config(json!({})), "ff");
    assert!(matches!(missing, Err(PluginError::NotFound(_))), "{missing:?}");

    let revoke = |serial: &str| {
        InternalCa::revoke(&ctx, &config(json!({})), &RevokeRequest::for_test(serial, RevocationReason::KeyCompromise))
    };
    revoke("01").expect("revoked");
    revoke("01").expect("revoking again succeeds");
    assert!(matches!(revoke("ff"), Err(PluginError::NotFound(_))));

    let page = InternalCa::list_certificates(&ctx, &config(json!({})), &PageRequest::new(None, 10)).expect("page");
    assert_eq!(page.items.len(), 1);
    assert_eq!(page.items[0].ca_reference.as_deref(), Some("01"));
    assert!(page.items[0].revoked_at.is_some());
    assert_eq!(
        InternalCa::ca_chain(&ctx, &config(json!({}))).expect("chain"),
        [pki::certificate_pem(b"CN=Example Root")]
    );
}

#[test]
fn without_a_ca_issuance_says_to_set_it_up() {
    testing::reset();
    let mut request = IssueRequest::for_test("", &["a.example"], 90);
    request.csr_der = b"csr".to_vec();
    let err = InternalCa::issue(&testing::context("7"), &config(json!({})), &request).expect_err("no CA");
    assert!(err.to_string().contains("has not been set up"), "{err}");
}

#[test]
fn times_read_as_rfc3339_utc() {
    assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
    assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    assert_eq!(rfc3339(2_082_758_399), "2035-12-31T23:59:59Z");
    assert_eq!(rfc3339(-1), "1969-12-31T23:59:59Z");
}
