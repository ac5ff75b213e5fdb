//! Black-box tests: each test starts the real `trellis` binary and talks HTTP to it.

mod acme;
mod acme_http01;
mod attestation;
mod attestation_tpm;
mod audit;
mod auth;
mod aws_pca;
mod ca_probes;
mod cas;
mod certificates;
mod discovery;
mod errors;
mod integrations;
mod issuance;
mod lifecycle;
mod ops;
mod pagination;
mod pending_issuance;
mod pki;
mod plugins;
mod plugins_out_of_tree;
mod plugins_slack;
mod renewal_info;
mod webhooks;
