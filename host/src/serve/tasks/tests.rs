//! The task stores' bounds, alike in memory, in a redb file and on a real
//! Redis: kept tasks bounded per bucket (its oldest finished forgotten
//! first), unfinished ones refused past their bound, finished records
//! without their call, and answers cut to `max_result`.

use std::num::NonZeroU32;
use std::time::Duration;

use super::*;
use crate::durable_tasks::{TaskPolicy, TaskStore};
use crate::stores::parity::RedisServer;

/// A policy of `unfinished` and `kept` per bucket, a long lease and ttl.
fn policy(store: TaskStore, unfinished: u32, kept: u32) -> TaskPolicy {
    TaskPolicy {
        store,
        ttl: Duration::from_secs(3600),
        lease: Duration::from_secs(60),
        max_per_principal: NonZeroU32::new(unfinished).unwrap(),
        max_kept_per_principal: NonZeroU32::new(kept).unwrap(),
        max_result: 1 << 20,
    }
}

fn record(bucket: &str, n: u64) -> Record {
    let now = now_ms();
    Record {
        id: random_id(),
        owner: "alice".into(),
        bucket: bucket.into(),
        owner_class: "token:alice".into(),
        tool: "calc".into(),
        state: State::Working,
        call_id: format!("c{n}"),
        arguments: StoredArguments::Json(serde_json::json!({"expression": "1+1"})),
        context: Some(serde_json::json!({"user": "alice"})),
        format: "toolmessage".into(),
        result: None,
        follow_up: None,
        reason: None,
        created_ms: now,
        updated_ms: now,
        replica: "r".into(),
        lease_until_ms: now + 60_000,
        runs: 1,
        input: None,
        asks: false,
        version: 1,
    }
}

/// Finish `id` as completed with a result.
async fn finish(tasks: &Tasks, id: &str) {
    let done = tasks
        .update(id, |r| {
            r.state = State::Completed;
            r.result = Some(serde_json::json!({"content": "2"}));
            true
        })
        .await
        .unwrap();
    assert!(done.is_some(), "task {id} could not be finished");
}

/// The bounds and the forgetting, against `tasks` (2 unfinished, 3 kept).
async fn bounds_hold(tasks: &Tasks) {
    let mut finished = Vec::new();
    // Many more tasks than kept, each finished before the next: only the
    // newest three are kept, the others forgotten oldest first.
    for n in 0..8 {
        let record = record("alice", n);
        tasks
            .insert(std::slice::from_ref(&record))
            .await
            .unwrap()
            .unwrap();
        finish(tasks, &record.id).await;
        finished.push(record.id);
        // Finish times must differ for "oldest first" to mean anything.
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    let mut kept = Vec::new();
    for id in &finished {
        if tasks.get(id).await.unwrap().is_some() {
            kept.push(id.clone());
        }
    }
    assert_eq!(kept, finished[5..], "the newest three are kept");
    // A finished record keeps its answer, not its call.
    let last = tasks.get(&finished[7]).await.unwrap().unwrap();
    assert!(
        matches!(last.arguments, StoredArguments::Dropped),
        "{last:?}"
    );
    assert_eq!(last.context, None);
    assert_eq!(last.result, Some(serde_json::json!({"content": "2"})));
    // Unfinished tasks are refused past their bound, finished ones
    // forgotten to make room for them.
    let (one, two) = (record("alice", 10), record("alice", 11));
    tasks
        .insert(&[one.clone(), two.clone()])
        .await
        .unwrap()
        .unwrap();
    let refused = tasks.insert(&[record("alice", 12)]).await.unwrap();
    assert!(
        matches!(refused, Err(Full { unfinished: 2 })),
        "{refused:?}"
    );
    assert!(tasks.get(&one.id).await.unwrap().is_some());
    assert!(tasks.get(&finished[7]).await.unwrap().is_some());
    assert!(tasks.get(&finished[6]).await.unwrap().is_none());
    // Another bucket's bounds are its own.
    tasks
        .insert(&[record("bob", 0), record("bob", 1)])
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn memory_keeps_each_bucket_within_its_bounds_and_forgets_the_oldest_finished() {
    let tasks = Tasks::new(policy(TaskStore::Memory, 2, 3)).unwrap();
    bounds_hold(&tasks).await;
    let Store::Memory(memory) = &tasks.inner.store else {
        unreachable!()
    };
    // alice's 3 and bob's 2: nothing else is held.
    assert_eq!(memory.len(), 5);
}

#[tokio::test]
async fn a_redb_file_keeps_each_bucket_within_its_bounds_and_forgets_the_oldest_finished() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.redb");
    let tasks = Tasks::new(policy(TaskStore::Embedded { path }, 2, 3)).unwrap();
    bounds_hold(&tasks).await;
}

#[tokio::test]
async fn a_redb_file_reopened_with_a_shorter_ttl_forgets_what_is_past_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.redb");
    let store = || TaskStore::Embedded { path: path.clone() };
    // A task that finished ten minutes ago, kept for an hour.
    let tasks = Tasks::new(policy(store(), 2, 100)).unwrap();
    let old = Record {
        state: State::Completed,
        updated_ms: now_ms() - 600_000,
        ..record("alice", 0)
    };
    tasks
        .insert(std::slice::from_ref(&old))
        .await
        .unwrap()
        .unwrap();
    assert!(tasks.get(&old.id).await.unwrap().is_some());
    drop(tasks);
    // The operator shortens the ttl to a minute and restarts: the next
    // insert sweeps it from the file (it used to stay for good, its index
    // entry keyed by the expiry of the old ttl).
    let tasks = Tasks::new(TaskPolicy {
        ttl: Duration::from_secs(60),
        ..policy(store(), 2, 100)
    })
    .unwrap();
    assert!(tasks.get(&old.id).await.unwrap().is_none());
    tasks.insert(&[record("bob", 0)]).await.unwrap().unwrap();
    let Store::Embedded(file) = &tasks.inner.store else {
        unreachable!()
    };
    assert_eq!(file.len(), 1, "only bob's new task is left");
}

#[tokio::test]
async fn redis_keeps_each_bucket_within_its_bounds_and_forgets_the_oldest_finished() {
    let redis = RedisServer::start();
    let store = TaskStore::Redis {
        url: redis.url(),
        prefix: "t".into(),
    };
    let tasks = Tasks::new(policy(store, 2, 3)).unwrap();
    bounds_hold(&tasks).await;
    // Nothing is kept without an expiry, and no more keys than the five
    // tasks, alice's two sets and bob's one (none of his finished).
    let client = ::redis::Client::open(redis.url()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = ::redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut connection)
        .await
        .unwrap();
    assert_eq!(keys.len(), 5 + 3, "{keys:?}");
    for key in keys {
        let ttl: i64 = ::redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut connection)
            .await
            .unwrap();
        assert!(ttl > 0, "{key} never expires");
    }
}

#[test]
fn callers_without_a_principal_of_their_own_are_bounded_per_address() {
    let anyone = crate::identity::Principal::anyone();
    let v4: std::net::IpAddr = "192.0.2.7".parse().unwrap();
    let v6: std::net::IpAddr = "2001:db8:1:2:3:4:5:6".parse().unwrap();
    let same_64: std::net::IpAddr = "2001:db8:1:2:ffff::1".parse().unwrap();
    assert_eq!(bucket_of(&anyone, false, Some(v4)), "anyone@192.0.2.7");
    assert_eq!(
        bucket_of(&anyone, false, Some(v6)),
        bucket_of(&anyone, false, Some(same_64)),
        "one host gets a whole /64"
    );
    assert_eq!(
        bucket_of(&anyone, false, Some(v6)),
        "anyone@2001:db8:1:2::/64"
    );
    // A principal told apart is its own bucket, wherever it calls from.
    assert_eq!(bucket_of(&anyone, true, Some(v4)), "anyone");
    assert_eq!(bucket_of(&anyone, false, None), "anyone");
}
