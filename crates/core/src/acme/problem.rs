//! ACME problem documents (RFC 8555 §6.7, RFC 7807): the error vocabulary of the ACME
//! endpoints. The HTTP status of each type is chosen in one place, `trellis-http`'s
//! `acme_server`.

use serde_json::{json, Value};

use crate::error::Error;

/// The `urn:ietf:params:acme:error:*` types Trellis answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProblemType {
    AccountDoesNotExist,
    AlreadyRevoked,
    /// RFC 9773 §7.4: newOrder's `replaces` names a certificate another live order replaces.
    AlreadyReplaced,
    BadCsr,
    BadNonce,
    BadPublicKey,
    BadRevocationReason,
    BadSignatureAlgorithm,
    Connection,
    Dns,
    ExternalAccountRequired,
    IncorrectResponse,
    InvalidContact,
    InvalidProfile,
    Malformed,
    OrderNotReady,
    RateLimited,
    RejectedIdentifier,
    ServerInternal,
    Tls,
    Unauthorized,
    UnsupportedContact,
    UnsupportedIdentifier,
    /// Not an ACME type: the resource (order, authorization, …) does not exist.
    NotFound,
    /// Not an ACME type: the key of keyChange is another account's (RFC 8555 §7.3.5: 409).
    Conflict,
}

impl ProblemType {
    pub fn name(self) -> &'static str {
        match self {
            ProblemType::AccountDoesNotExist => "accountDoesNotExist",
            ProblemType::AlreadyRevoked => "alreadyRevoked",
            ProblemType::AlreadyReplaced => "alreadyReplaced",
            ProblemType::BadCsr => "badCSR",
            ProblemType::BadNonce => "badNonce",
            ProblemType::BadPublicKey => "badPublicKey",
            ProblemType::BadRevocationReason => "badRevocationReason",
            ProblemType::BadSignatureAlgorithm => "badSignatureAlgorithm",
            ProblemType::Connection => "connection",
            ProblemType::Dns => "dns",
            ProblemType::ExternalAccountRequired => "externalAccountRequired",
            ProblemType::IncorrectResponse => "incorrectResponse",
            ProblemType::InvalidContact => "invalidContact",
            ProblemType::InvalidProfile => "invalidProfile",
            ProblemType::Malformed | ProblemType::NotFound | ProblemType::Conflict => "malformed",
            ProblemType::OrderNotReady => "orderNotReady",
            ProblemType::RateLimited => "rateLimited",
            ProblemType::RejectedIdentifier => "rejectedIdentifier",
            ProblemType::ServerInternal => "serverInternal",
            ProblemType::Tls => "tls",
            ProblemType::Unauthorized => "unauthorized",
            ProblemType::UnsupportedContact => "unsupportedContact",
            ProblemType::UnsupportedIdentifier => "unsupportedIdentifier",
        }
    }

    pub fn urn(self) -> String {
        format!("urn:ietf:params:acme:error:{}", self.name())
    }
}

/// One identifier's share of a problem.
#[derive(Debug, Clone, PartialEq)]
pub struct Subproblem {
    pub kind: ProblemType,
    pub detail: String,
    pub identifier: super::Identifier,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub kind: ProblemType,
    pub detail: String,
    pub subproblems: Vec<Subproblem>,
    /// Seconds, for `rateLimited` (and orders still processing).
    pub retry_after: Option<u64>,
    /// Extra members (`algorithms` of badSignatureAlgorithm); boxed, as few problems have any.
    pub extra: Option<Box<Value>>,
    /// A URL for `Location` (keyChange's conflict names the account holding the key).
    pub location: Option<String>,
}

impl Problem {
    pub fn new(kind: ProblemType, detail: impl Into<String>) -> Problem {
        Problem { kind, detail: detail.into(), subproblems: Vec::new(), retry_after: None, extra: None, location: None }
    }

    pub fn with_subproblems(mut self, subproblems: Vec<Subproblem>) -> Problem {
        self.subproblems = subproblems;
        self
    }

    pub fn with_algorithms(mut self) -> Problem {
        self.extra = Some(Box::new(json!({ "algorithms": ["ES256", "ES384", "RS256", "EdDSA"] })));
        self
    }

    /// The document (without `status`, which the HTTP layer adds with the status line).
    pub fn document(&self) -> Value {
        let mut doc = json!({ "type": self.kind.urn(), "detail": self.detail });
        if !self.subproblems.is_empty() {
            doc["subproblems"] = Value::Array(
                self.subproblems
                    .iter()
                    .map(|s| json!({ "type": s.kind.urn(), "detail": s.detail, "identifier": s.identifier.to_value() }))
                    .collect(),
            );
        }
        if let Some(Value::Object(extra)) = self.extra.as_deref() {
            for (k, v) in extra {
                doc[k] = v.clone();
            }
        }
        doc
    }
}

impl From<Error> for Problem {
    /// A domain failure inside an ACME request: its message, never a 5xx for what the client
    /// sent (validation errors are `malformed`), `serverInternal` for real failures.
    fn from(err: Error) -> Problem {
        match &err {
            Error::Validation { .. } => Problem::new(ProblemType::Malformed, err.to_string()),
            Error::PolicyDenied(reasons) => {
                Problem::new(ProblemType::Unauthorized, format!("an issuance policy denied the request: {reasons}"))
            }
            Error::NotFound(_) => Problem::new(ProblemType::NotFound, err.to_string()),
            _ => {
                tracing::error!(error = %err, code = err.code(), "ACME request failed");
                Problem::new(ProblemType::ServerInternal, format!("the request failed ({})", err.code()))
            }
        }
    }
}

impl From<crate::store_error::StoreError> for Problem {
    fn from(err: crate::store_error::StoreError) -> Problem {
        Problem::from(Error::from(err))
    }
}
