//! The commercial CA types served by the ACME connector (issue 24, item 2) against a real Pebble
//! that requires External Account Binding: a `sectigo` record whose `url` is Pebble's directory
//! issues with EAB (the chain verified by openssl and parsed and checked by pyca/cryptography), a
//! wrong MAC key and a missing EAB are clear 400s, and a `sectigo` record created while
//! `ca-probe` 0.1.0 served the type (and bound to it) is served by the ACME connector once both
//! plugins are upgraded.

use std::path::PathBuf;
use std::process::Command;

use serde_json::{json, Value};
use trellis_tests::pebble::PebbleOptions;

use crate::acme::{issued, setup, setup_with, verify_against_pebble_root, Setup, EAB_KEY, EAB_KID};
use crate::cas::Openssl;

fn eab_pebble() -> PebbleOptions {
    PebbleOptions { eab_keys: vec![(EAB_KID.into(), EAB_KEY.into())], ..PebbleOptions::default() }
}

async fn create(s: &Setup, ca_type: &str, config: Value) -> trellis_tests::Response {
    s.admin
        .post(
            "/api/certificate-authorities",
            json!({ "name": format!("{ca_type} via Pebble"), "type": ca_type, "url": s.pebble.directory_url,
                    "config": config }),
        )
        .await
}

fn config_fields(res: &trellis_tests::Response) -> Vec<String> {
    res.body["error"]["details"]["config"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|issue| issue["field"].as_str().map(str::to_owned))
        .collect()
}

/// The Python of scripts/pkilint.sh's venv (pyca/cryptography, pinned).
fn cryptography_python() -> PathBuf {
    let python = trellis_tests::workspace_root().join("target/venv-pkilint/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/pkilint.sh (installs pyca/cryptography from PyPI; `make test` runs it)",
        python.display()
    );
    python
}

/// pyca/cryptography parses the leaf and its chain strictly, checks each signature up to
/// Pebble's root and that the leaf names `name`.
const CHAIN_CHECK: &str = r#"
import sys
from cryptography import x509
leaf = x509.load_pem_x509_certificate(open(sys.argv[1], "rb").read())
chain = x509.load_pem_x509_certificates(open(sys.argv[2], "rb").read())
root = x509.load_pem_x509_certificate(open(sys.argv[3], "rb").read())
issuers = chain + [root]
cert = leaf
for issuer in issuers:
    cert.verify_directly_issued_by(issuer)
    cert = issuer
names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
assert sys.argv[4] in names, names
print("ok", leaf.issuer.rfc4514_string())
"#;

fn cryptography_checks(s: &Setup, cert: &Value, name: &str) {
    let openssl = Openssl::new();
    let leaf = openssl.write("leaf.pem", cert["certificate"].as_str().expect("PEM"));
    let chain: String = cert["chain"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let chain = openssl.write("chain.pem", chain);
    let root = openssl.write("root.pem", s.pebble.root_pem());
    let out = Command::new(cryptography_python())
        .args(["-c", CHAIN_CHECK, &leaf, &chain, &root, name])
        .output()
        .expect("python runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.starts_with("ok"), "pyca/cryptography: {text}");
}

#[tokio::test]
async fn a_sectigo_record_issues_through_an_eab_directory_and_refuses_missing_or_wrong_keys() {
    let s = setup(eab_pebble()).await;

    // No EAB: refused before anything is sent, naming both members.
    let missing = create(&s, "sectigo", json!({ "termsOfServiceAgreed": true })).await;
    assert_eq!(missing.status, 400, "{}", missing.body);
    assert_eq!(missing.error_code(), "VALIDATION_ERROR", "{}", missing.body);
    assert_eq!(config_fields(&missing), ["/eabKid", "/eabHmacKey"], "{}", missing.body);
    assert!(missing.body.to_string().contains("sectigo requires External Account Binding"), "{}", missing.body);

    // A MAC key Pebble does not know: the account registration is refused, a clear 400.
    let wrong_key = "c2VjcmV0LXRoYXQtaXMtbm90LXRoZS1vbmUtcGViYmxlLWtub3dz";
    let wrong =
        create(&s, "sectigo", json!({ "termsOfServiceAgreed": true, "eabKid": EAB_KID, "eabHmacKey": wrong_key }))
            .await;
    assert_eq!(wrong.status, 400, "{}", wrong.body);
    assert_eq!(wrong.error_code(), "VALIDATION_ERROR", "{}", wrong.body);
    let text = wrong.body.to_string();
    assert!(text.contains("refused the External Account Binding"), "{text}");
    assert!(!text.contains(wrong_key), "the secret is not echoed: {text}");
    let listed = s.admin.get("/api/certificate-authorities").await;
    assert_eq!(listed.body["total"], 0, "refused records are not created: {}", listed.body);

    // The right key: created with Sectigo's issuer patterns, the key masked, tested, issuing.
    let created =
        create(&s, "sectigo", json!({ "termsOfServiceAgreed": true, "eabKid": EAB_KID, "eabHmacKey": EAB_KEY })).await;
    assert_eq!(created.status, 201, "{}\n{}", created.body, s.server.log());
    let ca = created.body["data"].clone();
    assert_eq!(ca["issuerPatterns"], json!(["Sectigo", "COMODO", "USERTrust"]), "{ca}");
    assert!(!created.body.to_string().contains(EAB_KEY), "the MAC key is masked: {}", created.body);
    let id = ca["id"].as_i64().expect("id");
    let tested = s.admin.post(&format!("/api/certificate-authorities/{id}/test"), json!({})).await;
    assert_eq!(tested.status, 200, "{}", tested.body);
    let report = &tested.body["data"];
    assert_eq!(report["success"], true, "{report}");
    assert_eq!(report["details"]["directoryUrl"], s.pebble.directory_url, "the record's url overrides the default");
    assert_eq!(report["details"]["defaultDirectoryUrl"], "https://acme.sectigo.com/v2/DV", "{report}");
    assert!(report["details"]["accountUrl"].as_str().is_some_and(|u| u.contains("/my-account/")), "{report}");

    let cert = issued(&s, id, &["shop.example.com"]).await;
    assert_eq!(cert["issuanceSource"], "external", "{cert}");
    verify_against_pebble_root(&s, &cert);
    cryptography_checks(&s, &cert, "shop.example.com");
    assert!(!s.server.log().contains(EAB_KEY), "the MAC key is never logged");

    // AD CS stays a probe type: its records are not the ACME connector's.
    let plugins = s.admin.get("/api/plugins/trellis.acme").await;
    assert!(!plugins.body.to_string().contains("microsoft_adcs"), "{}", plugins.body);
}

/// A record created while `ca-probe` 0.1.0 served `sectigo` (and the workspace bound the type to
/// it) keeps working after both plugins are upgraded: the ACME connector answers its test, asks
/// for EAB, and issues once the record has it.
#[tokio::test]
async fn a_probe_era_sectigo_record_is_served_by_the_acme_connector_after_the_upgrade() {
    let first_party = tempfile::tempdir().expect("temp dir");
    let frozen = trellis_tests::workspace_root().join("plugins/frozen/ca-probe-0.1.0.wasm");
    std::fs::copy(&frozen, first_party.path().join("ca-probe.wasm")).expect("frozen ca-probe");
    let dir = first_party.path().display().to_string();
    let s = setup_with(eab_pebble(), &[("TRELLIS_FIRST_PARTY_PLUGIN_DIR", dir.as_str())]).await;

    // Before: ca-probe 0.1.0 alone serves the type; the record (with a bundled root, which the
    // probe checked) is created and bound to it.
    let root = trellis_tests::certs::ca_pem("Probe Era Root", -1, 3650);
    let created = create(&s, "sectigo", json!({ "termsOfServiceAgreed": true, "rootCertificate": root })).await;
    assert_eq!(created.status, 201, "{}\n{}", created.body, s.server.log());
    let id = created.body["data"]["id"].as_i64().expect("id");
    let bound = s
        .admin
        .put(
            "/api/plugin-bindings",
            json!({ "kind": "ca-connector", "type": "sectigo", "pluginId": "trellis.ca-probe" }),
        )
        .await;
    assert_eq!(bound.status, 200, "{}", bound.body);
    let tested = s.admin.post(&format!("/api/certificate-authorities/{id}/test"), json!({})).await;
    assert_eq!(tested.body["data"]["details"]["probe"], "https-reachability", "{}", tested.body);

    // The upgrade: both plugins' new versions installed.
    for name in ["acme", "ca-probe"] {
        let bytes = std::fs::read(trellis_tests::plugin_file(name)).expect("built plugin");
        let installed = s.admin.post_raw("/api/plugins", "application/wasm", bytes).await;
        assert!(installed.status == 200 || installed.status == 201, "{name}: {}", installed.body);
    }

    // After: the ACME connector answers the record's test (EAB missing is a failed check)...
    let tested = s.admin.post(&format!("/api/certificate-authorities/{id}/test"), json!({})).await;
    assert_eq!(tested.status, 200, "{}", tested.body);
    let report = &tested.body["data"];
    assert_eq!(report["details"]["directoryUrl"], s.pebble.directory_url, "{report}");
    assert_eq!(report["success"], false, "{report}");
    let check = |name: &str| {
        report["checks"].as_array().into_iter().flatten().find(|c| c["name"] == name).map(|c| c["status"].clone())
    };
    assert_eq!(check("externalAccountBinding"), Some(json!("fail")), "{report}");
    assert_eq!(check("root-is-ca"), Some(json!("pass")), "the bundled root is still checked: {report}");
    // ...issuing without EAB is a 400 naming both members...
    let refused = crate::acme::issue(&s, id, &["old.example.com"]).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    let text = refused.body.to_string();
    assert!(text.contains("eabKid") && text.contains("eabHmacKey"), "names both members: {text}");
    // ...and once the record has its EAB credentials, it issues.
    let patched = s
        .admin
        .patch(
            &format!("/api/certificate-authorities/{id}"),
            json!({ "config": { "eabKid": EAB_KID, "eabHmacKey": EAB_KEY } }),
        )
        .await;
    assert_eq!(patched.status, 200, "{}", patched.body);
    let cert = issued(&s, id, &["old.example.com"]).await;
    verify_against_pebble_root(&s, &cert);

    // AD CS stays ca-probe's.
    let adcs = s
        .admin
        .post(
            "/api/certificate-authorities",
            json!({ "name": "AD CS", "type": "microsoft_adcs", "url": "https://127.0.0.1:9/certsrv" }),
        )
        .await;
    assert_eq!(adcs.status, 201, "{}", adcs.body);
    let tested =
        s.admin.post(&format!("/api/certificate-authorities/{}/test", adcs.body["data"]["id"]), json!({})).await;
    assert_eq!(tested.body["data"]["details"]["probe"], "web-enrolment", "{}", tested.body);
}
