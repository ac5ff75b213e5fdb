//! Certificate revocation lists (RFC 5280 §5) signed by an internal CA.

use rcgen::{CertificateRevocationListParams, RevokedCertParams, SerialNumber};

use crate::authority::Signer;
use crate::vocabulary::RevocationReason;
use crate::{time, PkiError};

/// One revoked certificate of the CA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevokedEntry {
    /// Lowercase hex, as stored.
    pub serial_number: String,
    /// Seconds since the epoch.
    pub revoked_at: i64,
    pub reason: RevocationReason,
}

/// A DER CRL of `entries`, numbered `number` (monotonic per CA), valid from `this_update` until
/// `next_update` (seconds since the epoch).
pub fn sign_crl(
    authority: &Signer,
    entries: &[RevokedEntry],
    number: u64,
    this_update: i64,
    next_update: i64,
) -> Result<Vec<u8>, PkiError> {
    if next_update <= this_update {
        return Err(PkiError::InvalidProfile("nextUpdate must follow thisUpdate".into()));
    }
    let revoked_certs = entries
        .iter()
        .map(|entry| {
            let serial = hex::decode(&entry.serial_number)
                .map_err(|_| PkiError::InvalidProfile(format!("serial `{}` is not hex", entry.serial_number)))?;
            Ok(RevokedCertParams {
                serial_number: SerialNumber::from_slice(&serial),
                revocation_time: time(entry.revoked_at)?,
                // RFC 5280 §5.3.1: the reason code is omitted rather than written as unspecified.
                reason_code: reason(entry.reason),
                invalidity_date: None,
            })
        })
        .collect::<Result<Vec<_>, PkiError>>()?;
    let params = CertificateRevocationListParams {
        this_update: time(this_update)?,
        next_update: time(next_update)?,
        crl_number: SerialNumber::from(number),
        issuing_distribution_point: None,
        revoked_certs,
        // The CA certificate's own subjectKeyIdentifier (an imported CA may have derived it
        // another way than SHA-256), so clients match the CRL to its issuer.
        key_identifier_method: authority.issuer.params().key_identifier_method.clone(),
    };
    let crl = crate::guarded("CRL", || params.signed_by(&authority.issuer, &authority.key))?;
    Ok(crl.der().to_vec())
}

pub(super) fn reason(reason: RevocationReason) -> Option<rcgen::RevocationReason> {
    use rcgen::RevocationReason as R;
    Some(match reason {
        RevocationReason::Unspecified => return None,
        RevocationReason::KeyCompromise => R::KeyCompromise,
        RevocationReason::CaCompromise => R::CaCompromise,
        RevocationReason::AffiliationChanged => R::AffiliationChanged,
        RevocationReason::Superseded => R::Superseded,
        RevocationReason::CessationOfOperation => R::CessationOfOperation,
        RevocationReason::CertificateHold => R::CertificateHold,
        RevocationReason::RemoveFromCrl => R::RemoveFromCrl,
        RevocationReason::PrivilegeWithdrawn => R::PrivilegeWithdrawn,
        RevocationReason::AaCompromise => R::AaCompromise,
    })
}
