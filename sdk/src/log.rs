//! Structured logging into the host's tracing pipeline.
//!
//! Lines are attributed to the plugin, its version and the workspace by the host.
//! `println!`/`eprintln!` also work (the host captures stdout and stderr) but lose structure.

use crate::bindings::imports::trellis::plugin::logging::{self, Field, Level};

fn emit(level: Level, message: &str, fields: &[(&str, &str)]) {
    let fields: Vec<Field> =
        fields.iter().map(|(key, value)| Field { key: (*key).to_owned(), value: (*value).to_owned() }).collect();
    logging::log(level, message, &fields);
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
