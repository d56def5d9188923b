//! The compile cache: used when valid, rebuilt when stale or damaged.

use serde_json::json;
use toolhost::{CacheStatus, ComponentConfig, SandboxOptions, ToolHost};

use crate::util::*;

async fn load(cache: &std::path::Path) -> (ToolHost, CacheStatus) {
    let options = SandboxOptions::default()
        .with_cache_dir(Some(cache.to_owned()))
        .with_max_instances(std::num::NonZeroU32::new(16).unwrap());
    let host = ToolHost::load_components(vec![ComponentConfig::new(component("calc"))], options)
        .await
        .unwrap();
    let status = host.components().next().unwrap().2;
    (host, status)
}

fn only_entry(cache: &std::path::Path) -> std::path::PathBuf {
    let entries: Vec<_> = std::fs::read_dir(cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    entries[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compiled_code_is_reused_across_loads() {
    let cache = tempfile::tempdir().unwrap();
    assert_eq!(load(cache.path()).await.1, CacheStatus::Miss);
    let (host, status) = load(cache.path()).await;
    assert_eq!(status, CacheStatus::Hit);
    assert_eq!(
        ok(&call(&host, "calc", json!({"expression": "6*7"})).await),
        "42"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_entry_is_detected_and_rebuilt() {
    let cache = tempfile::tempdir().unwrap();
    load(cache.path()).await;
    let entry = only_entry(cache.path());
    let mut bytes = std::fs::read(&entry).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&entry, &bytes).unwrap();

    let (host, status) = load(cache.path()).await;
    assert_eq!(status, CacheStatus::Rebuilt);
    assert_eq!(
        ok(&call(&host, "calc", json!({"expression": "6*7"})).await),
        "42"
    );
    assert_eq!(
        load(cache.path()).await.1,
        CacheStatus::Hit,
        "the rebuilt entry is valid"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_or_foreign_file_is_rebuilt() {
    let cache = tempfile::tempdir().unwrap();
    load(cache.path()).await;
    let entry = only_entry(cache.path());
    for junk in [&b""[..], b"\x7fELF some other program"] {
        std::fs::write(&entry, junk).unwrap();
        assert_eq!(load(cache.path()).await.1, CacheStatus::Rebuilt);
    }
    // An artifact without its recorded sum is not trusted either.
    std::fs::remove_file(entry.with_extension("sum")).unwrap();
    assert_eq!(load(cache.path()).await.1, CacheStatus::Miss);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwritable_cache_only_costs_speed() {
    let dir = tempfile::tempdir().unwrap();
    let not_a_dir = dir.path().join("file");
    std::fs::write(&not_a_dir, "").unwrap();
    let (host, status) = load(&not_a_dir).await;
    assert_eq!(status, CacheStatus::Miss);
    assert_eq!(
        ok(&call(&host, "calc", json!({"expression": "1"})).await),
        "1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_starting_together_compile_a_component_once() {
    let cache = tempfile::tempdir().unwrap();
    let (a, b) = tokio::join!(load(cache.path()), load(cache.path()));
    let mut statuses = [a.1, b.1];
    statuses.sort_by_key(|s| format!("{s:?}"));
    assert_eq!(statuses, [CacheStatus::Hit, CacheStatus::Miss]);
}

/// Issue 29: loading in the background (what `serve` does) hands out a
/// first version before the components that compile are ready, then one
/// more version as each is, the last with every tool; a compile is
/// announced to the hook, a load from the cache is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn components_that_compile_join_in_later_versions_and_cached_ones_at_once() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let cache = tempfile::tempdir().unwrap();
    let compiles = Arc::new(AtomicUsize::new(0));
    let counted = compiles.clone();
    let options = SandboxOptions::default()
        .with_cache_dir(Some(cache.path().to_owned()))
        .with_max_instances(std::num::NonZeroU32::new(16).unwrap())
        .with_compile_hook(Arc::new(move |_| {
            counted.fetch_add(1, Ordering::Relaxed);
        }));
    let manifest = toolhost::Manifest::of_components(vec![
        ComponentConfig::new(component("calc")),
        ComponentConfig::new(component("probe")),
    ]);
    let load =
        || ToolHost::load_in_background(&manifest, options.clone(), &toolhost::LockMode::Write, 0);
    // Nothing may compile before the first version: it has no tools.
    let (first, _, mut loading) = load().await.unwrap();
    assert_eq!(first.specs().count(), 0);
    assert_eq!(loading.pending(), 2);
    let mut versions = Vec::new();
    while let Some(version) = loading.next().await {
        versions.push(version.unwrap());
    }
    assert_eq!(versions.len(), 2);
    assert_eq!(loading.pending(), 0);
    // The two compile side by side, so either may be ready first (calc,
    // the smaller, usually is): the first version holds exactly one
    // component's tools, the last holds both.
    let names = |host: &ToolHost| host.specs().map(|s| s.name.clone()).collect::<Vec<_>>();
    let first_names = names(&versions[0]);
    let calc_first = first_names == ["calc"];
    assert!(
        calc_first || (!first_names.is_empty() && !first_names.contains(&"calc".to_owned())),
        "{first_names:?}"
    );
    let last = versions.pop().unwrap();
    let last_names = names(&last);
    assert!(last_names.contains(&"calc".to_owned()), "{last_names:?}");
    assert!(
        first_names.iter().all(|name| last_names.contains(name)),
        "{first_names:?} then {last_names:?}"
    );
    assert!(last_names.len() > first_names.len(), "{last_names:?}");
    assert_eq!(
        ok(&call(&last, "calc", json!({"expression": "6*7"})).await),
        "42"
    );
    assert_eq!(compiles.load(Ordering::Relaxed), 2);
    // Warm: everything is in the first version, and nothing compiles.
    let (first, _, mut loading) = load().await.unwrap();
    assert_eq!(names(&first), names(&last));
    assert_eq!(loading.pending(), 0);
    assert!(loading.next().await.is_none());
    assert_eq!(compiles.load(Ordering::Relaxed), 2);
}
