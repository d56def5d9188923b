use super::*;
use crate::stores::{PAGE_KEYS, rules::Refused};

fn quota(max_keys: u64, max_bytes: u64) -> Quota {
    Quota {
        max_keys,
        max_bytes,
        ..Quota::default()
    }
}

fn open() -> (tempfile::TempDir, Arc<Embedded>) {
    let dir = tempfile::tempdir().unwrap();
    let store = Embedded::open(&dir.path().join("s.redb")).unwrap();
    (dir, store)
}

fn entries(pairs: &[(&str, &[u8])]) -> Vec<Entry> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.to_vec()))
        .collect()
}

#[tokio::test]
async fn writes_past_a_quota_change_nothing_and_usage_follows_deletes() {
    let (_dir, store) = open();
    store
        .set_many("", entries(&[("a", b"1")]), quota(2, 100))
        .await
        .unwrap();
    let refused = store
        .set_many("", entries(&[("b", b"2"), ("c", b"3")]), quota(2, 100))
        .await;
    assert_eq!(refused, Err(Refused::Keys.error(3, &quota(2, 100))));
    assert_eq!(
        store.get("", "b").await.unwrap(),
        None,
        "a refused write is all or nothing"
    );
    let too_big = store
        .set_many("", vec![("a".into(), vec![0; 200])], quota(2, 100))
        .await;
    assert!(matches!(too_big, Err(StoreError::QuotaExceeded(_))));
    assert_eq!(
        store.get("", "a").await.unwrap(),
        Some(b"1".to_vec()),
        "the old value is kept"
    );
    store.delete_many("", vec!["a".into()]).await.unwrap();
    store
        .set_many("", entries(&[("b", b"2"), ("c", b"3")]), quota(2, 100))
        .await
        .unwrap();
    // A key named twice in one batch counts once, its last value winning.
    store
        .set_many("", entries(&[("b", b"x"), ("b", b"yy")]), quota(2, 100))
        .await
        .unwrap();
    assert_eq!(store.get("", "b").await.unwrap(), Some(b"yy".to_vec()));
}

#[tokio::test]
async fn the_store_as_a_whole_is_bounded_however_many_namespaces_callers_invent() {
    let (_dir, store) = open();
    let bounded = Quota {
        max_namespaces: 2,
        max_store_bytes: 30,
        ..Quota::default()
    };
    for ns in ["s:a", "s:b"] {
        store
            .set_many(ns, entries(&[("k", b"123456789")]), bounded)
            .await
            .unwrap();
    }
    // A third namespace is refused, and writes nothing.
    let third = store
        .set_many("s:c", entries(&[("k", b"1")]), bounded)
        .await;
    assert_eq!(third, Err(Refused::Namespaces.error(3, &bounded)));
    assert_eq!(store.list("s:c", None, 10).await.unwrap().0.len(), 0);
    // The existing namespaces may grow up to the store's bytes, not past.
    let grow = store
        .set_many("s:a", entries(&[("k2", b"123456789")]), bounded)
        .await;
    assert_eq!(grow, Err(Refused::StoreBytes.error(31, &bounded)));
    store
        .set_many("s:a", entries(&[("k2", b"12345678")]), bounded)
        .await
        .unwrap();
    // Emptying a namespace frees its place.
    store
        .delete_many("s:b", vec!["k".into(), "k".into()])
        .await
        .unwrap();
    store
        .set_many("s:c", entries(&[("k", b"1")]), bounded)
        .await
        .unwrap();
    // Counters obey the same bounds.
    let counter = store.increment("s:d", "n", 1, bounded).await;
    assert_eq!(counter, Err(Refused::Namespaces.error(3, &bounded)));
}

#[tokio::test]
async fn totals_are_counted_for_a_file_written_before_they_were_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.redb");
    {
        // The layout before `totals`: entries and usage only.
        let db = Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut table = txn.open_table(ENTRIES).unwrap();
            let mut usage = txn.open_table(USAGE).unwrap();
            table.insert(("s:a", "k"), &b"12345"[..]).unwrap();
            table.insert(("s:b", "k"), &b"12345"[..]).unwrap();
            usage.insert("s:a", (1, 6)).unwrap();
            usage.insert("s:b", (1, 6)).unwrap();
        }
        txn.commit().unwrap();
    }
    let store = Embedded::open(&path).unwrap();
    let bounded = Quota {
        max_namespaces: 2,
        ..Quota::default()
    };
    let third = store
        .set_many("s:c", entries(&[("k", b"1")]), bounded)
        .await;
    assert_eq!(third, Err(Refused::Namespaces.error(3, &bounded)));
}

#[tokio::test]
async fn namespaces_are_apart_and_lists_page_from_the_last_key() {
    let (_dir, store) = open();
    let many: Vec<Entry> = (0..PAGE_KEYS + 5)
        .map(|i| (format!("k{i:05}"), vec![1]))
        .collect();
    store
        .set_many("s:ada", many, quota(10_000, 1 << 20))
        .await
        .unwrap();
    // Neighbours of "s:ada" in byte order, which a range must not reach.
    for ns in ["s:ad", "s:ada\0", "s:adab", "s:ada\u{1}"] {
        store
            .set_many(ns, entries(&[("", b"x"), ("zz", b"x")]), Quota::default())
            .await
            .unwrap();
    }
    let (first, more) = store.list("s:ada", None, PAGE_KEYS).await.unwrap();
    assert_eq!((first.len(), more), (PAGE_KEYS, true));
    assert_eq!(first[0], "k00000");
    let (rest, more) = store
        .list("s:ada", first.last().map(String::as_str), PAGE_KEYS)
        .await
        .unwrap();
    assert_eq!((rest.len(), more), (5, false));
    assert_eq!(rest[0], format!("k{PAGE_KEYS:05}"));
    assert_eq!(
        store.list("s:ada\0", None, 10).await.unwrap().0,
        vec![String::new(), "zz".to_owned()]
    );
    assert_eq!(store.get("s:ad", "k00000").await.unwrap(), None);
    // A page of exactly the rest says there is no more.
    let (exact, more) = store
        .list("s:ada", Some(&format!("k{:05}", PAGE_KEYS - 1)), 5)
        .await
        .unwrap();
    assert_eq!((exact.len(), more), (5, false));
}

#[tokio::test]
async fn counters_count_and_keep_the_quota() {
    let (_dir, store) = open();
    assert_eq!(store.increment("", "n", 5, Quota::default()).await, Ok(5));
    assert_eq!(store.increment("", "n", 1, Quota::default()).await, Ok(6));
    let full = quota(1, 100);
    assert_eq!(
        store.increment("", "m", 1, full).await,
        Err(Refused::Keys.error(2, &full))
    );
    assert_eq!(store.get("", "m").await.unwrap(), None);
}

#[tokio::test]
async fn one_process_shares_an_open_file_under_any_spelling() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let a = Embedded::open(&path).unwrap();
    let b = Embedded::open(&dir.path().join("sub/../s.redb")).unwrap();
    assert!(Arc::ptr_eq(&a, &b));
}

#[test]
fn file_identity_sees_through_spellings_and_links() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    std::os::unix::fs::symlink(&real, dir.path().join("link")).unwrap();
    let one = file_identity(&real.join("s.redb"));
    for spelling in [
        dir.path().join("link/s.redb"),
        dir.path().join("real/./s.redb"),
        dir.path().join("real/new/../s.redb"),
        dir.path().join("link/a/b/../../s.redb"),
    ] {
        assert_eq!(file_identity(&spelling), one, "{}", spelling.display());
    }
    assert_ne!(file_identity(&real.join("t.redb")), one);
}

#[tokio::test]
async fn a_write_that_changes_nothing_commits_nothing() {
    let (dir, store) = open();
    store
        .set_many("", entries(&[("a", b"1")]), Quota::default())
        .await
        .unwrap();
    let file = dir.path().join("s.redb");
    let written = || {
        let meta = std::fs::metadata(&file).unwrap();
        (meta.modified().unwrap(), meta.len())
    };
    let before = written();
    // Each of these once cost a commit and its `fsync`.
    for _ in 0..3 {
        store.delete_many("", vec!["missing".into()]).await.unwrap();
        store.delete_many("", Vec::new()).await.unwrap();
        store
            .set_many("", Vec::new(), Quota::default())
            .await
            .unwrap();
    }
    assert_eq!(written(), before);
    store.delete_many("", vec!["a".into()]).await.unwrap();
    assert_ne!(written(), before, "a delete that deletes commits");
}
