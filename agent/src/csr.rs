//! A PKCS#10 request whose key lives in the TPM. rcgen builds the request and asks a remote key
//! pair to sign it; the TPM context cannot be shared with rcgen's `Send + Sync` key pair, so the
//! request is built twice: once to learn the bytes to sign, once with the TPM's signature
//! (the to-be-signed bytes do not depend on the signature, so both passes agree).

use std::sync::{Arc, Mutex};

use anyhow::{anyhow, bail, Result};
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, RemoteKeyPair, PKCS_ECDSA_P256_SHA256};

struct TpmKey {
    public: Vec<u8>,
    signature: Option<Vec<u8>>,
    seen: Arc<Mutex<Option<Vec<u8>>>>,
}

impl RemoteKeyPair for TpmKey {
    fn public_key(&self) -> &[u8] {
        &self.public
    }

    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, rcgen::Error> {
        if let Ok(mut seen) = self.seen.lock() {
            *seen = Some(msg.to_vec());
        }
        self.signature.clone().ok_or(rcgen::Error::RemoteKeyError)
    }

    fn algorithm(&self) -> &'static rcgen::SignatureAlgorithm {
        &PKCS_ECDSA_P256_SHA256
    }
}

/// A CSR (PEM) for `common_name` and `dns` names (the common name alone when none), for the
/// P-256 key `public_point` (04 ‖ x ‖ y), signed by `sign` (ECDSA-SHA256 over the bytes
/// given, DER signature).
pub fn build(
    common_name: &str,
    dns: &[String],
    public_point: &[u8],
    sign: impl FnOnce(&[u8]) -> Result<Vec<u8>>,
) -> Result<String> {
    let names = if dns.is_empty() { vec![common_name.to_owned()] } else { dns.to_vec() };
    let mut params = CertificateParams::new(names)?;
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, common_name);
    params.distinguished_name = name;
    let seen = Arc::new(Mutex::new(None));
    let pass = |signature: Option<Vec<u8>>| {
        KeyPair::from_remote(Box::new(TpmKey { public: public_point.to_vec(), signature, seen: seen.clone() }))
    };
    match params.serialize_request(&pass(None)?) {
        Err(rcgen::Error::RemoteKeyError) => {}
        Err(err) => return Err(err.into()),
        Ok(_) => bail!("rcgen signed without the TPM"),
    }
    let tbs = take(&seen).ok_or_else(|| anyhow!("rcgen did not ask for a signature"))?;
    let csr = params.serialize_request(&pass(Some(sign(&tbs)?))?)?;
    if take(&seen).as_deref() != Some(tbs.as_slice()) {
        bail!("the request changed between the two passes");
    }
    Ok(csr.pem()?)
}

fn take(seen: &Mutex<Option<Vec<u8>>>) -> Option<Vec<u8>> {
    seen.lock().ok()?.take()
}
