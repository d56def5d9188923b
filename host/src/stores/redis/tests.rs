use proptest::prelude::*;

use super::*;
use crate::stores::parity::RedisServer;

/// `key`'s parts, read from the right: the inverse of [`key`].
fn parts(key: &str) -> (String, String, char, String) {
    let (rest, ns) = key.rsplit_once(':').unwrap();
    let (rest, kind) = rest.rsplit_once(':').unwrap();
    let (prefix, store) = rest.rsplit_once(':').unwrap();
    let ns = match ns {
        "g" => String::new(),
        escaped => escaped.replace("%3A", ":").replace("%25", "%"),
    };
    (
        prefix.to_owned(),
        store.to_owned(),
        kind.chars().next().unwrap(),
        ns,
    )
}

fn namespace() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[a-z:%3Ag]{1,6}".prop_map(|v| format!("s:{v}")),
        any::<i64>().prop_map(|n| format!("n:{n}")),
    ]
}

type Parts = (String, String, char, String);

fn parts_strategy() -> impl Strategy<Value = Parts> {
    (
        "[a-z:%]{1,5}",
        "[a-z_-]{1,3}",
        prop::sample::select(vec!['h', 'i', 'u']),
        namespace(),
    )
}

fn make((prefix, store, kind, ns): &Parts) -> String {
    key(&format!("{prefix}:{store}:"), *kind, ns)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// A key reads back as the prefix, store, kind and namespace that made
    /// it, so no two of those ever make one key.
    #[test]
    fn keys_read_back_from_the_right(one in parts_strategy()) {
        prop_assert_eq!(parts(&make(&one)), one);
    }

    #[test]
    fn distinct_prefixes_stores_kinds_and_namespaces_never_share_a_key(
        one in parts_strategy(),
        other in parts_strategy(),
    ) {
        prop_assume!(one != other);
        prop_assert_ne!(make(&one), make(&other));
    }
}

#[test]
fn values_with_colons_never_meet_another_stores_keys() {
    // Once, a namespace value carrying `:` could spell another store's key.
    let a = key("app:notes:", 'h', "s:x:h:y");
    let b = key("app:notes:x:h:", 'h', "s:y");
    assert_ne!(a, b);
    assert_eq!(a, "app:notes:h:s%3Ax%3Ah%3Ay");
    assert_eq!(key("p:s:", 'h', ""), "p:s:h:g");
    assert_ne!(key("p:s:", 'h', "s:7"), key("p:s:", 'h', "n:7"));
}

#[tokio::test]
async fn connection_errors_name_the_server_without_its_secrets() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    for url in [
        format!("redis://user:hunter2@127.0.0.1:{port}"),
        format!("redis://user:hun@ter2@127.0.0.1:{port}/?password=hunter2"),
        format!("redis://127.0.0.1:{port}/?protocol=nonsense&pass=hunter2"),
    ] {
        let error = Redis::connect(&url, "p", "s").await.unwrap_err();
        let text = error.to_string();
        assert!(matches!(error, StoreError::Unavailable(_)), "{text}");
        assert!(
            !text.contains("hunter2") && !text.contains("ter2"),
            "{text}"
        );
        assert!(text.contains("***"), "{text}");
    }
}

#[tokio::test]
async fn the_layout_is_what_the_module_documents() {
    let server = RedisServer::start();
    let store = Redis::connect(&server.url(), "app:v1", "notes")
        .await
        .unwrap();
    store
        .set_many(
            "s:a:b",
            vec![("k".into(), b"\xffv".to_vec())],
            Quota::default(),
        )
        .await
        .unwrap();
    let mut connection = store.connection.clone();
    let mut keys: Vec<String> = ::redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut connection)
        .await
        .unwrap();
    keys.sort();
    assert_eq!(
        keys,
        [
            "app:v1:notes:h:s%3Aa%3Ab",
            "app:v1:notes:i:s%3Aa%3Ab",
            "app:v1:notes:t:all",
            "app:v1:notes:u:s%3Aa%3Ab",
        ]
    );
    let bytes: u64 = connection.get("app:v1:notes:u:s%3Aa%3Ab").await.unwrap();
    assert_eq!(bytes, 3);
    store.delete_many("s:a:b", vec!["k".into()]).await.unwrap();
    let left: Vec<String> = ::redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut connection)
        .await
        .unwrap();
    assert_eq!(
        left,
        ["app:v1:notes:t:all"],
        "an emptied namespace leaves nothing"
    );
    let totals: Vec<u64> = ::redis::cmd("HMGET")
        .arg("app:v1:notes:t:all")
        .arg(&["namespaces", "bytes"])
        .query_async(&mut connection)
        .await
        .unwrap();
    assert_eq!(totals, [0, 0]);
}
