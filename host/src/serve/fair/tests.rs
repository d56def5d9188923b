//! The limiter in memory (on a clock the tests move) and on a real
//! `redis-server` on 127.0.0.1: buckets, caps, replicas, outages, keys.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::redis::{Timing, key};
use super::*;
use crate::fair_shares::{DEFAULT_PREFIX, LimitsConfig};

use crate::stores::parity::RedisServer;

fn policy(toml_text: &str) -> Policy {
    toml::from_str::<LimitsConfig>(toml_text)
        .unwrap()
        .validate()
        .unwrap()
}

/// A limiter in memory on a clock at 0 that moves only by `advance`.
fn in_memory(toml_text: &str) -> (Limiter, Arc<AtomicU64>) {
    let (clock, now) = memory::Clock::manual();
    (
        Limiter::build(policy(toml_text), clock, Timing::default()),
        now,
    )
}

fn advance(now: &AtomicU64, by: Duration) {
    now.fetch_add(u64::try_from(by.as_micros()).unwrap(), Ordering::SeqCst);
}

/// Timings short enough for tests that wait for an outage to end.
fn quick() -> Timing {
    Timing {
        probe_every: Duration::from_millis(20),
        ..Timing::default()
    }
}

/// A limiter on the Redis at `url`.
fn on_redis(url: &str, rest: &str, timing: Timing) -> Limiter {
    let text = format!("redis = \"{url}\"\n{rest}");
    Limiter::build(policy(&text), memory::Clock::monotonic(), timing)
}

fn who(id: &str) -> Caller<'_> {
    Caller { id, class: "token" }
}

fn memory_held(limiter: &Limiter) -> usize {
    match &limiter.inner.backend {
        Backend::Memory(memory) => memory.held(),
        Backend::Redis(_) => unreachable!("an in-memory limiter"),
    }
}

#[tokio::test]
async fn a_bucket_admits_its_burst_then_one_call_per_interval_and_saves_no_more_than_its_burst() {
    let (limiter, now) = in_memory("[per_principal]\nrate = \"60/min\"\nburst = 3");
    for _ in 0..3 {
        drop(limiter.admit(who("alice"), "calc").await.unwrap());
    }
    let refused = limiter.admit(who("alice"), "calc").await.unwrap_err();
    assert_eq!(refused.reason, Reason::RatePrincipal);
    assert_eq!(refused.retry_after, Duration::from_secs(1));
    advance(&now, Duration::from_micros(999_999));
    let refused = limiter.admit(who("alice"), "calc").await.unwrap_err();
    assert_eq!(refused.retry_after, Duration::from_micros(1));
    assert_eq!(
        refused.retry_after_secs(),
        1,
        "Retry-After is whole seconds, at least 1"
    );
    advance(&now, Duration::from_micros(1));
    drop(limiter.admit(who("alice"), "calc").await.unwrap());
    limiter.admit(who("alice"), "calc").await.unwrap_err();
    // Others have their own bucket.
    drop(limiter.admit(who("bob"), "calc").await.unwrap());
    // An hour's quiet refills the bucket to its burst, not beyond.
    advance(&now, Duration::from_secs(3600));
    for _ in 0..3 {
        drop(limiter.admit(who("alice"), "calc").await.unwrap());
    }
    assert_eq!(
        limiter
            .admit(who("alice"), "calc")
            .await
            .unwrap_err()
            .reason,
        Reason::RatePrincipal
    );
}

#[tokio::test]
async fn a_refusal_by_one_budget_takes_nothing_from_the_other() {
    let (limiter, _now) = in_memory("[per_principal]\nrate = \"1/h\"\n[per_tool]\nrate = \"3/h\"");
    drop(limiter.admit(who("alice"), "fetch").await.unwrap());
    for _ in 0..5 {
        let refused = limiter.admit(who("alice"), "fetch").await.unwrap_err();
        assert_eq!(refused.reason, Reason::RatePrincipal);
    }
    // Alice's refused calls took nothing from fetch's bucket: two are left.
    drop(limiter.admit(who("bob"), "fetch").await.unwrap());
    drop(limiter.admit(who("carol"), "fetch").await.unwrap());
    let refused = limiter.admit(who("dave"), "fetch").await.unwrap_err();
    assert_eq!(refused.reason, Reason::RateTool);
    // And fetch's refusal took nothing from Dave's bucket.
    drop(limiter.admit(who("dave"), "calc").await.unwrap());
}

#[tokio::test]
async fn refusals_name_what_was_hit_and_the_key_to_raise() {
    let (limiter, _now) =
        in_memory("[per_tool]\nrate = \"5/min\"\n[tool.fetch]\nrate = \"1/min\"\nconcurrency = 1");
    let _running = limiter.admit(who("sub:alice"), "fetch").await.unwrap();
    let refused = limiter.admit(who("sub:alice"), "fetch").await.unwrap_err();
    // Both the rate (60 s) and the cap (1 s) refuse: the longer wait is the answer.
    assert_eq!(refused.reason, Reason::RateTool);
    assert_eq!(refused.retry_after_secs(), 60);
    assert_eq!(
        refused.message,
        "rate limit: tool \"fetch\" takes, from all callers together, 1/min calls (bursts of 1); \
         retry after 60s, or ask the operator to raise serve.limits.tool.fetch.rate"
    );
    let (limiter, _now) = in_memory("[per_principal]\nconcurrency = 1");
    let _running = limiter.admit(who("sub:alice"), "calc").await.unwrap();
    let refused = limiter.admit(who("sub:alice"), "calc").await.unwrap_err();
    assert_eq!(refused.reason, Reason::ConcurrencyPrincipal);
    assert_eq!(refused.retry_after, CONCURRENCY_RETRY);
    assert_eq!(
        refused.message,
        "concurrency limit: principal \"sub:alice\" has 1 calls running, the most \
         serve.limits.per_principal.concurrency allows; retry when one finishes (after 1s)"
    );
}

#[tokio::test]
async fn concurrency_caps_are_released_when_the_permit_drops() {
    let (limiter, _now) =
        in_memory("[per_principal]\nconcurrency = 2\n[per_tool]\nconcurrency = 3");
    let a1 = limiter.admit(who("alice"), "calc").await.unwrap();
    let a2 = limiter.admit(who("alice"), "calc").await.unwrap();
    let refused = limiter.admit(who("alice"), "calc").await.unwrap_err();
    assert_eq!(refused.reason, Reason::ConcurrencyPrincipal);
    let b1 = limiter.admit(who("bob"), "calc").await.unwrap();
    assert_eq!(
        limiter.admit(who("bob"), "calc").await.unwrap_err().reason,
        Reason::ConcurrencyTool
    );
    // Another tool has its own cap.
    let other = limiter.admit(who("bob"), "other").await.unwrap();
    drop(other);
    drop(a1);
    let b2 = limiter.admit(who("bob"), "calc").await.unwrap();
    drop((a2, b1, b2));
    assert_eq!(
        memory_held(&limiter),
        0,
        "no count is kept once every call ended"
    );
}

#[tokio::test]
async fn idle_buckets_are_forgotten_so_memory_stays_bounded() {
    let (limiter, now) = in_memory("[per_principal]\nrate = \"10/s\"");
    let principals = 5_000;
    for round in 0..10 {
        for i in 0..principals {
            let id = format!("p{round}-{i}");
            drop(limiter.admit(who(&id), "calc").await.unwrap());
        }
        // Each bucket is full again 100 ms after its call.
        advance(&now, Duration::from_secs(1));
        let held = memory_held(&limiter);
        assert!(
            held <= 2 * principals + 1024,
            "round {round}: {held} buckets kept for {principals} principals active at a time"
        );
    }
}

#[tokio::test]
async fn unlimited_calls_need_no_store_and_a_tool_entry_overrides_per_tool() {
    let (limiter, _now) = in_memory("[tool.fetch]\nrate = \"1/h\"");
    for _ in 0..100 {
        drop(limiter.admit(who("alice"), "calc").await.unwrap());
    }
    drop(limiter.admit(who("alice"), "fetch").await.unwrap());
    assert_eq!(
        limiter.admit(who("bob"), "fetch").await.unwrap_err().reason,
        Reason::RateTool
    );
    // A Redis limiter with nothing to limit never dials Redis.
    let limiter = on_redis("redis://127.0.0.1:1", "", quick());
    drop(limiter.admit(who("alice"), "calc").await.unwrap());
    assert_eq!(limiter.outages(), 0);
}

#[tokio::test]
async fn refusals_are_counted_by_class_and_reason_and_classes_are_bounded() {
    let (limiter, _now) = in_memory("[per_principal]\nrate = \"1/h\"");
    for class in (0..MAX_CLASSES + 10).map(|i| format!("class{i:03}")) {
        let caller = Caller {
            id: "same",
            class: &class,
        };
        let _ = limiter.admit(caller, "calc").await;
    }
    let counts = limiter.refusals();
    // The first class's call was admitted; the next 64 classes were each
    // refused once and counted apart, the last 9 together.
    let other = counts.iter().find(|c| c.class == OTHER_CLASS).unwrap();
    assert_eq!((other.reason, other.count), (Reason::RatePrincipal, 9));
    assert_eq!(counts.len(), MAX_CLASSES + 1);
    assert_eq!(
        counts.iter().map(|c| c.count).sum::<u64>(),
        (MAX_CLASSES + 9) as u64
    );
    assert!(counts.iter().all(|c| c.reason.as_str() == "rate_principal"));
}

#[test]
fn principal_ids_and_tool_names_never_share_a_key() {
    let names = [
        "a:b", "a%3Ab", "a", "a:b:c", "", ":", "%", "%3A", "a:", ":a", "rp:a", "b",
    ];
    let mut keys = std::collections::HashSet::new();
    for prefix in ["toolhost:limits", "toolhost:limits:rp"] {
        for kind in ["rp", "rt", "cp", "ct"] {
            for name in names {
                assert!(
                    keys.insert(key(prefix, kind, name)),
                    "{prefix} {kind} {name:?}"
                );
            }
        }
    }
}

#[tokio::test]
async fn ids_with_colons_do_not_share_a_budget_in_redis() {
    let redis = RedisServer::start();
    let limiter = on_redis(&redis.url(), "[per_principal]\nrate = \"1/h\"", quick());
    for id in ["a:b", "a%3Ab", "a", "a:b:c", "", "b", "calc"] {
        drop(limiter.admit(who(id), "calc").await.unwrap());
        let refused = limiter.admit(who(id), "calc").await.unwrap_err();
        assert_eq!(refused.reason, Reason::RatePrincipal, "{id:?}");
    }
}

/// Admit `n` calls of `id` to `tool` through `limiter`; how many got in.
async fn admit_many(limiter: &Limiter, id: &str, tool: &str, n: usize) -> usize {
    let mut admitted = 0;
    for _ in 0..n {
        if limiter.admit(who(id), tool).await.is_ok() {
            admitted += 1;
        }
    }
    admitted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_on_one_redis_share_one_budget() {
    let redis = RedisServer::start();
    let rules = "[per_principal]\nrate = \"20/h\"\n[per_tool]\nrate = \"30/h\"";
    let replicas = [
        on_redis(&redis.url(), rules, quick()),
        on_redis(&redis.url(), rules, quick()),
    ];
    // Both replicas at once, 25 calls each, of one principal: its 20 get in.
    let (a, b) = tokio::join!(
        admit_many(&replicas[0], "alice", "calc", 25),
        admit_many(&replicas[1], "alice", "calc", 25)
    );
    assert_eq!(a + b, 20, "replica a admitted {a}, b {b}");
    // Calc has 10 of its 30 left, whoever calls and through whichever replica.
    let (c, d) = tokio::join!(
        admit_many(&replicas[0], "carol", "calc", 8),
        admit_many(&replicas[1], "dave", "calc", 8)
    );
    assert_eq!(c + d, 10, "replica a admitted {c}, b {d}");
    // The bucket is kept in Redis's time: full again 20 × 3 min after now.
    let mut connection = ::redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let (secs, micros): (u64, u64) = ::redis::cmd("TIME")
        .query_async(&mut connection)
        .await
        .unwrap();
    let redis_now = secs * 1_000_000 + micros;
    let tat: u64 = ::redis::cmd("GET")
        .arg(key(DEFAULT_PREFIX, "rp", "alice"))
        .query_async(&mut connection)
        .await
        .unwrap();
    let ahead = tat
        .checked_sub(redis_now)
        .expect("the bucket is ahead of Redis's clock");
    assert!(ahead <= 20 * 180_000_000, "{ahead} µs ahead");
    let ttl: i64 = ::redis::cmd("PTTL")
        .arg(key(DEFAULT_PREFIX, "rp", "alice"))
        .query_async(&mut connection)
        .await
        .unwrap();
    assert!(ttl > 0, "a bucket expires when full again: PTTL {ttl}");
}

#[tokio::test]
async fn redis_leases_are_released_on_drop_and_expire_when_their_replica_is_gone() {
    let redis = RedisServer::start();
    let rules = "[per_principal]\nconcurrency = 2";
    let a = on_redis(&redis.url(), rules, quick());
    let b = on_redis(&redis.url(), rules, quick());
    let first = a.admit(who("alice"), "calc").await.unwrap();
    let _second = b.admit(who("alice"), "calc").await.unwrap();
    let refused = a.admit(who("alice"), "calc").await.unwrap_err();
    assert_eq!(refused.reason, Reason::ConcurrencyPrincipal);
    // A replica's own release is seen by its next check.
    drop(first);
    let third = a.admit(who("alice"), "calc").await.unwrap();
    // Another replica's release reaches Redis by itself, soon.
    drop(third);
    let mut waited = 0;
    let _fourth = loop {
        match b.admit(who("alice"), "calc").await {
            Ok(permit) => break permit,
            Err(refused) => assert_eq!(refused.reason, Reason::ConcurrencyPrincipal),
        }
        waited += 1;
        assert!(waited < 500, "replica a's released lease never left Redis");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    // A dead replica's lease, expired in Redis's time, holds no slot.
    let leases = key(DEFAULT_PREFIX, "cp", "bob");
    let mut connection = ::redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = ::redis::cmd("ZADD")
        .arg(&leases)
        .arg(1)
        .arg("dead-replica-1")
        .arg(2)
        .arg("dead-replica-2")
        .query_async(&mut connection)
        .await
        .unwrap();
    let held = a.admit(who("bob"), "calc").await.unwrap();
    let _also = a.admit(who("bob"), "calc").await.unwrap();
    let count: u64 = ::redis::cmd("ZCARD")
        .arg(&leases)
        .query_async(&mut connection)
        .await
        .unwrap();
    assert_eq!(
        count, 2,
        "the dead leases were dropped, the two live ones kept"
    );
    // A live lease is renewed: its expiry moves on.
    let expiries = async |connection: &mut ::redis::aio::MultiplexedConnection| -> Vec<u64> {
        ::redis::cmd("ZRANGE")
            .arg(&leases)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query_async::<Vec<(String, u64)>>(connection)
            .await
            .unwrap()
            .into_iter()
            .map(|(_, score)| score)
            .collect()
    };
    let before = expiries(&mut connection).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let Backend::Redis(remote) = &a.inner.backend else {
        unreachable!("a Redis limiter")
    };
    remote.maintain().await;
    let after = expiries(&mut connection).await;
    assert!(
        after.iter().zip(&before).all(|(a, b)| a > b),
        "renewed: {before:?} → {after:?}"
    );
    drop(held);
}

/// A log that the test reads back.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Log {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Log {
    /// Lines holding `what` and `about` (the Redis URL of the test that
    /// counts: the log is the whole process's).
    fn count_about(&self, what: &str, about: &str) -> usize {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .filter(|line| line.contains(what) && line.contains(about))
            .count()
    }
}

const DOWN: &str = "cannot reach Redis";
const BACK: &str = "Redis is reachable again";

/// Admit until Redis answers again, within ten seconds.
async fn until_reachable(limiter: &Limiter) {
    for _ in 0..500 {
        match limiter.admit(who("alice"), "calc").await {
            Err(refused) if refused.reason == Reason::Unavailable => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            _ => return,
        }
    }
    panic!("Redis never became reachable again");
}

/// A port held by a listener that closes every connection at once: a
/// Redis that is down, which nothing else can start on meanwhile.
struct Squatter {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Squatter {
    fn on(port: u16) -> Self {
        let listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("the port is free");
        listener.set_nonblocking(true).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = stop.clone();
        std::thread::spawn(move || {
            while !stopping.load(std::sync::atomic::Ordering::Relaxed) {
                // Accepted and dropped: the client sees the connection close.
                if listener.accept().is_err() {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        });
        Self { stop }
    }
}

impl Drop for Squatter {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        // Let the thread see it and drop the listener before the port is
        // taken again.
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(feature = "cli")]
#[tokio::test]
async fn redis_down_fails_closed_or_open_as_configured_and_says_so_once_per_outage() {
    let log = Log::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    // The process's subscriber, not one for this thread: a thread-local one
    // loses lines to tracing's per-callsite caches when other tests run at
    // once (seen: no line at all). Lines are counted by this test's URL.
    tracing::subscriber::set_global_default(subscriber)
        .expect("no other test sets the process's subscriber");

    let redis = RedisServer::start();
    let url = redis.url();
    let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
    let rules = "[per_principal]\nrate = \"1000/s\"\nconcurrency = 100";
    let closed = on_redis(&url, rules, quick());
    let open = on_redis(
        &url,
        &format!("on_redis_error = \"open\"\n{rules}"),
        quick(),
    );
    drop(closed.admit(who("alice"), "calc").await.unwrap());
    drop(open.admit(who("alice"), "calc").await.unwrap());
    drop(redis);
    // Hold the port while Redis is "down": a redis-server another test
    // starts meanwhile must not land on it and end the outage early.
    let squatter = Squatter::on(port);

    for _ in 0..5 {
        let refused = closed.admit(who("alice"), "calc").await.unwrap_err();
        assert_eq!(refused.reason, Reason::Unavailable);
        assert!(
            refused.message.contains("retry after"),
            "{}",
            refused.message
        );
        drop(open.admit(who("alice"), "calc").await.unwrap());
    }
    assert_eq!((closed.outages(), open.outages()), (1, 1));
    assert_eq!(
        log.count_about(DOWN, &url),
        2,
        "one warning per limiter per outage"
    );
    assert_eq!(open.admitted_unchecked(), 5);
    assert_eq!(closed.admitted_unchecked(), 0);
    let refused: u64 = closed.refusals().iter().map(|c| c.count).sum();
    assert_eq!(refused, 5);
    assert!(
        closed
            .refusals()
            .iter()
            .all(|c| c.reason == Reason::Unavailable)
    );

    // Back: one line says so, and calls are checked again.
    drop(squatter);
    let redis = RedisServer::start_on(port);
    until_reachable(&closed).await;
    assert_eq!(log.count_about(BACK, &url), 1);
    drop(closed.admit(who("alice"), "calc").await.unwrap());
    assert_eq!(log.count_about(DOWN, &url), 2);

    // A second outage is a second warning.
    drop(redis);
    let _squatter = Squatter::on(port);
    closed.admit(who("alice"), "calc").await.unwrap_err();
    closed.admit(who("alice"), "calc").await.unwrap_err();
    assert_eq!(closed.outages(), 2);
    assert_eq!(log.count_about(DOWN, &url), 3);
    // (Every line counted above names the server.)
}

#[tokio::test]
async fn a_server_down_from_the_start_is_an_outage_too() {
    let redis = RedisServer::start();
    let url = redis.url();
    drop(redis);
    let closed = on_redis(&url, "[per_tool]\nrate = \"5/s\"", quick());
    let refused = closed.admit(who("alice"), "calc").await.unwrap_err();
    assert_eq!(refused.reason, Reason::Unavailable);
    assert!(refused.retry_after <= quick().probe_every, "{refused:?}");
    assert_eq!(closed.outages(), 1);
}

/// What one admit costs, in memory and on a local Redis, and how close two
/// replicas on one Redis keep a sustained rate. Run with
/// `cargo-locked test --release --workspace --lib fair::tests::measure -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: prints figures, asserts nothing about time"]
async fn measure_admit_cost_and_accuracy_across_replicas() {
    let rules = "[per_principal]\nrate = \"1000000/s\"\nconcurrency = 1000\n\
                 [per_tool]\nrate = \"1000000/s\"";
    let limiter = Limiter::new(policy(rules));
    let n = 1_000_000;
    let start = std::time::Instant::now();
    for i in 0..n {
        let id = format!("p{}", i % 1000);
        drop(limiter.admit(who(&id), "calc").await.unwrap());
    }
    let memory = start.elapsed() / n;
    let redis = RedisServer::start();
    let limiter = on_redis(&redis.url(), rules, Timing::default());
    let n = 20_000;
    let start = std::time::Instant::now();
    for i in 0..n {
        let id = format!("p{}", i % 1000);
        drop(limiter.admit(who(&id), "calc").await.unwrap());
    }
    let on_redis_cost = start.elapsed() / n;
    let limiter = on_redis(
        &redis.url(),
        "[per_principal]\nrate = \"1000000/s\"",
        Timing::default(),
    );
    let start = std::time::Instant::now();
    for i in 0..n {
        let id = format!("p{}", i % 1000);
        drop(limiter.admit(who(&id), "calc").await.unwrap());
    }
    let rate_only = start.elapsed() / n;
    println!("admit, one rate only: local Redis {rate_only:?}");
    println!(
        "admit (rate + cap on principal and tool, 1000 principals): memory {memory:?}, local Redis {on_redis_cost:?}"
    );

    // Two replicas, four callers each, all as one principal at 200/s, burst 1, for 3 s.
    let rules = "[per_principal]\nrate = \"200/s\"\nburst = 1";
    let replicas = [
        on_redis(&redis.url(), rules, Timing::default()),
        on_redis(&redis.url(), rules, Timing::default()),
    ];
    let start = std::time::Instant::now();
    let run = Duration::from_secs(3);
    let mut tasks = Vec::new();
    for replica in &replicas {
        for _ in 0..4 {
            let replica = replica.clone();
            tasks.push(tokio::spawn(async move {
                let mut admitted = 0u64;
                while start.elapsed() < run {
                    if replica.admit(who("shared"), "calc").await.is_ok() {
                        admitted += 1;
                    }
                }
                admitted
            }));
        }
    }
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.unwrap();
    }
    let expected = 200.0 * start.elapsed().as_secs_f64() + 1.0;
    println!(
        "two replicas at 200/s for {:?}: {admitted} admitted, {expected:.0} allowed ({:+.2}%)",
        start.elapsed(),
        (admitted as f64 / expected - 1.0) * 100.0
    );
}
