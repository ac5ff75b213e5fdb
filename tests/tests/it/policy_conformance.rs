//! One policy, three languages (issue 27): the domain policy's core rules (allowed DNS suffixes,
//! wildcards, the validity cap) as the first-party Rust plugin (`domain-policy`), in Python
//! (`plugins-py/domain-policy`, type `domain-policy-py`) and in JavaScript (`plugins-js/domain-policy`,
//! type `domain-policy-js`), the latter two installed into the real binary over the API. The same
//! configurations and the same issuance requests go to each; every answer (status, error code,
//! reasons with their messages, the validity issued, configuration problems by field) must be the
//! same for all three, and match what the rules say.

use serde_json::{json, Value};
use trellis_tests::{Client, Server};

use crate::cas::{install_plugin, internal_root};
use crate::issuance::validity_secs;

/// The policy type each build serves.
const BUILDS: [&str; 3] = ["domain-policy", "domain-policy-py", "domain-policy-js"];

/// What an issuance came to, in the terms the three builds must agree on.
#[derive(Debug, PartialEq)]
enum Outcome {
    Issued { validity_days: i64 },
    Refused { status: u16, code: String, reasons: Vec<(String, String)> },
}

async fn outcome(client: &Client, request: &Value) -> Outcome {
    let res = client.post("/api/certificates/issue", request.clone()).await;
    if res.status == 201 {
        return Outcome::Issued { validity_days: validity_secs(&res.body["data"]) / 86_400 };
    }
    let reasons = res.body["error"]["details"]["reasons"]
        .as_array()
        .map(|reasons| {
            reasons
                .iter()
                .map(|r| {
                    (
                        r["code"].as_str().unwrap_or_default().to_owned(),
                        r["message"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    Outcome::Refused { status: res.status, code: res.error_code().to_owned(), reasons }
}

fn deny(reasons: &[(&str, &str)]) -> Outcome {
    Outcome::Refused {
        status: 403,
        code: "POLICY_DENIED".into(),
        reasons: reasons.iter().map(|(c, m)| ((*c).to_owned(), (*m).to_owned())).collect(),
    }
}

/// The requests of one configuration and what the rules say of each.
struct Case {
    config: Value,
    expect: Vec<(Value, Outcome)>,
}

fn cases(ca: i64) -> Vec<Case> {
    let req = |body: Value| {
        let mut body = body;
        body["caId"] = json!(ca);
        body
    };
    vec![
        Case {
            config: json!({ "allowedDnsSuffixes": [".example.com", "Example.ORG."], "allowWildcards": false, "maxValidityDays": 30 }),
            expect: vec![
                (
                    req(json!({ "commonName": "www.example.com", "validityDays": 10 })),
                    Outcome::Issued { validity_days: 10 },
                ),
                (
                    req(json!({ "commonName": "www.example.com", "validityDays": 90 })),
                    Outcome::Issued { validity_days: 30 },
                ),
                (
                    req(json!({ "commonName": "deep.sub.EXAMPLE.org", "validityDays": 5 })),
                    Outcome::Issued { validity_days: 5 },
                ),
                (
                    req(json!({ "commonName": "www.example.net" })),
                    deny(&[(
                        "dns_suffix_not_allowed",
                        "DNS name www.example.net is not under an allowed DNS suffix (.example.com, Example.ORG.)",
                    )]),
                ),
                (
                    req(
                        json!({ "commonName": "api.example.org", "subjectAltNames": ["*.example.com", "badexample.com"] }),
                    ),
                    deny(&[
                        (
                            "wildcard_not_allowed",
                            "DNS name *.example.com is a wildcard, and this policy allows no wildcards",
                        ),
                        (
                            "dns_suffix_not_allowed",
                            "DNS name badexample.com is not under an allowed DNS suffix (.example.com, Example.ORG.)",
                        ),
                    ]),
                ),
                // IP addresses are not among the core rules: the request is judged by its DNS name.
                (
                    req(
                        json!({ "commonName": "ip.example.com", "subjectAltNames": ["ip.example.com", "10.0.0.1"], "validityDays": 7 }),
                    ),
                    Outcome::Issued { validity_days: 7 },
                ),
            ],
        },
        Case {
            config: json!({ "allowedDnsSuffixes": [] }),
            expect: vec![(
                req(json!({ "commonName": "a.example.com" })),
                deny(&[(
                    "dns_suffix_not_allowed",
                    "DNS name a.example.com is not allowed: this policy allows no DNS names",
                )]),
            )],
        },
        Case {
            config: json!({}),
            expect: vec![(
                req(json!({ "commonName": "*.wild.example.com", "validityDays": 3 })),
                Outcome::Issued { validity_days: 3 },
            )],
        },
    ]
}

/// Creates the policy of `build` with `config`; returns its id, or the configuration problems'
/// fields when it is refused.
async fn create_policy(admin: &Client, build: &str, config: &Value) -> Result<i64, (u16, Vec<String>)> {
    let res = admin.post("/api/issuance-policies", json!({ "name": build, "type": build, "config": config })).await;
    if res.status == 201 {
        return Ok(res.body["data"]["id"].as_i64().expect("policy id"));
    }
    let mut fields: Vec<String> = res.body["error"]["details"]["config"]
        .as_array()
        .map(|issues| issues.iter().filter_map(|i| i["field"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    fields.sort();
    Err((res.status, fields))
}

#[tokio::test]
async fn the_domain_policy_decides_the_same_in_rust_python_and_javascript() {
    let server = Server::start();
    let admin = server.admin().await;
    for (file, kind) in [("py-domain-policy", "issuance-policy"), ("js-domain-policy", "issuance-policy")] {
        let installed = install_plugin(&admin, file).await;
        assert_eq!(installed["info"]["kind"], kind, "{installed}");
    }
    let ca = internal_root(&admin, "Conformance Root").await;

    for case in cases(ca) {
        for build in BUILDS {
            let policy = create_policy(&admin, build, &case.config)
                .await
                .unwrap_or_else(|refused| panic!("{build} refused {}: {refused:?}", case.config));
            for (request, expected) in &case.expect {
                let got = outcome(&admin, request).await;
                assert_eq!(&got, expected, "{build} with {} on {request}", case.config);
            }
            assert_eq!(admin.delete(&format!("/api/issuance-policies/{policy}")).await.status, 204);
        }
    }

    // Configurations: the same problems, at the same fields, from all three.
    for config in [
        json!({ "allowedDnsSuffixes": ["", "*.example.com", "exa mple.com", "ok.example.com"], "maxValidityDays": 0 }),
        json!({ "allowedDnsSufixes": [".example.com"] }),
        json!({ "allowWildcards": "no" }),
    ] {
        let mut answers = Vec::new();
        for build in BUILDS {
            let refused = create_policy(&admin, build, &config).await.expect_err("a bad configuration is refused");
            assert_eq!(refused.0, 400, "{build}: {config}");
            answers.push((build, refused.1));
        }
        assert!(answers.iter().all(|(_, fields)| *fields == answers[0].1), "{config}: {answers:?}");
        assert!(!answers[0].1.is_empty(), "{config}: every problem has its field");
    }
    assert_eq!(admin.get("/api/issuance-policies").await.body["data"], json!([]));
}
