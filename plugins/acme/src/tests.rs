//! The connector against the SDK's fakes: HTTP answers scripted per URL, the fake keystore
//! (signatures are not real), the fake challenge solver and a fake clock.

use serde_json::json;
use trellis_plugin_sdk::challenge::{Challenge, ChallengeType};
use trellis_plugin_sdk::testing::{self, http::respond_with_headers as answer};

use super::*;

const DIR: &str = "https://acme.test/dir";

fn directory(extra: Value) -> String {
    let mut dir = json!({
        "newNonce": "https://acme.test/nonce",
        "newAccount": "https://acme.test/new-acct",
        "newOrder": "https://acme.test/new-order",
        "revokeCert": "https://acme.test/revoke",
        "keyChange": "https://acme.test/key-change",
        "meta": { "termsOfService": "https://acme.test/tos" }
    });
    if let (Some(dir), Some(extra)) = (dir.as_object_mut(), extra.as_object()) {
        dir.extend(extra.clone());
    }
    dir.to_string()
}

fn nonce(n: u32) -> String {
    format!("nonce-{n}")
}

fn script_account() {
    testing::http::respond("GET", DIR, 200, directory(json!({})));
    answer("HEAD", "https://acme.test/nonce", 200, &[("replay-nonce", "nonce-0")], "");
    answer(
        "POST",
        "https://acme.test/new-acct",
        201,
        &[("replay-nonce", &nonce(1)), ("location", "https://acme.test/acct/1")],
        r#"{"status":"valid"}"#,
    );
}

fn cfg(extra: Value) -> Config {
    let mut base = json!({ "directoryUrl": DIR, "termsOfServiceAgreed": true, "email": "ops@example.com" });
    if let (Some(base), Some(extra)) = (base.as_object_mut(), extra.as_object()) {
        base.extend(extra.clone());
    }
    testing::config(base).unwrap()
}

fn request() -> IssueRequest {
    let mut r = IssueRequest::for_test("-----BEGIN CERTIFICATE REQUEST-----", &["www.example.com"], 90);
    r.csr_der = vec![0x30, 0x01, 0x02];
    r
}

const LEAF: &str = "-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\n";
const INTERMEDIATE: &str = "-----BEGIN CERTIFICATE-----\nBAUG\n-----END CERTIFICATE-----\n";

fn script_order(authz_after: &[&str], order_after: &[&str]) {
    answer(
        "POST",
        "https://acme.test/new-order",
        201,
        &[("replay-nonce", &nonce(2)), ("location", "https://acme.test/order/1")],
        r#"{"status":"pending"}"#,
    );
    for status in order_after {
        answer(
            "POST",
            "https://acme.test/order/1",
            200,
            &[("replay-nonce", &nonce(3))],
            json!({
                "status": status,
                "authorizations": ["https://acme.test/authz/1"],
                "finalize": "https://acme.test/order/1/finalize",
                "certificate": if *status == "valid" { json!("https://acme.test/cert/1") } else { json!(null) },
            })
            .to_string(),
        );
    }
    for status in authz_after {
        answer(
            "POST",
            "https://acme.test/authz/1",
            200,
            &[("replay-nonce", &nonce(4))],
            json!({
                "status": status,
                "identifier": { "type": "dns", "value": "www.example.com" },
                "challenges": [
                    { "type": "http-01", "url": "https://acme.test/chall/h", "token": "tok-h", "status": if *status == "pending" { "pending" } else { "valid" } },
                    { "type": "dns-01", "url": "https://acme.test/chall/d", "token": "tok-d", "status": "pending" }
                ]
            })
            .to_string(),
        );
    }
    answer("POST", "https://acme.test/chall/h", 200, &[("replay-nonce", &nonce(5))], "{}");
    answer("POST", "https://acme.test/chall/d", 200, &[("replay-nonce", &nonce(5))], "{}");
    answer(
        "POST",
        "https://acme.test/order/1/finalize",
        200,
        &[("replay-nonce", &nonce(6))],
        r#"{"status":"processing"}"#,
    );
    answer(
        "POST",
        "https://acme.test/cert/1",
        200,
        &[("replay-nonce", &nonce(7)), ("content-type", "application/pem-certificate-chain")],
        format!("{LEAF}\n{INTERMEDIATE}"),
    );
}

fn posted_to(url: &str) -> Vec<Value> {
    testing::http::requests().into_iter().filter(|r| r.method == "POST" && r.url == url).map(|r| r.json()).collect()
}

#[test]
fn http01_issuance_orders_answers_finalizes_and_splits_the_chain() {
    testing::reset();
    script_account();
    script_order(&["pending", "valid"], &["pending", "ready", "valid"]);
    let outcome = Acme::issue(&testing::context("ca_1"), &cfg(json!({})), &request()).unwrap();
    let IssueOutcome::Issued(issued) = outcome else { panic!("pending: {outcome:?}") };
    assert_eq!(issued.certificate_pem(), LEAF);
    assert_eq!(issued.ca_reference(), Some("https://acme.test/cert/1"));
    assert_eq!(Acme::ca_chain(&testing::context("ca_1"), &cfg(json!({}))).unwrap(), vec![INTERMEDIATE.to_owned()]);

    let answer = Challenge::http01("www.example.com", "tok-h", "tok-h.thumbprint-acme-account");
    assert_eq!(testing::challenges::presented(), vec![answer.clone()]);
    assert_eq!(testing::challenges::cleaned(), vec![answer], "cleaned up after the authorization");

    let account = &posted_to("https://acme.test/new-acct")[0];
    let header = jws::protected_header(account).unwrap();
    assert_eq!(header["jwk"]["label"], "acme-account", "new accounts are signed with the jwk");
    assert_eq!(header["nonce"], "nonce-0");
    let payload: Value =
        serde_json::from_slice(&jws::base64url_decode(account["payload"].as_str().unwrap()).unwrap()).unwrap();
    assert_eq!(payload, json!({ "termsOfServiceAgreed": true, "contact": ["mailto:ops@example.com"] }));

    let order = &posted_to("https://acme.test/new-order")[0];
    assert_eq!(jws::protected_header(order).unwrap()["kid"], "https://acme.test/acct/1");
    let payload: Value =
        serde_json::from_slice(&jws::base64url_decode(order["payload"].as_str().unwrap()).unwrap()).unwrap();
    assert_eq!(payload, json!({ "identifiers": [{ "type": "dns", "value": "www.example.com" }] }));
    let finalize = &posted_to("https://acme.test/order/1/finalize")[0];
    let payload: Value =
        serde_json::from_slice(&jws::base64url_decode(finalize["payload"].as_str().unwrap()).unwrap()).unwrap();
    assert_eq!(payload, json!({ "csr": "MAEC" }));
    assert_eq!(
        state::get_json::<order::OrderState>("order/req_test").unwrap().map(|s| s.order_url).as_deref(),
        Some("https://acme.test/order/1")
    );
}

#[test]
fn dns01_goes_through_the_configured_provider() {
    testing::reset();
    script_account();
    script_order(&["pending", "valid"], &["pending", "ready", "valid"]);
    let provider = json!({ "type": "challtestsrv", "url": "http://127.0.0.1:8055" });
    let config = cfg(json!({ "challengeType": "dns-01", "dnsProvider": provider }));
    assert!(matches!(Acme::issue(&testing::context("ca_1"), &config, &request()).unwrap(), IssueOutcome::Issued(_)));
    let presented = testing::challenges::presented();
    assert_eq!(presented.len(), 1);
    assert_eq!(presented[0].kind(), ChallengeType::Dns01);
    assert_eq!(presented[0], Challenge::dns01("www.example.com", "tok-d.thumbprint-acme-account", Some(&provider)));
    assert_eq!(testing::challenges::cleaned(), presented);
}

#[test]
fn the_second_issuance_reuses_the_account_and_a_retried_key_the_order() {
    testing::reset();
    script_account();
    script_order(&["pending", "valid"], &["pending", "ready", "valid"]);
    Acme::setup(&testing::context("ca_1"), &cfg(json!({}))).unwrap();
    Acme::issue(&testing::context("ca_1"), &cfg(json!({})), &request()).unwrap();
    // Same idempotency key: the recorded (now valid) order is returned, no second order.
    let again = Acme::issue(&testing::context("ca_1"), &cfg(json!({})), &request()).unwrap();
    assert!(matches!(again, IssueOutcome::Issued(_)));
    assert_eq!(posted_to("https://acme.test/new-acct").len(), 1, "one account registration");
    assert_eq!(posted_to("https://acme.test/new-order").len(), 1, "one order per idempotency key");
}

#[test]
fn bad_nonces_are_retried_with_the_fresh_nonce() {
    testing::reset();
    testing::http::respond("GET", DIR, 200, directory(json!({})));
    answer("HEAD", "https://acme.test/nonce", 200, &[("replay-nonce", "nonce-0")], "");
    let bad = r#"{"type":"urn:ietf:params:acme:error:badNonce","detail":"JWS has an invalid anti-replay nonce"}"#;
    answer("POST", "https://acme.test/new-acct", 400, &[("replay-nonce", "fresh-1")], bad);
    answer("POST", "https://acme.test/new-acct", 400, &[("replay-nonce", "fresh-2")], bad);
    answer("POST", "https://acme.test/new-acct", 201, &[("location", "https://acme.test/acct/1")], "{}");
    Acme::setup(&testing::context("ca_1"), &cfg(json!({}))).unwrap();
    let nonces: Vec<Value> = posted_to("https://acme.test/new-acct")
        .iter()
        .map(|b| jws::protected_header(b).unwrap()["nonce"].clone())
        .collect();
    assert_eq!(nonces, vec![json!("nonce-0"), json!("fresh-1"), json!("fresh-2")]);
}

#[test]
fn rate_limits_eab_refusals_and_unreachable_directories_map_to_their_errors() {
    testing::reset();
    testing::http::respond("GET", DIR, 200, directory(json!({})));
    answer("HEAD", "https://acme.test/nonce", 200, &[("replay-nonce", "nonce-0")], "");
    let limited = r#"{"type":"urn:ietf:params:acme:error:rateLimited","detail":"too many"}"#;
    answer("POST", "https://acme.test/new-acct", 429, &[("retry-after", "30")], limited);
    assert_eq!(Acme::setup(&testing::context("ca_1"), &cfg(json!({}))), Err(PluginError::RateLimited(Some(30))));

    testing::reset();
    testing::http::respond("GET", DIR, 200, directory(json!({ "meta": { "externalAccountRequired": true } })));
    answer("HEAD", "https://acme.test/nonce", 200, &[("replay-nonce", "nonce-0")], "");
    let Err(PluginError::InvalidConfig(issues)) = Acme::setup(&testing::context("ca_1"), &cfg(json!({}))) else {
        panic!("EAB required")
    };
    assert_eq!(issues[0].field, "/eabKid");
    let refused = r#"{"type":"urn:ietf:params:acme:error:unauthorized","detail":"bad MAC"}"#;
    answer("POST", "https://acme.test/new-acct", 403, &[], refused);
    let eab = cfg(json!({ "eabKid": "kid-1", "eabHmacKey": "c2VjcmV0" }));
    let Err(PluginError::InvalidConfig(issues)) = Acme::setup(&testing::context("ca_1"), &eab) else {
        panic!("EAB refused")
    };
    assert_eq!(issues[0].field, "/eabKid");
    assert!(issues[0].message.contains("bad MAC"), "{issues:?}");
    let sent = &posted_to("https://acme.test/new-acct")[0];
    let payload: Value =
        serde_json::from_slice(&jws::base64url_decode(sent["payload"].as_str().unwrap()).unwrap()).unwrap();
    assert_eq!(jws::protected_header(&payload["externalAccountBinding"]).unwrap()["kid"], "kid-1");

    // An unreachable directory does not refuse the record; the first use registers the account.
    testing::reset();
    testing::http::fail("GET", DIR, trellis_plugin_sdk::http::HttpError::Transport("connection refused".into()));
    assert_eq!(Acme::setup(&testing::context("ca_1"), &cfg(json!({}))), Ok(()));
    let err = Acme::issue(&testing::context("ca_1"), &cfg(json!({})), &request()).unwrap_err();
    assert!(matches!(err, PluginError::Upstream { retryable: true, .. }), "{err:?}");
    assert!(posted_to("https://acme.test/new-acct").is_empty());
}

#[test]
fn terms_not_agreed_name_the_member_and_what_to_do() {
    for kind in ["agreementRequired", "userActionRequired"] {
        testing::reset();
        testing::http::respond("GET", DIR, 200, directory(json!({})));
        answer("HEAD", "https://acme.test/nonce", 200, &[("replay-nonce", "nonce-0")], "");
        let problem = json!({ "type": format!("urn:ietf:params:acme:error:{kind}"), "detail": "agree first" });
        answer("POST", "https://acme.test/new-acct", 403, &[], problem.to_string());
        let refused = Acme::setup(&testing::context("ca_1"), &cfg(json!({ "termsOfServiceAgreed": false })));
        let Err(PluginError::InvalidConfig(issues)) = refused else { panic!("{kind}: {refused:?}") };
        assert_eq!(issues[0].field, "/termsOfServiceAgreed", "{kind}");
        let message = &issues[0].message;
        assert!(message.contains("set termsOfServiceAgreed to true"), "{kind}: {message}");
        assert!(message.contains("https://acme.test/tos") && message.contains("agree first"), "{kind}: {message}");
    }
}

#[test]
fn an_order_outlasting_the_budget_is_pending_and_poll_issue_continues_it() {
    testing::reset();
    script_account();
    // The authorization stays pending past the budget, then validates.
    script_order(&["pending", "pending", "pending", "pending", "pending", "pending", "valid"], &[]);
    answer("POST", "https://acme.test/order/1", 200, &[], json!({ "status": "pending", "authorizations": ["https://acme.test/authz/1"], "finalize": "https://acme.test/order/1/finalize" }).to_string());
    let mut ctx = testing::context("ca_1");
    ctx.time_budget_ms = 4_000;
    let outcome = Acme::issue(&ctx, &cfg(json!({})), &request()).unwrap();
    let IssueOutcome::Pending { reference, .. } = outcome else { panic!("{outcome:?}") };
    assert_eq!(reference, "https://acme.test/order/1");
    assert!(testing::challenges::cleaned().is_empty(), "the answer stays up while the CA may still validate");

    script_order(&["valid"], &["pending", "ready", "valid"]);
    let outcome = Acme::poll_issue(&testing::context("ca_1"), &cfg(json!({})), &reference, &request()).unwrap();
    assert!(matches!(outcome, IssueOutcome::Issued(_)), "{outcome:?}");
    assert_eq!(testing::challenges::cleaned().len(), 1, "cleaned up once the CA decided");
    assert_eq!(posted_to("https://acme.test/new-order").len(), 1);
}

#[test]
fn invalid_configurations_name_each_member() {
    let Err(PluginError::InvalidConfig(issues)) = Acme::validate_config(
        &testing::config::<Config>(json!({
            "directoryUrl": "ftp://x", "email": "nope", "eabKid": "k", "challengeType": "tls-alpn-01"
        }))
        .unwrap(),
    ) else {
        panic!("invalid")
    };
    let fields: Vec<&str> = issues.iter().map(|i| i.field.as_str()).collect();
    assert_eq!(fields, ["/directoryUrl", "/email", "/eabHmacKey", "/challengeType"]);
    let dns = testing::config::<Config>(json!({ "challengeType": "dns-01" })).unwrap();
    assert!(Acme::validate_config(&dns).is_err(), "dns-01 needs a provider");
    // An unknown member parses (a record stored under ca-probe keeps answering its calls) and is
    // refused by name when a configuration is saved.
    let unknown = testing::config::<Config>(json!({ "unknown": 1 })).unwrap();
    let Err(PluginError::InvalidConfig(issues)) = Acme::validate_config(&unknown) else { panic!("unknown member") };
    assert_eq!(issues.iter().map(|i| i.field.as_str()).collect::<Vec<_>>(), ["/unknown"]);
    assert_eq!(testing::secret_fields::<Config>(), vec![("/eabHmacKey".to_owned(), false)]);
}

fn typed(ca_type: &str, extra: Value) -> Config {
    let mut base = json!({ "caType": ca_type, "termsOfServiceAgreed": true });
    if let (Some(base), Some(extra)) = (base.as_object_mut(), extra.as_object()) {
        base.extend(extra.clone());
    }
    testing::config(base).unwrap()
}

#[test]
fn commercial_types_require_eab_naming_both_members_and_where_to_get_them() {
    for ca in commercial::COMMERCIAL {
        let Err(PluginError::InvalidConfig(issues)) = Acme::validate_config(&typed(ca.ca_type, json!({}))) else {
            panic!("{}: EAB is required", ca.ca_type)
        };
        let fields: Vec<&str> = issues.iter().map(|i| i.field.as_str()).collect();
        assert_eq!(fields, ["/eabKid", "/eabHmacKey"], "{}", ca.ca_type);
        assert!(issues[0].message.contains(ca.ca_type) && issues[0].message.contains(ca.eab_from), "{issues:?}");
        let with = typed(ca.ca_type, json!({ "eabKid": "kid-1", "eabHmacKey": "c2VjcmV0" }));
        assert_eq!(Acme::validate_config(&with), Ok(()), "{}", ca.ca_type);
    }
    // `acme` itself leaves EAB to the directory's `externalAccountRequired`.
    assert_eq!(Acme::validate_config(&typed("acme", json!({}))), Ok(()));
}

#[test]
fn a_commercial_record_without_a_url_uses_its_ca_s_directory_and_still_refuses_without_eab() {
    testing::reset();
    let sectigo = "https://acme.sectigo.com/v2/DV";
    testing::http::respond("GET", sectigo, 200, directory(json!({})));
    answer("HEAD", "https://acme.test/nonce", 200, &[("replay-nonce", "nonce-0")], "");
    // A record stored before the upgrade, without EAB: a 400 naming both members, nothing sent.
    let refused = Acme::issue(&testing::context("ca_1"), &typed("sectigo", json!({})), &request()).unwrap_err();
    let PluginError::InvalidConfig(issues) = refused else { panic!("{refused:?}") };
    assert_eq!(issues.iter().map(|i| i.field.as_str()).collect::<Vec<_>>(), ["/eabKid", "/eabHmacKey"]);
    assert!(posted_to("https://acme.test/new-acct").is_empty());

    // Its connection test answers, failing the EAB check, against the default directory.
    let report = Acme::test_connection(&testing::context("ca_1"), &typed("sectigo", json!({}))).unwrap();
    assert!(!report.success());
    assert_eq!(report.details()["directoryUrl"], sectigo);
    assert_eq!(report.details()["caType"], "sectigo");
    assert_eq!(report.details()["externalAccountRequired"], true);

    // The record's url overrides the default.
    let mut ctx = testing::context("ca_1");
    ctx.endpoint = Some(DIR.to_owned());
    testing::http::respond("GET", DIR, 200, directory(json!({})));
    let report = Acme::test_connection(&ctx, &typed("sectigo", json!({}))).unwrap();
    assert_eq!(report.details()["directoryUrl"], DIR);
}

#[test]
fn describe_serves_the_commercial_types_with_their_patterns_and_default_hosts() {
    // PluginInfo's members are the SDK's: read them through Debug.
    let info = format!("{:?}", Acme::describe());
    for ca in ["acme", "digicert", "sectigo", "globalsign", "entrust", "zerossl", "google_trust_services"] {
        assert!(info.contains(&format!("\"{ca}\"")), "{ca}: {info}");
    }
    assert!(!info.contains("microsoft_adcs"), "AD CS stays with ca-probe");
    assert!(info.contains("\"digicert:DigiCert\"") && info.contains("\"google_trust_services:Google Trust Services\""));
    assert!(info.contains("\"acme.zerossl.com\"") && info.contains("\"dv.acme-v02.api.pki.goog\""), "{info}");
    let schema = testing::config_schema::<Config>();
    assert_eq!(schema["properties"]["caType"]["x-trellis-record-type"], true);
}

#[test]
fn the_connection_test_lists_the_directory_endpoints_and_registers_the_account() {
    testing::reset();
    script_account();
    let report = Acme::test_connection(&testing::context("ca_1"), &cfg(json!({}))).unwrap();
    assert!(report.success());
    assert_eq!(report.details()["directoryUrl"], DIR);
    let endpoints = report.details()["endpoints"].as_array().unwrap();
    assert_eq!(endpoints.len(), 5, "{endpoints:?}");
    assert_eq!(report.details()["accountUrl"], "https://acme.test/acct/1", "registered by the test");
    Acme::test_connection(&testing::context("ca_1"), &cfg(json!({}))).unwrap();
    assert_eq!(posted_to("https://acme.test/new-acct").len(), 1, "found in state the second time");

    // An account the CA refuses fails the test.
    testing::reset();
    testing::http::respond("GET", DIR, 200, directory(json!({})));
    answer("HEAD", "https://acme.test/nonce", 200, &[("replay-nonce", "nonce-0")], "");
    let refused = r#"{"type":"urn:ietf:params:acme:error:agreementRequired","detail":"agree first"}"#;
    answer("POST", "https://acme.test/new-acct", 403, &[], refused);
    let report = Acme::test_connection(&testing::context("ca_1"), &cfg(json!({}))).unwrap();
    assert!(!report.success());
    assert_eq!(report.details()["accountUrl"], Value::Null);

    testing::reset();
    testing::http::fail("GET", DIR, trellis_plugin_sdk::http::HttpError::Transport("connection refused".into()));
    let report = Acme::test_connection(&testing::context("ca_1"), &cfg(json!({}))).unwrap();
    assert!(!report.success());
    assert_eq!(report.details()["directoryUrl"], DIR);
}

#[test]
fn renewal_information_names_the_certificate_by_aki_and_serial() {
    testing::reset();
    testing::http::respond("GET", DIR, 200, directory(json!({ "renewalInfo": "https://acme.test/ari" })));
    let mut certificate = CertificateRef::default();
    certificate.serial_number = "87".into();
    certificate.authority_key_id = Some(vec![0x69, 0x88, 0x5b]);
    assert_eq!(order::ari_certificate_id(&certificate).as_deref(), Some("aYhb.AIc"));
    answer(
        "GET",
        "https://acme.test/ari/aYhb.AIc",
        200,
        &[("retry-after", "21600")],
        r#"{"suggestedWindow":{"start":"2026-01-01T00:00:00Z","end":"2026-01-02T00:00:00Z"}}"#,
    );
    let window = Acme::renewal_info(&testing::context("ca_1"), &cfg(json!({})), &certificate).unwrap().unwrap();
    assert_eq!((window.start, window.end), (1_767_225_600, 1_767_312_000));
    assert_eq!(window.retry_after_secs, Some(21_600));
}

#[test]
fn the_authority_key_id_is_read_from_the_certificate() {
    // extnID 2.5.29.35, critical FALSE, extnValue { SEQUENCE { [0] 69 88 5b } }.
    let der = [
        0x30, 0x10, 0x06, 0x03, 0x55, 0x1d, 0x23, 0x01, 0x01, 0x00, 0x04, 0x07, 0x30, 0x05, 0x80, 0x03, 0x69, 0x88,
        0x5b,
    ];
    assert_eq!(order::authority_key_id(&der), Some(vec![0x69, 0x88, 0x5b]));
    let plain = [0x06, 0x03, 0x55, 0x1d, 0x23, 0x04, 0x06, 0x30, 0x04, 0x80, 0x02, 0x01, 0x02];
    assert_eq!(order::authority_key_id(&plain), Some(vec![0x01, 0x02]));
    assert_eq!(order::authority_key_id(&[0x06, 0x03, 0x55, 0x1d, 0x23, 0x04]), None);
    let mut certificate = CertificateRef::default();
    certificate.serial_number = "87".into();
    certificate.pem = Some(trellis_plugin_sdk::pki::certificate_pem(&der));
    assert_eq!(order::ari_certificate_id(&certificate).as_deref(), Some("aYhb.AIc"));
}

#[test]
fn old_order_entries_are_pruned_a_few_at_a_time() {
    testing::reset();
    let now = 1_800_000_000;
    let entry = |placed_at: i64, issued_at: Option<i64>| json!({ "orderUrl": "https://acme.test/order/x", "placedAt": placed_at, "issuedAt": issued_at });
    for i in 0..10 {
        // Even: issued 8 days ago (stale); odd: issued an hour ago (kept).
        let issued = if i % 2 == 0 { now - 8 * 86_400 } else { now - 3_600 };
        state::set_json(&format!("order/k{i:02}"), &entry(issued, Some(issued))).unwrap();
    }
    state::set_json("order/open-old", &entry(now - 31 * 86_400, None)).unwrap();
    state::set_json("order/open-new", &entry(now - 86_400, None)).unwrap();
    order::prune(now);
    let left = state::list_keys("order/", None, 100).unwrap();
    assert_eq!(left.len(), 12 - 4, "the first batch of 8 held four stale entries: {left:?}");
    order::prune(now);
    order::prune(now);
    let left = state::list_keys("order/", None, 100).unwrap();
    assert_eq!(left, ["order/k01", "order/k03", "order/k05", "order/k07", "order/k09", "order/open-new"]);
}

fn root_pem(is_ca: bool) -> String {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(rcgen::DnType::CommonName, "Commercial Test Root");
    if is_ca {
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    }
    let key = rcgen::KeyPair::generate().unwrap();
    params.self_signed(&key).unwrap().pem()
}

#[test]
fn a_bundled_root_certificate_is_checked_as_ca_probe_did() {
    // Refused when saved if it is not a CA certificate or does not parse.
    for (root, what) in [(root_pem(false), "a leaf"), ("garbage".to_owned(), "garbage")] {
        let config = typed("sectigo", json!({ "eabKid": "k", "eabHmacKey": "c2VjcmV0", "rootCertificate": root }));
        let Err(PluginError::InvalidConfig(issues)) = Acme::validate_config(&config) else { panic!("{what}") };
        assert_eq!(issues[0].field, "/rootCertificate", "{what}");
    }
    // A valid one adds the three root checks to the connection test.
    testing::reset();
    script_account();
    let config = cfg(json!({ "rootCertificate": root_pem(true) }));
    assert_eq!(Acme::validate_config(&config), Ok(()));
    let report = Acme::test_connection(&testing::context("ca_1"), &config).unwrap();
    assert!(report.success(), "{report:?}");
    let names: Vec<&str> = report.checks().iter().map(|c| c.name.as_str()).collect();
    for name in ["root-certificate", "root-is-ca", "root-validity"] {
        assert!(names.contains(&name), "{name}: {names:?}");
    }
    assert!(report.details()["rootCertificate"]["subject"].as_str().unwrap().contains("Commercial Test Root"));
}
