//! Loading: each component's tools checked (names, sizes, schemas,
//! titles) and their schemas compiled, and result caching allowed only
//! where it is safe.

use serde_json::Value;

use super::Entry;
use crate::arguments::{CompiledSchema, ComponentSchemas};
use crate::component::ComponentConfig;
use crate::outcome::clip;
use crate::sandbox::RawSpec;
use crate::spec::{Hints, MAX_DESCRIPTION, MAX_SCHEMA, MAX_TITLE, ToolSpec, valid_name};

/// Check that a component may cache results, and mark which of its
/// `tools` will be: those both read-only and idempotent.
///
/// # Errors
///
/// When the component may write (a read-write directory, a store) or holds
/// secrets, or none of its tools is read-only and idempotent.
pub(super) fn cacheable(config: &ComponentConfig, tools: &mut [Entry]) -> Result<(), String> {
    let refuse = |why: &str| {
        Err(format!(
            "cache is set, but {why}: a cached result would skip a write or keep a secret; remove cache from this entry"
        ))
    };
    if config
        .grants
        .files()
        .iter()
        .any(|f| f.mode == crate::grants::FileMode::ReadWrite)
    {
        return refuse("it has a read-write directory");
    }
    if config.grants.stores().next().is_some() {
        return refuse("it is granted a store");
    }
    if config.grants.secrets().next().is_some() {
        return refuse("it is given secrets");
    }
    if config.grants.tool_calls().is_some() {
        // A cached program's result would skip its callees' approvals
        // and writes.
        return refuse("it calls other tools (call_tools)");
    }
    let mut any = false;
    for entry in tools {
        entry.cached = entry.spec.hints.read_only && entry.spec.hints.idempotent;
        any |= entry.cached;
    }
    if !any {
        return Err(
            "cache is set, but none of its tools is both read-only and idempotent (their hints); only those are cached"
                .into(),
        );
    }
    Ok(())
}

/// Check a tool's spec as its component gave it, and compile its schemas:
/// the entry the host keeps for it.
///
/// # Errors
///
/// What is wrong and the limit or rule it breaks, naming the tool.
pub(super) fn validate_spec(
    raw: RawSpec,
    component: usize,
    schemas: &mut ComponentSchemas,
) -> Result<Entry, String> {
    check_sizes(&raw)?;
    let (input_schema, schema) = input_schema(&raw, schemas)?;
    let (output_schema, output) = output_schema(&raw, schemas)?;
    let title = title(&raw)?;
    Ok(Entry {
        spec: std::sync::Arc::new(ToolSpec {
            title,
            name: raw.name,
            description: raw.description,
            input_schema,
            output_schema,
            hints: Hints {
                read_only: raw.read_only,
                destructive: raw.destructive,
                idempotent: raw.idempotent,
                open_world: raw.open_world,
            },
        }),
        component,
        schema,
        output,
        cached: false,
    })
}

/// The name's rule, and the description's and schemas' sizes, checked
/// before anything is parsed.
fn check_sizes(raw: &RawSpec) -> Result<(), String> {
    if !valid_name(&raw.name) {
        return Err(format!(
            "tool name {:?} must match ^[A-Za-z0-9_-]{{1,64}}$ (what OpenAI and Anthropic accept)",
            clip(&raw.name, 80)
        ));
    }
    if raw.description.len() > MAX_DESCRIPTION {
        return Err(format!(
            "tool {:?}: its description is {} bytes; at most {MAX_DESCRIPTION}",
            raw.name,
            raw.description.len()
        ));
    }
    for (what, text) in [
        ("input-schema", Some(&raw.input_schema)),
        ("output-schema", raw.output_schema.as_ref()),
    ] {
        if let Some(text) = text
            && text.len() > MAX_SCHEMA
        {
            return Err(format!(
                "tool {:?}: its {what} is {} bytes; at most {MAX_SCHEMA}",
                raw.name,
                text.len()
            ));
        }
    }
    Ok(())
}

/// `text`, one of the tool's schemas, as JSON with its integer formats
/// normalised once, here: every format that lists the tool, and the
/// argument check, read the same schema (see crate::schema).
fn parse_schema(raw: &RawSpec, what: &str, text: &str) -> Result<Value, String> {
    let mut schema: Value = serde_json::from_str(text)
        .map_err(|e| format!("tool {:?}: its {what} is not JSON: {e}", raw.name))?;
    crate::schema::normalize_integer_formats(&mut schema);
    Ok(schema)
}

/// The input schema: an object's, compiled.
fn input_schema(
    raw: &RawSpec,
    schemas: &mut ComponentSchemas,
) -> Result<(Value, CompiledSchema), String> {
    let input_schema = parse_schema(raw, "input-schema", &raw.input_schema)?;
    if input_schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err(format!(
            "tool {:?}: its input-schema must describe an object (\"type\": \"object\"): models send arguments as an object",
            raw.name
        ));
    }
    let schema = CompiledSchema::compile(&input_schema, schemas).map_err(|e| {
        format!(
            "tool {:?}: its input-schema is not valid JSON Schema: {e}",
            raw.name
        )
    })?;
    Ok((input_schema, schema))
}

/// The output schema, when the tool declares one, compiled.
fn output_schema(
    raw: &RawSpec,
    schemas: &mut ComponentSchemas,
) -> Result<(Option<Value>, Option<CompiledSchema>), String> {
    let Some(text) = raw.output_schema.as_deref() else {
        return Ok((None, None));
    };
    let output_schema = parse_schema(raw, "output-schema", text)?;
    let compiled = CompiledSchema::compile(&output_schema, schemas).map_err(|e| {
        format!(
            "tool {:?}: its output-schema is not valid JSON Schema: {e}",
            raw.name
        )
    })?;
    Ok((Some(output_schema), Some(compiled)))
}

/// The tool's own title, checked, or one derived from its name.
fn title(raw: &RawSpec) -> Result<String, String> {
    match &raw.title {
        None => Ok(crate::spec::title(&raw.name)),
        Some(title)
            if title.trim().is_empty()
                || title.chars().count() > MAX_TITLE
                || title.chars().any(char::is_control) =>
        {
            Err(format!(
                "tool {:?}: its title must be 1 to {MAX_TITLE} characters on one line",
                raw.name
            ))
        }
        Some(title) => Ok(title.clone()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::arguments::Invalid;

    fn raw(input: Value, output: Option<Value>) -> RawSpec {
        RawSpec {
            name: "t".into(),
            title: None,
            description: "A tool for tests".into(),
            input_schema: input.to_string(),
            output_schema: output.map(|o| o.to_string()),
            read_only: false,
            destructive: false,
            idempotent: false,
            open_world: false,
        }
    }

    /// Issue 24: integer formats clients do not know are replaced at load
    /// by the bounds they stand for, in the schema every format lists and
    /// the one arguments are checked against alike.
    #[tokio::test]
    async fn integer_formats_become_bounds_that_are_listed_and_checked() {
        let input = json!({"type": "object", "properties": {
            "port": {"type": "integer", "format": "uint16", "minimum": 0, "maximum": 65535},
            "count": {"type": "integer", "format": "uint32", "minimum": 0},
            "offset": {"type": "integer", "format": "int64"},
        }});
        let output =
            json!({"type": "object", "properties": {"n": {"type": "integer", "format": "uint8"}}});
        let entry = validate_spec(
            raw(input, Some(output)),
            0,
            &mut ComponentSchemas::default(),
        )
        .unwrap();
        let listed = crate::wire::definitions::tool_definition(
            &entry.spec,
            crate::wire::definitions::Format::Mcp,
        );
        assert_eq!(
            listed["inputSchema"]["properties"]["count"],
            json!({"type": "integer", "minimum": 0, "maximum": 4_294_967_295_u64})
        );
        assert!(
            listed["inputSchema"]["properties"]["port"]
                .get("format")
                .is_none()
        );
        assert_eq!(
            listed["inputSchema"]["properties"]["offset"]["format"],
            "int64"
        );
        assert_eq!(listed["outputSchema"]["properties"]["n"]["maximum"], 255);
        // What the model is shown is what is checked.
        let over = json!({"count": 4_294_967_296_u64});
        match entry.schema.check(over, 24, Duration::from_secs(5)).await {
            Err(Invalid::Mismatch(message)) => assert!(message.contains("at /count"), "{message}"),
            other => panic!("expected a mismatch, got {other:?}"),
        }
    }

    #[test]
    fn an_output_schema_that_is_no_json_schema_is_a_load_error() {
        let error = validate_spec(
            raw(json!({"type": "object"}), Some(json!({"type": 5}))),
            0,
            &mut ComponentSchemas::default(),
        )
        .err()
        .unwrap();
        assert!(
            error.contains("its output-schema is not valid JSON Schema"),
            "{error}"
        );
    }

    #[test]
    fn names_follow_what_providers_accept() {
        assert!(valid_name("read_file"));
        assert!(valid_name("a-b_C9"));
        assert!(!valid_name(""));
        assert!(!valid_name("has space"));
        assert!(!valid_name("dot.ted"));
        assert!(!valid_name(&"x".repeat(65)));
    }
}
