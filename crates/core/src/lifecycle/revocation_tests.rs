//! Revocation against in-memory fakes.
