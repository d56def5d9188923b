//! Checking a call's arguments against its tool's input schema, at a cost
//! the host can bound.
//!
//! Both sides are untrusted: the schema comes from the component (which may
//! be hostile) and the arguments from the model. So:
//! - arguments over the tool's `max_arguments` are refused before they are
//!   parsed;
//! - they must be a JSON object, whatever the schema says (a schema with
//!   `$ref` beside `"type": "object"` could otherwise let `5` through);
//! - `pattern` and `patternProperties` use the `regex` crate (finite
//!   automata, linear in the input) with size limits, never a backtracking
//!   engine, and `format` is an annotation, not a check;
//! - a schema that could still make validation expensive (combinators,
//!   `uniqueItems`, patterns, `contains`, …), and any large arguments, are
//!   checked on the blocking pool, off the async workers, under the call's
//!   deadline; at most [`MAX_PARALLEL_CHECKS`] such checks run at once, so
//!   that runaway ones cannot take every core. Plain schemas over small
//!   arguments (what nearly every tool has) are checked inline: that costs
//!   microseconds and no thread hand-off.
//! - error messages are short: each problem is cut to [`MAX_PROBLEM`]
//!   characters and at most five are listed, so a 5 MiB argument is never
//!   echoed back.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Semaphore;

/// Arguments at most this long are checked inline against a plain schema.
const INLINE_BYTES: usize = 4096;

/// Expensive checks running at once, across the process.
pub(crate) const MAX_PARALLEL_CHECKS: usize = 2;

/// The longest single problem reported to the model.
const MAX_PROBLEM: usize = 200;

/// The largest compiled form of one `pattern` (bytes of the `regex` crate's
/// program, and of its lazy DFA cache).
const REGEX_SIZE_LIMIT: usize = 1 << 20;

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
    "$dynamicRef",
    "$recursiveRef",
    "format",
    "contentSchema",
];

static CHECKS: LazyLock<Arc<Semaphore>> =
    LazyLock::new(|| Arc::new(Semaphore::new(MAX_PARALLEL_CHECKS)));

/// A tool's compiled input schema.
pub(crate) struct ArgumentSchema {
    validator: Arc<jsonschema::Validator>,
    /// No keyword in [`COSTLY`]: validation is linear in schema and input.
    plain: bool,
}

impl ArgumentSchema {
    /// Compile `schema` with the bounded regex engine.
    ///
    /// # Errors
    ///
    /// When it is not valid JSON Schema (or uses a pattern too large to
    /// compile within the limits).
    pub(crate) fn compile(schema: &Value) -> Result<Self, String> {
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
        })
    }

    /// Check `arguments` (whose JSON text is `size` bytes) within `timeout`.
    ///
    /// # Errors
    ///
    /// [`Invalid::Arguments`] with a message for the model, or
    /// [`Invalid::TimedOut`] when checking took longer than the call may.
    pub(crate) async fn check(
        &self,
        arguments: Value,
        size: usize,
        timeout: Duration,
    ) -> Result<Value, Invalid> {
        if !arguments.is_object() {
            return Err(Invalid::Arguments(format!(
                "arguments must be a JSON object, not {}",
                kind(&arguments)
            )));
        }
        if self.plain && size <= INLINE_BYTES {
            return problems(&self.validator, &arguments).map(|()| arguments);
        }
        let validator = self.validator.clone();
        let checked = async move {
            // Waiting for a turn counts against the deadline too.
            let _turn = CHECKS.clone().acquire_owned().await;
            tokio::task::spawn_blocking(move || {
                problems(&validator, &arguments).map(|()| arguments)
            })
            .await
        };
        match tokio::time::timeout(timeout, checked).await {
            Ok(Ok(result)) => result,
            Ok(Err(_panicked)) => Err(Invalid::Arguments(
                "the host could not check these arguments".into(),
            )),
            Err(_) => Err(Invalid::TimedOut),
        }
    }
}

/// Why arguments were not accepted.
#[derive(Debug)]
pub(crate) enum Invalid {
    /// They do not fit the schema: the message says where and why.
    Arguments(String),
    /// Checking them took longer than the call's deadline.
    TimedOut,
}

/// Each field that is wrong and why (at most five, each cut short).
fn problems(validator: &jsonschema::Validator, arguments: &Value) -> Result<(), Invalid> {
    let errors: Vec<String> = validator
        .iter_errors(arguments)
        .take(5)
        .map(|e| {
            let path = clip(&e.instance_path().to_string(), 80);
            let problem = clip(&e.to_string(), MAX_PROBLEM);
            if path.is_empty() {
                problem
            } else {
                format!("at {path}: {problem}")
            }
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Invalid::Arguments(errors.join("; ")))
    }
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

/// At most `max` characters of `text`, with `…` when cut.
pub(crate) fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some((end, _)) => format!("{}…", &text[..end]),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use std::time::Instant;

    use super::*;

    const FOREVER: Duration = Duration::from_secs(60);

    fn message(result: Result<Value, Invalid>) -> String {
        match result {
            Err(Invalid::Arguments(message)) => message,
            other => panic!("expected invalid arguments, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn errors_name_the_field_and_the_reason() {
        let schema = ArgumentSchema::compile(&json!({
            "type": "object",
            "properties": {"expression": {"type": "string"}, "times": {"type": "integer", "minimum": 1}},
            "required": ["expression"],
            "additionalProperties": false
        }))
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
        let schema = ArgumentSchema::compile(&json!({
            "$ref": "#/$defs/a", "type": "object", "$defs": {"a": {}}
        }))
        .unwrap();
        for value in [json!(5), json!("str"), json!(null), json!([1])] {
            let m = message(schema.check(value, 4, FOREVER).await);
            assert!(m.contains("must be a JSON object"), "{m}");
        }
    }

    #[tokio::test]
    async fn long_values_are_not_echoed_back() {
        let schema = ArgumentSchema::compile(&json!({
            "type": "object", "properties": {"n": {"type": "integer"}}
        }))
        .unwrap();
        let huge = "x".repeat(1 << 20);
        let m = message(schema.check(json!({"n": huge}), 1 << 20, FOREVER).await);
        assert!(m.len() < 400, "{} bytes", m.len());
    }

    #[tokio::test]
    async fn a_backtracking_pattern_is_linear() {
        // Catastrophic for a backtracking engine on "aaaa…!".
        let schema = ArgumentSchema::compile(&json!({
            "type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}
        }))
        .unwrap();
        assert!(!schema.plain);
        let input = format!("{}!", "a".repeat(100_000));
        let started = Instant::now();
        let m = message(schema.check(json!({ "s": input }), 100_010, FOREVER).await);
        assert!(m.contains("at /s"), "{m}");
        // Generous: a backtracking engine would take longer than the age
        // of the universe.
        assert!(started.elapsed() < Duration::from_secs(10));
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

    #[test]
    fn clip_counts_characters() {
        assert_eq!(clip("héllo", 2), "hé…");
        assert_eq!(clip("hi", 2), "hi");
    }
}
