//! Checking a call's arguments against its tool's input schema, and a
//! tool's structured output against its output schema, at a cost the host
//! can bound.
//!
//! Both sides are untrusted: the schema comes from the component (which may
//! be hostile), the arguments from the model and the output from the
//! component. So (for outputs as for arguments):
//! - arguments over the tool's `max_arguments` are refused before they are
//!   parsed;
//! - they must be a JSON object, whatever the schema says (a schema with
//!   `$ref` beside `"type": "object"` could otherwise let `5` through);
//! - `pattern` and `patternProperties` use the `regex` crate (finite
//!   automata, linear in the input) with size limits, never a backtracking
//!   engine, and `format` is an annotation, not a check;
//! - a schema that could still make validation expensive (combinators,
//!   references, `uniqueItems`, patterns, `contains`, …), and any large
//!   arguments, are checked on the blocking pool, off the async workers,
//!   under the call's deadline. A check cannot be stopped once it runs, so
//!   each component checks one call's arguments at a time (the permit stays
//!   with the check until it really ends): a schema that makes checking
//!   run away costs its own component its calls and one thread, never
//!   another component's. Plain schemas over small arguments (what nearly
//!   every tool has) are checked inline: that costs microseconds, no thread
//!   hand-off, and is linear in schema and input;
//! - at load, a component's schemas may hold at most
//!   [`MAX_PATTERNS_PER_COMPONENT`] regular expressions of at most
//!   [`REGEX_SIZE_LIMIT`] compiled bytes each, so describing tools cannot
//!   make the host compile gigabytes of automata.
//! - error messages are short: each problem is cut to [`MAX_PROBLEM`]
//!   characters and at most five are listed, so a 5 MiB argument is never
//!   echoed back.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Semaphore;

use crate::outcome::{CallError, ErrorType, INVALID_OUTPUT, ToolOutput, clip};
use crate::sandbox::Secrets;

/// Arguments at most this long are checked inline against a plain schema.
const INLINE_BYTES: usize = 4096;

/// Regular expressions (`pattern`, `patternProperties`) in all of one
/// component's input schemas together.
pub(crate) const MAX_PATTERNS_PER_COMPONENT: usize = 256;

/// The longest single problem reported to the model.
const MAX_PROBLEM: usize = 200;

/// The largest compiled form of one `pattern` (bytes of the `regex` crate's
/// program, and of its lazy DFA cache): ample for any real pattern.
pub(crate) const REGEX_SIZE_LIMIT: usize = 64 * 1024;

/// Keywords whose cost can grow faster than the arguments or the schema, or
/// that run regular expressions.
const COSTLY: &[&str] = &[
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "dependencies",
    "contains",
    "uniqueItems",
    "pattern",
    "patternProperties",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
    // References can make a schema recursive, and jsonschema's error
    // iterator does not memoise: a nested instance can cost exponential time.
    "$ref",
    "$dynamicRef",
    "$recursiveRef",
    "contentSchema",
];

/// A tool's compiled input or output schema.
pub(crate) struct CompiledSchema {
    validator: Arc<jsonschema::Validator>,
    /// No keyword in [`COSTLY`]: validation is linear in schema and input.
    plain: bool,
    /// The component's one turn at costly checks, shared by its tools.
    turn: Arc<Semaphore>,
}

/// What one component's schemas may cost at load, and its turn at costly
/// checks: one per component, shared by its tools.
#[derive(Debug)]
pub(crate) struct ComponentSchemas {
    patterns: usize,
    turn: Arc<Semaphore>,
}

impl Default for ComponentSchemas {
    fn default() -> Self {
        Self {
            patterns: 0,
            turn: Arc::new(Semaphore::new(1)),
        }
    }
}

impl CompiledSchema {
    /// Compile `schema` with the bounded regex engine.
    ///
    /// # Errors
    ///
    /// When it is not valid JSON Schema (or uses a pattern too large to
    /// compile within the limits).
    pub(crate) fn compile(
        schema: &Value,
        component: &mut ComponentSchemas,
    ) -> Result<Self, String> {
        component.patterns += count_patterns(schema);
        if component.patterns > MAX_PATTERNS_PER_COMPONENT {
            return Err(format!(
                "the component's input schemas use more than {MAX_PATTERNS_PER_COMPONENT} patterns"
            ));
        }
        let validator = jsonschema::options()
            .should_validate_formats(false)
            .with_pattern_options(
                jsonschema::PatternOptions::regex()
                    .size_limit(REGEX_SIZE_LIMIT)
                    .dfa_size_limit(REGEX_SIZE_LIMIT),
            )
            .build(schema)
            .map_err(|e| clip(&e.to_string(), 500))?;
        Ok(Self {
            validator: Arc::new(validator),
            plain: !uses_costly_keywords(schema),
            turn: component.turn.clone(),
        })
    }

    /// Check `arguments` (whose JSON text is `size` bytes) within `timeout`.
    ///
    /// # Errors
    ///
    /// [`Invalid::Mismatch`] with a message for the model, or
    /// [`Invalid::TimedOut`] when checking took longer than the call may.
    pub(crate) async fn check(
        &self,
        arguments: Value,
        size: usize,
        timeout: Duration,
    ) -> Result<Value, Invalid> {
        self.check_masked(arguments, size, timeout, None).await
    }

    /// [`CompiledSchema::check`], each problem masked with `secrets` before
    /// it is cut short (a complaint quotes the value, and a cut would
    /// leave the start of a secret where masking cannot recognise it).
    ///
    /// # Errors
    ///
    /// As [`CompiledSchema::check`].
    pub(crate) async fn check_masked(
        &self,
        arguments: Value,
        size: usize,
        timeout: Duration,
        secrets: Option<Arc<Secrets>>,
    ) -> Result<Value, Invalid> {
        if !arguments.is_object() {
            return Err(Invalid::Mismatch(format!(
                "arguments must be a JSON object, not {}",
                kind(&arguments)
            )));
        }
        self.validate(arguments, size, MAX_LISTED, timeout, secrets)
            .await
    }

    /// Check a tool's structured `output` within `timeout`; a mismatch names
    /// only the first problem (a tool's fault, for its author to fix from
    /// the log).
    ///
    /// # Errors
    ///
    /// As [`CompiledSchema::check`].
    pub(crate) async fn check_output(
        &self,
        output: Value,
        timeout: Duration,
    ) -> Result<Value, Invalid> {
        let size = json_size(&output, INLINE_BYTES + 1);
        // Masked already: the sandbox sealed the output.
        self.validate(output, size, 1, timeout, None).await
    }

    /// Check `value` (whose JSON text is `size` bytes), listing at most
    /// `most` problems: inline when the schema is plain and the value
    /// small, otherwise on the blocking pool, one check per component at a
    /// time, within `timeout`.
    async fn validate(
        &self,
        value: Value,
        size: usize,
        most: usize,
        timeout: Duration,
        secrets: Option<Arc<Secrets>>,
    ) -> Result<Value, Invalid> {
        if self.plain && size <= INLINE_BYTES {
            return problems(&self.validator, &value, true, most, secrets.as_deref())
                .map(|()| value);
        }
        // With no time left, a costly check is not started at all.
        if timeout.is_zero() {
            return Err(Invalid::TimedOut);
        }
        let validator = self.validator.clone();
        let turn = self.turn.clone();
        let plain = self.plain;
        let checked = async move {
            // Waiting for a turn counts against the deadline too; the turn
            // goes with the check and ends only when the check does.
            let turn = turn.acquire_owned().await;
            tokio::task::spawn_blocking(move || {
                let _turn = turn;
                problems(&validator, &value, plain, most, secrets.as_deref()).map(|()| value)
            })
            .await
        };
        match tokio::time::timeout(timeout, checked).await {
            Ok(Ok(result)) => result,
            Ok(Err(_panicked)) => Err(Invalid::Mismatch(
                "the host could not check this value against its schema".into(),
            )),
            Err(_) => Err(Invalid::TimedOut),
        }
    }
}

/// Check `output`'s structured output against the tool's output `schema`
/// within `left`, the rest of the call's time (of `timeout` in all).
///
/// A mismatch is the tool's fault, and calling again with the same
/// arguments gives the same output: a `tool_error` of kind
/// [`INVALID_OUTPUT`], not retryable, naming the first place that does not
/// fit. It is never passed on as a success: MCP clients must be able to
/// trust `structuredContent` to fit `outputSchema`, and the other formats
/// carry the same outcome. A result without structured output is left to
/// the edge (MCP answers it with an error; other formats need none).
///
/// # Errors
///
/// The typed error that replaces the result.
pub(crate) async fn check_structured(
    schema: &CompiledSchema,
    output: &mut ToolOutput,
    left: Duration,
    timeout: Duration,
) -> Result<(), CallError> {
    let Some(structured) = output.structured.take() else {
        return Ok(());
    };
    match schema.check_output(structured, left).await {
        Ok(structured) => {
            output.structured = Some(structured);
            Ok(())
        }
        Err(Invalid::Mismatch(problem)) => {
            tracing::warn!(problem = %problem, "the tool's structured output does not fit its output schema");
            Err(CallError {
                kind: ErrorType::ToolError,
                message: format!(
                    "its structured output does not fit its output schema ({problem}); the tool must be fixed"
                ),
                retryable: false,
                tool_kind: Some(INVALID_OUTPUT.to_owned()),
            })
        }
        Err(Invalid::TimedOut) => Err(CallError::new(
            ErrorType::Timeout,
            format!(
                "timed out after {} while checking its structured output against its output schema",
                humantime::format_duration(timeout)
            ),
        )),
    }
}

/// How many problems a mismatch of arguments lists.
const MAX_LISTED: usize = 5;

/// The length of `value`'s JSON text, counted up to `limit` bytes (writing
/// stops there: the text is never built).
fn json_size(value: &Value, limit: usize) -> usize {
    struct Counter {
        bytes: usize,
        limit: usize,
    }
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.bytes += buf.len();
            if self.bytes > self.limit {
                return Err(std::io::Error::other("over the limit"));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter { bytes: 0, limit };
    let _ = serde_json::to_writer(&mut counter, value);
    counter.bytes
}

/// Why a value (arguments, a structured output, an answer) was not
/// accepted.
#[derive(Debug)]
pub(crate) enum Invalid {
    /// It does not fit the schema: the message says where and why.
    Mismatch(String),
    /// Checking it took longer than the call's deadline.
    TimedOut,
}

/// Each field that is wrong and why (at most `most`, each masked with
/// `secrets`, then cut short).
///
/// A plain schema lists every problem (up to `most`). A costly one is first
/// checked with `is_valid`, which memoises references, and then reports
/// only the first problem, which `validate` finds without exploring every
/// branch: listing all of them is exponential for some recursive schemas.
fn problems(
    validator: &jsonschema::Validator,
    arguments: &Value,
    plain: bool,
    most: usize,
    secrets: Option<&Secrets>,
) -> Result<(), Invalid> {
    let masked = |text: String| match secrets {
        Some(secrets) => secrets.redact(text).into_string(),
        None => text,
    };
    let describe = |e: jsonschema::ValidationError<'_>| {
        let path = clip(&masked(e.instance_path().to_string()), 80);
        let problem = clip(&masked(e.to_string()), MAX_PROBLEM);
        if path.is_empty() {
            problem
        } else {
            format!("at {path}: {problem}")
        }
    };
    let errors: Vec<String> = if plain {
        validator
            .iter_errors(arguments)
            .take(most)
            .map(describe)
            .collect()
    } else if validator.is_valid(arguments) {
        Vec::new()
    } else {
        match validator.validate(arguments) {
            Ok(()) => vec!["it does not match the schema".to_owned()],
            Err(e) => vec![describe(e)],
        }
    };
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Invalid::Mismatch(errors.join("; ")))
    }
}

/// How many regular expressions `schema` holds.
fn count_patterns(schema: &Value) -> usize {
    let mut count = 0;
    let mut pending = vec![schema];
    while let Some(value) = pending.pop() {
        match value {
            Value::Object(map) => {
                if map.get("pattern").is_some_and(Value::is_string) {
                    count += 1;
                }
                if let Some(Value::Object(patterns)) = map.get("patternProperties") {
                    count += patterns.len();
                }
                pending.extend(map.values());
            }
            Value::Array(items) => pending.extend(items),
            _ => {}
        }
    }
    count
}

fn uses_costly_keywords(schema: &Value) -> bool {
    let mut pending = vec![schema];
    while let Some(value) = pending.pop() {
        match value {
            Value::Object(map) => {
                if map.keys().any(|k| COSTLY.contains(&k.as_str())) {
                    return true;
                }
                pending.extend(map.values());
            }
            Value::Array(items) => pending.extend(items),
            _ => {}
        }
    }
    false
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const FOREVER: Duration = Duration::from_secs(60);

    fn message(result: Result<Value, Invalid>) -> String {
        match result {
            Err(Invalid::Mismatch(message)) => message,
            other => panic!("expected invalid arguments, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn errors_name_the_field_and_the_reason() {
        let schema = CompiledSchema::compile(&json!({
            "type": "object",
            "properties": {"expression": {"type": "string"}, "times": {"type": "integer", "minimum": 1}},
            "required": ["expression"],
            "additionalProperties": false
        }), &mut ComponentSchemas::default())
        .unwrap();
        assert!(schema.plain);
        assert!(
            schema
                .check(json!({"expression": "1"}), 16, FOREVER)
                .await
                .is_ok()
        );
        let m = message(schema.check(json!({"times": 0}), 10, FOREVER).await);
        assert!(m.contains("\"expression\" is a required property"), "{m}");
        assert!(m.contains("at /times"), "{m}");
    }

    #[tokio::test]
    async fn arguments_are_an_object_whatever_the_schema_says() {
        let schema = CompiledSchema::compile(
            &json!({
                "$ref": "#/$defs/a", "type": "object", "$defs": {"a": {}}
            }),
            &mut ComponentSchemas::default(),
        )
        .unwrap();
        for value in [json!(5), json!("str"), json!(null), json!([1])] {
            let m = message(schema.check(value, 4, FOREVER).await);
            assert!(m.contains("must be a JSON object"), "{m}");
        }
    }

    #[tokio::test]
    async fn long_values_are_not_echoed_back() {
        let schema = CompiledSchema::compile(
            &json!({
                "type": "object", "properties": {"n": {"type": "integer"}}
            }),
            &mut ComponentSchemas::default(),
        )
        .unwrap();
        let huge = "x".repeat(1 << 20);
        let m = message(schema.check(json!({"n": huge}), 1 << 20, FOREVER).await);
        assert!(m.len() < 400, "{} bytes", m.len());
    }

    #[tokio::test]
    async fn a_complaint_is_masked_before_it_is_cut() {
        let schema = CompiledSchema::compile(
            &json!({
                "type": "object",
                "properties": {"n": {"type": "integer"}},
                "additionalProperties": false
            }),
            &mut ComponentSchemas::default(),
        )
        .unwrap();
        // A secret longer than a complaint may be, with characters JSON
        // escapes, given where a number belongs and as a key.
        let secret = format!("eyJ\"{}", "a".repeat(300));
        let secrets = Arc::new(Secrets::new([secret.as_str()]));
        let checked = schema
            .check_masked(
                json!({"n": secret, secret.clone(): 1}),
                700,
                FOREVER,
                Some(secrets),
            )
            .await;
        let m = message(checked);
        assert!(m.contains("[redacted]"), "{m}");
        assert!(!m.contains("eyJ"), "a prefix of the secret is left: {m}");
    }

    #[tokio::test]
    async fn a_backtracking_pattern_is_linear() {
        // Catastrophic for a backtracking engine on "aaaa…!".
        let schema = CompiledSchema::compile(
            &json!({
                "type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}
            }),
            &mut ComponentSchemas::default(),
        )
        .unwrap();
        assert!(!schema.plain);
        let input = format!("{}!", "a".repeat(100_000));
        // A backtracking engine would take longer than the age of the
        // universe, a linear one milliseconds: the bound only ends a test
        // that would otherwise never end.
        let checked = schema.check(json!({ "s": input }), 100_010, FOREVER);
        let m = message(
            tokio::time::timeout(Duration::from_secs(60), checked)
                .await
                .expect("the pattern backtracked"),
        );
        assert!(m.contains("at /s"), "{m}");
    }

    #[test]
    fn a_component_may_hold_only_so_many_patterns() {
        let mut component = ComponentSchemas::default();
        let properties: serde_json::Map<String, Value> = (0..200)
            .map(|i| {
                (
                    format!("p{i}"),
                    json!({"type": "string", "pattern": "^a+$"}),
                )
            })
            .collect();
        let schema = json!({"type": "object", "properties": properties});
        assert!(CompiledSchema::compile(&schema, &mut component).is_ok());
        let error = CompiledSchema::compile(&schema, &mut component)
            .err()
            .unwrap();
        assert!(error.contains("more than 256 patterns"), "{error}");
    }

    #[tokio::test]
    async fn a_recursive_schema_is_checked_off_the_workers_under_the_deadline() {
        // `$ref` beside `properties`, recursing: each level is validated
        // twice by the error iterator, so 2^depth steps.
        let schema = CompiledSchema::compile(
            &json!({"type": "object", "$ref": "#/$defs/x",
                "properties": {"a": {"$ref": "#"}},
                "$defs": {"x": {"properties": {"a": {"$ref": "#"}}}}}),
            &mut ComponentSchemas::default(),
        )
        .unwrap();
        assert!(!schema.plain);
        let mut nested = json!({"a": 1});
        for _ in 0..60 {
            nested = json!({ "a": nested });
        }
        let size = nested.to_string().len();
        // 2^60 steps unbounded: only the deadline ends the check, and the
        // bound only ends a test that would otherwise never end.
        let checked = schema.check(nested, size, Duration::from_millis(300));
        let result = tokio::time::timeout(Duration::from_secs(60), checked)
            .await
            .expect("the check held its caller past the deadline");
        // Either it finished in time or it timed out; it never held the
        // caller past the deadline.
        assert!(matches!(
            result,
            Err(Invalid::TimedOut | Invalid::Mismatch(_)) | Ok(_)
        ));
    }

    fn output(structured: Value) -> ToolOutput {
        ToolOutput {
            structured: Some(structured),
            ..ToolOutput::text("text")
        }
    }

    fn compiled(schema: Value) -> CompiledSchema {
        CompiledSchema::compile(&schema, &mut ComponentSchemas::default()).unwrap()
    }

    #[tokio::test]
    async fn structured_output_that_does_not_fit_is_a_tool_error_naming_where() {
        let schema = compiled(
            json!({"type": "object", "properties": {"port": {"type": "integer"}}, "required": ["port"]}),
        );
        let forever = Duration::from_secs(60);
        let mut fits = output(json!({"port": 1}));
        assert_eq!(
            check_structured(&schema, &mut fits, forever, forever).await,
            Ok(())
        );
        assert_eq!(fits.structured, Some(json!({"port": 1})), "kept as it was");
        let mut wrong = output(json!({"port": "eighty", "extra": [1, 2]}));
        let error = check_structured(&schema, &mut wrong, forever, forever)
            .await
            .unwrap_err();
        assert_eq!(error.kind, ErrorType::ToolError);
        assert_eq!(error.tool_kind.as_deref(), Some(INVALID_OUTPUT));
        assert!(!error.retryable, "the same call gives the same output");
        assert!(error.message.contains("at /port"), "{}", error.message);
        // One problem named, briefly, of two.
        let two = compiled(json!({"type": "object", "required": ["port", "name"]}));
        let error = check_structured(&two, &mut output(json!({})), forever, forever)
            .await
            .unwrap_err();
        assert!(
            error.message.contains("\"port\"") != error.message.contains("\"name\""),
            "{}",
            error.message
        );
        // No structured output: nothing to check here (MCP's edge answers
        // a tool that declares an output schema and gives none).
        let mut none = ToolOutput::text("text");
        assert_eq!(
            check_structured(&schema, &mut none, forever, forever).await,
            Ok(())
        );
    }

    /// A costly schema is checked off the async workers under what is left
    /// of the call's time: none left is a timeout, never a success.
    #[tokio::test]
    async fn checking_output_past_the_calls_deadline_is_a_timeout() {
        let schema = compiled(json!({"$ref": "#/$defs/n", "$defs": {"n": {"type": "integer"}}}));
        let mut late = output(json!(1));
        let error = check_structured(&schema, &mut late, Duration::ZERO, Duration::from_secs(2))
            .await
            .unwrap_err();
        assert_eq!(error.kind, ErrorType::Timeout);
        assert!(
            error
                .message
                .contains("timed out after 2s while checking its structured output"),
            "{}",
            error.message
        );
    }

    #[test]
    fn costly_keywords_are_found_at_any_depth() {
        assert!(uses_costly_keywords(
            &json!({"properties": {"a": {"items": {"anyOf": []}}}})
        ));
        // A property named like a keyword counts too: conservative, and
        // only costs a thread hand-off.
        assert!(uses_costly_keywords(
            &json!({"properties": {"anyOf": {"type": "string"}}})
        ));
        assert!(!uses_costly_keywords(
            &json!({"type": "object", "required": ["a"]})
        ));
    }
}
