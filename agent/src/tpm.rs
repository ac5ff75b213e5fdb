//! The TPM side, over tss-esapi (libtss2's ESAPI): the EK and its certificate, the AK under the
//! EK, credential activation, a CSR key under the owner hierarchy, TPM2_Quote and TPM2_Certify.
//!
//! A TPM without a resource manager (swtpm, /dev/tpm0) has three transient object slots, so
//! every object is flushed as soon as the next step no longer needs it.

use std::collections::BTreeMap;
use std::str::FromStr;

use anyhow::{anyhow, bail, Context as _, Result};
use sha2::{Digest as _, Sha256};
use tss_esapi::abstraction::{ak, ek, pcr, AsymmetricAlgorithmSelection};
use tss_esapi::attributes::{ObjectAttributesBuilder, SessionAttributesBuilder};
use tss_esapi::constants::tss::{TPM2_RH_NULL, TPM2_ST_HASHCHECK};
use tss_esapi::constants::SessionType;
use tss_esapi::handles::{KeyHandle, ObjectHandle, PersistentTpmHandle, TpmHandle};
use tss_esapi::interface_types::algorithm::{HashingAlgorithm, PublicAlgorithm, SignatureSchemeAlgorithm};
use tss_esapi::interface_types::ecc::EccCurve;
use tss_esapi::interface_types::key_bits::RsaKeyBits;
use tss_esapi::interface_types::resource_handles::Hierarchy;
use tss_esapi::interface_types::session_handles::{AuthSession, PolicySession};
use tss_esapi::structures::{
    Attest, AttestInfo, Data, Digest, EccPoint, EccScheme, EncryptedSecret, HashScheme, HashcheckTicket, IdObject,
    MaxBuffer, PcrSelectionListBuilder, PcrSlot, Private, Public, PublicBuilder, PublicEccParametersBuilder, Signature,
    SignatureScheme, SymmetricDefinition, SymmetricDefinitionObject,
};
use tss_esapi::traits::Marshall;
use tss_esapi::tss2_esys::TPMT_TK_HASHCHECK;
use tss_esapi::{Context, TctiNameConf};

/// `swtpm:host=127.0.0.1,port=2321`, `mssim:…`, `device:/dev/tpmrm0`, or a device path.
pub fn tcti(spec: &str) -> Result<TctiNameConf> {
    let spec = if spec.starts_with('/') { format!("device:{spec}") } else { spec.to_owned() };
    TctiNameConf::from_str(&spec).with_context(|| format!("`{spec}` is not a TCTI (swtpm:port=…, device:/dev/tpmrm0)"))
}

/// A loaded key's public and private parts as the TPM returned them.
pub struct KeyBlobs {
    pub public: Public,
    pub private: Private,
}

impl KeyBlobs {
    /// TPM2B_PUBLIC (u16 size ‖ TPMT_PUBLIC), the file format of tpm2-tools.
    pub fn public_file(&self) -> Result<Vec<u8>> {
        tpm2b(&self.public.marshall()?)
    }

    /// TPM2B_PRIVATE (u16 size ‖ the TPM's encrypted blob).
    pub fn private_file(&self) -> Result<Vec<u8>> {
        tpm2b(self.private.value())
    }

    pub fn from_files(public: &[u8], private: &[u8]) -> Result<KeyBlobs> {
        use tss_esapi::traits::UnMarshall;
        let public = Public::unmarshall(untpm2b(public)?).context("not a TPM2B_PUBLIC")?;
        let private = Private::try_from(untpm2b(private)?.to_vec()).context("not a TPM2B_PRIVATE")?;
        Ok(KeyBlobs { public, private })
    }
}

fn tpm2b(body: &[u8]) -> Result<Vec<u8>> {
    let size = u16::try_from(body.len()).map_err(|_| anyhow!("TPM structure too large"))?;
    Ok([&size.to_be_bytes()[..], body].concat())
}

fn untpm2b(file: &[u8]) -> Result<&[u8]> {
    match file {
        [hi, lo, body @ ..] if usize::from(u16::from_be_bytes([*hi, *lo])) == body.len() => Ok(body),
        _ => bail!("not a TPM2B structure (size prefix does not match)"),
    }
}

/// One PCR selection, e.g. `sha256:0,1,2,3,4,7+sha1:7`.
#[derive(Debug, Clone)]
pub struct Selection(pub Vec<(HashingAlgorithm, Vec<u32>)>);

impl FromStr for Selection {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> Result<Self> {
        let mut banks = Vec::new();
        for part in text.split('+') {
            let (bank, indexes) =
                part.split_once(':').ok_or_else(|| anyhow!("`{part}`: expected BANK:INDEX,… (sha256:0,1,7)"))?;
            let alg = match bank.to_ascii_lowercase().as_str() {
                "sha1" => HashingAlgorithm::Sha1,
                "sha256" => HashingAlgorithm::Sha256,
                "sha384" => HashingAlgorithm::Sha384,
                "sha512" => HashingAlgorithm::Sha512,
                other => bail!("unknown PCR bank `{other}`"),
            };
            let mut indexes = indexes
                .split(',')
                .map(|i| i.trim().parse::<u32>().ok().filter(|i| *i <= 23))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| anyhow!("`{part}`: PCR indexes are 0 to 23"))?;
            indexes.sort_unstable();
            indexes.dedup();
            banks.push((alg, indexes));
        }
        Ok(Selection(banks))
    }
}

pub fn bank_name(alg: HashingAlgorithm) -> &'static str {
    match alg {
        HashingAlgorithm::Sha1 => "SHA1",
        HashingAlgorithm::Sha384 => "SHA384",
        HashingAlgorithm::Sha512 => "SHA512",
        _ => "SHA256",
    }
}

/// TPM2_Quote's output and the values it covers (bank → index → digest).
pub struct Quote {
    pub attest: Vec<u8>,
    pub signature: Vec<u8>,
    pub pcrs: BTreeMap<&'static str, BTreeMap<String, String>>,
}

/// TPM2_Certify's output.
pub struct Certification {
    pub attest: Vec<u8>,
    pub signature: Vec<u8>,
}

pub struct Tpm {
    ctx: Context,
}

/// Where TCG's provisioning guidance (and swtpm_setup) persists the RSA EK.
const PERSISTENT_EK: u32 = 0x8101_0001;
const EK_ALG: AsymmetricAlgorithmSelection = AsymmetricAlgorithmSelection::Rsa(RsaKeyBits::Rsa2048);

impl Tpm {
    pub fn open(tcti_spec: &str) -> Result<Tpm> {
        let ctx = Context::new(tcti(tcti_spec)?).with_context(|| format!("cannot open the TPM at `{tcti_spec}`"))?;
        Ok(Tpm { ctx })
    }

    /// The EK certificate (DER) from its NV index (RSA-2048, 0x01c00002).
    pub fn ek_certificate(&mut self) -> Result<Vec<u8>> {
        let der = ek::retrieve_ek_pubcert(&mut self.ctx, EK_ALG)
            .context("no EK certificate in NV index 0x01c00002 (RSA-2048)")?;
        // Some vendors pad the NV index (0xff) after the DER; send the certificate only.
        Ok(der_prefix(&der).unwrap_or(&der).to_vec())
    }

    /// The RSA EK: the one persisted at 0x81010001 (TCG's EK handle; the key the EK certificate
    /// certifies) when there is one, else created from the TCG default template (the same key:
    /// primary keys are derived from the hierarchy's seed). The flag says whether it must be
    /// flushed after use.
    fn ek(&mut self) -> Result<(KeyHandle, bool)> {
        let persistent = PersistentTpmHandle::new(PERSISTENT_EK).map(TpmHandle::Persistent);
        if let Ok(handle) = persistent.and_then(|h| self.ctx.execute_without_session(|c| c.tr_from_tpm_public(h))) {
            return Ok((KeyHandle::from(handle), false));
        }
        let handle = ek::create_ek_object_2(&mut self.ctx, EK_ALG, None)
            .context("cannot create the EK (TCG default template)")?;
        Ok((handle, true))
    }

    fn release(&mut self, (handle, transient): (KeyHandle, bool)) -> Result<()> {
        if transient {
            self.ctx.flush_context(handle.into())?;
        }
        Ok(())
    }

    /// The EK's TPMT_PUBLIC.
    pub fn ek_public(&mut self) -> Result<Vec<u8>> {
        let ek = self.ek()?;
        let public = self.ctx.read_public(ek.0).map(|(public, _, _)| public);
        self.release(ek)?;
        Ok(public?.marshall()?)
    }

    /// A new AK under the EK: restricted RSASSA-SHA256 signing key, fixedTPM, fixedParent,
    /// sensitiveDataOrigin (the endorsement hierarchy keeps resetCount/restartCount readable).
    pub fn create_ak(&mut self) -> Result<KeyBlobs> {
        let ek = self.ek()?;
        let created =
            ak::create_ak(&mut self.ctx, ek.0, HashingAlgorithm::Sha256, SignatureSchemeAlgorithm::RsaSsa, None, None);
        self.release(ek)?;
        let created = created.context("cannot create the AK")?;
        Ok(KeyBlobs { public: created.out_public, private: created.out_private })
    }

    /// Loads the AK under the EK (the EK is flushed again).
    fn load_ak(&mut self, ak_blobs: &KeyBlobs) -> Result<KeyHandle> {
        let ek = self.ek()?;
        let loaded = ak::load_ak(&mut self.ctx, ek.0, None, ak_blobs.private.clone(), ak_blobs.public.clone());
        self.release(ek)?;
        loaded.context("cannot load the AK under the EK (was it created on this TPM?)")
    }

    /// TPM2_ActivateCredential: recovers the secret the service wrapped for this EK and AK Name.
    pub fn activate(
        &mut self,
        ak_blobs: &KeyBlobs,
        credential_blob: &[u8],
        encrypted_secret: &[u8],
    ) -> Result<Vec<u8>> {
        let ek = self.ek()?;
        let loaded = ak::load_ak(&mut self.ctx, ek.0, None, ak_blobs.private.clone(), ak_blobs.public.clone());
        let result = loaded.and_then(|ak| {
            let out = self.activate_with(ak, ek.0, credential_blob, encrypted_secret);
            self.ctx.flush_context(ak.into())?;
            out
        });
        self.release(ek)?;
        Ok(result.context("TPM2_ActivateCredential refused the challenge")?.value().to_vec())
    }

    fn activate_with(
        &mut self,
        ak: KeyHandle,
        ek: KeyHandle,
        credential_blob: &[u8],
        encrypted_secret: &[u8],
    ) -> tss_esapi::Result<Digest> {
        // The AK is used with its (empty) auth in an HMAC session; the EK's authPolicy is
        // PolicySecret(TPM_RH_ENDORSEMENT), satisfied in a policy session.
        let (attributes, mask) = SessionAttributesBuilder::new().with_decrypt(true).with_encrypt(true).build();
        let hmac = self.session(SessionType::Hmac)?;
        let policy = self.session(SessionType::Policy)?;
        // Only one session of a command may encrypt parameters.
        self.ctx.tr_sess_set_attributes(hmac, attributes, mask)?;
        let out = (|| {
            let _ = self.ctx.execute_with_session(Some(hmac), |c| {
                c.policy_secret(
                    PolicySession::try_from(policy)?,
                    tss_esapi::handles::AuthHandle::Endorsement,
                    Default::default(),
                    Default::default(),
                    Default::default(),
                    None,
                )
            })?;
            self.ctx.execute_with_sessions((Some(hmac), Some(policy), None), |c| {
                c.activate_credential(
                    ak,
                    ek,
                    IdObject::try_from(credential_blob.to_vec())?,
                    EncryptedSecret::try_from(encrypted_secret.to_vec())?,
                )
            })
        })();
        for session in [hmac, policy] {
            let _ = self.ctx.flush_context(tss_esapi::handles::SessionHandle::from(session).into());
        }
        out
    }

    fn session(&mut self, kind: SessionType) -> tss_esapi::Result<AuthSession> {
        self.ctx
            .start_auth_session(None, None, None, kind, SymmetricDefinition::AES_128_CFB, HashingAlgorithm::Sha256)?
            .ok_or(tss_esapi::Error::WrapperError(tss_esapi::WrapperErrorKind::WrongValueFromTpm))
    }

    /// The owner-hierarchy storage key the CSR keys live under: an ECC P-256 primary from a
    /// fixed template, so the same TPM always derives the same key and key blobs reload.
    fn storage_root(&mut self) -> Result<KeyHandle> {
        let attributes = ObjectAttributesBuilder::new()
            .with_fixed_tpm(true)
            .with_fixed_parent(true)
            .with_sensitive_data_origin(true)
            .with_user_with_auth(true)
            .with_no_da(true)
            .with_restricted(true)
            .with_decrypt(true)
            .build()?;
        let template = PublicBuilder::new()
            .with_public_algorithm(PublicAlgorithm::Ecc)
            .with_name_hashing_algorithm(HashingAlgorithm::Sha256)
            .with_object_attributes(attributes)
            .with_ecc_parameters(
                PublicEccParametersBuilder::new_restricted_decryption_key(
                    SymmetricDefinitionObject::AES_128_CFB,
                    EccCurve::NistP256,
                )
                .build()?,
            )
            .with_ecc_unique_identifier(EccPoint::default())
            .build()?;
        let primary = self
            .ctx
            .execute_with_nullauth_session(|c| c.create_primary(Hierarchy::Owner, template, None, None, None, None))
            .context("cannot create the owner storage key")?;
        Ok(primary.key_handle)
    }

    /// A new ECC P-256 ECDSA-SHA256 signing key under the storage root. `attributes` is
    /// normally [`CSR_KEY_ATTRIBUTES`]; tests pass weaker ones to check the service refuses them.
    pub fn create_csr_key(&mut self, attributes: &str) -> Result<KeyBlobs> {
        let attributes = object_attributes(attributes)?;
        let restricted = attributes.restricted();
        let params = PublicEccParametersBuilder::new_unrestricted_signing_key(
            EccScheme::EcDsa(HashScheme::new(HashingAlgorithm::Sha256)),
            EccCurve::NistP256,
        )
        .with_restricted(restricted)
        .build()?;
        let template = PublicBuilder::new()
            .with_public_algorithm(PublicAlgorithm::Ecc)
            .with_name_hashing_algorithm(HashingAlgorithm::Sha256)
            .with_object_attributes(attributes)
            .with_ecc_parameters(params)
            .with_ecc_unique_identifier(EccPoint::default())
            .build()?;
        let srk = self.storage_root()?;
        let created = self.ctx.execute_with_nullauth_session(|c| c.create(srk, template, None, None, None, None));
        self.ctx.flush_context(srk.into())?;
        let created = created.context("cannot create the CSR key")?;
        Ok(KeyBlobs { public: created.out_public, private: created.out_private })
    }

    fn load_csr_key(&mut self, key: &KeyBlobs) -> Result<KeyHandle> {
        let srk = self.storage_root()?;
        let loaded = self.ctx.execute_with_nullauth_session(|c| c.load(srk, key.private.clone(), key.public.clone()));
        self.ctx.flush_context(srk.into())?;
        loaded.context("cannot load the CSR key under the owner storage key")
    }

    /// Signs `message` (a CSR's TBS) with the CSR key: ECDSA over SHA-256, as DER.
    pub fn sign(&mut self, key: &KeyBlobs, message: &[u8]) -> Result<Vec<u8>> {
        let handle = self.load_csr_key(key)?;
        let out = self.sign_with(handle, key, message);
        self.ctx.flush_context(handle.into())?;
        out
    }

    fn sign_with(&mut self, handle: KeyHandle, key: &KeyBlobs, message: &[u8]) -> Result<Vec<u8>> {
        let restricted = key.public.object_attributes().restricted();
        let (digest, ticket) = if restricted {
            // A restricted key signs only digests the TPM hashed itself (and checked do not
            // start with TPM_GENERATED_VALUE).
            let data = MaxBuffer::try_from(message.to_vec()).context("message too long to hash in the TPM")?;
            self.ctx.execute_without_session(|c| c.hash(data, HashingAlgorithm::Sha256, Hierarchy::Owner))?
        } else {
            let ticket = HashcheckTicket::try_from(TPMT_TK_HASHCHECK {
                tag: TPM2_ST_HASHCHECK,
                hierarchy: TPM2_RH_NULL,
                digest: Default::default(),
            })?;
            (Digest::try_from(Sha256::digest(message).to_vec())?, ticket)
        };
        let signature = self
            .ctx
            .execute_with_nullauth_session(|c| c.sign(handle, digest, SignatureScheme::Null, ticket))
            .context("TPM2_Sign failed")?;
        let Signature::EcDsa(ecdsa) = signature else { bail!("the TPM returned a non-ECDSA signature") };
        Ok(ecdsa_der(ecdsa.signature_r().value(), ecdsa.signature_s().value()))
    }

    /// TPM2_Certify of the CSR key and TPM2_Quote of `selection`, both by the AK with `nonce`
    /// as qualifyingData (the AK is loaded once).
    pub fn attest(
        &mut self,
        ak_blobs: &KeyBlobs,
        key: &KeyBlobs,
        nonce: &[u8],
        selection: &Selection,
    ) -> Result<(Certification, Quote)> {
        let ak = self.load_ak(ak_blobs)?;
        let out = self.certify(ak, key, nonce).and_then(|c| Ok((c, self.quote_with(ak, nonce, selection)?)));
        self.ctx.flush_context(ak.into())?;
        out
    }

    /// The PCR values are read before quoting and may change in between; the digest is
    /// recomputed and the pair retried (as rust-keylime does).
    fn quote_with(&mut self, ak: KeyHandle, nonce: &[u8], selection: &Selection) -> Result<Quote> {
        let mut builder = PcrSelectionListBuilder::new();
        for (alg, indexes) in &selection.0 {
            let slots = indexes.iter().map(|i| PcrSlot::try_from(1u32 << i)).collect::<tss_esapi::Result<Vec<_>>>()?;
            builder = builder.with_selection(*alg, &slots);
        }
        let list = builder.build()?;
        for _ in 0..5 {
            let values = pcr::read_all(&mut self.ctx, list.clone()).context("cannot read the PCRs")?;
            let (attest, signature) = self
                .ctx
                .execute_with_nullauth_session(|c| {
                    c.quote(ak, Data::try_from(nonce.to_vec())?, SignatureScheme::Null, list.clone())
                })
                .context("TPM2_Quote failed")?;
            let AttestInfo::Quote { info } = attest.attested() else { bail!("TPM2_Quote returned no quote") };
            let mut concatenated = Vec::new();
            let mut pcrs: BTreeMap<&'static str, BTreeMap<String, String>> = BTreeMap::new();
            for sel in info.pcr_selection().get_selections() {
                let bank = values
                    .pcr_bank(sel.hashing_algorithm())
                    .ok_or_else(|| anyhow!("the TPM has no {:?} PCR bank", sel.hashing_algorithm()))?;
                let mut slots = sel.selected();
                slots.sort_by_key(|s| u32::from(*s));
                for slot in slots {
                    let digest = bank.get_digest(slot).ok_or_else(|| anyhow!("PCR {slot:?} was not read"))?;
                    concatenated.extend_from_slice(digest.value());
                    pcrs.entry(bank_name(sel.hashing_algorithm()))
                        .or_default()
                        .insert(u32::from(slot).trailing_zeros().to_string(), hex::encode(digest.value()));
                }
            }
            if Sha256::digest(&concatenated).as_slice() == info.pcr_digest().value() {
                return Ok(Quote { attest: attest.marshall()?, signature: signature.marshall()?, pcrs });
            }
        }
        bail!("the PCRs kept changing while quoting (5 tries)")
    }

    fn certify(&mut self, ak: KeyHandle, key: &KeyBlobs, nonce: &[u8]) -> Result<Certification> {
        let handle = self.load_csr_key(key)?;
        // Two authorisations: the certified object's and the AK's (both empty passwords).
        let certified = self.ctx.execute_with_sessions(
            (Some(AuthSession::Password), Some(AuthSession::Password), None),
            |c| -> tss_esapi::Result<(Attest, Signature)> {
                c.certify(ObjectHandle::from(handle), ak, Data::try_from(nonce.to_vec())?, SignatureScheme::Null)
            },
        );
        self.ctx.flush_context(handle.into())?;
        let (attest, signature) = certified.context("TPM2_Certify failed")?;
        Ok(Certification { attest: attest.marshall()?, signature: signature.marshall()? })
    }
}

/// The attributes of a CSR key: TPM-resident, never exported, generated inside the TPM.
pub const CSR_KEY_ATTRIBUTES: &str = "fixedtpm|fixedparent|sensitivedataorigin|userwithauth|sign";

fn object_attributes(list: &str) -> Result<tss_esapi::attributes::ObjectAttributes> {
    let mut builder = ObjectAttributesBuilder::new();
    for name in list.split('|').map(str::trim).filter(|n| !n.is_empty()) {
        builder = match name {
            "fixedtpm" => builder.with_fixed_tpm(true),
            "fixedparent" => builder.with_fixed_parent(true),
            "sensitivedataorigin" => builder.with_sensitive_data_origin(true),
            "userwithauth" => builder.with_user_with_auth(true),
            "restricted" => builder.with_restricted(true),
            "sign" => builder.with_sign_encrypt(true),
            "noda" => builder.with_no_da(true),
            other => bail!("unknown object attribute `{other}`"),
        };
    }
    Ok(builder.build()?)
}

/// The uncompressed SEC1 point (04 ‖ x ‖ y) of an ECC P-256 public area.
pub fn ecc_point(public: &Public) -> Result<Vec<u8>> {
    let Public::Ecc { unique, .. } = public else { bail!("not an ECC key") };
    let pad = |v: &[u8]| -> Result<Vec<u8>> {
        if v.len() > 32 {
            bail!("coordinate longer than P-256's");
        }
        Ok([vec![0u8; 32 - v.len()], v.to_vec()].concat())
    };
    Ok([vec![4u8], pad(unique.x().value())?, pad(unique.y().value())?].concat())
}

/// The DER `Ecdsa-Sig-Value` SEQUENCE { r INTEGER, s INTEGER }.
fn ecdsa_der(r: &[u8], s: &[u8]) -> Vec<u8> {
    fn integer(v: &[u8]) -> Vec<u8> {
        let v = match v.iter().position(|b| *b != 0) {
            Some(first) => &v[first..],
            None => &[0u8][..],
        };
        let pad = v.first().is_some_and(|b| b & 0x80 != 0);
        let len = v.len() + usize::from(pad);
        let mut out = vec![0x02, len as u8];
        if pad {
            out.push(0);
        }
        out.extend_from_slice(v);
        out
    }
    let body = [integer(r), integer(s)].concat();
    [vec![0x30, body.len() as u8], body].concat()
}

/// The DER structure at the start of `bytes` (drops NV padding after it).
fn der_prefix(bytes: &[u8]) -> Option<&[u8]> {
    let (&tag, rest) = bytes.split_first()?;
    if tag != 0x30 {
        return None;
    }
    let (&first, rest) = rest.split_first()?;
    let (len, header) = if first < 0x80 {
        (usize::from(first), 2)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 3 || rest.len() < n {
            return None;
        }
        (rest[..n].iter().fold(0usize, |acc, b| (acc << 8) | usize::from(*b)), 2 + n)
    };
    bytes.get(..header + len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ecdsa_signatures_are_minimal_der_integers() {
        let der = ecdsa_der(&[0x00, 0x80, 0x01], &[0x00, 0x00, 0x7f]);
        assert_eq!(der, vec![0x30, 0x08, 0x02, 0x03, 0x00, 0x80, 0x01, 0x02, 0x01, 0x7f]);
    }

    #[test]
    fn selections_parse() -> Result<()> {
        let s: Selection = "sha256:7,0,1+sha1:7".parse()?;
        assert_eq!(s.0, vec![(HashingAlgorithm::Sha256, vec![0, 1, 7]), (HashingAlgorithm::Sha1, vec![7])]);
        assert!("sha256:24".parse::<Selection>().is_err());
        assert!("md5:1".parse::<Selection>().is_err());
        Ok(())
    }

    #[test]
    fn der_padding_is_dropped() {
        assert_eq!(der_prefix(&[0x30, 0x01, 0x05, 0xff, 0xff]), Some(&[0x30, 0x01, 0x05][..]));
        assert_eq!(der_prefix(&[0x30, 0x81, 0x01, 0x05, 0xff]), Some(&[0x30, 0x81, 0x01, 0x05][..]));
        assert_eq!(der_prefix(&[0x31, 0x00]), None);
    }
}
