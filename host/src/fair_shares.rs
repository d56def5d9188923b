//! Fair shares as the manifest writes them (`[serve.limits]`,
//! [`LimitsConfig`]), and the checked [`Policy`] the limiter in
//! `serve::fair` is built from. Domain-level, so the manifest (which
//! always compiles) validates it at load, while the limiter itself lives
//! behind the `serve` feature.

use std::collections::BTreeMap;
use std::fmt;
use std::num::NonZeroU32;
use std::time::Duration;

use serde::Deserialize;

use crate::grants::store::redacted;

/// The key prefix in Redis when the manifest names none.
pub const DEFAULT_PREFIX: &str = "toolhost:limits";

/// The longest a full bucket may take to refill (burst ÷ rate). It bounds
/// how long a bucket's state is kept after its last call, in memory and in
/// Redis; a budget over days is a quota, which this limiter is not.
const MAX_REFILL: Duration = Duration::from_secs(24 * 3600);

/// The fastest rate: one call per microsecond, the unit buckets count in.
const MIN_INTERVAL_US: u64 = 1;

/// `[serve.limits]` as written: where the budgets live and what they are.
/// Check it with [`LimitsConfig::validate`]. Its `Debug` hides the Redis
/// URL's password.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// `redis://…` or `redis+unix://…`: budgets shared by every replica
    /// naming it. Absent: in this process's memory.
    pub redis: Option<String>,
    /// The prefix of every key in Redis; default [`DEFAULT_PREFIX`].
    pub prefix: Option<String>,
    /// What a call gets when Redis cannot be reached; default closed.
    pub on_redis_error: Option<OnRedisError>,
    /// Each principal's own budget, all tools together.
    pub per_principal: Option<LimitSpec>,
    /// Each tool's budget, all principals together.
    pub per_tool: Option<LimitSpec>,
    /// Per-tool entries: the keys an entry sets replace those of
    /// `per_tool` for that tool; those it leaves out are `per_tool`'s.
    #[serde(default)]
    pub tool: BTreeMap<String, LimitSpec>,
}

impl fmt::Debug for LimitsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimitsConfig")
            .field("redis", &self.redis.as_deref().map(redacted))
            .field("prefix", &self.prefix)
            .field("on_redis_error", &self.on_redis_error)
            .field("per_principal", &self.per_principal)
            .field("per_tool", &self.per_tool)
            .field("tool", &self.tool)
            .finish()
    }
}

/// One budget as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitSpec {
    /// Calls per period: `"100/min"`, `"5/s"`, `"1000/h"`, `"10/30s"`.
    pub rate: Option<String>,
    /// Calls that may come at once after a quiet spell; default the rate's
    /// count.
    pub burst: Option<u32>,
    /// Calls that may run at the same time.
    pub concurrency: Option<u32>,
}

/// What a call gets while Redis cannot be reached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum OnRedisError {
    /// Admitted, unlimited, and counted as unchecked.
    Open,
    /// Refused with the reason `unavailable` and a retry-after.
    #[default]
    Closed,
}

/// A `[serve.limits]` key whose value cannot be used, and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`serve.limits.{key}`: {problem}")]
pub struct InvalidLimits {
    key: String,
    problem: String,
}

impl InvalidLimits {
    fn new(key: impl Into<String>, problem: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            problem: problem.into(),
        }
    }
}

/// A checked `[serve.limits]`: what the limiter (`serve::fair::Limiter::new`) takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub(crate) store: Store,
    pub(crate) per_principal: Budget,
    pub(crate) per_tool: Budget,
    pub(crate) tools: BTreeMap<String, Budget>,
}

/// Where the budgets are kept.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Store {
    Memory,
    Redis {
        url: String,
        prefix: String,
        on_error: OnRedisError,
    },
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Memory => f.write_str("Memory"),
            Self::Redis {
                url,
                prefix,
                on_error,
            } => f
                .debug_struct("Redis")
                .field("url", &redacted(url))
                .field("prefix", prefix)
                .field("on_error", on_error)
                .finish(),
        }
    }
}

/// One checked budget, and the keys that set it (for refusals' fixes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Budget {
    pub(crate) rate: Option<Bucket>,
    pub(crate) concurrency: Option<Cap>,
}

impl Budget {
    // Only the serving limiter asks; the library without `serve` has none.
    #[cfg_attr(not(feature = "serve"), allow(dead_code))]
    pub(crate) fn is_unlimited(&self) -> bool {
        self.rate.is_none() && self.concurrency.is_none()
    }
}

/// A token bucket: one token per `interval_us`, at most `burst` saved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Bucket {
    pub(crate) interval_us: u64,
    pub(crate) burst: u32,
    /// The rate as written, e.g. `100/min`, for messages.
    pub(crate) written: String,
    /// The key that set it, e.g. `tool.fetch.rate`.
    pub(crate) key: String,
}

/// A concurrency cap and the key that set it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cap {
    pub(crate) most: NonZeroU32,
    pub(crate) key: String,
}

impl Policy {
    /// The tools named by `[serve.limits.tool.NAME]` entries, for the
    /// server to check against the tools it loaded.
    pub fn tool_names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }
}

impl LimitsConfig {
    /// Check every key, and make the [`Policy`] a limiter is built from.
    ///
    /// # Errors
    ///
    /// The first key whose value cannot be used, with the fix: a rate of 0
    /// or that is not `COUNT/PERIOD`, a burst or concurrency of 0, a bucket
    /// that takes over a day to refill, an entry that limits nothing, a
    /// tool entry that is no tool name, a URL that is no Redis URL, or a
    /// prefix or `on_redis_error` without `redis`.
    pub fn validate(&self) -> Result<Policy, InvalidLimits> {
        let store = self.store()?;
        let per_principal = budget("per_principal", self.per_principal.as_ref(), None)?;
        let per_tool = budget("per_tool", self.per_tool.as_ref(), None)?;
        let mut tools = BTreeMap::new();
        for (name, spec) in &self.tool {
            let key = format!("tool.{name}");
            if !crate::spec::valid_name(name) {
                return Err(InvalidLimits::new(
                    key,
                    "is not a tool name: write the name of a tool, 1 to 64 letters, digits, `_` or `-`",
                ));
            }
            tools.insert(
                name.clone(),
                budget(&key, Some(spec), Some((&per_tool, self.per_tool.as_ref())))?,
            );
        }
        Ok(Policy {
            store,
            per_principal,
            per_tool,
            tools,
        })
    }

    fn store(&self) -> Result<Store, InvalidLimits> {
        let Some(url) = &self.redis else {
            if self.prefix.is_some() {
                return Err(InvalidLimits::new(
                    "prefix",
                    "only budgets kept in Redis have a key prefix; set `redis` or remove `prefix`",
                ));
            }
            if self.on_redis_error.is_some() {
                return Err(InvalidLimits::new(
                    "on_redis_error",
                    "budgets kept in memory never fail; set `redis` or remove `on_redis_error`",
                ));
            }
            return Ok(Store::Memory);
        };
        if !crate::grants::store::is_redis_url(url) {
            return Err(InvalidLimits::new(
                "redis",
                format!(
                    "{:?} is not a Redis URL; write e.g. \"redis://127.0.0.1:6379\", or remove `redis` to keep budgets in memory",
                    crate::outcome::clip(&redacted(url), 60)
                ),
            ));
        }
        let prefix = self.prefix.as_deref().unwrap_or(DEFAULT_PREFIX);
        if prefix.is_empty() || prefix.contains(|c: char| c.is_whitespace() || c.is_control()) {
            return Err(InvalidLimits::new(
                "prefix",
                format!(
                    "{prefix:?} must be non-empty, without spaces; write e.g. \"{DEFAULT_PREFIX}\""
                ),
            ));
        }
        Ok(Store::Redis {
            url: url.clone(),
            prefix: prefix.to_owned(),
            on_error: self.on_redis_error.unwrap_or_default(),
        })
    }
}

/// Check the budget at `key`. A tool entry (`base` set) takes from
/// `per_tool` every key it does not set; its burst goes with its rate.
fn budget(
    key: &str,
    spec: Option<&LimitSpec>,
    base: Option<(&Budget, Option<&LimitSpec>)>,
) -> Result<Budget, InvalidLimits> {
    let Some(spec) = spec else {
        return Ok(Budget::default());
    };
    if spec.rate.is_none() && spec.burst.is_none() && spec.concurrency.is_none() {
        return Err(InvalidLimits::new(
            key,
            "limits nothing: give it `rate` (e.g. \"100/min\") or `concurrency`, or remove it",
        ));
    }
    let concurrency = match spec.concurrency {
        Some(most) => Some(Cap {
            most: NonZeroU32::new(most).ok_or_else(|| {
                InvalidLimits::new(
                    format!("{key}.concurrency"),
                    "0 would refuse every call; write at least 1, or remove it for no cap",
                )
            })?,
            key: format!("{key}.concurrency"),
        }),
        None => base.and_then(|(b, _)| b.concurrency.clone()),
    };
    let rate = match (&spec.rate, spec.burst, base) {
        (Some(rate), burst, _) => Some(bucket(key, rate, burst)?),
        // A tool entry that sets only `burst` keeps `per_tool`'s rate.
        (
            None,
            Some(burst),
            Some((
                _,
                Some(LimitSpec {
                    rate: Some(rate), ..
                }),
            )),
        ) => Some(bucket(key, rate, Some(burst))?),
        (None, Some(_), _) => {
            return Err(InvalidLimits::new(
                format!("{key}.burst"),
                "a burst needs a rate: add `rate` (e.g. \"100/min\") or remove `burst`",
            ));
        }
        (None, None, base) => base.and_then(|(b, _)| b.rate.clone()),
    };
    Ok(Budget { rate, concurrency })
}

/// The bucket of `rate` (`COUNT/PERIOD`) and `burst` at `key`.
fn bucket(key: &str, rate: &str, burst: Option<u32>) -> Result<Bucket, InvalidLimits> {
    let rate_key = format!("{key}.rate");
    let (count, period) = parse_rate(rate).map_err(|why| {
        InvalidLimits::new(
            &rate_key,
            format!(
                "{rate:?} {why}; write calls per period, e.g. \"100/min\", \"5/s\" or \"1000/h\""
            ),
        )
    })?;
    let period_us = u64::try_from(period.as_micros()).unwrap_or(u64::MAX);
    let interval_us = period_us / u64::from(count.get());
    if interval_us < MIN_INTERVAL_US {
        return Err(InvalidLimits::new(
            rate_key,
            format!("{rate:?} is over a million calls a second; write a slower rate, or remove it"),
        ));
    }
    let burst = match burst {
        None => count.get(),
        Some(0) => {
            return Err(InvalidLimits::new(
                format!("{key}.burst"),
                "0 would refuse every call; write at least 1, or remove it for the rate's count",
            ));
        }
        Some(b) => b,
    };
    let refill = Duration::from_micros(interval_us.saturating_mul(u64::from(burst)));
    if refill > MAX_REFILL {
        return Err(InvalidLimits::new(
            format!("{key}.burst"),
            format!(
                "a burst of {burst} at {rate} takes {} to refill, more than a day; lower the burst or raise the rate",
                humantime::format_duration(Duration::from_secs(refill.as_secs()))
            ),
        ));
    }
    Ok(Bucket {
        interval_us,
        burst,
        written: rate.trim().to_owned(),
        key: rate_key,
    })
}

/// `COUNT/PERIOD`: a count of at least 1, and a unit (`s`, `sec`,
/// `second`, `min`, `minute`, `h`, `hour`, `d`, `day`) or a duration
/// (`30s`, `5m`). The error says what is wrong, to follow the text.
fn parse_rate(text: &str) -> Result<(NonZeroU32, Duration), &'static str> {
    let (count, period) = text.split_once('/').ok_or("is not COUNT/PERIOD")?;
    let count: u32 = count
        .trim()
        .parse()
        .map_err(|_| "does not start with a count of calls")?;
    let count = NonZeroU32::new(count).ok_or("would refuse every call")?;
    let period = match period.trim() {
        "s" | "sec" | "second" => Duration::from_secs(1),
        "m" | "min" | "minute" => Duration::from_secs(60),
        "h" | "hr" | "hour" => Duration::from_secs(3600),
        "d" | "day" => Duration::from_secs(86_400),
        other => crate::duration::parse(other).map_err(|_| "has no period after the `/`")?,
    };
    if period.is_zero() {
        return Err("has a period of 0");
    }
    Ok((count, period))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(toml_text: &str) -> Result<Policy, String> {
        let config: LimitsConfig = toml::from_str(toml_text).map_err(|e| e.to_string())?;
        config.validate().map_err(|e| e.to_string())
    }

    #[test]
    fn rates_are_read_in_every_documented_spelling() {
        for (text, count, secs) in [
            ("100/min", 100, 60),
            ("5/s", 5, 1),
            ("1000/h", 1000, 3600),
            ("10/30s", 10, 30),
            (" 7 / minute ", 7, 60),
            ("2/5m", 2, 300),
            ("1/day", 1, 86_400),
        ] {
            let (c, period) = parse_rate(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(
                (c.get(), period),
                (count, Duration::from_secs(secs)),
                "{text}"
            );
        }
    }

    #[test]
    fn a_rate_and_its_default_burst_make_the_bucket() {
        let policy = limits("[per_principal]\nrate = \"100/min\"\nconcurrency = 4").unwrap();
        let bucket = policy.per_principal.rate.unwrap();
        assert_eq!((bucket.interval_us, bucket.burst), (600_000, 100));
        assert_eq!(bucket.key, "per_principal.rate");
        assert_eq!(policy.per_principal.concurrency.unwrap().most.get(), 4);
        assert_eq!(policy.store, Store::Memory);
        assert!(policy.per_tool.is_unlimited());
    }

    #[test]
    fn bad_limits_are_refused_with_the_key_and_the_fix() {
        for (text, expected) in [
            (
                "[per_principal]\nrate = \"0/min\"",
                "`serve.limits.per_principal.rate`: \"0/min\" would refuse every call; write calls per period",
            ),
            (
                "[per_principal]\nrate = \"fast\"",
                "`serve.limits.per_principal.rate`: \"fast\" is not COUNT/PERIOD; write calls per period, e.g. \"100/min\"",
            ),
            (
                "[per_principal]\nrate = \"ten/min\"",
                "does not start with a count of calls",
            ),
            (
                "[per_principal]\nrate = \"10/fortnight\"",
                "\"10/fortnight\" has no period after the `/`",
            ),
            ("[per_principal]\nrate = \"10/0s\"", "has a period of 0"),
            (
                "[per_principal]\nrate = \"2000000/s\"",
                "over a million calls a second",
            ),
            (
                "[per_tool]\nrate = \"5/s\"\nburst = 0",
                "`serve.limits.per_tool.burst`: 0 would refuse every call; write at least 1",
            ),
            (
                "[per_tool]\nconcurrency = 0",
                "`serve.limits.per_tool.concurrency`: 0 would refuse every call; write at least 1",
            ),
            (
                "[per_tool]\nburst = 3",
                "`serve.limits.per_tool.burst`: a burst needs a rate: add `rate`",
            ),
            (
                "[per_tool]",
                "`serve.limits.per_tool`: limits nothing: give it `rate`",
            ),
            (
                "[per_tool]\nrate = \"1/h\"\nburst = 100",
                "a burst of 100 at 1/h takes 4days 4h to refill, more than a day; lower the burst or raise the rate",
            ),
            (
                "[tool.\"no such\"]\nrate = \"1/s\"",
                "`serve.limits.tool.no such`: is not a tool name",
            ),
            (
                "[tool.fetch]\nrate = \"1/s\"\nburst = 0",
                "`serve.limits.tool.fetch.burst`: 0 would refuse",
            ),
            (
                "redis = \"postgres://u:secret@db\"",
                "`serve.limits.redis`: \"postgres://u:***@db\" is not a Redis URL; write e.g. \"redis://127.0.0.1:6379\"",
            ),
            ("redis = \"redis://h:notaport\"", "is not a Redis URL"),
            (
                "redis = \"redis://127.0.0.1\"\nprefix = \"\"",
                "`serve.limits.prefix`: \"\" must be non-empty",
            ),
            (
                "redis = \"redis://127.0.0.1\"\nprefix = \"a b\"",
                "must be non-empty, without spaces",
            ),
            (
                "prefix = \"x\"",
                "`serve.limits.prefix`: only budgets kept in Redis have a key prefix; set `redis` or remove `prefix`",
            ),
            (
                "on_redis_error = \"open\"",
                "`serve.limits.on_redis_error`: budgets kept in memory never fail",
            ),
            (
                "on_redis_error = \"sideways\"",
                "unknown variant `sideways`, expected `open` or `closed`",
            ),
            ("rate = \"1/s\"", "unknown field `rate`"),
            (
                "[per_principal]\nrates = \"1/s\"",
                "unknown field `rates`, expected one of `rate`, `burst`, `concurrency`",
            ),
            (
                "[per_principal]\nconcurrency = -1",
                "invalid value: integer `-1`",
            ),
        ] {
            let error = limits(text).expect_err(text);
            assert!(
                error.contains(expected),
                "{text}\n  gave: {error}\n  want: {expected}"
            );
            assert!(!error.contains("secret"), "{error}");
        }
    }

    #[test]
    fn a_tool_entry_replaces_only_the_keys_it_sets() {
        let policy = limits(
            "[per_tool]\nrate = \"10/s\"\nburst = 20\nconcurrency = 8\n\
             [tool.slow]\nconcurrency = 2\n\
             [tool.busy]\nrate = \"100/s\"\n\
             [tool.bursty]\nburst = 50",
        )
        .unwrap();
        let slow = &policy.tools["slow"];
        assert_eq!(
            slow.rate, policy.per_tool.rate,
            "slow keeps per_tool's rate"
        );
        assert_eq!(slow.concurrency.as_ref().unwrap().most.get(), 2);
        assert_eq!(
            slow.concurrency.as_ref().unwrap().key,
            "tool.slow.concurrency"
        );
        let busy = policy.tools["busy"].rate.as_ref().unwrap();
        // A tool's own rate brings its own burst: the rate's count.
        assert_eq!((busy.interval_us, busy.burst), (10_000, 100));
        assert_eq!(
            policy.tools["busy"]
                .concurrency
                .as_ref()
                .unwrap()
                .most
                .get(),
            8
        );
        let bursty = policy.tools["bursty"].rate.as_ref().unwrap();
        assert_eq!((bursty.interval_us, bursty.burst), (100_000, 50));
        assert_eq!(bursty.key, "tool.bursty.rate");
    }

    #[test]
    fn a_redis_store_takes_the_default_prefix_and_fails_closed_and_hides_its_password() {
        let policy = limits("redis = \"redis://:pw@127.0.0.1:6379/2\"").unwrap();
        assert_eq!(
            policy.store,
            Store::Redis {
                url: "redis://:pw@127.0.0.1:6379/2".into(),
                prefix: DEFAULT_PREFIX.into(),
                on_error: OnRedisError::Closed,
            }
        );
        assert!(!format!("{policy:?}").contains("pw@"), "{policy:?}");
        let config: LimitsConfig = toml::from_str("redis = \"redis://:pw@h\"").unwrap();
        assert!(!format!("{config:?}").contains("pw@"), "{config:?}");
        let unix = limits("redis = \"redis+unix:///run/redis.sock\"\non_redis_error = \"open\"");
        assert!(matches!(
            unix.unwrap().store,
            Store::Redis {
                on_error: OnRedisError::Open,
                ..
            }
        ));
    }
}
