//! Lints: what models and clients trip on in tool specs that load fine.
//!
//! `toolhost check` prints them as warnings, each with its fix, and
//! `--strict` makes them errors. They are about what the host cannot fix
//! for the tool author:
//!
//! - an input schema OpenAI's strict mode would refuse (`strict: true`
//!   function calling, which constrains the model's arguments to the schema):
//!   a property not in `required`, an object without
//!   `additionalProperties: false`, `default`, a `format` it does not know,
//!   a keyword it does not support;
//! - an output schema that is not an object: MCP's `structuredContent` is
//!   an object, and clients (the MCP Python SDK among them) refuse the tool;
//! - a description missing, too short to choose the tool by, or longer than
//!   OpenAI takes;
//! - names that differ only in case or in `-` against `_`, which clients that
//!   map tool names to identifiers, or compare them without case, confuse.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::{Map, Value};

use crate::spec::ToolSpec;

/// The `format`s OpenAI's strict mode accepts.
const STRICT_FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];

/// Keywords OpenAI's strict mode refuses.
const STRICT_UNSUPPORTED: &[&str] = &[
    "allOf",
    "not",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
    "patternProperties",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
    "minProperties",
    "maxProperties",
];

/// OpenAI's limit on a function's description, in characters.
const MAX_DESCRIPTION: usize = crate::tool_host::MAX_DESCRIPTION_CHARS;

/// Schemas are walked this deep, no deeper: a schema that nests further is
/// refused by every client anyway, and a hostile one must not exhaust the
/// stack.
const MAX_DEPTH: usize = 64;

/// Descriptions shorter than this rarely tell a model when to use the tool.
const MIN_DESCRIPTION: usize = 10;

/// What a warning is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Rule {
    /// The input schema is not one OpenAI's strict mode accepts.
    StrictSchema,
    /// The output schema is not an object, as MCP requires.
    OutputSchema,
    /// The description is missing, very short or too long.
    Description,
    /// Two tools' names collide for some clients.
    NameCollision,
}

/// One thing to fix, with how. Only [`lint`] makes them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Warning {
    /// The tool it is about.
    pub tool: String,
    /// What kind of problem.
    pub rule: Rule,
    /// The problem and its fix.
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tool {}: {}", self.tool, self.message)
    }
}

/// Every warning about `specs`, tool by tool in the order given, then the
/// names that collide.
pub fn lint<'a>(specs: impl IntoIterator<Item = &'a ToolSpec>) -> Vec<Warning> {
    let specs: Vec<&ToolSpec> = specs.into_iter().collect();
    let mut warnings = Vec::new();
    for spec in &specs {
        let mut warn = |rule, message: String| {
            warnings.push(Warning {
                tool: spec.name.clone(),
                rule,
                message,
            });
        };
        let mut problems = Vec::new();
        strict_problems(&spec.input_schema, "", 0, &mut problems);
        for problem in problems {
            warn(
                Rule::StrictSchema,
                format!("input schema {problem} (OpenAI strict mode refuses it)"),
            );
        }
        if let Some(message) = spec.output_schema.as_ref().and_then(output_schema_problem) {
            warn(Rule::OutputSchema, message);
        }
        if let Some(message) = description_problem(&spec.description) {
            warn(Rule::Description, message);
        }
    }
    warnings.extend(name_collisions(&specs));
    warnings
}

/// What is wrong with an output schema for MCP, if it is not an object.
fn output_schema_problem(output: &Value) -> Option<String> {
    if is_type(output, "object") {
        return None;
    }
    let kind = output
        .get("type")
        .map_or_else(|| "untyped".into(), Value::to_string);
    Some(format!(
        "output schema is {kind}, not an object: MCP's structuredContent is an \
         object, and clients such as the MCP Python SDK refuse the tool; wrap it \
         in one, e.g. {{\"type\":\"object\",\"properties\":{{\"items\":…}}}}"
    ))
}

/// What is wrong with a tool's description, if it is missing, too short to
/// choose the tool by, or longer than OpenAI takes.
fn description_problem(description: &str) -> Option<String> {
    let description = description.trim();
    let length = description.chars().count();
    if description.is_empty() {
        Some(
            "has no description: models choose tools by it; say what it does and when to use it"
                .into(),
        )
    } else if length < MIN_DESCRIPTION {
        Some(format!(
            "description {description:?} is too short to choose the tool by; say what it \
             does and when to use it"
        ))
    } else if length > MAX_DESCRIPTION {
        Some(format!(
            "description is {length} characters; OpenAI takes at most {MAX_DESCRIPTION}: \
             move details into the arguments' descriptions"
        ))
    } else {
        None
    }
}

/// A warning for each tool whose name another's equals but for case or `-`
/// against `_`, in the order of the names' common spelling.
fn name_collisions(specs: &[&ToolSpec]) -> Vec<Warning> {
    let mut by_key: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for spec in specs {
        by_key
            .entry(spec.name.to_lowercase().replace('-', "_"))
            .or_default()
            .push(&spec.name);
    }
    let mut warnings = Vec::new();
    for names in by_key.values().filter(|names| names.len() > 1) {
        for name in names {
            let others: Vec<&str> = names.iter().copied().filter(|n| n != name).collect();
            warnings.push(Warning {
                tool: (*name).to_owned(),
                rule: Rule::NameCollision,
                message: format!(
                    "name collides with {} for clients that ignore case or `-` against `_`; \
                     rename one",
                    others.join(", ")
                ),
            });
        }
    }
    warnings
}

/// Whether `schema`'s `type` is `kind`, alone or among others.
fn is_type(schema: &Value, kind: &str) -> bool {
    has_type(schema.get("type"), kind)
}

/// Whether a `type` keyword's value is `kind`, alone or among others.
fn has_type(types: Option<&Value>, kind: &str) -> bool {
    match types {
        Some(Value::String(t)) => t == kind,
        Some(Value::Array(types)) => types.iter().any(|t| t == kind),
        _ => false,
    }
}

/// A name or key from a tool's schema, fit to print: escaped, so a
/// component cannot write terminal control sequences, and cut short.
fn printable(text: &str) -> String {
    let escaped: String = text.escape_debug().collect();
    match escaped.char_indices().nth(64) {
        Some((at, _)) => format!("{}…", &escaped[..at]),
        None => escaped,
    }
}

/// What OpenAI's strict mode refuses in `schema`, at JSON pointer `at`,
/// `depth` levels down: here first, then in the schemas it holds.
fn strict_problems(schema: &Value, at: &str, depth: usize, problems: &mut Vec<String>) {
    let Some(schema) = schema.as_object() else {
        return;
    };
    if depth > MAX_DEPTH {
        problems.push(format!(
            "nests deeper than {MAX_DEPTH} levels at {at}: flatten it"
        ));
        return;
    }
    let here = if at.is_empty() { "/" } else { at };
    if schema.contains_key("default") {
        problems.push(format!(
            "has `default` at {here}: say the default in the description instead, and make \
             the argument nullable if it may be left out"
        ));
    }
    problems.extend(format_problem(schema, here));
    for keyword in STRICT_UNSUPPORTED {
        if schema.contains_key(*keyword) {
            problems.push(format!("uses `{keyword}` at {here}: express it without"));
        }
    }
    let is_object = has_type(schema.get("type"), "object") || schema.contains_key("properties");
    if is_object {
        object_problems(schema, here, problems);
    }
    for (keyword, value) in schema {
        strict_problems_under(keyword, value, at, depth, problems);
    }
}

/// A `format` strict mode does not know, with the fix for the schema's type.
fn format_problem(schema: &Map<String, Value>, here: &str) -> Option<String> {
    let format = schema.get("format").and_then(Value::as_str)?;
    if STRICT_FORMATS.contains(&format) {
        return None;
    }
    // Strict mode takes `format` on strings only; a number's range is
    // said with `minimum` and `maximum` (the host already writes an
    // integer format clients do not know, such as schemars' `uint16`,
    // that way).
    let fix = if has_type(schema.get("type"), "string") {
        "drop it, or use `pattern`"
    } else {
        "drop it, and say a number's range with `minimum` and `maximum`"
    };
    Some(format!(
        "has format {:?} at {here}, not one of {}: {fix}",
        printable(format),
        STRICT_FORMATS.join(", ")
    ))
}

/// What strict mode refuses in an object schema: other properties allowed,
/// and properties not in `required`.
fn object_problems(schema: &Map<String, Value>, here: &str, problems: &mut Vec<String>) {
    if schema.get("additionalProperties") != Some(&Value::Bool(false)) {
        problems.push(format!(
            "lets an object at {here} have other properties: add \
             `\"additionalProperties\": false`"
        ));
    }
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        let optional: Vec<String> = properties
            .keys()
            .filter(|name| !required.contains(&name.as_str()))
            .map(|name| printable(name))
            .collect();
        if !optional.is_empty() {
            problems.push(format!(
                "has optional properties at {here} ({}): strict mode needs every property \
                 in `required`; make those that may be left out nullable \
                 (`\"type\": [\"string\", \"null\"]`) instead",
                optional.join(", ")
            ));
        }
    }
}

/// What strict mode refuses in the schemas that `keyword`'s `value` holds,
/// if it is one that holds schemas, of the schema at `at`.
fn strict_problems_under(
    keyword: &str,
    value: &Value,
    at: &str,
    depth: usize,
    problems: &mut Vec<String>,
) {
    match keyword {
        "properties" | "$defs" | "definitions" => {
            if let Some(members) = value.as_object() {
                for (name, member) in members {
                    let name = printable(&name.replace('~', "~0").replace('/', "~1"));
                    strict_problems(
                        member,
                        &format!("{at}/{keyword}/{name}"),
                        depth + 1,
                        problems,
                    );
                }
            }
        }
        "items" | "additionalProperties" if value.is_object() => {
            strict_problems(value, &format!("{at}/{keyword}"), depth + 1, problems);
        }
        // `items` as a list is the older spelling of `prefixItems`.
        "items" | "anyOf" | "oneOf" | "prefixItems" => {
            for (i, member) in value.as_array().into_iter().flatten().enumerate() {
                strict_problems(member, &format!("{at}/{keyword}/{i}"), depth + 1, problems);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec(name: &str, input: Value, output: Option<Value>) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            title: name.into(),
            description: "Does one useful thing, described for the model".into(),
            input_schema: input,
            output_schema: output,
            hints: Default::default(),
        }
    }

    fn strict_object() -> Value {
        json!({
            "type": "object",
            "properties": {"name": {"type": "string", "description": "Who"}},
            "required": ["name"],
            "additionalProperties": false
        })
    }

    #[test]
    fn a_strict_schema_with_an_object_output_has_no_warnings() {
        let tool = spec("greet", strict_object(), Some(strict_object()));
        assert_eq!(lint([&tool]), []);
    }

    #[test]
    fn what_strict_mode_refuses_is_named_with_its_place_and_fix() {
        let input = json!({
            "type": "object",
            "properties": {
                "text": {"type": "string"},
                "separator": {"type": "string", "default": "-"},
                "when": {"type": "string", "format": "uri"},
                "tags": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
                "rule": {"allOf": [{"type": "string"}]}
            },
            "required": ["text", "when", "tags", "rule"]
        });
        let messages: Vec<String> = lint([&spec("slugify", input, None)])
            .into_iter()
            .inspect(|w| assert_eq!(w.rule, Rule::StrictSchema))
            .map(|w| w.message)
            .collect();
        let all = messages.join("\n");
        for expected in [
            "optional properties at / (separator)",
            "`default` at /properties/separator",
            "format \"uri\" at /properties/when",
            "other properties: add `\"additionalProperties\": false`",
            "/properties/tags/items",
            "`allOf` at /properties/rule",
        ] {
            assert!(all.contains(expected), "missing {expected:?} in:\n{all}");
        }
    }

    #[test]
    fn a_format_on_a_number_is_named_with_the_fix_for_numbers() {
        let input = json!({
            "type": "object",
            "properties": {"n": {"type": "integer", "format": "int64"}},
            "required": ["n"],
            "additionalProperties": false
        });
        let warnings = lint([&spec("t", input, None)]);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0]
                .message
                .contains("format \"int64\" at /properties/n, not one of")
                && warnings[0].message.contains("`minimum` and `maximum`"),
            "{}",
            warnings[0]
        );
    }

    #[test]
    fn an_output_schema_that_is_not_an_object_is_a_warning() {
        let output = json!({"type": "array", "items": {"type": "string"}});
        let warnings = lint([&spec("list_dir", strict_object(), Some(output))]);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert_eq!(warnings[0].rule, Rule::OutputSchema);
        assert!(warnings[0].message.contains("\"array\""), "{}", warnings[0]);
    }

    #[test]
    fn object_types_in_a_list_count_and_hostile_schemas_are_bounded() {
        let output = json!({"type": ["object"]});
        assert_eq!(lint([&spec("t", strict_object(), Some(output))]), []);
        let nullable = json!({
            "type": "object",
            "properties": {"o": {"type": ["object", "null"]}},
            "required": ["o"],
            "additionalProperties": false
        });
        let all = lint([&spec("t", nullable, None)])
            .into_iter()
            .map(|w| w.message)
            .collect::<Vec<_>>()
            .join("\n");
        assert!(all.contains("object at /properties/o"), "{all}");
        // A thousand levels: walked to the cap, reported once.
        let mut deep = json!({"type": "string"});
        for _ in 0..1_000 {
            deep = json!({"anyOf": [deep]});
        }
        let input = json!({
            "type": "object",
            "properties": {"\u{1b}[31mx": deep},
            "required": ["\u{1b}[31mx"],
            "additionalProperties": false
        });
        let warnings = lint([&spec("t", input, None)]);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].message.contains("nests deeper than 64"),
            "{}",
            warnings[0]
        );
        assert!(
            !warnings[0].message.contains('\u{1b}'),
            "escaped: {}",
            warnings[0]
        );
    }

    #[test]
    fn descriptions_missing_short_or_too_long_are_warnings() {
        for (description, expected) in [
            ("", "no description"),
            ("Adds", "too short"),
            (&"x".repeat(1025)[..], "1025 characters"),
        ] {
            let mut tool = spec("t", strict_object(), None);
            tool.description = description.into();
            let warnings = lint([&tool]);
            assert_eq!(warnings.len(), 1, "{warnings:?}");
            assert!(warnings[0].message.contains(expected), "{}", warnings[0]);
        }
    }

    #[test]
    fn names_equal_but_for_case_or_dashes_collide() {
        let tools = [
            spec("get-weather", strict_object(), None),
            spec("Get_Weather", strict_object(), None),
            spec("get_forecast", strict_object(), None),
        ];
        let warnings = lint(&tools);
        let colliding: Vec<&str> = warnings
            .iter()
            .filter(|w| w.rule == Rule::NameCollision)
            .map(|w| w.tool.as_str())
            .collect();
        assert_eq!(colliding, ["get-weather", "Get_Weather"]);
    }
}
