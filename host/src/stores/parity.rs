//! Both backends, one table of cases: counters, quotas and listings must
//! answer alike on redb and on a real `redis-server` the tests start on
//! 127.0.0.1.

use std::sync::Arc;

use super::embedded::Embedded;
use super::redis::Redis;
use super::rules::{MAX_COUNTER, Refused, not_a_counter, overflow};
use super::{Engine, Entry, Quota, StoreError};

// One `redis-server` starter for the unit tests here and elsewhere in the
// crate (`serve::fair`), and the integration tests in tests/all, which
// cannot see this crate's test code.
#[path = "../../tests/all/redis_server.rs"]
mod redis_server;
pub(crate) use redis_server::RedisServer;

/// An embedded store and a Redis store, both empty; keep the first two
/// until done.
async fn both() -> (RedisServer, tempfile::TempDir, [Arc<dyn Engine>; 2]) {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let embedded: Arc<dyn Engine> = Embedded::open(&dir.path().join("s.redb")).unwrap();
    let remote: Arc<dyn Engine> = Arc::new(Redis::connect(&redis.url(), "p:x", "s").await.unwrap());
    (redis, dir, [embedded, remote])
}

/// What one engine answers to `op`, for every engine; they must agree.
async fn alike<T: PartialEq + std::fmt::Debug>(
    engines: &[Arc<dyn Engine>; 2],
    what: &str,
    op: impl AsyncFn(&dyn Engine) -> T,
) -> T {
    let embedded = op(engines[0].as_ref()).await;
    let redis = op(engines[1].as_ref()).await;
    assert_eq!(embedded, redis, "{what}: embedded and Redis answer apart");
    embedded
}

#[tokio::test]
async fn counters_behave_the_same_on_both_backends() {
    let (_redis, _dir, engines) = both().await;
    let max = MAX_COUNTER.to_string();
    let over = (u128::from(MAX_COUNTER) + 1).to_string();
    /// A stored value (none: no key), a delta, and the answer expected.
    type Case<'a> = (Option<&'a [u8]>, u64, Result<u64, StoreError>);
    let cases: Vec<Case<'_>> = vec![
        (None, 5, Ok(5)),
        (None, 0, Ok(0)),
        (Some(b"0"), 7, Ok(7)),
        (Some(b"41"), 1, Ok(42)),
        (Some(b"007"), 1, Err(not_a_counter())),
        (Some(b"00"), 1, Err(not_a_counter())),
        (Some(b"+5"), 1, Err(not_a_counter())),
        (Some(b"-1"), 1, Err(not_a_counter())),
        (Some(b" 5"), 1, Err(not_a_counter())),
        (Some(b"5 "), 1, Err(not_a_counter())),
        (Some(b"5\n"), 1, Err(not_a_counter())),
        (Some(b"1e3"), 1, Err(not_a_counter())),
        (Some(b""), 1, Err(not_a_counter())),
        (Some(b"\xff\xfe"), 1, Err(not_a_counter())),
        (Some(over.as_bytes()), 0, Err(not_a_counter())),
        (Some(b"99999999999999999999999"), 1, Err(not_a_counter())),
        (Some(max.as_bytes()), 0, Ok(MAX_COUNTER)),
        (Some(max.as_bytes()), 1, Err(overflow(MAX_COUNTER, 1))),
        (Some(b"9223372036854775806"), 1, Ok(MAX_COUNTER)),
        (None, MAX_COUNTER, Ok(MAX_COUNTER)),
        (None, MAX_COUNTER + 1, Err(overflow(0, MAX_COUNTER + 1))),
        (None, u64::MAX, Err(overflow(0, u64::MAX))),
        (Some(b"1"), u64::MAX, Err(overflow(1, u64::MAX))),
        (
            Some(b"9999999999"),
            MAX_COUNTER,
            Err(overflow(9_999_999_999, MAX_COUNTER)),
        ),
    ];
    for (i, (stored, delta, expected)) in cases.into_iter().enumerate() {
        let key = format!("c{i}");
        let what = format!("{:?} + {delta}", stored.map(String::from_utf8_lossy));
        if let Some(stored) = stored {
            alike(&engines, &what, async |e| {
                e.set_many("", vec![(key.clone(), stored.to_vec())], Quota::default())
                    .await
            })
            .await
            .unwrap();
        }
        let answer = alike(&engines, &what, async |e| {
            e.increment("", &key, delta, Quota::default()).await
        })
        .await;
        assert_eq!(answer, expected, "{what}");
        // A refused increment leaves the value as it was.
        let kept = alike(&engines, &what, async |e| e.get("", &key).await).await;
        let left = match &answer {
            Ok(sum) => Some(sum.to_string().into_bytes()),
            Err(_) => stored.map(<[u8]>::to_vec),
        };
        assert_eq!(kept, Ok(left), "{what}");
    }
}

#[tokio::test]
async fn quotas_refuse_alike_on_both_backends_and_refused_writes_change_nothing() {
    let (_redis, _dir, engines) = both().await;
    let quota = Quota {
        max_keys: 3,
        max_bytes: 40,
        max_namespaces: 2,
        max_store_bytes: 60,
        ..Quota::default()
    };
    let set = |pairs: &[(&str, usize)]| -> Vec<Entry> {
        pairs
            .iter()
            .map(|(k, n)| ((*k).to_owned(), vec![b'v'; *n]))
            .collect()
    };
    let steps: Vec<(&str, Vec<Entry>, Result<(), StoreError>)> = vec![
        ("s:a", set(&[("k1", 8), ("k2", 8)]), Ok(())),
        (
            "s:a",
            set(&[("k3", 1), ("k4", 1)]),
            Err(Refused::Keys.error(4, &quota)),
        ),
        (
            "s:a",
            set(&[("k1", 30)]),
            Err(Refused::Bytes.error(42, &quota)),
        ),
        // A key named twice counts once, its last value winning.
        ("s:a", set(&[("k3", 30), ("k3", 1)]), Ok(())),
        ("s:b", set(&[("k", 18)]), Ok(())),
        (
            "s:c",
            set(&[("k", 1)]),
            Err(Refused::Namespaces.error(3, &quota)),
        ),
        (
            "s:b",
            set(&[("j", 18)]),
            Err(Refused::StoreBytes.error(61, &quota)),
        ),
        ("s:b", set(&[("k", 2)]), Ok(())),
        ("s:b", set(&[("k", 1), ("k2", 1)]), Ok(())),
    ];
    for (ns, entries, expected) in steps {
        let what = format!(
            "{ns} {:?}",
            entries.iter().map(|e| &e.0).collect::<Vec<_>>()
        );
        let answer = alike(&engines, &what, async |e| {
            e.set_many(ns, entries.clone(), quota).await
        })
        .await;
        assert_eq!(answer, expected, "{what}");
    }
    // Emptying a namespace frees its place; deleting a key twice counts once.
    alike(&engines, "delete", async |e| {
        e.delete_many(
            "s:b",
            vec!["k".into(), "k".into(), "k2".into(), "none".into()],
        )
        .await
    })
    .await
    .unwrap();
    let third = alike(&engines, "third", async |e| {
        e.set_many("s:c", vec![("k".into(), vec![1])], quota).await
    })
    .await;
    assert_eq!(third, Ok(()));
    for ns in ["s:a", "s:b", "s:c"] {
        alike(&engines, ns, async |e| e.list(ns, None, 10).await)
            .await
            .unwrap();
    }
    let values = alike(&engines, "values", async |e| {
        e.get_many("s:a", vec!["k1".into(), "k3".into(), "k4".into()])
            .await
    })
    .await
    .unwrap();
    assert_eq!(
        values,
        vec![
            Some(("k1".into(), vec![b'v'; 8])),
            Some(("k3".into(), vec![b'v'; 1])),
            None
        ]
    );
}

#[tokio::test]
async fn listings_page_alike_on_both_backends_and_never_read_values() {
    let (_redis, _dir, engines) = both().await;
    let keys = [
        "b",
        "a",
        "",
        "a\0",
        "a\u{1}",
        "é",
        "z:z",
        "%3A",
        "\u{10ffff}",
        "A",
        "0",
    ];
    // Values that are not UTF-8 (once broke Redis listings).
    let entries: Vec<Entry> = keys
        .iter()
        .map(|k| ((*k).to_owned(), vec![0xff, 0xfe, 0]))
        .collect();
    for ns in ["", "s:a", "n:1"] {
        alike(&engines, "write", async |e| {
            e.set_many(ns, entries.clone(), Quota::default()).await
        })
        .await
        .unwrap();
    }
    let mut sorted: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
    sorted.sort();
    for ns in ["", "s:a", "n:1"] {
        let mut listed = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let (page, more) = alike(&engines, "page", async |e| {
                e.list(ns, after.as_deref(), 3).await
            })
            .await
            .unwrap();
            assert!(page.len() <= 3);
            after = page.last().cloned();
            listed.extend(page);
            if !more {
                break;
            }
        }
        assert_eq!(
            listed, sorted,
            "namespace {ns:?} in byte order, each key once"
        );
    }
    assert_eq!(
        alike(&engines, "empty", async |e| e.list("s:none", None, 3).await).await,
        Ok((Vec::new(), false))
    );
}
