//! The host imports of contract 0.2: `types`, `logging`, `state` and `keystore` scoped to the
//! call's record, `challenge-solver` and `pki-core`.
//!
//! `challenge-solver` presents HTTP-01 answers to the host's challenge listener when one is
//! configured (`TRELLIS_ACME_HTTP01_LISTEN`); DNS-01 and TLS-ALPN-01 are `unsupported` until a
//! DNS provider or an ALPN responder exists. `pki-core` is `unavailable` for every record until
//! internal CA records exist (the CA/issuance issue); it is linked so connectors built against
//! the full world install and run today.

use trellis_core::plugins::challenges::{self, ChallengeError, Http01Answer};
use trellis_core::plugins::{KeyAlgorithm, KeystoreError, PublicKeyInfo};

use crate::bindings::v0_2::{challenge_solver as solver, keystore, logging, pki_core as pki, state, wit_types};
use crate::call::{CallState, MAX_STATE_KEY};
use crate::StateError;

impl wit_types::Host for CallState {}

crate::call::impl_logging_host!();

fn state_error(err: StateError) -> state::StateError {
    match err {
        StateError::QuotaExceeded(quota) => state::StateError::QuotaExceeded(quota),
        StateError::Unavailable(message) => state::StateError::Unavailable(message),
    }
}

fn check_key(key: &str) -> Result<(), state::StateError> {
    if key.is_empty() || key.len() > MAX_STATE_KEY || key.chars().any(char::is_control) {
        let shown: String = key.chars().take(64).collect();
        return Err(state::StateError::InvalidKey(format!(
            "{shown:?}: keys are 1 to {MAX_STATE_KEY} bytes without control characters"
        )));
    }
    Ok(())
}

impl state::Host for CallState {
    async fn get(&mut self, key: String) -> wasmtime::Result<Result<Option<Vec<u8>>, state::StateError>> {
        if let Err(err) = check_key(&key) {
            return Ok(Err(err));
        }
        Ok(self.state_store.get(&self.scope, &key).await.map_err(state_error))
    }

    async fn set(&mut self, key: String, value: Vec<u8>) -> wasmtime::Result<Result<(), state::StateError>> {
        if let Err(err) = check_key(&key) {
            return Ok(Err(err));
        }
        Ok(self.state_store.set(&self.scope, &key, value, self.state_quota).await.map_err(state_error))
    }

    async fn delete(&mut self, key: String) -> wasmtime::Result<Result<(), state::StateError>> {
        if let Err(err) = check_key(&key) {
            return Ok(Err(err));
        }
        Ok(self.state_store.delete(&self.scope, &key).await.map_err(state_error))
    }

    async fn list_keys(
        &mut self,
        prefix: String,
        after: Option<String>,
        limit: u32,
    ) -> wasmtime::Result<Result<Vec<String>, state::StateError>> {
        let limit = limit.clamp(1, 1000);
        Ok(self.state_store.list_keys(&self.scope, &prefix, after.as_deref(), limit).await.map_err(state_error))
    }

    async fn compare_and_swap(
        &mut self,
        key: String,
        expected: Option<Vec<u8>>,
        new: Option<Vec<u8>>,
    ) -> wasmtime::Result<Result<bool, state::StateError>> {
        if let Err(err) = check_key(&key) {
            return Ok(Err(err));
        }
        let quota = self.state_quota;
        Ok(self.state_store.compare_and_swap(&self.scope, &key, expected, new, quota).await.map_err(state_error))
    }
}

fn algorithm_from_wit(algorithm: wit_types::KeyAlgorithm) -> KeyAlgorithm {
    match algorithm {
        wit_types::KeyAlgorithm::EcdsaP256 => KeyAlgorithm::EcdsaP256,
        wit_types::KeyAlgorithm::EcdsaP384 => KeyAlgorithm::EcdsaP384,
        wit_types::KeyAlgorithm::Ed25519 => KeyAlgorithm::Ed25519,
        wit_types::KeyAlgorithm::Rsa2048 => KeyAlgorithm::Rsa2048,
        wit_types::KeyAlgorithm::Rsa3072 => KeyAlgorithm::Rsa3072,
        wit_types::KeyAlgorithm::Rsa4096 => KeyAlgorithm::Rsa4096,
    }
}

fn algorithm_to_wit(algorithm: KeyAlgorithm) -> wit_types::KeyAlgorithm {
    match algorithm {
        KeyAlgorithm::EcdsaP256 => wit_types::KeyAlgorithm::EcdsaP256,
        KeyAlgorithm::EcdsaP384 => wit_types::KeyAlgorithm::EcdsaP384,
        KeyAlgorithm::Ed25519 => wit_types::KeyAlgorithm::Ed25519,
        KeyAlgorithm::Rsa2048 => wit_types::KeyAlgorithm::Rsa2048,
        KeyAlgorithm::Rsa3072 => wit_types::KeyAlgorithm::Rsa3072,
        KeyAlgorithm::Rsa4096 => wit_types::KeyAlgorithm::Rsa4096,
    }
}

fn key_info(info: PublicKeyInfo) -> keystore::KeyInfo {
    keystore::KeyInfo {
        algorithm: algorithm_to_wit(info.algorithm),
        spki_der: info.spki_der,
        jwk: info.jwk,
        jwk_thumbprint: info.jwk_thumbprint,
        jws_algorithm: info.jws_algorithm,
    }
}

fn keystore_error(err: KeystoreError) -> keystore::KeystoreError {
    match err {
        KeystoreError::NotFound(label) => keystore::KeystoreError::NotFound(label),
        KeystoreError::AlreadyExists(label) => keystore::KeystoreError::AlreadyExists(label),
        KeystoreError::InvalidLabel(label) => keystore::KeystoreError::InvalidLabel(label),
        KeystoreError::MessageTooLarge(limit) => keystore::KeystoreError::MessageTooLarge(limit),
        KeystoreError::QuotaExceeded(limit) => keystore::KeystoreError::QuotaExceeded(limit),
        KeystoreError::Unavailable(message) => keystore::KeystoreError::Unavailable(message),
    }
}

type KeyResult<T> = wasmtime::Result<Result<T, keystore::KeystoreError>>;

impl keystore::Host for CallState {
    async fn generate(&mut self, label: String, algorithm: wit_types::KeyAlgorithm) -> KeyResult<keystore::KeyInfo> {
        let generated = self.keystore.generate(&self.scope, &label, algorithm_from_wit(algorithm)).await;
        Ok(generated.map(key_info).map_err(keystore_error))
    }

    async fn public_key(&mut self, label: String) -> KeyResult<keystore::KeyInfo> {
        Ok(self.keystore.public_key(&self.scope, &label).await.map(key_info).map_err(keystore_error))
    }

    async fn labels(&mut self) -> KeyResult<Vec<String>> {
        Ok(self.keystore.labels(&self.scope).await.map_err(keystore_error))
    }

    async fn sign(&mut self, label: String, message: Vec<u8>) -> KeyResult<Vec<u8>> {
        Ok(self.keystore.sign(&self.scope, &label, &message).await.map_err(keystore_error))
    }

    async fn delete(&mut self, label: String) -> KeyResult<()> {
        Ok(self.keystore.delete(&self.scope, &label).await.map_err(keystore_error))
    }
}

impl solver::Host for CallState {
    async fn supported(&mut self) -> wasmtime::Result<Vec<solver::ChallengeType>> {
        Ok(if self.http01.is_some() { vec![solver::ChallengeType::Http01] } else { Vec::new() })
    }

    async fn present(
        &mut self,
        challenge: solver::Challenge,
    ) -> wasmtime::Result<Result<solver::Presented, solver::SolverError>> {
        let (solver::Challenge::Http01(http01), Some((answers, clock))) = (&challenge, &self.http01) else {
            return Ok(Err(unsupported(&challenge)));
        };
        let answer = Http01Answer {
            domain: http01.domain.clone(),
            token: http01.token.clone(),
            key_authorization: http01.key_authorization.clone(),
        };
        let now_ms = clock.now().timestamp_millis();
        Ok(challenges::present(answers.as_ref(), &self.scope, &answer, now_ms)
            .await
            .map(|()| solver::Presented { settle_seconds: 0 })
            .map_err(solver_error))
    }

    async fn cleanup(&mut self, challenge: solver::Challenge) -> wasmtime::Result<Result<(), solver::SolverError>> {
        let (solver::Challenge::Http01(http01), Some((answers, _))) = (&challenge, &self.http01) else {
            return Ok(Err(unsupported(&challenge)));
        };
        Ok(answers
            .cleanup(&self.scope, &http01.token)
            .await
            .map_err(|err| solver::SolverError::Failed(err.to_string())))
    }
}

fn solver_error(err: ChallengeError) -> solver::SolverError {
    match err {
        ChallengeError::Invalid(message) => solver::SolverError::Invalid(message),
        ChallengeError::QuotaExceeded(limit) => solver::SolverError::QuotaExceeded(limit),
        other => solver::SolverError::Failed(other.to_string()),
    }
}

fn unsupported(challenge: &solver::Challenge) -> solver::SolverError {
    let kind = match challenge {
        solver::Challenge::Http01(_) => {
            "HTTP-01: no challenge listener is configured on this host (TRELLIS_ACME_HTTP01_LISTEN)"
        }
        solver::Challenge::Dns01(_) => "DNS-01: this host has no DNS provider implementation",
        solver::Challenge::TlsAlpn01(_) => "TLS-ALPN-01: this host offers no ALPN responder",
    };
    solver::SolverError::Unsupported(kind.to_owned())
}

/// No record is an internal CA yet, so every `pki-core` call gets the answer the contract gives
/// a call serving another kind of record.
fn no_internal_ca<T>() -> wasmtime::Result<Result<T, pki::PkiError>> {
    Ok(Err(pki::PkiError::Unavailable("this record is not an internal CA".into())))
}

impl pki::Host for CallState {
    async fn authority(&mut self) -> wasmtime::Result<Result<Option<pki::AuthorityInfo>, pki::PkiError>> {
        no_internal_ca()
    }

    async fn create_authority(
        &mut self,
        _spec: pki::AuthoritySpec,
    ) -> wasmtime::Result<Result<pki::AuthorityInfo, pki::PkiError>> {
        no_internal_ca()
    }

    async fn sign_csr(
        &mut self,
        _csr_der: Vec<u8>,
        _profile: wit_types::CertificateProfile,
    ) -> wasmtime::Result<Result<pki::Signed, pki::PkiError>> {
        no_internal_ca()
    }

    async fn ca_chain(&mut self) -> wasmtime::Result<Result<Vec<Vec<u8>>, pki::PkiError>> {
        no_internal_ca()
    }

    async fn revoke(
        &mut self,
        _serial_number: String,
        _reason: wit_types::RevocationReason,
    ) -> wasmtime::Result<Result<(), pki::PkiError>> {
        no_internal_ca()
    }

    async fn status(&mut self, _serial_number: String) -> wasmtime::Result<Result<pki::SerialStatus, pki::PkiError>> {
        no_internal_ca()
    }

    async fn list_issued(
        &mut self,
        _page: wit_types::PageRequest,
    ) -> wasmtime::Result<Result<pki::IssuedPage, pki::PkiError>> {
        no_internal_ca()
    }
}
