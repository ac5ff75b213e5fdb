//! The `trellis` binary's library half: configuration loading, the wiring of core, store,
//! plugin host and HTTP into one process, and the background workers. `main.rs` is the CLI.

pub mod config;
pub mod jobs;
pub mod plugin_workers;
pub mod wiring;
