//! `GET /metrics`: what the server has done, in the Prometheus text format
//! (OpenMetrics), for any scraper.
//!
//! Label values come only from the loaded tools' names and the fixed
//! outcome taxonomy: a call to a tool that does not exist is counted under
//! [`Metrics::UNKNOWN_TOOL`], so a client cannot grow the label sets (and the
//! server's memory) by making up names.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::fair::Limiter;
use crate::tool_host::{CallResult, ToolHost};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    tool: String,
    /// `success` or an error type (`timeout`, `tool_error`, …).
    outcome: &'static str,
    /// `mcp` or `http`.
    front_end: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    tool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitedLabels {
    /// The principal's class (bounded by the limiter, see
    /// [`super::fair::MAX_CLASSES`]).
    class: String,
    /// Which budget refused: `rate_principal`, `concurrency_tool`, ….
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskLabels {
    /// `started`, `completed`, `failed`, `cancelled`, `taken_over`,
    /// `rerun` or `fenced`.
    event: &'static str,
    /// `memory`, `redb` or `redis`.
    store: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RejectLabels {
    front_end: &'static str,
    reason: &'static str,
}

/// Passes everything on to the observer a front end gave (if any), and
/// counts the calls a call made (code mode).
#[derive(Debug)]
pub(crate) struct Counted {
    pub inner: Option<std::sync::Arc<dyn crate::observe::CallObserver>>,
    pub metrics: std::sync::Arc<Metrics>,
}

impl crate::observe::CallObserver for Counted {
    fn wants(&self, level: crate::observe::LogLevel) -> bool {
        self.inner.as_ref().is_some_and(|o| o.wants(level))
    }

    fn log(&self, level: crate::observe::LogLevel, line: &str) {
        if let Some(inner) = &self.inner {
            inner.log(level, line);
        }
    }

    fn progress(&self, progress: &crate::observe::Progress) {
        if let Some(inner) = &self.inner {
            inner.progress(progress);
        }
    }

    fn called(&self, outcome: &crate::outcome::Outcome) {
        self.metrics.record_nested(outcome);
        if let Some(inner) = &self.inner {
            inner.called(outcome);
        }
    }

    fn refused_unreported(&self, outcome: &crate::outcome::Outcome) {
        self.metrics.record_refused(outcome);
        if let Some(inner) = &self.inner {
            inner.refused_unreported(outcome);
        }
    }
}

/// The server's counters and histograms.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    calls: Family<CallLabels, Counter>,
    duration: Family<ToolLabels, Histogram>,
    queue_wait: Histogram,
    fuel: Family<ToolLabels, Counter<u64, AtomicU64>>,
    in_flight: Gauge,
    loading: Gauge,
    waited_for_compile: Counter,
    rejected: Family<RejectLabels, Counter>,
    reloads: Family<ReloadLabels, Counter>,
    registry_loads: Family<RegistryLabels, Counter>,
    verify_failures: Counter,
    limited: Family<LimitedLabels, Counter>,
    limiter_outages: Counter,
    limiter_unchecked: Counter,
    tasks: Family<TaskLabels, Counter>,
    mcp_fast_path: Counter,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RegistryLabels {
    /// `network` (pulled) or `cache` (all from the blob store).
    source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadLabels {
    result: &'static str,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Register the counters of `[serve.limits]`: refusals by class and
/// reason, Redis outages, calls admitted unchecked.
fn register_limits(registry: &mut Registry) -> (Family<LimitedLabels, Counter>, Counter, Counter) {
    let limited = Family::<LimitedLabels, Counter>::default();
    registry.register(
        "rate_limited",
        "Calls refused by [serve.limits], by principal class and the budget that refused them",
        limited.clone(),
    );
    let outages = Counter::default();
    registry.register(
        "rate_limiter_outages",
        "Times the rate limiter found its Redis unreachable",
        outages.clone(),
    );
    let unchecked = Counter::default();
    registry.register(
        "rate_limiter_unchecked",
        "Calls admitted unchecked while Redis was unreachable (on_redis_error = \"open\")",
        unchecked.clone(),
    );
    (limited, outages, unchecked)
}

/// Register the counter of durable tasks' events.
fn register_tasks(registry: &mut Registry) -> Family<TaskLabels, Counter> {
    let tasks = Family::<TaskLabels, Counter>::default();
    registry.register(
        "tasks",
        "Durable tasks by event (started, completed, failed, cancelled, taken_over, rerun, fenced) \
         and store (memory, redb, redis), as this replica saw them",
        tasks.clone(),
    );
    tasks
}

impl Metrics {
    /// The content type of [`Metrics::render`]'s text.
    pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

    /// The `tool` label of calls to names no loaded tool has.
    pub const UNKNOWN_TOOL: &str = "(unknown)";

    /// Empty metrics, registered under `toolhost_`.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("toolhost");
        let calls = Family::<CallLabels, Counter>::default();
        registry.register(
            "tool_calls",
            "Tool calls answered, by tool, outcome (success or the error type) and front end",
            calls.clone(),
        );
        // 50 µs to about 100 s: calls range from a few microseconds of
        // arithmetic to tools that wait on the network until their deadline.
        let duration = Family::<ToolLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.00005, 4.0, 11))
        });
        registry.register(
            "tool_call_duration_seconds",
            "Time from dispatch to outcome, queueing included, by tool",
            duration.clone(),
        );
        let queue_wait = Histogram::new(exponential_buckets(0.00001, 4.0, 12));
        registry.register(
            "tool_call_queue_wait_seconds",
            "Time calls waited for a free instance (the tool's or the host's concurrency limit)",
            queue_wait.clone(),
        );
        let fuel = Family::<ToolLabels, Counter<u64, AtomicU64>>::default();
        registry.register(
            "tool_fuel_used",
            "Fuel (wasm instructions, roughly) spent by calls, by tool",
            fuel.clone(),
        );
        let in_flight = Gauge::default();
        registry.register(
            "instances_in_flight",
            "Sandbox instances running a call at the time of the scrape",
            in_flight.clone(),
        );
        let loading = Gauge::default();
        registry.register(
            "components_loading",
            "Components still compiling at start (their tools are listed once they are ready)",
            loading.clone(),
        );
        let waited_for_compile = Counter::default();
        registry.register(
            "calls_waited_for_compile",
            "Calls of a tool not loaded yet that waited for the components compiling at start",
            waited_for_compile.clone(),
        );
        let rejected = Family::<RejectLabels, Counter>::default();
        registry.register(
            "rejected_requests",
            "Requests refused before any tool ran (malformed, too large, unauthorized, bad origin), by front end and reason",
            rejected.clone(),
        );
        let reloads = Family::<ReloadLabels, Counter>::default();
        registry.register(
            "reloads",
            "Hot reloads of the manifest and components, by result (ok or failed)",
            reloads.clone(),
        );
        let registry_loads = Family::<RegistryLabels, Counter>::default();
        registry.register(
            "registry_components",
            "Registry components loaded (at start and on reloads), by source: network (pulled) or cache (no network)",
            registry_loads.clone(),
        );
        let verify_failures = Counter::default();
        registry.register(
            "registry_verify_failures",
            "Reloads refused because a registry component's signatures did not satisfy its policy",
            verify_failures.clone(),
        );
        let (limited, limiter_outages, limiter_unchecked) = register_limits(&mut registry);
        let tasks = register_tasks(&mut registry);
        let mcp_fast_path = Counter::default();
        registry.register(
            "mcp_fast_path_requests",
            "MCP requests answered on their own task (a plain stateless tools/call) rather than \
             through rmcp; counted besides tool_calls, which counts every call",
            mcp_fast_path.clone(),
        );
        Self {
            mcp_fast_path,
            tasks,
            registry,
            limited,
            limiter_outages,
            limiter_unchecked,
            registry_loads,
            verify_failures,
            calls,
            duration,
            queue_wait,
            fuel,
            in_flight,
            loading,
            waited_for_compile,
            rejected,
            reloads,
        }
    }

    /// `pending` components are still compiling at start.
    pub(crate) fn loading(&self, pending: usize) {
        self.loading.set(i64::try_from(pending).unwrap_or(i64::MAX));
    }

    /// A call waited for the components compiling at start.
    pub(crate) fn waited_for_compile(&self) {
        self.waited_for_compile.inc();
    }

    /// Count one answered call, under its tool's name when the call named
    /// a loaded tool (as it resolved when the call began), else under
    /// [`Metrics::UNKNOWN_TOOL`].
    pub fn record(&self, result: &CallResult, front_end: &'static str) {
        let tool = result
            .spec
            .as_ref()
            .map_or_else(|| Self::UNKNOWN_TOOL.to_owned(), |spec| spec.name.clone());
        self.count(tool, &result.outcome, front_end);
    }

    /// Count one call a call made (code mode): under its tool and the
    /// front end `nested`.
    pub(crate) fn record_nested(&self, outcome: &crate::outcome::Outcome) {
        self.count(outcome.tool.clone(), outcome, "nested");
    }

    /// A refused call a program made, past those reported: counted, and
    /// kept out of the duration and queue histograms (it took no time, and
    /// a program refused in a loop would drag them to zero).
    pub(crate) fn record_refused(&self, outcome: &crate::outcome::Outcome) {
        self.count_call(outcome.tool.clone(), outcome, "nested");
    }

    /// Count `outcome` in `calls_total` alone.
    fn count_call(&self, tool: String, outcome: &crate::outcome::Outcome, front_end: &'static str) {
        let kind = match &outcome.result {
            Ok(_) => "success",
            Err(error) => error.kind.as_str(),
        };
        self.calls
            .get_or_create(&CallLabels {
                tool,
                outcome: kind,
                front_end,
            })
            .inc();
    }

    fn count(&self, tool: String, outcome: &crate::outcome::Outcome, front_end: &'static str) {
        self.count_call(tool.clone(), outcome, front_end);
        let labels = ToolLabels { tool };
        self.duration
            .get_or_create(&labels)
            .observe(outcome.stats.duration.as_secs_f64());
        self.queue_wait
            .observe(outcome.stats.queue_wait.as_secs_f64());
        if outcome.stats.fuel_used > 0 {
            self.fuel
                .get_or_create(&labels)
                .inc_by(outcome.stats.fuel_used);
        }
    }

    /// Count one event of a durable task kept in `store`.
    pub(crate) fn task(&self, event: &'static str, store: &'static str) {
        self.tasks.get_or_create(&TaskLabels { event, store }).inc();
    }

    /// Count one MCP request the fast path answered.
    pub(crate) fn mcp_fast_path(&self) {
        self.mcp_fast_path.inc();
    }

    /// Count one request refused at the edge.
    pub fn reject(&self, front_end: &'static str, reason: &'static str) {
        self.rejected
            .get_or_create(&RejectLabels { front_end, reason })
            .inc();
    }

    /// Count the registry components of one load, pulled or from the cache.
    pub fn registry(&self, report: &[crate::tool_host::PinReport]) {
        for pinned in report {
            let source = if pinned.fetched { "network" } else { "cache" };
            self.registry_loads
                .get_or_create(&RegistryLabels { source })
                .inc();
        }
    }

    /// Count one load refused by a signature policy.
    pub fn verify_failure(&self) {
        self.verify_failures.inc();
    }

    /// Count one reload.
    pub fn reload(&self, ok: bool) {
        let result = if ok { "ok" } else { "failed" };
        self.reloads.get_or_create(&ReloadLabels { result }).inc();
    }

    /// Bring the limiter's counts up to date: it keeps them (bounded by
    /// class), these counters follow. Called before each render.
    pub(crate) fn limits(&self, limiter: &Limiter) {
        let catch_up = |counter: &Counter, count: u64| {
            counter.inc_by(count.saturating_sub(counter.get()));
        };
        for refused in limiter.refusals() {
            let labels = LimitedLabels {
                class: refused.class,
                reason: refused.reason.as_str(),
            };
            catch_up(&self.limited.get_or_create(&labels), refused.count);
        }
        catch_up(&self.limiter_outages, limiter.outages());
        catch_up(&self.limiter_unchecked, limiter.admitted_unchecked());
    }

    /// Everything, as the text a scraper reads; `host` gives the gauges.
    pub fn render(&self, host: &ToolHost) -> String {
        self.in_flight
            .set(i64::try_from(host.in_flight()).unwrap_or(i64::MAX));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        text
    }
}
