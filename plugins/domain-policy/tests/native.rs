//! The policy's own tests, native (`cargo test`): configurations are parsed the way the host
//! hands them over (`testing::config`), and `evaluate` / `validate_config` are called as the
//! export does.

// The helpers below are test code too; clippy's test allowance only covers `#[test]` functions.
#![allow(clippy::expect_used)]

use std::net::IpAddr;

use serde_json::{json, Value};
use trellis_plugin_domain_policy::{codes, Config, DomainPolicy};
use trellis_plugin_sdk::policy::{Decision, EvaluationRequest, IssuancePolicy, Reason};
use trellis_plugin_sdk::prelude::*;
use trellis_plugin_sdk::testing;

fn config(json: Value) -> Config {
    testing::config(json).expect("the configuration parses")
}

/// A request for `names` (DNS SANs, the first also the common name), RSA 2048, 90 days.
fn request(names: &[&str]) -> EvaluationRequest {
    EvaluationRequest::for_test(names, 2048, 90)
}

fn with_ips(mut request: EvaluationRequest, ips: &[&str]) -> EvaluationRequest {
    for ip in ips {
        request.subject_alt_names.push(SubjectAltName::Ip(ip.parse::<IpAddr>().expect("an IP address")));
    }
    request
}

fn with_key(mut request: EvaluationRequest, algorithm: &str, size_bits: u32, curve: Option<&str>) -> EvaluationRequest {
    request.key.algorithm = algorithm.to_owned();
    request.key.size_bits = size_bits;
    request.key.curve = curve.map(str::to_owned);
    request
}

fn with_common_name(mut request: EvaluationRequest, common_name: Option<&str>) -> EvaluationRequest {
    request.subject.common_name = common_name.map(str::to_owned);
    request
}

fn evaluate(config_json: Value, request: &EvaluationRequest) -> Decision {
    DomainPolicy::evaluate(&testing::context("pol_1"), &config(config_json), request).expect("a decision")
}

/// The denial's reasons, or a panic naming the decision.
fn denied(decision: Decision) -> Vec<Reason> {
    match decision {
        Decision::Deny(reasons) => reasons,
        other => panic!("expected a denial, got {other:?}"),
    }
}

fn codes_of(reasons: &[Reason]) -> Vec<&str> {
    reasons.iter().map(|r| r.code.as_str()).collect()
}

/// The (field, message) of every configuration problem, or a panic.
fn issues(config_json: Value) -> Vec<(String, String)> {
    match DomainPolicy::validate_config(&config(config_json)) {
        Err(PluginError::InvalidConfig(issues)) => issues.into_iter().map(|i| (i.field, i.message)).collect(),
        other => panic!("expected invalid-config, got {other:?}"),
    }
}

fn fields(config_json: Value) -> Vec<String> {
    issues(config_json).into_iter().map(|(field, _)| field).collect()
}

const SUFFIXES: &str = "allowedDnsSuffixes";

// --- describe and schema --------------------------------------------------------------------

#[test]
fn describes_itself_as_the_domain_policy() {
    let info = format!("{:?}", DomainPolicy::describe());
    assert!(info.contains(r#"id: "trellis.domain-policy""#), "{info}");
    assert!(info.contains("kind: IssuancePolicy"), "{info}");
    assert!(info.contains(r#"serves: ["domain-policy"]"#), "{info}");
    assert!(info.contains("outbound_hosts: []"), "a pure policy asks for no hosts: {info}");
}

#[test]
fn the_schema_lists_every_member_refuses_others_and_has_no_secrets() {
    let schema = testing::config_schema::<Config>();
    assert_eq!(schema["additionalProperties"], json!(false), "{schema:#}");
    let mut members: Vec<&str> =
        schema["properties"].as_object().expect("properties").keys().map(String::as_str).collect();
    members.sort_unstable();
    assert_eq!(
        members,
        [
            "allowWildcards",
            "allowedDnsSuffixes",
            "allowedIpRanges",
            "allowedKeyAlgorithms",
            "appliesTo",
            "maxValidityDays",
            "minRsaBits",
            "requireApprovalFor"
        ]
    );
    assert!(schema.get("required").is_none_or(|r| r == &json!([])), "every member is optional: {schema:#}");
    assert!(testing::secret_fields::<Config>().is_empty());
    let text = schema.to_string();
    assert!(text.contains("\"minimum\":1024"), "minRsaBits carries its bound: {text}");
}

// --- allow ----------------------------------------------------------------------------------

#[test]
fn an_empty_configuration_allows_everything() {
    let request = with_key(
        with_ips(request(&["*.anything.test", "host.example.net"]), &["192.0.2.1", "2001:db8::1"]),
        "ec",
        521,
        Some("p521"),
    );
    assert_eq!(evaluate(json!({}), &request), Decision::allow());
    let mut long = request.clone();
    long.validity_days = 3650;
    assert_eq!(evaluate(json!({}), &long), Decision::allow(), "no cap, no shortening");
    // An absent configuration (the host sends an empty document) reads as an empty one.
    let absent: Config = trellis_plugin_sdk::glue::parse_config("").expect("an empty document parses");
    assert_eq!(DomainPolicy::evaluate(&testing::context("pol_1"), &absent, &request), Ok(Decision::allow()));
}

#[test]
fn an_empty_configuration_still_applies_the_default_rsa_minimum() {
    let weak = with_key(request(&["a.test"]), "rsa", 1024, None);
    assert_eq!(codes_of(&denied(evaluate(json!({}), &weak))), [codes::RSA_KEY_TOO_SMALL]);
    let fine = with_key(request(&["a.test"]), "rsa", 2048, None);
    assert_eq!(evaluate(json!({}), &fine), Decision::allow());
}

#[test]
fn a_compliant_request_is_allowed() {
    let policy = json!({
        "allowedDnsSuffixes": [".example.com", "example.org"],
        "allowedIpRanges": ["10.0.0.0/8", "2001:db8::/32"],
        "allowWildcards": true,
        "maxValidityDays": 397,
        "allowedKeyAlgorithms": ["ecdsa-p256", "ecdsa-p384", "ed25519", "rsa"],
        "minRsaBits": 3072,
        "requireApprovalFor": ["*.prod.example.com", "payments.*"]
    });
    let request = with_key(
        with_ips(
            request(&["www.example.com", "example.com", "api.example.org", "*.dev.example.com"]),
            &["10.1.2.3", "2001:db8::42"],
        ),
        "ec",
        256,
        Some("p256"),
    );
    assert_eq!(evaluate(policy, &request), Decision::allow());
}

// --- DNS suffixes ---------------------------------------------------------------------------

#[test]
fn suffixes_match_whole_labels_only() {
    let policy = json!({ SUFFIXES: [".example.com"] });
    for allowed in ["example.com", "www.example.com", "a.b.c.example.com", "*.example.com"] {
        assert_eq!(evaluate(policy.clone(), &request(&[allowed])), Decision::allow(), "{allowed}");
    }
    for refused in ["badexample.com", "example.com.evil.net", "example.co", "com", "wwwexample.com", "example.org"] {
        let reasons = denied(evaluate(policy.clone(), &request(&[refused])));
        assert_eq!(codes_of(&reasons), [codes::DNS_SUFFIX_NOT_ALLOWED], "{refused}");
        assert!(reasons[0].message.contains(refused), "the message names the name: {}", reasons[0].message);
        assert!(reasons[0].message.contains(".example.com"), "and the allowed suffixes: {}", reasons[0].message);
    }
}

#[test]
fn a_suffix_with_or_without_its_leading_dot_means_the_same() {
    for suffix in ["example.com", ".example.com", "Example.COM.", ".EXAMPLE.com"] {
        let policy = json!({ SUFFIXES: [suffix] });
        assert_eq!(evaluate(policy.clone(), &request(&["example.com"])), Decision::allow(), "{suffix}");
        assert_eq!(evaluate(policy.clone(), &request(&["api.example.com"])), Decision::allow(), "{suffix}");
        assert!(matches!(evaluate(policy, &request(&["badexample.com"])), Decision::Deny(_)), "{suffix}");
    }
}

#[test]
fn names_compare_case_insensitively_and_ignore_a_trailing_dot() {
    let policy = json!({ SUFFIXES: [".example.com"] });
    for name in ["WWW.Example.COM", "www.example.com.", "EXAMPLE.COM."] {
        assert_eq!(evaluate(policy.clone(), &request(&[name])), Decision::allow(), "{name}");
    }
}

#[test]
fn a_dns_looking_common_name_is_judged_and_other_common_names_are_not() {
    let policy = json!({ SUFFIXES: [".example.com"] });
    let outside = with_common_name(request(&["www.example.com"]), Some("intranet.corp.test"));
    let reasons = denied(evaluate(policy.clone(), &outside));
    assert_eq!(codes_of(&reasons), [codes::DNS_SUFFIX_NOT_ALLOWED]);
    assert!(reasons[0].message.contains("common name intranet.corp.test"), "{}", reasons[0].message);
    for not_dns in ["Alice Smith", "build-agent", "user@example.net"] {
        let request = with_common_name(request(&["www.example.com"]), Some(not_dns));
        assert_eq!(evaluate(policy.clone(), &request), Decision::allow(), "{not_dns}");
    }
    // Only a common name, no SAN.
    let mut cn_only = with_common_name(request(&[]), Some("www.example.net"));
    cn_only.subject_alt_names.clear();
    assert_eq!(codes_of(&denied(evaluate(policy, &cn_only))), [codes::DNS_SUFFIX_NOT_ALLOWED]);
}

#[test]
fn a_common_name_repeating_a_san_is_reported_once() {
    // for_test makes the first name the common name too.
    let reasons = denied(evaluate(json!({ SUFFIXES: ["example.com"] }), &request(&["www.example.net"])));
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    let differently_cased = with_common_name(request(&["www.example.net"]), Some("WWW.example.net."));
    assert_eq!(denied(evaluate(json!({ SUFFIXES: ["example.com"] }), &differently_cased)).len(), 1);
}

#[test]
fn an_empty_suffix_list_allows_no_dns_name() {
    let policy = json!({ SUFFIXES: [], "allowedIpRanges": ["10.0.0.0/8"] });
    let reasons = denied(evaluate(policy.clone(), &request(&["www.example.com"])));
    assert_eq!(codes_of(&reasons), [codes::DNS_SUFFIX_NOT_ALLOWED]);
    assert!(reasons[0].message.contains("no DNS names"), "{}", reasons[0].message);
    let mut ip_only = with_ips(request(&[]), &["10.0.0.1"]);
    ip_only.subject.common_name = Some("10.0.0.1".into());
    assert_eq!(evaluate(policy, &ip_only), Decision::allow());
}

#[test]
fn email_and_uri_names_are_not_judged() {
    let mut request = request(&["www.example.com"]);
    request.subject_alt_names.push(SubjectAltName::Email("ops@elsewhere.test".into()));
    request.subject_alt_names.push(SubjectAltName::Uri("spiffe://elsewhere.test/x".into()));
    assert_eq!(evaluate(json!({ SUFFIXES: [".example.com"], "allowedIpRanges": [] }), &request), Decision::allow());
}

// --- wildcards ------------------------------------------------------------------------------

#[test]
fn wildcards_are_allowed_by_default_and_denied_when_switched_off() {
    let wildcard = request(&["*.example.com"]);
    assert_eq!(evaluate(json!({ "allowWildcards": true }), &wildcard), Decision::allow());
    assert_eq!(evaluate(json!({}), &wildcard), Decision::allow());
    let reasons = denied(evaluate(json!({ "allowWildcards": false }), &wildcard));
    // The common name repeats the SAN: one reason.
    assert_eq!(codes_of(&reasons), [codes::WILDCARD_NOT_ALLOWED]);
    assert!(reasons[0].message.contains("*.example.com"), "{}", reasons[0].message);
    assert_eq!(evaluate(json!({ "allowWildcards": false }), &request(&["www.example.com"])), Decision::allow());
}

#[test]
fn a_wildcard_is_only_ever_the_whole_left_most_label() {
    for malformed in [
        "foo*.example.com",
        "*foo.example.com",
        "a.*.example.com",
        "*.*.example.com",
        "**.example.com",
        "*",
        "*.",
        "www.example.*",
    ] {
        for allow in [true, false] {
            let reasons = denied(evaluate(json!({ "allowWildcards": allow }), &request(&[malformed])));
            assert_eq!(codes_of(&reasons), [codes::INVALID_WILDCARD], "{malformed} (allowWildcards {allow})");
            assert!(reasons[0].message.contains(malformed), "{}", reasons[0].message);
        }
    }
}

#[test]
fn a_wildcard_common_name_is_judged_like_a_san() {
    let request = with_common_name(request(&["www.example.com"]), Some("*.example.com"));
    let reasons = denied(evaluate(json!({ "allowWildcards": false }), &request));
    assert_eq!(codes_of(&reasons), [codes::WILDCARD_NOT_ALLOWED]);
    assert!(reasons[0].message.contains("common name *.example.com"), "{}", reasons[0].message);
}

// --- IP ranges ------------------------------------------------------------------------------

#[test]
fn ip_sans_must_fall_in_an_allowed_range() {
    let policy = json!({ "allowedIpRanges": ["10.0.0.0/8", "192.168.1.0/24", "2001:db8::/32"] });
    let inside = with_ips(request(&["a.test"]), &["10.200.0.1", "192.168.1.255", "2001:db8:1::1", "::ffff:10.0.0.9"]);
    assert_eq!(evaluate(policy.clone(), &inside), Decision::allow());
    for outside in ["11.0.0.1", "192.168.2.1", "2001:db9::1", "fe80::1", "::1", "127.0.0.1"] {
        let reasons = denied(evaluate(policy.clone(), &with_ips(request(&["a.test"]), &[outside])));
        assert_eq!(codes_of(&reasons), [codes::IP_NOT_ALLOWED], "{outside}");
        assert!(reasons[0].message.contains(outside), "{}", reasons[0].message);
        assert!(reasons[0].message.contains("10.0.0.0/8"), "{}", reasons[0].message);
    }
}

#[test]
fn ipv6_ranges_of_every_length() {
    let policy = json!({ "allowedIpRanges": ["2001:db8:abcd:12::/64", "fd00::/8", "2001:db8::1"] });
    for inside in ["2001:db8:abcd:12::1", "2001:db8:abcd:12:ffff:ffff:ffff:ffff", "fdab::1", "2001:db8::1"] {
        assert_eq!(evaluate(policy.clone(), &with_ips(request(&["a.test"]), &[inside])), Decision::allow(), "{inside}");
    }
    for outside in ["2001:db8:abcd:13::1", "fe00::1", "2001:db8::2", "10.0.0.1"] {
        let decision = evaluate(policy.clone(), &with_ips(request(&["a.test"]), &[outside]));
        assert_eq!(codes_of(&denied(decision)), [codes::IP_NOT_ALLOWED], "{outside}");
    }
}

#[test]
fn an_absent_range_list_allows_any_ip_and_an_empty_one_none() {
    let request = with_ips(request(&["a.test"]), &["203.0.113.9", "2001:db8::9"]);
    assert_eq!(evaluate(json!({ SUFFIXES: [".test"] }), &request), Decision::allow());
    let reasons = denied(evaluate(json!({ "allowedIpRanges": [] }), &request));
    assert_eq!(codes_of(&reasons), [codes::IP_NOT_ALLOWED, codes::IP_NOT_ALLOWED]);
    assert!(reasons[0].message.contains("no IP addresses"), "{}", reasons[0].message);
}

#[test]
fn an_ip_address_common_name_is_judged_like_an_ip_san() {
    let request = with_common_name(with_ips(request(&[]), &["10.0.0.1"]), Some("172.16.0.1"));
    let reasons = denied(evaluate(json!({ "allowedIpRanges": ["10.0.0.0/8"], SUFFIXES: [".example.com"] }), &request));
    assert_eq!(codes_of(&reasons), [codes::IP_NOT_ALLOWED]);
    assert!(reasons[0].message.contains("common name 172.16.0.1"), "{}", reasons[0].message);
}

// --- keys -----------------------------------------------------------------------------------

#[test]
fn key_algorithms_are_matched_by_family_and_curve() {
    let policy = json!({ "allowedKeyAlgorithms": ["ecdsa-p256", "ed25519"] });
    let base = request(&["a.test"]);
    for (algorithm, bits, curve) in [("ec", 256, Some("p256")), ("ed25519", 256, None), ("EC", 256, Some("P-256"))] {
        let request = with_key(base.clone(), algorithm, bits, curve);
        assert_eq!(evaluate(policy.clone(), &request), Decision::allow(), "{algorithm} {curve:?}");
    }
    for (algorithm, bits, curve, shown) in [
        ("rsa", 4096, None, "rsa"),
        ("ec", 384, Some("p384"), "ecdsa-p384"),
        ("ec", 521, Some("p521"), "ecdsa-p521"),
        ("ec", 256, Some("1.3.132.0.10"), "ecdsa on curve 1.3.132.0.10"),
        ("ec", 256, None, "ecdsa on an unnamed curve"),
        ("ed448", 456, None, "ed448"),
        ("1.2.840.113549.1.1.10", 2048, None, "algorithm 1.2.840.113549.1.1.10"),
    ] {
        let reasons = denied(evaluate(policy.clone(), &with_key(base.clone(), algorithm, bits, curve)));
        assert_eq!(codes_of(&reasons), [codes::KEY_ALGORITHM_NOT_ALLOWED], "{algorithm} {curve:?}");
        assert!(reasons[0].message.contains(shown), "{}", reasons[0].message);
        assert!(reasons[0].message.contains("allowed: ecdsa-p256, ed25519"), "{}", reasons[0].message);
    }
}

#[test]
fn rsa_keys_below_the_minimum_are_denied() {
    let policy = json!({ "minRsaBits": 3072 });
    assert_eq!(evaluate(policy.clone(), &with_key(request(&["a.test"]), "rsa", 3072, None)), Decision::allow());
    assert_eq!(evaluate(policy.clone(), &with_key(request(&["a.test"]), "rsa", 4096, None)), Decision::allow());
    let reasons = denied(evaluate(policy.clone(), &with_key(request(&["a.test"]), "rsa", 2048, None)));
    assert_eq!(codes_of(&reasons), [codes::RSA_KEY_TOO_SMALL]);
    assert!(reasons[0].message.contains("2048") && reasons[0].message.contains("3072"), "{}", reasons[0].message);
    // The minimum is about RSA moduli only.
    assert_eq!(evaluate(policy, &with_key(request(&["a.test"]), "ec", 256, Some("p256"))), Decision::allow());
}

#[test]
fn a_disallowed_rsa_key_is_not_also_reported_too_small() {
    let policy = json!({ "allowedKeyAlgorithms": ["ecdsa-p256"], "minRsaBits": 4096 });
    let reasons = denied(evaluate(policy, &with_key(request(&["a.test"]), "rsa", 1024, None)));
    assert_eq!(codes_of(&reasons), [codes::KEY_ALGORITHM_NOT_ALLOWED]);
}

// --- every violation at once ----------------------------------------------------------------

#[test]
fn every_violation_is_reported_not_just_the_first() {
    let policy = json!({
        "allowedDnsSuffixes": [".example.com"],
        "allowedIpRanges": ["10.0.0.0/8"],
        "allowWildcards": false,
        "minRsaBits": 2048,
        "requireApprovalFor": ["*"]
    });
    let request = with_key(
        with_ips(
            request(&["www.example.com", "badexample.com", "*.example.com", "a.*.example.com", "other.test"]),
            &["10.0.0.1", "192.168.0.1", "2001:db8::1"],
        ),
        "rsa",
        1024,
        None,
    );
    let reasons = denied(evaluate(policy, &request));
    assert_eq!(
        codes_of(&reasons),
        [
            codes::DNS_SUFFIX_NOT_ALLOWED, // badexample.com
            codes::WILDCARD_NOT_ALLOWED,   // *.example.com
            codes::INVALID_WILDCARD,       // a.*.example.com (under .example.com: no suffix reason)
            codes::DNS_SUFFIX_NOT_ALLOWED, // other.test
            codes::IP_NOT_ALLOWED,         // 192.168.0.1
            codes::IP_NOT_ALLOWED,         // 2001:db8::1
            codes::RSA_KEY_TOO_SMALL,
        ],
        "{reasons:#?}"
    );
    let messages: Vec<&str> = reasons.iter().map(|r| r.message.as_str()).collect();
    for value in
        ["badexample.com", "*.example.com", "a.*.example.com", "other.test", "192.168.0.1", "2001:db8::1", "1024"]
    {
        assert!(messages.iter().any(|m| m.contains(value)), "{value} named in {messages:#?}");
    }
}

#[test]
fn a_wildcard_outside_the_suffixes_gets_both_reasons() {
    let policy = json!({ SUFFIXES: [".example.com"], "allowWildcards": false });
    let reasons = denied(evaluate(policy, &request(&["*.example.net"])));
    assert_eq!(codes_of(&reasons), [codes::WILDCARD_NOT_ALLOWED, codes::DNS_SUFFIX_NOT_ALLOWED]);
}

// --- validity -------------------------------------------------------------------------------

#[test]
fn a_longer_validity_is_shortened_not_denied() {
    let policy = json!({ "maxValidityDays": 90 });
    let mut request = request(&["a.test"]);
    request.validity_days = 398;
    assert_eq!(evaluate(policy.clone(), &request), Decision::allow_at_most(90));
    assert_eq!(evaluate(policy.clone(), &request), Decision::Allow { max_validity_days: Some(90) });
    request.validity_days = 90;
    assert_eq!(evaluate(policy.clone(), &request), Decision::allow(), "exactly the cap: nothing to shorten");
    request.validity_days = 30;
    assert_eq!(evaluate(policy, &request), Decision::allow());
}

#[test]
fn a_denial_wins_over_shortening() {
    let mut request = request(&["www.example.net"]);
    request.validity_days = 398;
    let reasons = denied(evaluate(json!({ "maxValidityDays": 90, SUFFIXES: [".example.com"] }), &request));
    assert_eq!(codes_of(&reasons), [codes::DNS_SUFFIX_NOT_ALLOWED]);
}

// --- approval -------------------------------------------------------------------------------

#[test]
fn a_name_matching_a_pattern_needs_approval_with_the_pattern_in_the_reason() {
    let policy = json!({ "requireApprovalFor": ["*.prod.example.com", "payments.*"] });
    let Decision::RequireApproval(reasons) = evaluate(policy.clone(), &request(&["api.prod.example.com"])) else {
        panic!("approval")
    };
    assert_eq!(codes_of(&reasons), [codes::APPROVAL_REQUIRED]);
    assert!(reasons[0].message.contains("`*.prod.example.com`"), "{}", reasons[0].message);
    assert!(reasons[0].message.contains("api.prod.example.com"), "{}", reasons[0].message);

    let Decision::RequireApproval(reasons) =
        evaluate(policy.clone(), &request(&["PAYMENTS.example.com", "x.y.prod.example.com", "www.example.com"]))
    else {
        panic!("approval")
    };
    assert_eq!(codes_of(&reasons), [codes::APPROVAL_REQUIRED, codes::APPROVAL_REQUIRED], "one reason per pattern");
    assert!(reasons[0].message.contains("x.y.prod.example.com") && reasons[0].message.contains("`*.prod.example.com`"));
    assert!(reasons[1].message.contains("PAYMENTS.example.com") && reasons[1].message.contains("`payments.*`"));

    for plain in ["prod.example.com", "www.example.com", "mypayments.example.com", "api.prod.example.com.evil.net"] {
        assert_eq!(evaluate(policy.clone(), &request(&[plain])), Decision::allow(), "{plain}");
    }
}

#[test]
fn several_names_matching_one_pattern_make_one_reason() {
    let policy = json!({ "requireApprovalFor": ["*.prod.example.com"] });
    let Decision::RequireApproval(reasons) = evaluate(policy, &request(&["a.prod.example.com", "b.prod.example.com"]))
    else {
        panic!("approval")
    };
    assert_eq!(reasons.len(), 1);
    assert!(reasons[0].message.contains("a.prod.example.com, b.prod.example.com match"), "{}", reasons[0].message);
}

#[test]
fn the_common_name_alone_can_need_approval() {
    let request = with_common_name(request(&["www.example.com"]), Some("Payments Gateway"));
    let decision = evaluate(json!({ "requireApprovalFor": ["payments*"] }), &request);
    assert!(
        matches!(decision, Decision::RequireApproval(ref r) if r[0].message.contains("Payments Gateway")),
        "{decision:?}"
    );
}

#[test]
fn a_denial_wins_over_approval() {
    let policy = json!({ "requireApprovalFor": ["payments.*"], SUFFIXES: [".example.com"] });
    let reasons = denied(evaluate(policy, &request(&["payments.example.com", "payments.example.net"])));
    assert_eq!(codes_of(&reasons), [codes::DNS_SUFFIX_NOT_ALLOWED]);
}

#[test]
fn approval_tells_the_approver_about_the_shortened_validity() {
    let mut request = request(&["payments.example.com"]);
    request.validity_days = 365;
    let decision = evaluate(json!({ "requireApprovalFor": ["payments.*"], "maxValidityDays": 90 }), &request);
    let Decision::RequireApproval(reasons) = decision else { panic!("approval: {decision:?}") };
    assert_eq!(codes_of(&reasons), [codes::APPROVAL_REQUIRED, codes::VALIDITY_SHORTENED]);
    assert!(reasons[1].message.contains("365") && reasons[1].message.contains("90"), "{}", reasons[1].message);
}

// --- appliesTo ------------------------------------------------------------------------------

#[test]
fn requests_outside_applies_to_are_allowed_unjudged() {
    let policy = json!({
        SUFFIXES: [".example.com"],
        "maxValidityDays": 30,
        "appliesTo": { "caTypes": ["acme"], "templates": ["web_server"] }
    });
    let mut outside = request(&["www.example.net"]);
    outside.validity_days = 365;
    // ca_type "internal", no template.
    assert_eq!(evaluate(policy.clone(), &outside), Decision::allow());
    outside.ca_type = "acme".into();
    assert_eq!(evaluate(policy.clone(), &outside), Decision::allow(), "no template: outside the template list");
    outside.template = Some("client".into());
    assert_eq!(evaluate(policy.clone(), &outside), Decision::allow());
    outside.template = Some("web_server".into());
    assert_eq!(codes_of(&denied(evaluate(policy.clone(), &outside))), [codes::DNS_SUFFIX_NOT_ALLOWED]);
    outside.ca_type = "ACME".into();
    assert!(matches!(evaluate(policy, &outside), Decision::Deny(_)), "CA types compare case-insensitively");
}

#[test]
fn applies_to_with_one_list_ignores_the_other_dimension() {
    let policy = json!({ SUFFIXES: [".example.com"], "appliesTo": { "caTypes": ["internal"] } });
    assert!(matches!(evaluate(policy.clone(), &request(&["www.example.net"])), Decision::Deny(_)));
    let policy = json!({ SUFFIXES: [".example.com"], "appliesTo": { "templates": ["web_server"] } });
    let mut request = request(&["www.example.net"]);
    assert_eq!(evaluate(policy.clone(), &request), Decision::allow());
    request.template = Some("web_server".into());
    assert!(matches!(evaluate(policy, &request), Decision::Deny(_)));
}

// --- validate-config ------------------------------------------------------------------------

#[test]
fn a_complete_valid_configuration_validates() {
    let policy = json!({
        "allowedDnsSuffixes": [".example.com", "example.org", "xn--bcher-kva.example."],
        "allowedIpRanges": ["10.0.0.0/8", "2001:db8::/32", "192.0.2.7", "0.0.0.0/0", "::/0"],
        "allowWildcards": false,
        "maxValidityDays": 397,
        "allowedKeyAlgorithms": ["ecdsa-p256", "ecdsa-p384", "ecdsa-p521", "ed25519", "ed448", "rsa"],
        "minRsaBits": 1024,
        "requireApprovalFor": ["*.prod.example.com", "payments.*", "*"],
        "appliesTo": { "caTypes": ["internal", "acme"], "templates": ["web_server"] }
    });
    assert_eq!(DomainPolicy::validate_config(&config(policy)), Ok(()));
    assert_eq!(DomainPolicy::validate_config(&config(json!({}))), Ok(()));
    // null reads as absent.
    assert_eq!(DomainPolicy::validate_config(&config(json!({ "maxValidityDays": null, SUFFIXES: null }))), Ok(()));
}

#[test]
fn a_malformed_cidr_is_reported_with_its_index() {
    let found = issues(
        json!({ "allowedIpRanges": ["10.0.0.0/8", "10.0.0.0/33", "300.1.1.1/8", "10.1.0.0/8", "2001:db8::/200", "nonsense"] }),
    );
    let pointers: Vec<&str> = found.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        pointers,
        ["/allowedIpRanges/1", "/allowedIpRanges/2", "/allowedIpRanges/3", "/allowedIpRanges/4", "/allowedIpRanges/5"]
    );
    assert!(found[0].1.contains("10.0.0.0/33") && found[0].1.contains("0 to 32"), "{}", found[0].1);
    assert!(found[2].1.contains("did you mean `10.0.0.0/8`"), "{}", found[2].1);
    assert!(found[3].1.contains("0 to 128"), "{}", found[3].1);
}

#[test]
fn empty_or_spaced_suffixes_are_reported() {
    let found =
        issues(json!({ SUFFIXES: ["", ".", "exa mple.com", " example.com", "ok.example.com", "*.example.com"] }));
    let pointers: Vec<&str> = found.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        pointers,
        [
            "/allowedDnsSuffixes/0",
            "/allowedDnsSuffixes/1",
            "/allowedDnsSuffixes/2",
            "/allowedDnsSuffixes/3",
            "/allowedDnsSuffixes/5"
        ]
    );
    assert!(found[0].1.contains("empty"), "{}", found[0].1);
    assert!(found[2].1.contains("spaces"), "{}", found[2].1);
    assert!(found[3].1.contains("spaces"), "{}", found[3].1);
}

#[test]
fn numbers_out_of_bounds_are_reported() {
    assert_eq!(fields(json!({ "minRsaBits": 512 })), ["/minRsaBits"]);
    assert_eq!(fields(json!({ "minRsaBits": 1023 })), ["/minRsaBits"]);
    assert_eq!(fields(json!({ "minRsaBits": 32768 })), ["/minRsaBits"]);
    assert_eq!(fields(json!({ "maxValidityDays": 0 })), ["/maxValidityDays"]);
    assert!(issues(json!({ "minRsaBits": 512 }))[0].1.contains("at least 1024"));
}

#[test]
fn unknown_key_algorithms_are_reported_with_the_known_ones() {
    let found = issues(json!({ "allowedKeyAlgorithms": ["rsa", "ecdsa", "dsa", "ed25519", "ECDSA-P256"] }));
    let pointers: Vec<&str> = found.iter().map(|(f, _)| f.as_str()).collect();
    // Names are exact, as the schema's enum lists them.
    assert_eq!(pointers, ["/allowedKeyAlgorithms/1", "/allowedKeyAlgorithms/2", "/allowedKeyAlgorithms/4"]);
    assert!(found[0].1.contains("`ecdsa`"), "{}", found[0].1);
    for known in ["rsa", "ecdsa-p256", "ecdsa-p384", "ecdsa-p521", "ed25519", "ed448"] {
        assert!(found[1].1.contains(known), "{known} listed in {}", found[1].1);
    }
    assert_eq!(fields(json!({ "allowedKeyAlgorithms": [] })), ["/allowedKeyAlgorithms"]);
}

#[test]
fn unknown_members_are_reported_so_a_typo_never_allows_everything() {
    let found = issues(json!({ "allowedDnsSufixes": [".example.com"], "maxValidity": 90, "colour": "blue" }));
    let pointers: Vec<&str> = found.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(pointers, ["/allowedDnsSufixes", "/colour", "/maxValidity"]);
    assert!(found[0].1.contains("did you mean `allowedDnsSuffixes`"), "{}", found[0].1);
    assert!(found[1].1.contains("known members"), "{}", found[1].1);
    assert!(!found[1].1.contains("did you mean"), "{}", found[1].1);
    assert!(found[2].1.contains("did you mean `maxValidityDays`"), "{}", found[2].1);
    // The fixture's member names are not this policy's.
    assert_eq!(fields(json!({ "allowedSuffixes": ["example.com"] })), ["/allowedSuffixes"]);
    // Nested too.
    assert_eq!(fields(json!({ "appliesTo": { "caType": ["acme"] } })), ["/appliesTo/caType"]);
}

#[test]
fn a_config_with_problems_fails_evaluation_so_the_host_denies() {
    let typo = config(json!({ "allowedDnsSufixes": [".example.com"] }));
    let err = DomainPolicy::evaluate(&testing::context("pol_1"), &typo, &request(&["www.evil.test"]))
        .expect_err("a policy it cannot read does not decide");
    assert!(matches!(err, PluginError::InvalidConfig(_)), "{err:?}");
    assert!(err.to_string().contains("/allowedDnsSufixes"), "{err}");
}

#[test]
fn members_of_the_wrong_type_are_each_reported() {
    let found = issues(json!({
        "allowedDnsSuffixes": ".example.com",
        "allowWildcards": "no",
        "maxValidityDays": -1,
        "minRsaBits": "2048",
        "allowedIpRanges": [10],
        "appliesTo": ["acme"]
    }));
    let pointers: Vec<&str> = found.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        pointers,
        ["/allowedDnsSuffixes", "/allowedIpRanges", "/allowWildcards", "/maxValidityDays", "/minRsaBits", "/appliesTo"]
    );
    assert!(found.iter().all(|(_, message)| message.starts_with("wrong type")), "{found:#?}");
}

#[test]
fn every_problem_is_reported_at_once() {
    let found = fields(json!({
        "allowedDnsSuffixes": ["", "ok.example.com", "a b"],
        "allowedIpRanges": ["10.0.0.0/8", "10.0.0.0/99"],
        "maxValidityDays": 0,
        "allowedKeyAlgorithms": ["rsa", "dsa"],
        "minRsaBits": 512,
        "requireApprovalFor": ["", "payments.*", "pay ments"],
        "appliesTo": { "caTypes": [], "templates": [""], "extra": 1 },
        "typo": true
    }));
    assert_eq!(
        found,
        [
            "/typo",
            "/allowedDnsSuffixes/0",
            "/allowedDnsSuffixes/2",
            "/allowedIpRanges/1",
            "/maxValidityDays",
            "/allowedKeyAlgorithms/1",
            "/minRsaBits",
            "/requireApprovalFor/0",
            "/requireApprovalFor/2",
            "/appliesTo/extra",
            "/appliesTo/caTypes",
            "/appliesTo/templates/0",
        ]
    );
}

#[test]
fn a_configuration_that_is_not_an_object_is_refused_by_parsing() {
    assert!(testing::config::<Config>(json!(["allowedDnsSuffixes"])).is_err());
    assert!(testing::config::<Config>(json!("example.com")).is_err());
}
