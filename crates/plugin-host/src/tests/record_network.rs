//! Per-record network settings, applied by the host to a plugin's requests for that record:
//! a private-network allowance the operator delegated, extra trusted roots, and a client
//! certificate for mutual TLS. The plugin sees none of them.

use serde_json::json;

use crate::tests::slack::{https_receiver, https_receiver_with};
use crate::tests::{event, install, runtime, test_config};
use crate::{CallTarget, ClientCertificate, PluginError, PluginHost, PluginRef, RecordNetwork, ReportedError};

fn slack_target(port: u16, network: RecordNetwork) -> CallTarget {
    let webhook = format!("https://localhost:{port}/services/T/B/X");
    CallTarget::new("ws_test", PluginRef::Serving("slack".into()), json!({ "webhookUrl": webhook }))
        .with_record_hosts([webhook])
        .for_record("int_1")
        .with_network(network)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_reaches_its_private_endpoint_with_its_own_roots_only_where_the_operator_delegates() {
    let (port, cert_pem, mut received) = https_receiver("HTTP/1.1 200 OK").await;
    let mut config = test_config();
    config.egress.allow_record_private_networks = true;
    let runtime = runtime(config);
    install(&runtime, "slack").await;

    let own =
        RecordNetwork { allow_private_networks: true, ca_bundle_pem: Some(cert_pem.clone()), client_certificate: None };
    let delivery =
        runtime.notify(&slack_target(port, own.clone()), &event("certificate.issued")).await.expect("delivered");
    assert_eq!(delivery.status, Some(200));
    assert!(received.recv().await.is_some());

    // Without the record's allowance the private address is refused, as for any record.
    let no_allowance = RecordNetwork { allow_private_networks: false, ..own.clone() };
    let err =
        runtime.notify(&slack_target(port, no_allowance), &event("certificate.issued")).await.expect_err("denied");
    assert!(matches!(&err, PluginError::CapabilityDenied { reason, .. } if reason == "private_address"), "{err}");

    // Without its roots the server is not trusted, and the plugin says so in plain words.
    let no_roots = RecordNetwork { ca_bundle_pem: None, ..own.clone() };
    let err = runtime.notify(&slack_target(port, no_roots), &event("certificate.issued")).await.expect_err("untrusted");
    match &err {
        PluginError::Reported { error: ReportedError::Upstream { message, .. }, .. } => {
            assert!(message.contains("TLS certificate is not trusted"), "{message}")
        }
        other => panic!("expected an upstream failure, got {other}"),
    }

    // An operator who did not delegate keeps private networks closed whatever the record says.
    let strict = runtime_without_delegation();
    install(&strict, "slack").await;
    let err = strict.notify(&slack_target(port, own), &event("certificate.issued")).await.expect_err("denied");
    assert!(matches!(&err, PluginError::CapabilityDenied { reason, .. } if reason == "private_address"), "{err}");
}

fn runtime_without_delegation() -> crate::PluginRuntime {
    runtime(test_config())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_presents_its_client_certificate_to_a_server_that_demands_one() {
    let ca_key = rcgen::KeyPair::generate().expect("ca key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).expect("ca");
    let client_key = rcgen::KeyPair::generate().expect("client key");
    let client = rcgen::CertificateParams::new(vec!["trellis-client".to_owned()])
        .expect("client params")
        .signed_by(&client_key, &ca, &ca_key)
        .expect("client cert");

    let (port, cert_pem, mut received) = https_receiver_with("HTTP/1.1 200 OK", Some(ca.der().clone())).await;
    let mut config = test_config();
    config.egress.allow_record_private_networks = true;
    let runtime = runtime(config);
    install(&runtime, "slack").await;

    let without =
        RecordNetwork { allow_private_networks: true, ca_bundle_pem: Some(cert_pem), client_certificate: None };
    let err =
        runtime.notify(&slack_target(port, without.clone()), &event("certificate.issued")).await.expect_err("no cert");
    assert!(matches!(err, PluginError::Reported { error: ReportedError::Upstream { .. }, .. }), "{err}");
    assert!(received.try_recv().is_err(), "the server must not have accepted a request");

    let with = RecordNetwork {
        client_certificate: Some(ClientCertificate {
            chain_pem: client.pem(),
            private_key_pem: client_key.serialize_pem(),
        }),
        ..without
    };
    let delivery = runtime.notify(&slack_target(port, with), &event("certificate.issued")).await.expect("mTLS");
    assert_eq!(delivery.status, Some(200));
    assert!(received.recv().await.is_some());

    // Unusable settings fail the call before any plugin code runs, naming the problem.
    let broken = RecordNetwork { ca_bundle_pem: Some("not pem".into()), ..RecordNetwork::default() };
    let err = runtime.notify(&slack_target(port, broken), &event("certificate.issued")).await.expect_err("bad bundle");
    assert!(err.to_string().contains("CA bundle holds no certificate"), "{err}");
}
