//! Structured logging into the host's tracing pipeline; lines are attributed to the plugin,
//! workspace and record by the host. Never log secrets. In native builds lines are kept by
//! [`crate::testing`] (see `testing::logs`).

/// Severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Diagnostics.
    Debug,
    /// Normal operation.
    Info,
    /// Recovered from something unexpected.
    Warn,
    /// Something failed.
    Error,
}

fn emit(level: Level, message: &str, fields: &[(&str, &str)]) {
    #[cfg(target_arch = "wasm32")]
    {
        use crate::bindings::imports::trellis::plugin::logging::{self, Field, Level as Wit};
        let fields: Vec<Field> =
            fields.iter().map(|(key, value)| Field { key: (*key).to_owned(), value: (*value).to_owned() }).collect();
        let level = match level {
            Level::Debug => Wit::Debug,
            Level::Info => Wit::Info,
            Level::Warn => Wit::Warn,
            Level::Error => Wit::Error,
        };
        logging::log(level, message, &fields);
    }
    #[cfg(not(target_arch = "wasm32"))]
    crate::testing::log(level, message, fields);
}

/// Logs at debug level with key/value fields.
pub fn debug(message: &str, fields: &[(&str, &str)]) {
    emit(Level::Debug, message, fields);
}

/// Logs at info level with key/value fields.
pub fn info(message: &str, fields: &[(&str, &str)]) {
    emit(Level::Info, message, fields);
}

/// Logs at warn level with key/value fields.
pub fn warn(message: &str, fields: &[(&str, &str)]) {
    emit(Level::Warn, message, fields);
}

/// Logs at error level with key/value fields.
pub fn error(message: &str, fields: &[(&str, &str)]) {
    emit(Level::Error, message, fields);
}
