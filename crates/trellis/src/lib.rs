//! Trellis: certificate lifecycle management.
//!
//! Data flows one way: HTTP (`api`) → domain services (`auth`, `certificates`,
//! `audit`, …) → `store` / `plugins`. See ARCHITECTURE.md for the code map.

pub mod api;
pub mod audit;
pub mod auth;
pub mod certificates;
pub mod clock;
pub mod config;
pub mod context;
pub mod crypto;
pub mod error;
pub mod events;
pub mod jobs;
pub mod pagination;
pub mod plugins;
pub mod store;
