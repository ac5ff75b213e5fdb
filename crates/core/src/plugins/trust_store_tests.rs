//! The trust store of plugin publisher keys over the whole fake of the plugins' port
//! (`super::fake`): a key is added once, and revoking it names every version it signed, none of
//! which can be activated again.

use super::fake::PluginVersionRow;
use super::signatures::{add_key_as, list_keys, revoke_key_as, NewSigningKey};
use super::StoredPluginVersion;
use crate::audit::Audit;
use crate::error::Error;
use crate::testing::{context, owner, MemoryStore};

fn ok<T, E: std::fmt::Display>(result: Result<T, E>) -> T {
    result.unwrap_or_else(|e| panic!("{e}"))
}

fn publisher_key() -> NewSigningKey {
    let pair = wasmsign2::KeyPair::generate();
    NewSigningKey {
        name: "Example Corp".into(),
        public_key: pair.pk.to_pem().into_bytes(),
        id_prefixes: vec!["com.example.".into()],
        kinds: vec!["integration".into()],
    }
}

fn version(plugin_id: &str, version: &str, signer: Option<&str>, installed_at: i64) -> PluginVersionRow {
    PluginVersionRow {
        version: StoredPluginVersion {
            plugin_id: plugin_id.into(),
            version: version.into(),
            sha256: format!("{plugin_id}@{version}"),
            info: serde_json::json!({}),
            wit_version: "0.2.0".into(),
            size_bytes: 0,
            signer_key_id: signer.map(str::to_string),
        },
        installed_at,
    }
}

#[tokio::test]
async fn revoking_a_key_names_every_version_it_signed_and_none_can_be_activated_again() {
    let store = MemoryStore::default();
    let ctx = context(store.clone(), "2026-07-01T00:00:00Z");
    let deps = ctx.plugin_deps();
    let operator = Audit::system("cli");
    let new = publisher_key();
    let again = NewSigningKey { name: "again".into(), ..publisher_key() };
    let again = NewSigningKey { public_key: new.public_key.clone(), ..again };
    let key = ok(add_key_as(&deps, &operator, None, new).await);
    let twice = add_key_as(&deps, &operator, None, again).await;
    assert!(matches!(twice, Err(Error::Conflict(_))), "{twice:?}");

    store.edit(|t| {
        t.plugin_versions.push(version("com.example.chat", "1.1.0", Some(&key.key_id), 2));
        t.plugin_versions.push(version("com.example.chat", "1.0.0", Some(&key.key_id), 1));
        t.plugin_versions.push(version("com.example.unsigned", "1.0.0", None, 3));
    });

    let revocation = ok(revoke_key_as(&deps, &operator, None, &key.key_id).await);
    let expected = [("com.example.chat".to_string(), "1.0.0".to_string()), ("com.example.chat".into(), "1.1.0".into())];
    assert_eq!(revocation.deactivated, expected, "in install order");
    assert_eq!(revocation.key.revoked_at, Some(ctx.now_millis()));

    // None of them can be made active again; a version the key did not sign can.
    for (plugin_id, signed_version) in &expected {
        let refused = super::signatures::check_activatable(&deps, plugin_id, signed_version).await;
        assert!(
            refused.as_ref().err().and_then(Error::area::<crate::plugins::PluginError>).is_some(),
            "{plugin_id}@{signed_version}: {refused:?}"
        );
    }
    ok(super::signatures::check_activatable(&deps, "com.example.unsigned", "1.0.0").await);
    let tables = store.snapshot();
    let revoked = tables.audit.iter().find(|a| a.action == "plugin_key.revoked").map(|a| a.details.clone());
    let listed = revoked.map(|d| d["deactivatedVersions"].as_array().map_or(0, Vec::len));
    assert_eq!(listed, Some(2), "the revocation's audit row names what it deactivated");

    let twice = revoke_key_as(&deps, &operator, None, &key.key_id).await;
    assert!(matches!(twice, Err(Error::Conflict(_))), "{twice:?}");
    let mut admin = owner("ws_a");
    admin.instance_admin = true;
    let listed = ok(list_keys(&ctx.plugin_deps(), &admin).await);
    assert_eq!(listed.len(), 1);
    assert!(listed[0].is_revoked(), "a revoked key stays listed, as revoked");
    let not_admin = list_keys(&ctx.plugin_deps(), &owner("ws_a")).await;
    assert!(matches!(not_admin, Err(Error::Forbidden(_))), "{not_admin:?}");
}
