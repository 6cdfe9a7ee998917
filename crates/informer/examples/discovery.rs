//! Every group/version/resource/kind the server serves, through the disk cache.
//! Run it twice: the second run (within `--ttl` seconds) is served from the cache and makes
//! no discovery request.
//!
//! `cargo run -p sluice-informer --example discovery -- [--cache-dir DIR] [--ttl 600] [--invalidate]`

mod common;

use sluice_informer::discovery::{CachedDiscovery, cache_dir_for};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = common::Args::parse();
    let config = kube::Config::infer().await?;
    let root = match args.value("cache-dir") {
        Some(d) => std::path::PathBuf::from(d),
        None => std::path::PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/tmp".into()))
            .join(".kube/cache/sluice-discovery"),
    };
    let dir = cache_dir_for(&root, &config.cluster_url.to_string());
    let client = kube::Client::try_from(config)?;
    let discovery = CachedDiscovery::new(client, &dir, args.seconds("ttl", 600));
    if args.flag("invalidate") {
        discovery.invalidate()?;
    }
    let result = discovery.run().await?;
    for (group, versions) in &result.groups {
        println!("group {:?} versions {}", group, versions.join(","));
    }
    for r in &result.resources {
        println!(
            "{}/{} resource={} kind={} namespaced={} verbs={}",
            if r.group.is_empty() { "core" } else { &r.group },
            r.version,
            r.resource,
            r.kind,
            r.namespaced,
            r.verbs.join(",")
        );
    }
    for (g, v) in &result.failed {
        println!("failed: {g}/{v}");
    }
    println!(
        "{} groups, {} resources; cache {}; from cache: {} ({} discovery requests)",
        result.groups.len(),
        result.resources.len(),
        dir.display(),
        result.from_cache(),
        result.requests
    );
    Ok(())
}
