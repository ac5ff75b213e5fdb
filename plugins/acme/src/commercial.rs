//! Commercial CAs reached through their ACME servers (RFC 8555) with External Account Binding
//! (RFC 8555 §7.3.4). Each is a CA type of its own, so a record says which CA it is (discovery
//! matches issuers by the type's patterns, the default directory is the CA's), but the protocol
//! is the `acme` type's, unchanged.
//!
//! Directory URLs and EAB requirements are the CAs' own documentation (cited per entry; the
//! table in docs/commercial-cas.md repeats them with where a user gets the EAB key). Every one
//! of these CAs binds ACME accounts to a customer account by EAB, so every one requires it: a
//! record without `eabKid` and `eabHmacKey` is refused before anything is sent.

/// One commercial CA served through ACME.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Commercial {
    /// The CA type (`type` of the CA record).
    pub ca_type: &'static str,
    /// The documented production directory, used when the record has neither `url` nor
    /// `directoryUrl`.
    pub directory_url: &'static str,
    /// Whether the CA requires External Account Binding.
    pub eab_required: bool,
    /// Default `issuerPatterns` of records of this type (case-insensitive issuer substrings).
    pub issuer_patterns: &'static [&'static str],
    /// Where the user gets the EAB key id and MAC key (said in refusals).
    pub eab_from: &'static str,
}

/// The commercial CA types, in the order the plugin declares them.
pub const COMMERCIAL: [Commercial; 6] = [
    // DigiCert CertCentral: "ACME External Account Binding" (dev.digicert.com, services API
    // `POST /services/v2/key/acme-eab/tlm`) answers `acme_directory_url`
    // https://acme.digicert.com/v2/acme/directory/ with `ext_act_kid` and `ext_act_hmac`.
    Commercial {
        ca_type: "digicert",
        directory_url: "https://acme.digicert.com/v2/acme/directory/",
        eab_required: true,
        issuer_patterns: &["DigiCert", "Thawte", "GeoTrust", "RapidSSL"],
        eab_from: "CertCentral: Automation > ACME Directory URLs (or the services API's acme-eab key)",
    },
    // Sectigo: the CaaS quick start (docs.sectigo.com/caas/caas-api-guide/quick-start-api.html)
    // registers accounts on https://acme.sectigo.com/v2/DV and answers `eabMACIDb64url` /
    // `eabMACKeyb64url`; Sectigo Certificate Manager accounts get their own endpoint URL and EAB
    // values on SCM's ACME page (docs.sectigo.com/scm/scm-administrator/understanding-acme-endpoints.html).
    Commercial {
        ca_type: "sectigo",
        directory_url: "https://acme.sectigo.com/v2/DV",
        eab_required: true,
        issuer_patterns: &["Sectigo", "COMODO", "USERTrust"],
        eab_from: "Sectigo Certificate Manager's ACME page (or the CaaS PREREGISTER API)",
    },
    // GlobalSign Atlas: "Through External Account Binding (EAB), your ACME client is linked to
    // your Atlas account" (support.globalsign.com/atlas/acme/acme-overview); directory from
    // GlobalSign's ACME configuration guide.
    Commercial {
        ca_type: "globalsign",
        directory_url: "https://emea.acme.atlas.globalsign.com/directory",
        eab_required: true,
        issuer_patterns: &["GlobalSign"],
        eab_from: "the GlobalSign Atlas portal (ACME EAB credentials of the Atlas account)",
    },
    // Entrust Certificate Services' public ACME server; EAB credentials come from the Entrust
    // account (docs.pkiaas.entrust.com/acme/pkiaas/eab/: "Copy the EAB Identifier and EAB HMAC
    // Key").
    Commercial {
        ca_type: "entrust",
        directory_url: "https://acme.entrust.net/acme2/directory",
        eab_required: true,
        issuer_patterns: &["Entrust"],
        eab_from: "the Entrust portal's ACME EAB keys (shown once)",
    },
    // ZeroSSL: https://acme.zerossl.com/v2/DV90, EAB from app.zerossl.com/developer or
    // `POST api.zerossl.com/acme/eab-credentials` (zerossl.com/documentation/acme/generate-eab-credentials).
    Commercial {
        ca_type: "zerossl",
        directory_url: "https://acme.zerossl.com/v2/DV90",
        eab_required: true,
        issuer_patterns: &["ZeroSSL"],
        eab_from: "app.zerossl.com/developer (EAB Credentials for ACME Clients) or the eab-credentials API",
    },
    // Google Trust Services (Certificate Manager's Public CA): `gcloud publicca
    // external-account-keys create` answers `keyId` and `b64MacKey`, to be used within 7 days
    // (cloud.google.com/certificate-manager/docs/public-ca-tutorial).
    Commercial {
        ca_type: "google_trust_services",
        directory_url: "https://dv.acme-v02.api.pki.goog/directory",
        eab_required: true,
        issuer_patterns: &["Google Trust Services"],
        eab_from: "`gcloud publicca external-account-keys create` (keyId, b64MacKey)",
    },
];

/// The commercial CA of `ca_type`, if it is one.
pub fn commercial(ca_type: Option<&str>) -> Option<&'static Commercial> {
    let ca_type = ca_type?;
    COMMERCIAL.iter().find(|c| c.ca_type == ca_type)
}

/// The issuer patterns of every commercial type, written `<type>:<pattern>` so each applies
/// only to records of its type.
pub fn default_issuer_patterns() -> Vec<String> {
    COMMERCIAL.iter().flat_map(|c| c.issuer_patterns.iter().map(move |p| format!("{}:{p}", c.ca_type))).collect()
}
