//! Signed plugins through the real binary: the trust store (API and CLI), every refusal of
//! `TRELLIS_PLUGIN_SIGNATURES=require` with its own code, embedded and detached signatures,
//! `warn` mode, and revocation deactivating what a key signed (audit rows and an event).
//! Keys and signatures come from the real signer, `trellis-plugin-sign` (wasmsign2).

use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine as _;
use serde_json::{json, Value};
use trellis_tests::{Client, Server};

fn signer() -> PathBuf {
    let path = trellis_tests::target_dir().join("debug").join("trellis-plugin-sign");
    assert!(path.is_file(), "{} missing: cargo build --bins --workspace first", path.display());
    path
}

fn run_signer(args: &[&str]) -> String {
    let output = Command::new(signer()).args(args).output().expect("run trellis-plugin-sign");
    assert!(output.status.success(), "trellis-plugin-sign {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// A publisher key pair in `dir`: (secret path, public PEM, key id).
fn keypair(dir: &Path, name: &str) -> (String, String, String) {
    let secret = dir.join(format!("{name}.secret.pem")).display().to_string();
    let public = dir.join(format!("{name}.public.pem")).display().to_string();
    let key_id = run_signer(&["keygen", &secret, &public]);
    let pem = std::fs::read_to_string(&public).expect("public key");
    (secret, pem, key_id)
}

/// `plugin` signed with `secret`: the signed component, or (detached) the signature alone.
fn signed(dir: &Path, secret: &str, plugin: &str, detached: bool) -> Vec<u8> {
    let input = trellis_tests::plugin_file(plugin).display().to_string();
    let output = dir.join(format!("{plugin}.{}", if detached { "sig" } else { "signed.wasm" })).display().to_string();
    if detached {
        run_signer(&["sign", "--detached", secret, &input, &output]);
    } else {
        run_signer(&["sign", secret, &input, &output]);
    }
    std::fs::read(output).expect("signed output")
}

fn unsigned(plugin: &str) -> Vec<u8> {
    std::fs::read(trellis_tests::plugin_file(plugin)).expect("plugin")
}

async fn install(admin: &Client, bytes: Vec<u8>) -> trellis_tests::Response {
    admin.post_raw("/api/plugins", "application/wasm", bytes).await
}

fn refused_with(res: &trellis_tests::Response, code: &str) {
    assert_eq!(res.status, 400, "{}", res.body);
    assert_eq!(res.error_code(), "PLUGIN_SIGNATURE_REFUSED", "{}", res.body);
    assert_eq!(res.body["error"]["details"]["code"], code, "{}", res.body);
}

async fn add_key(admin: &Client, name: &str, pem: &str, prefixes: &[&str], kinds: &[&str]) -> Value {
    let res = admin
        .post("/api/plugin-keys", json!({ "name": name, "publicKey": pem, "idPrefixes": prefixes, "kinds": kinds }))
        .await;
    assert_eq!(res.status, 201, "{}", res.body);
    res.body["data"].clone()
}

fn audit_actions(entries: &Value) -> Vec<String> {
    entries["data"]
        .as_array()
        .map(|a| a.iter().filter_map(|e| e["action"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn require_mode_refuses_each_untrusted_component_with_its_own_code() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start_with(&[("TRELLIS_PLUGIN_SIGNATURES", "require")]);
    let admin = server.admin().await;
    let (publisher, publisher_pem, publisher_id) = keypair(dir.path(), "publisher");
    let (stranger, _, stranger_id) = keypair(dir.path(), "stranger");
    let (other, other_pem, _) = keypair(dir.path(), "other");

    let key = add_key(&admin, "Fixture publisher", &publisher_pem, &["trellis.fixture."], &["integration"]).await;
    assert_eq!(key["keyId"], publisher_id.as_str());
    assert_eq!(key["revokedAt"], Value::Null);
    let again = admin
        .post("/api/plugin-keys", json!({ "name": "dup", "publicKey": publisher_pem, "idPrefixes": ["x."] }))
        .await;
    assert_eq!(again.status, 409, "{}", again.body);
    let junk =
        admin.post("/api/plugin-keys", json!({ "name": "junk", "publicKey": "nope", "idPrefixes": ["x."] })).await;
    assert_eq!(junk.status, 400, "{}", junk.body);
    add_key(&admin, "Someone else", &other_pem, &["com.other."], &[]).await;

    refused_with(&install(&admin, unsigned("fixture-noop")).await, "plugin.unsigned");
    refused_with(
        &install(&admin, signed(dir.path(), &stranger, "fixture-noop", false)).await,
        "plugin.signature_unknown_key",
    );
    let res = install(&admin, signed(dir.path(), &stranger, "fixture-noop", false)).await;
    assert!(res.body["error"]["message"].as_str().unwrap_or_default().contains(&stranger_id), "{}", res.body);
    // One changed byte after signing: refused before compilation (the bytes are no longer a
    // valid component either, and the signature is what is reported).
    let mut changed = signed(dir.path(), &publisher, "fixture-noop", false);
    let last = changed.len() - 1;
    changed[last] ^= 0x01;
    refused_with(&install(&admin, changed).await, "plugin.signature_invalid");
    // Out of scope: an id outside the key's prefixes, and a kind outside its kinds.
    refused_with(
        &install(&admin, signed(dir.path(), &other, "fixture-noop", false)).await,
        "plugin.signature_out_of_scope",
    );
    refused_with(
        &install(&admin, signed(dir.path(), &publisher, "fixture-policy", false)).await,
        "plugin.signature_out_of_scope",
    );
    assert_eq!(admin.get("/api/plugins/trellis.fixture.noop").await.status, 404, "nothing refused is installed");
    assert_eq!(admin.get("/api/plugins/trellis.fixture.policy").await.status, 404, "nothing refused is installed");

    // Embedded signature.
    let v1 = install(&admin, signed(dir.path(), &publisher, "fixture-upgrade-v1", false)).await;
    assert_eq!(v1.status, 201, "{}", v1.body);
    assert_eq!(v1.body["data"]["signerKeyId"], publisher_id.as_str());
    assert_eq!(v1.body["data"]["signatureWarning"], Value::Null);
    // Detached signature in the header, beside the unsigned bytes.
    let signature =
        base64::engine::general_purpose::STANDARD.encode(signed(dir.path(), &publisher, "fixture-upgrade-v2", true));
    let v2 = admin
        .send(
            admin
                .request(reqwest::Method::POST, "/api/plugins")
                .header("content-type", "application/wasm")
                .header("trellis-plugin-signature", signature)
                .body(unsigned("fixture-upgrade-v2")),
        )
        .await;
    assert_eq!(v2.status, 201, "{}", v2.body);
    assert_eq!(v2.body["data"]["signerKeyId"], publisher_id.as_str());
    let shown = admin.get("/api/plugins/trellis.fixture.upgrade").await;
    assert_eq!(shown.body["data"]["activeVersion"], "2.0.0");
    let signers: Vec<&Value> =
        shown.body["data"]["versions"].as_array().unwrap().iter().map(|v| &v["signerKeyId"]).collect();
    assert!(signers.iter().all(|s| *s == publisher_id.as_str()), "{}", shown.body);

    // Revocation: every version the key signed is deactivated, with audit rows and events.
    let revoked = admin.post(&format!("/api/plugin-keys/{publisher_id}/revoke"), json!({})).await;
    assert_eq!(revoked.status, 200, "{}", revoked.body);
    assert!(revoked.body["data"]["key"]["revokedAt"].is_string(), "{}", revoked.body);
    assert_eq!(
        revoked.body["data"]["deactivatedVersions"],
        json!([{ "pluginId": "trellis.fixture.upgrade", "version": "1.0.0" }, { "pluginId": "trellis.fixture.upgrade", "version": "2.0.0" }])
    );
    assert_eq!(admin.post(&format!("/api/plugin-keys/{publisher_id}/revoke"), json!({})).await.status, 409);
    assert_eq!(admin.post("/api/plugin-keys/000000000000000000000000/revoke", json!({})).await.status, 404);
    let shown = admin.get("/api/plugins/trellis.fixture.upgrade").await;
    assert_eq!(shown.body["data"]["activeVersion"], Value::Null, "{}", shown.body);
    let activate = admin.post("/api/plugins/trellis.fixture.upgrade/versions/1.0.0/activate", json!({})).await;
    refused_with(&activate, "plugin.signature_key_revoked");
    refused_with(
        &install(&admin, signed(dir.path(), &publisher, "fixture-noop", false)).await,
        "plugin.signature_key_revoked",
    );

    let keys = admin.get("/api/plugin-keys").await;
    assert_eq!(keys.status, 200, "{}", keys.body);
    assert_eq!(keys.body["data"].as_array().map(Vec::len), Some(2));

    let events = admin.get("/api/events?type=plugin.version_deactivated").await;
    assert_eq!(events.status, 200, "{}", events.body);
    let deactivated: Vec<(String, String)> = events.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let data = &e["payload"]["data"];
            let data = if data.is_null() { &e["data"] } else { data };
            assert_eq!(data["keyId"], publisher_id.as_str(), "{e}");
            (
                data["pluginId"].as_str().unwrap_or_default().to_owned(),
                data["version"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(deactivated.len(), 2, "{}", events.body);

    let audit = admin.get("/api/audit-logs?limit=100").await;
    let actions = audit_actions(&audit.body);
    for action in ["plugin_key.added", "plugin_key.revoked", "plugin.deactivated", "plugin.installed"] {
        assert!(actions.iter().any(|a| a == action), "{action} missing from {actions:?}");
    }
    let installed = audit.body["data"].as_array().unwrap().iter().find(|e| e["action"] == "plugin.installed").unwrap();
    assert_eq!(installed["details"]["signerKeyId"], publisher_id.as_str(), "{installed}");

    // Instance administrators only.
    let (member, _) = server.new_user("member@example.com").await;
    assert_eq!(member.get("/api/plugin-keys").await.status, 403);
    assert_eq!(
        member
            .post("/api/plugin-keys", json!({ "name": "x", "publicKey": other_pem, "idPrefixes": ["a."] }))
            .await
            .status,
        403
    );
}

#[tokio::test]
async fn warn_mode_installs_with_a_warning_and_the_cli_manages_keys() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start();
    let admin = server.admin().await;

    let res = install(&admin, unsigned("fixture-noop")).await;
    assert_eq!(res.status, 201, "{}", res.body);
    assert_eq!(res.body["data"]["signerKeyId"], Value::Null);
    assert_eq!(res.body["data"]["signatureWarning"]["code"], "plugin.unsigned", "{}", res.body);
    let audit = admin.get("/api/audit-logs?limit=100").await;
    let installed = audit.body["data"].as_array().unwrap().iter().find(|e| e["action"] == "plugin.installed").unwrap();
    assert_eq!(installed["details"]["signatureWarning"], "plugin.unsigned", "{installed}");
    assert_eq!(installed["details"]["signatureMode"], "warn", "{installed}");

    // The CLI: add a key, install a component with a detached signature beside it, list, revoke.
    let (secret, _, key_id) = keypair(dir.path(), "cli");
    let public = dir.path().join("cli.public.pem").display().to_string();
    let added = server
        .cli(&["plugin-keys", "add", "--name", "CLI key", "--public-key", &public, "--prefix", "trellis.fixture."])
        .expect("plugin-keys add");
    assert_eq!(added["keyId"], key_id.as_str());
    assert_eq!(added["kinds"], json!([]));
    let component = dir.path().join("trap.wasm");
    std::fs::copy(trellis_tests::plugin_file("fixture-trap"), &component).expect("copy");
    let signature = dir.path().join("trap.wasm.sig");
    run_signer(&["sign", "--detached", &secret, &component.display().to_string(), &signature.display().to_string()]);
    let installed = server.cli(&["plugin", "install", &component.display().to_string()]).expect("plugin install");
    assert_eq!(installed["signerKeyId"], key_id.as_str(), "{installed}");
    let listed = server.cli(&["plugin-keys", "list"]).expect("plugin-keys list");
    assert_eq!(listed[0]["keyId"], key_id.as_str());
    // Bound in the admin's workspace: a revocation from the CLI (no workspace of its own) tells
    // every workspace that binds the plugin.
    // The running server learns of the CLI's install at its next sync with the database.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let binding = json!({ "kind": "integration", "type": "fixture-trap", "pluginId": "trellis.fixture.trap" });
        let bound = admin.put("/api/plugin-bindings", binding).await;
        if bound.status == 200 {
            break;
        }
        assert!(bound.status == 404 && std::time::Instant::now() < deadline, "{} {}", bound.status, bound.body);
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let revoked = server.cli(&["plugin-keys", "revoke", &key_id]).expect("plugin-keys revoke");
    assert_eq!(revoked["deactivatedVersions"][0]["pluginId"], installed["info"]["id"]);
    let events = admin.get("/api/events?type=plugin.version_deactivated").await;
    assert_eq!(events.status, 200, "{}", events.body);
    let heard = events.body["data"].as_array().cloned().unwrap_or_default();
    assert!(
        heard.iter().any(|e| {
            let data = if e["payload"]["data"].is_null() { &e["data"] } else { &e["payload"]["data"] };
            data["pluginId"] == "trellis.fixture.trap" && data["keyId"] == key_id.as_str()
        }),
        "the binding workspace hears of the CLI revocation: {}",
        events.body
    );
    let listed = server.cli(&["plugin-keys", "list"]).expect("plugin-keys list");
    assert!(listed[0]["revokedAt"].is_string(), "{listed}");
    let refused = server.cli_raw(&["plugin-keys", "revoke", &key_id]).expect("run");
    assert!(!refused.status.success());
}

/// The compiled-code cache across a restart: the install compiles and writes the artefact; after
/// a restart the first call loads it (the log says `from_cache`) and nothing is compiled again.
#[tokio::test]
async fn a_restart_loads_compiled_plugins_from_the_cache() {
    let cache = tempfile::tempdir().expect("tempdir");
    let cache_dir = cache.path().display().to_string();
    // No first-party plugins: a cold cache would compile all of them at the first start.
    let no_plugins = tempfile::tempdir().expect("tempdir");
    let no_plugins = no_plugins.path().display().to_string();
    let mut server = Server::start_with(&[
        ("TRELLIS_PLUGIN_CACHE_DIR", cache_dir.as_str()),
        ("TRELLIS_FIRST_PARTY_PLUGIN_DIR", no_plugins.as_str()),
    ]);
    let admin = server.admin().await;
    let res = install(&admin, unsigned("fixture-noop")).await;
    assert_eq!(res.status, 201, "{}", res.body);
    let sha256 = res.body["data"]["sha256"].as_str().expect("sha256").to_owned();
    let artefacts: Vec<String> = std::fs::read_dir(cache.path())
        .expect("cache dir")
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    assert!(artefacts.iter().any(|name| name.starts_with(&sha256) && name.ends_with(".cwasm")), "{artefacts:?}");

    server.kill_and_restart();
    let admin = server.admin().await;
    let test = admin.post("/api/plugin-bindings/integration/fixture-noop/test", json!({ "config": {} })).await;
    assert_eq!(test.status, 200, "{}", test.body);
    assert!(
        server.wait_for_log("plugin loaded on its first call", std::time::Duration::from_secs(30)),
        "no first-call load logged: {}",
        server.log()
    );
    let log = server.log();
    let loaded =
        log.lines().find(|l| l.contains("plugin loaded on its first call") && l.contains("trellis.fixture.noop"));
    let loaded = loaded.unwrap_or_else(|| panic!("no load line for the fixture: {log}"));
    assert!(loaded.contains("\"from_cache\":true"), "{loaded}");
    assert!(
        !log.lines().any(|l| l.contains("plugin component compiled") && l.contains(&sha256)),
        "the restart compiled the fixture again: {log}"
    );
}
