//! The verifier's pure-Rust TPM2_MakeCredential, for `tests/make-vectors.sh`: writes the
//! challenge in tpm2-tools' credential file format (magic 0xBADCC0DE, version 1,
//! TPM2B_ID_OBJECT, TPM2B_ENCRYPTED_SECRET) so that a real `tpm2_activatecredential` on swtpm
//! can recover the secret.
//!
//! Usage: make_credential EK_TPMT_PUBLIC AK_NAME SECRET ENTROPY OUT

use std::error::Error;

use trellis_plugin_tpm2_verifier::credential::make_credential;
use trellis_plugin_tpm2_verifier::tpm::TpmPublic;

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [ek, name, secret, entropy, out] = args.as_slice() else {
        return Err("usage: make_credential EK_TPMT_PUBLIC AK_NAME SECRET ENTROPY OUT".into());
    };
    let ek = TpmPublic::parse(&std::fs::read(ek)?).map_err(|e| format!("EK public area: {e}"))?;
    let credential = make_credential(&ek, &std::fs::read(name)?, &std::fs::read(secret)?, &std::fs::read(entropy)?)
        .map_err(|e| format!("{e:?}"))?;
    let mut file = Vec::new();
    file.extend(0xbadc_c0de_u32.to_be_bytes());
    file.extend(1u32.to_be_bytes());
    file.extend(u16::try_from(credential.credential_blob.len())?.to_be_bytes());
    file.extend(&credential.credential_blob);
    file.extend(u16::try_from(credential.encrypted_secret.len())?.to_be_bytes());
    file.extend(&credential.encrypted_secret);
    std::fs::write(out, file)?;
    Ok(())
}
