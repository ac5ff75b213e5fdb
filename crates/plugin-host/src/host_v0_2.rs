//! The host imports of contract 0.2: `types`, `logging`, `state` and `keystore` scoped to the
//! call's record, `challenge-solver` and `pki-core`.
//!
//! `challenge-solver` presents HTTP-01 answers to the host's challenge listener when one is
//! configured (`TRELLIS_ACME_HTTP01_LISTEN`) and DNS-01 answers through the DNS provider the
//! challenge's settings name ([`crate::dns01`]); TLS-ALPN-01 is `unsupported` until an ALPN
//! responder exists. `pki-core` reaches the host's internal PKI only
//! for calls the domain granted it (internal CA records); `sign-csr` only inside an issuance
//! call, for its own CSR and profile, once.

use trellis_core::plugins::challenges::{self, ChallengeError, Http01Answer};
use trellis_core::plugins::{
    AuthorityInfo, AuthoritySpec, KeyAlgorithm, KeystoreError, NewAuthoritySpec, PkiCoreError, PublicKeyInfo,
    RevocationInfo, SerialStatus,
};

use crate::bindings::v0_2::{challenge_solver as solver, keystore, logging, pki_core as pki, state, wit_types};
use crate::call::{CallState, MAX_STATE_KEY};
use crate::dns01::{self, ProviderError, ProviderHttp, TxtRecord};
use crate::worlds::v0_2;
use crate::StateError;
use trellis_core::domain_claims;

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

impl CallState {
    /// Outbound HTTP for DNS providers, under this call's egress policy and grant.
    fn provider_http(&self) -> ProviderHttp {
        ProviderHttp { policy: self.hooks.policy.clone(), call: self.hooks.call.clone() }
    }
}

/// Publishes (`present`) or removes a DNS-01 TXT record through the settings' provider.
async fn solve_dns01(
    http: ProviderHttp,
    dns01: &solver::Dns01Challenge,
    present: bool,
) -> Result<u32, solver::SolverError> {
    let Some(settings) = dns01.provider.as_deref() else {
        return Err(solver::SolverError::Unsupported(
            "DNS-01: no DNS provider settings were given (set the record's dnsProvider); this host has no workspace default".into(),
        ));
    };
    let (provider, settings) = dns01::provider_for(settings).map_err(dns_error)?;
    let record = TxtRecord::for_challenge(&dns01.domain, &dns01.value).map_err(solver::SolverError::Invalid)?;
    if present {
        provider.present(&http, &settings, &record).await.map_err(dns_error)
    } else {
        provider.cleanup(&http, &settings, &record).await.map(|()| 0).map_err(dns_error)
    }
}

fn dns_error(err: ProviderError) -> solver::SolverError {
    match err {
        ProviderError::Invalid(message) => solver::SolverError::Invalid(message),
        ProviderError::Failed(message) => solver::SolverError::Failed(message),
    }
}

impl solver::Host for CallState {
    async fn supported(&mut self) -> wasmtime::Result<Vec<solver::ChallengeType>> {
        let mut types = Vec::new();
        if self.http01.is_some() {
            types.push(solver::ChallengeType::Http01);
        }
        if !dns01::PROVIDERS.is_empty() {
            types.push(solver::ChallengeType::Dns01);
        }
        Ok(types)
    }

    async fn present(
        &mut self,
        challenge: solver::Challenge,
    ) -> wasmtime::Result<Result<solver::Presented, solver::SolverError>> {
        let check = entitlement(self, &challenge);
        if let Err(refused) = check.await {
            return Ok(Err(refused));
        }
        if let solver::Challenge::Dns01(dns01) = &challenge {
            let answered = solve_dns01(self.provider_http(), dns01, true).await;
            return Ok(answered.map(|settle_seconds| solver::Presented { settle_seconds }));
        }
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
        if let solver::Challenge::Dns01(dns01) = &challenge {
            return Ok(solve_dns01(self.provider_http(), dns01, false).await.map(|_| ()));
        }
        let (solver::Challenge::Http01(http01), Some((answers, _))) = (&challenge, &self.http01) else {
            return Ok(Err(unsupported(&challenge)));
        };
        Ok(answers
            .cleanup(&self.scope, &http01.token)
            .await
            .map_err(|err| solver::SolverError::Failed(err.to_string())))
    }
}

/// Whether the call's workspace holds a verified claim covering the challenge's name: the
/// host's answers are shared by every tenant, so a workspace may not have one presented for a
/// name it does not own (another tenant's, validated through our listener or DNS). What it
/// needs is taken from the call state before the future, which must be `Send`.
fn entitlement(
    state: &CallState,
    challenge: &solver::Challenge,
) -> impl std::future::Future<Output = Result<(), solver::SolverError>> + Send + 'static {
    let name = match challenge {
        solver::Challenge::Http01(c) => Some(c.domain.clone()),
        solver::Challenge::Dns01(c) => Some(c.domain.clone()),
        solver::Challenge::TlsAlpn01(_) => None,
    };
    let claims = state.domain_claims.clone();
    let workspace = state.scope.workspace_id.clone();
    async move {
        let Some(name) = name else { return Ok(()) };
        let Some(claims) = claims else {
            return Err(solver::SolverError::Unsupported(
                "this host has no domain claims to check names against".into(),
            ));
        };
        match domain_claims::entitled(claims.as_ref(), &workspace, &name).await {
            Ok(()) => Ok(()),
            Err(err @ domain_claims::EntitlementError::NotClaimed { .. }) => {
                tracing::warn!(target: "trellis::security", workspace = %workspace, name = %name,
                    code = "domain_not_claimed", "refused a challenge answer for a name the workspace has not claimed");
                Err(solver::SolverError::Invalid(err.to_string()))
            }
            Err(err) => Err(solver::SolverError::Failed(err.to_string())),
        }
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
        solver::Challenge::Dns01(_) => "DNS-01: no DNS provider settings were given",
        solver::Challenge::TlsAlpn01(_) => "TLS-ALPN-01: this host offers no ALPN responder",
    };
    solver::SolverError::Unsupported(kind.to_owned())
}

fn pki_error(err: PkiCoreError) -> pki::PkiError {
    match err {
        PkiCoreError::InvalidCsr(m) => pki::PkiError::InvalidCsr(m),
        PkiCoreError::InvalidRequest(m) => pki::PkiError::InvalidRequest(m),
        PkiCoreError::NoAuthority => pki::PkiError::NoAuthority,
        PkiCoreError::AuthorityExists(info) => pki::PkiError::AuthorityExists(authority_info(*info)),
        PkiCoreError::Unavailable(m) => pki::PkiError::Unavailable(m),
        PkiCoreError::UnknownSerial(m) => pki::PkiError::UnknownSerial(m),
    }
}

fn authority_info(info: AuthorityInfo) -> pki::AuthorityInfo {
    pki::AuthorityInfo {
        certificate_der: info.certificate_der,
        subject: info.subject,
        issuer: info.issuer,
        not_before: info.not_before,
        not_after: info.not_after,
        key_algorithm: info.key_algorithm.map(algorithm_to_wit),
        parent_record_id: info.parent_record_id,
    }
}

fn new_authority(spec: pki::NewAuthority) -> NewAuthoritySpec {
    NewAuthoritySpec {
        subject: v0_2::subject_from_wit(spec.subject),
        key_algorithm: algorithm_from_wit(spec.key_algorithm),
        validity_days: spec.validity_days,
        path_length: spec.path_length,
    }
}

fn revocation_info(info: RevocationInfo) -> wit_types::RevocationInfo {
    wit_types::RevocationInfo {
        revoked_at: info.revoked_at.unwrap_or_default(),
        reason: v0_2::reason_to_wit(info.reason),
    }
}

/// The answer every `pki-core` function gives a call that serves no internal CA record.
fn not_internal<T>() -> wasmtime::Result<Result<T, pki::PkiError>> {
    Ok(Err(pki::PkiError::Unavailable("this record is not an internal CA".into())))
}

/// The grant of this call and the PKI it reaches, or the `unavailable` answer.
macro_rules! granted {
    ($state:expr) => {
        match &$state.pki {
            Some(access) => (access.core.clone(), access.grant.clone()),
            None => return not_internal(),
        }
    };
}

impl pki::Host for CallState {
    async fn authority(&mut self) -> wasmtime::Result<Result<Option<pki::AuthorityInfo>, pki::PkiError>> {
        let (core, grant) = granted!(self);
        Ok(core.authority(&grant).await.map(|info| info.map(authority_info)).map_err(pki_error))
    }

    async fn create_authority(
        &mut self,
        spec: pki::AuthoritySpec,
    ) -> wasmtime::Result<Result<pki::AuthorityInfo, pki::PkiError>> {
        let (core, grant) = granted!(self);
        let spec = match spec {
            pki::AuthoritySpec::Root(root) => AuthoritySpec::Root(new_authority(root)),
            pki::AuthoritySpec::Intermediate(i) => AuthoritySpec::Intermediate {
                parent_record_id: i.parent_record_id,
                authority: new_authority(i.authority),
            },
            pki::AuthoritySpec::Imported(i) => {
                AuthoritySpec::Imported { certificate_pem: i.certificate_pem, private_key_field: i.private_key_field }
            }
        };
        Ok(core.create_authority(&grant, spec).await.map(authority_info).map_err(pki_error))
    }

    async fn sign_csr(
        &mut self,
        csr_der: Vec<u8>,
        profile: wit_types::CertificateProfile,
    ) -> wasmtime::Result<Result<pki::Signed, pki::PkiError>> {
        let (core, grant) = granted!(self);
        let profile = v0_2::profile_from_wit(profile);
        let Some(access) = self.pki.as_mut() else { return not_internal() };
        // Only an issuance call signs, only its own CSR, within its profile, and only once.
        let Some(permit) = grant.sign.as_ref() else {
            return Ok(Err(pki::PkiError::Unavailable("sign-csr is allowed only during issue or poll-issue".into())));
        };
        if access.signed {
            return Ok(Err(pki::PkiError::InvalidRequest("this call already signed its certificate".into())));
        }
        if let Err(why) = permit.allows(&csr_der, &profile) {
            return Ok(Err(pki::PkiError::InvalidRequest(why)));
        }
        access.signed = true;
        Ok(core
            .sign_csr(&grant, &csr_der, &profile)
            .await
            .map(|signed| pki::Signed {
                certificate_der: signed.certificate_der,
                chain_der: signed.chain_der,
                serial_number: signed.serial_number,
            })
            .map_err(pki_error))
    }

    async fn ca_chain(&mut self) -> wasmtime::Result<Result<Vec<Vec<u8>>, pki::PkiError>> {
        let (core, grant) = granted!(self);
        Ok(core.ca_chain(&grant).await.map_err(pki_error))
    }

    async fn revoke(
        &mut self,
        serial_number: String,
        reason: wit_types::RevocationReason,
    ) -> wasmtime::Result<Result<(), pki::PkiError>> {
        let (core, grant) = granted!(self);
        Ok(core.revoke(&grant, &serial_number, v0_2::reason_from_wit(reason)).await.map_err(pki_error))
    }

    async fn status(&mut self, serial_number: String) -> wasmtime::Result<Result<pki::SerialStatus, pki::PkiError>> {
        let (core, grant) = granted!(self);
        Ok(core
            .status(&grant, &serial_number)
            .await
            .map(|status| match status {
                SerialStatus::Good => pki::SerialStatus::Good,
                SerialStatus::Revoked(info) => pki::SerialStatus::Revoked(revocation_info(info)),
                SerialStatus::Unknown => pki::SerialStatus::Unknown,
            })
            .map_err(pki_error))
    }

    async fn list_issued(
        &mut self,
        page: wit_types::PageRequest,
    ) -> wasmtime::Result<Result<pki::IssuedPage, pki::PkiError>> {
        let (core, grant) = granted!(self);
        Ok(core
            .list_issued(&grant, page.cursor, page.limit)
            .await
            .map(|page| pki::IssuedPage {
                items: page
                    .items
                    .into_iter()
                    .map(|item| pki::IssuedEntry {
                        certificate_der: item.certificate_der,
                        serial_number: item.serial_number,
                        revocation: item.revocation.map(revocation_info),
                    })
                    .collect(),
                next_cursor: page.next_cursor,
            })
            .map_err(pki_error))
    }
}
