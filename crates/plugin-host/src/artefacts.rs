//! The on-disk cache of compiled components (`TRELLIS_PLUGIN_CACHE_DIR`), shared by restarts and
//! by replicas that share the directory: a large guest (an 18 MB Python component compiles for
//! ~10 s) is compiled once, then loaded in milliseconds.
//!
//! Loading compiled code is `unsafe` in wasmtime: the bytes become machine code that runs
//! unchecked. So an artefact is loaded only when it is provably one this service wrote for this
//! engine and this component: each file is
//!
//! ```text
//! MAGIC (8) | HMAC-SHA256 tag (32) | compiled component (wasmtime's serialization)
//! ```
//!
//! with the tag over `MAGIC | engine compatibility hash | component sha256 | compiled bytes`,
//! keyed with a key derived from the master key (`ArtefactKey`). A file for another component,
//! another engine configuration or wasmtime version, written by someone without the key, or
//! changed in any byte, fails the tag and is ignored (counted, logged) and recompiled; it is
//! never handed to wasmtime. The check runs on the bytes in memory, and the very same bytes
//! are deserialized, so nothing can change between check and load.

use std::hash::Hasher;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::Engine;

use crate::config::ArtefactKey;
use crate::PluginError;

const MAGIC: &[u8; 8] = b"TRLSCWM1";
const TAG_LEN: usize = 32;

/// Counters of the cache since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Components loaded from an authenticated artefact.
    pub hits: u64,
    /// Components compiled because no artefact was there.
    pub misses: u64,
    /// Artefacts present but refused (tampered, foreign, another engine): recompiled.
    pub rejected: u64,
}

pub(crate) struct Artefacts {
    dir: PathBuf,
    key: ring::hmac::Key,
    /// SHA-256 of wasmtime's precompile compatibility hash for this engine.
    compat: [u8; 32],
    hits: AtomicU64,
    misses: AtomicU64,
    rejected: AtomicU64,
}

/// Feeds `Hash` output into SHA-256: wasmtime states compatibility as a `Hash` value.
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn finish(&self) -> u64 {
        0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

impl Artefacts {
    pub(crate) fn new(engine: &Engine, dir: PathBuf, key: &ArtefactKey) -> Result<Artefacts, PluginError> {
        std::fs::create_dir_all(&dir)
            .map_err(|err| PluginError::Internal(format!("cannot create plugin cache {}: {err}", dir.display())))?;
        let mut hasher = Sha256Hasher(Sha256::new());
        std::hash::Hash::hash(&engine.precompile_compatibility_hash(), &mut hasher);
        let compat: [u8; 32] = hasher.0.finalize().into();
        Ok(Artefacts {
            dir,
            key: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key.bytes()),
            compat,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
        })
    }

    pub(crate) fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
        }
    }

    /// One file per (component, engine): replicas of different versions sharing the directory
    /// keep their own artefacts rather than overwriting each other's.
    fn path(&self, sha256: &str) -> PathBuf {
        self.dir.join(format!("{sha256}-{}.cwasm", hex::encode(&self.compat[..8])))
    }

    fn tag(&self, sha256: &str, compiled: &[u8]) -> ring::hmac::Tag {
        let mut context = ring::hmac::Context::with_key(&self.key);
        context.update(MAGIC);
        context.update(&self.compat);
        context.update(sha256.as_bytes());
        context.update(compiled);
        context.sign()
    }

    /// Whether an artefact file exists for the component (not whether it is valid).
    pub(crate) fn contains(&self, sha256: &str) -> bool {
        self.path(sha256).is_file()
    }

    /// The component compiled from the bytes whose digest is `sha256`, from its artefact if a
    /// valid one is there. `None`: compile it (a miss, or a refused file, counted apart).
    pub(crate) fn load(&self, engine: &Engine, sha256: &str) -> Option<Component> {
        let path = self.path(sha256);
        let file = match std::fs::read(&path) {
            Ok(file) => file,
            Err(_) => {
                self.misses.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("trellis_plugin_cache_total", "outcome" => "miss").increment(1);
                return None;
            }
        };
        let refuse = |why: &str| {
            self.rejected.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("trellis_plugin_cache_total", "outcome" => "rejected").increment(1);
            tracing::warn!(target: "trellis::security", file = %path.display(), reason = why, "compiled plugin artefact refused; compiling again");
            None
        };
        let Some((header, compiled)) = file.split_at_checked(MAGIC.len() + TAG_LEN) else {
            return refuse("truncated");
        };
        let (magic, tag) = header.split_at(MAGIC.len());
        if magic != MAGIC {
            return refuse("not an artefact of this service");
        }
        if !trellis_core::crypto::constant_time_eq(self.tag(sha256, compiled).as_ref(), tag) {
            return refuse("authentication tag does not match (tampered, foreign key, or another component or engine)");
        }
        match deserialize_authenticated(engine, compiled) {
            Ok(component) => {
                self.hits.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("trellis_plugin_cache_total", "outcome" => "hit").increment(1);
                Some(component)
            }
            Err(err) => {
                tracing::warn!(file = %path.display(), error = %format!("{err:#}"), "authenticated plugin artefact does not load; compiling again");
                self.rejected.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Writes the artefact of a freshly compiled component (atomically: a temporary file renamed
    /// into place, so a concurrent reader sees the old file, the new one or none). A failure is
    /// logged: the cache is an optimisation.
    pub(crate) fn store(&self, sha256: &str, component: &Component) {
        let compiled = match component.serialize() {
            Ok(compiled) => compiled,
            Err(err) => {
                tracing::warn!(error = %format!("{err:#}"), "cannot serialize a compiled plugin for the cache");
                return;
            }
        };
        let tag = self.tag(sha256, &compiled);
        let mut file = Vec::with_capacity(MAGIC.len() + TAG_LEN + compiled.len());
        file.extend_from_slice(MAGIC);
        file.extend_from_slice(tag.as_ref());
        file.extend_from_slice(&compiled);
        let path = self.path(sha256);
        let partial = path.with_extension(format!("partial-{}", std::process::id()));
        let written = std::fs::write(&partial, &file).and_then(|()| std::fs::rename(&partial, &path));
        if let Err(err) = written {
            let _ = std::fs::remove_file(&partial);
            tracing::warn!(file = %path.display(), error = %err, "cannot write a compiled plugin to the cache");
        }
    }
}

/// The one place the plugin host uses `unsafe`: wasmtime's deserialization of compiled code.
#[allow(unsafe_code)]
fn deserialize_authenticated(engine: &Engine, compiled: &[u8]) -> wasmtime::Result<Component> {
    // SAFETY: wasmtime requires that the bytes come from `Component::serialize` /
    // `Engine::precompile_component` of a compatible engine and were not altered since. The
    // caller (`Artefacts::load`) passes only bytes whose HMAC-SHA256 tag verified under a key
    // derived from the master key, over the bytes themselves, this engine's compatibility hash
    // and the component's digest: only this service (holding the master key) produced them, with
    // `Artefacts::store` right after compiling that component on an engine of this
    // configuration; and they are in this process's memory, so they cannot change between the
    // check and this call. wasmtime additionally checks its own header (version, target, flags).
    unsafe { Component::deserialize(engine, compiled) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine() -> Engine {
        let mut config = wasmtime::Config::new();
        config.wasm_component_model(true);
        Engine::new(&config).unwrap()
    }

    fn component(engine: &Engine) -> (Component, String) {
        let wat = r#"(component (core module (func (export "f"))))"#;
        let bytes = wat::parse_str(wat).unwrap();
        (Component::new(engine, &bytes).unwrap(), hex::encode(Sha256::digest(&bytes)))
    }

    #[test]
    fn miss_then_hit_then_tampered_and_foreign_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let engine = engine();
        let key = ArtefactKey::new([7; 32]);
        let cache = Artefacts::new(&engine, dir.path().to_owned(), &key).unwrap();
        let (component, sha256) = component(&engine);

        assert!(cache.load(&engine, &sha256).is_none());
        assert_eq!(cache.stats(), CacheStats { hits: 0, misses: 1, rejected: 0 });
        cache.store(&sha256, &component);
        assert!(cache.contains(&sha256));
        assert!(cache.load(&engine, &sha256).is_some());
        assert_eq!(cache.stats().hits, 1);

        // Another key (another instance's master key, or someone without it): refused.
        let foreign = Artefacts::new(&engine, dir.path().to_owned(), &ArtefactKey::new([8; 32])).unwrap();
        assert!(foreign.load(&engine, &sha256).is_none());
        assert_eq!(foreign.stats(), CacheStats { hits: 0, misses: 0, rejected: 1 });

        // The artefact of one component offered for another: refused.
        let path = cache.path(&sha256);
        let other = "0".repeat(64);
        std::fs::copy(&path, cache.path(&other)).unwrap();
        assert!(cache.load(&engine, &other).is_none());
        assert_eq!(cache.stats().rejected, 1);

        // One changed byte of the compiled code: refused, never deserialized.
        let mut file = std::fs::read(&path).unwrap();
        let last = file.len() - 1;
        file[last] ^= 0x01;
        std::fs::write(&path, &file).unwrap();
        assert!(cache.load(&engine, &sha256).is_none());
        assert_eq!(cache.stats().rejected, 2);

        // Garbage and truncation: refused.
        std::fs::write(&path, b"TRLS").unwrap();
        assert!(cache.load(&engine, &sha256).is_none());
        assert_eq!(cache.stats().rejected, 3);

        // Storing again repairs it.
        cache.store(&sha256, &component);
        assert!(cache.load(&engine, &sha256).is_some());
        assert_eq!(cache.stats().hits, 2);
    }

    #[test]
    fn another_engine_configuration_does_not_read_the_artefact() {
        let dir = tempfile::tempdir().unwrap();
        let engine = engine();
        let key = ArtefactKey::new([7; 32]);
        let cache = Artefacts::new(&engine, dir.path().to_owned(), &key).unwrap();
        let (component, sha256) = component(&engine);
        cache.store(&sha256, &component);

        let mut config = wasmtime::Config::new();
        config.wasm_component_model(true).epoch_interruption(true);
        let other_engine = Engine::new(&config).unwrap();
        let other = Artefacts::new(&other_engine, dir.path().to_owned(), &key).unwrap();
        // Its own file name (another compatibility hash): a miss, and the first engine's file stays.
        assert!(other.load(&other_engine, &sha256).is_none());
        assert_eq!(other.stats().misses, 1);
        assert!(cache.load(&engine, &sha256).is_some());
    }
}

/// The figure of docs/plugin-operators.md ("Compiled-code cache"): what a restart pays per large
/// component without the cache (a compile) and with it (an authenticated load). Run with
/// `TRELLIS_MEASURE_WASM=a.wasm,b.wasm cargo test -p trellis-plugin-host --lib -- --ignored
/// measure_restart_cost --nocapture`.
#[cfg(test)]
mod measure {
    use super::*;

    #[test]
    #[ignore = "a measurement: needs TRELLIS_MEASURE_WASM"]
    fn measure_restart_cost() {
        let Ok(files) = std::env::var("TRELLIS_MEASURE_WASM") else { return };
        let engine = crate::engine::build_engine(&crate::RuntimeConfig::without_cache()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let cache = Artefacts::new(&engine, dir.path().to_owned(), &ArtefactKey::new([1; 32])).unwrap();
        for file in files.split(',') {
            let bytes = std::fs::read(file).unwrap();
            let sha256 = hex::encode(Sha256::digest(&bytes));
            let started = std::time::Instant::now();
            let component = Component::new(&engine, &bytes).unwrap();
            let compile = started.elapsed();
            cache.store(&sha256, &component);
            drop(component);
            let artefact = std::fs::metadata(cache.path(&sha256)).unwrap().len();
            let mut loads = Vec::new();
            for _ in 0..3 {
                let started = std::time::Instant::now();
                assert!(cache.load(&engine, &sha256).is_some());
                loads.push(started.elapsed());
            }
            loads.sort();
            println!(
                "{file}: {} bytes; compile {:.2} s; artefact {} bytes; load from the cache (median of 3) {:.1} ms",
                bytes.len(),
                compile.as_secs_f64(),
                artefact,
                loads[1].as_secs_f64() * 1000.0
            );
        }
    }
}
