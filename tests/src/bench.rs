//! What the load drivers in `src/bin/` share: options from the environment, medians and
//! percentiles of samples across runs, and the machine's CPU clock, load and busy time (Linux
//! `/proc`), so every benchmark reports the same statistics the same way.

use std::collections::BTreeMap;

use anyhow::{anyhow, Result};

/// `name` from the environment parsed as `T`, or `default` when unset or empty.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> Result<T> {
    match std::env::var(name) {
        Ok(text) if !text.trim().is_empty() => {
            text.trim().parse().map_err(|_| anyhow!("{name}: `{text}` is not a valid value"))
        }
        _ => Ok(default),
    }
}

/// Nearest-rank percentile of an ascending slice (`p` in 0..=100); NaN when empty.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn sorted(values: &[f64]) -> Vec<f64> {
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v
}

pub fn median(values: &[f64]) -> f64 {
    let v = sorted(values);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

pub fn min(values: &[f64]) -> f64 {
    values.iter().copied().fold(f64::INFINITY, f64::min)
}

pub fn max(values: &[f64]) -> f64 {
    values.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

/// Samples of every figure across runs, in display order.
#[derive(Default)]
pub struct Samples {
    pub order: Vec<String>,
    pub values: BTreeMap<String, Vec<f64>>,
    pub meta: BTreeMap<String, (String, String)>, // unit, target
}

impl Samples {
    pub fn push(&mut self, name: &str, unit: &str, target: &str, value: f64) {
        if !self.meta.contains_key(name) {
            self.order.push(name.to_string());
            self.meta.insert(name.to_string(), (unit.to_string(), target.to_string()));
        }
        self.values.entry(name.to_string()).or_default().push(value);
    }
    pub fn median_of(&self, name: &str) -> f64 {
        median(self.values.get(name).map(Vec::as_slice).unwrap_or(&[]))
    }
}

/// USER_HZ; 100 on every mainstream Linux configuration.
pub fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// 1-minute load average: other work on the machine skews every figure.
pub fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| t.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(f64::NAN)
}

/// Busy and total jiffies of the whole machine (`/proc/stat`, all CPUs): the share of both
/// cores the server, this driver and everything else on the machine used together.
pub fn machine_jiffies() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let fields: Vec<f64> =
        stat.lines().next().unwrap_or("").split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    let total: f64 = fields.iter().take(8).sum();
    // idle + iowait are not busy.
    let idle = fields.get(3).copied().unwrap_or(0.0) + fields.get(4).copied().unwrap_or(0.0);
    (total - idle, total)
}
