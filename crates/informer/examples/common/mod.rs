//! Tiny argument parsing shared by the examples (`--flag value` and `--switch`).
#![allow(dead_code)]

use std::time::Duration;

pub struct Args(Vec<String>);

impl Args {
    pub fn parse() -> Self {
        Self(std::env::args().skip(1).collect())
    }

    /// The value after `--name`, if given.
    pub fn value(&self, name: &str) -> Option<String> {
        let flag = format!("--{name}");
        let mut it = self.0.iter();
        while let Some(a) = it.next() {
            if *a == flag {
                return it.next().cloned();
            }
            if let Some(v) = a.strip_prefix(&format!("{flag}=")) {
                return Some(v.to_string());
            }
        }
        None
    }

    /// Whether `--name` is present.
    pub fn flag(&self, name: &str) -> bool {
        self.0.iter().any(|a| *a == format!("--{name}"))
    }

    /// `--namespace` (or `-n`), default `default`.
    pub fn namespace(&self) -> String {
        self.value("namespace").unwrap_or_else(|| "default".into())
    }

    /// `--seconds N` as a duration, with a default.
    pub fn seconds(&self, name: &str, default: u64) -> Duration {
        Duration::from_secs_f64(
            self.value(name)
                .and_then(|v| v.parse().ok())
                .unwrap_or(default as f64),
        )
    }
}
