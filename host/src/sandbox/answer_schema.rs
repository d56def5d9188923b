//! The answer schema of a tool's question: which schemas the host asks
//! with, and the schema a person is shown.
//!
//! Every asker (the terminal, an MCP client's elicitation form, an
//! embedder's own) gets the schema the host makes here, never the tool's
//! own text: only the keywords of MCP's elicitation schema, and in it every
//! text a person reads (titles, descriptions, choice titles, defaults)
//! masked and made printable ([`crate::printable::text`]). What the answer
//! is keyed by or holds (property names, `enum` values, `const` values of
//! choices) is passed on exactly as the tool wrote it, or the tool's answer
//! would not fit: so a question whose names or choices hold a secret, or
//! would be shown differently from how they are written, is refused, as is
//! one with two fields, or two choices of a field, whose titles (or names)
//! a person could not tell apart.

use std::collections::HashSet;

use serde_json::{Map, Value, json};

use super::secrets::Secrets;
use crate::printable;

/// The largest answer schema, as JSON text.
const MAX_ANSWER_SCHEMA: usize = 16 * 1024;

/// The string formats MCP clients know how to ask for.
const FORMATS: [&str; 4] = ["email", "uri", "date", "date-time"];

/// Read the tool's answer schema: the schema the answer is checked against
/// (the tool's own), and the schema a person is shown.
///
/// # Errors
///
/// A message for the tool naming what to change, when the schema is not
/// one every asker can render, or cannot be shown as it is written.
pub(super) fn read(text: &str, secrets: &Secrets) -> Result<(Value, Value), String> {
    let schema = askable(text)?;
    let shown = Shown { secrets }.schema(&schema)?;
    Ok((schema, shown))
}

/// The answer schema as JSON, if it is one every asker can render: MCP's
/// elicitation schema, an object whose properties are strings (with an
/// optional `enum`, `oneOf` of `{const, title}` or legacy `enumNames`),
/// numbers, integers, booleans, or arrays of such string choices. The
/// terminal asks for them one by one.
fn askable(text: &str) -> Result<Value, String> {
    if text.len() > MAX_ANSWER_SCHEMA {
        return Err(format!(
            "the answer schema is over {MAX_ANSWER_SCHEMA} bytes"
        ));
    }
    let mut schema: Value =
        serde_json::from_str(text).map_err(|e| format!("the answer schema is not JSON: {e}"))?;
    // An integer format clients do not know (`uint16`) becomes the bounds it
    // stands for, in the form shown and the answer checked alike (see
    // crate::schema).
    crate::schema::normalize_integer_formats(&mut schema);
    let hint = r#"write e.g. {"type":"object","properties":{"confirm":{"type":"boolean"}},"required":["confirm"]}"#;
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err(format!(
            "the answer schema must be an object schema; {hint}"
        ));
    }
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Err(format!("the answer schema needs `properties`; {hint}"));
    };
    if properties.is_empty() {
        return Err(format!("the answer schema has no properties; {hint}"));
    }
    for (name, property) in properties {
        askable_property(name, property)?;
    }
    Ok(schema)
}

/// Whether one property is a field every asker can render.
fn askable_property(name: &str, property: &Value) -> Result<(), String> {
    // The name is checked to be printable later; until then it is shown
    // escaped.
    let name = printable::json(&Value::String(name.to_owned()));
    match property.get("type").and_then(Value::as_str) {
        Some("string") => {
            if let Some(options) = property.get("enum")
                && !options
                    .as_array()
                    .is_some_and(|o| !o.is_empty() && o.iter().all(Value::is_string))
            {
                return Err(format!("property {name}: `enum` must list strings"));
            }
            if let Some(options) = property.get("oneOf")
                && !is_choice_list(options)
            {
                return Err(format!(
                    "property {name}: `oneOf` must list {{\"const\": \"…\", \"title\": \"…\"}} choices"
                ));
            }
            Ok(())
        }
        Some("number" | "integer" | "boolean") => Ok(()),
        Some("array") => {
            let items = property.get("items");
            let plain = items
                .and_then(|i| i.get("enum"))
                .and_then(Value::as_array)
                .is_some_and(|o| !o.is_empty() && o.iter().all(Value::is_string));
            let titled = items
                .and_then(|i| i.get("anyOf"))
                .is_some_and(is_choice_list);
            if plain || titled {
                Ok(())
            } else {
                Err(format!(
                    "property {name}: an array answer must be a multi-select: `items` with a string `enum` or an `anyOf` of {{\"const\", \"title\"}} choices"
                ))
            }
        }
        _ => Err(format!(
            "property {name} must be of type string, number, integer, boolean, or an array of string choices (MCP clients ask for nothing else)"
        )),
    }
}

/// A non-empty list of `{"const": "…", "title": "…"}` choices.
fn is_choice_list(options: &Value) -> bool {
    options.as_array().is_some_and(|options| {
        !options.is_empty()
            && options
                .iter()
                .all(|o| o.get("const").is_some_and(Value::is_string))
    })
}

/// Makes the schema a person is shown.
struct Shown<'a> {
    secrets: &'a Secrets,
}

/// One choice of a property, as shown.
struct Choice {
    value: String,
    title: Option<String>,
}

impl Shown<'_> {
    /// Text a person reads: masked, then printable.
    fn text(&self, text: &str) -> String {
        printable::text(&self.secrets.redact(text).to_string()).into_owned()
    }

    /// The non-empty text of `schema[key]`, as a person reads it.
    fn text_of(&self, schema: &Value, key: &str) -> Option<String> {
        let text = self.text(schema.get(key)?.as_str()?);
        (!text.trim().is_empty()).then_some(text)
    }

    /// `value`, a name the answer is keyed by or a value it holds, which
    /// is passed on as written: it must already be exactly what a person
    /// is shown, on one line.
    fn exact(&self, what: &str, value: &str) -> Result<String, String> {
        if self.secrets.found_in(value) {
            let masked = self.secrets.redact(value).to_string();
            return Err(format!(
                "{what} {} holds a secret granted to the tool; a name or choice is shown as written, so keep secrets out of it",
                printable::json(&Value::String(masked))
            ));
        }
        if printable::one_line(value, usize::MAX) != value {
            return Err(format!(
                "{what} {} would not be shown as written (it has control, line-break, bidirectional or invisible characters, or white space at an end or twice in a row); a name or choice is shown as written, so write it in plain printable text",
                printable::json(&Value::String(value.to_owned()))
            ));
        }
        Ok(value.to_owned())
    }

    /// The schema a person is shown: MCP's elicitation schema.
    fn schema(&self, schema: &Value) -> Result<Value, String> {
        let mut shown = Map::new();
        shown.insert("type".into(), "object".into());
        for key in ["title", "description"] {
            if let Some(text) = self.text_of(schema, key) {
                shown.insert(key.into(), text.into());
            }
        }
        let mut properties = Map::new();
        let mut labels = Labels::new("two fields");
        let empty = Map::new();
        let asked = schema["properties"].as_object().unwrap_or(&empty);
        for (name, property) in asked {
            let name = self.exact("the property name", name)?;
            let what = format!("property {name:?}:");
            let property = self.property(&what, property)?;
            // An MCP client labels a field by its title, or its name. (The
            // terminal shows the name too where two labels are alike.)
            labels.add(property["title"].as_str().unwrap_or(&name))?;
            properties.insert(name, property);
        }
        shown.insert("properties".into(), properties.into());
        if let Some(required) = schema.get("required").and_then(Value::as_array) {
            let required = required
                .iter()
                .filter_map(Value::as_str)
                .map(|name| self.exact("a required name", name))
                .collect::<Result<Vec<_>, _>>()?;
            shown.insert("required".into(), required.into());
        }
        Ok(shown.into())
    }

    /// One property as shown: its type, texts, bounds, choices and default.
    fn property(&self, what: &str, property: &Value) -> Result<Value, String> {
        let kind = property["type"].as_str().unwrap_or("string");
        let mut shown = Map::new();
        shown.insert("type".into(), kind.into());
        for key in ["title", "description"] {
            if let Some(text) = self.text_of(property, key) {
                shown.insert(key.into(), text.into());
            }
        }
        let copy = |shown: &mut Map<String, Value>, keys: &[&str], fits: fn(&Value) -> bool| {
            for key in keys {
                if let Some(value) = property.get(*key).filter(|v| fits(v)) {
                    shown.insert((*key).into(), value.clone());
                }
            }
        };
        match kind {
            "string" => {
                copy(&mut shown, &["minLength", "maxLength"], Value::is_u64);
                if let Some(format) = property["format"].as_str().filter(|f| FORMATS.contains(f)) {
                    shown.insert("format".into(), format.into());
                }
                let choices = self.choices(what, property, &mut shown)?;
                if let Some(default) = property["default"].as_str() {
                    let default = self.text(default);
                    if choices.is_empty() || choices.iter().any(|c| c.value == default) {
                        shown.insert("default".into(), default.into());
                    }
                }
            }
            "number" | "integer" => {
                copy(
                    &mut shown,
                    &["minimum", "maximum", "default"],
                    Value::is_number,
                );
            }
            "boolean" => copy(&mut shown, &["default"], Value::is_boolean),
            _ => {
                copy(&mut shown, &["minItems", "maxItems"], Value::is_u64);
                let mut items = Map::new();
                let choices = self.choices(what, &property["items"], &mut items)?;
                shown.insert("items".into(), items.into());
                let default = property["default"].as_array().map(|picked| {
                    picked
                        .iter()
                        .filter_map(Value::as_str)
                        .map(|p| self.text(p))
                        .collect::<Vec<_>>()
                });
                if let Some(default) = default
                    && default
                        .iter()
                        .all(|p| choices.iter().any(|c| &c.value == p))
                {
                    shown.insert("default".into(), default.into());
                }
            }
        }
        Ok(shown.into())
    }

    /// The choices of `schema` (a string property, or a multi-select's
    /// `items`), written into `shown` as the tool gave them (`enum`, with
    /// `enumNames`; `oneOf`; `anyOf`), checked to be printable as written
    /// and distinct as shown.
    fn choices(
        &self,
        what: &str,
        schema: &Value,
        shown: &mut Map<String, Value>,
    ) -> Result<Vec<Choice>, String> {
        let mut choices = Vec::new();
        if let Some(values) = schema.get("enum").and_then(Value::as_array) {
            let names = schema.get("enumNames").and_then(Value::as_array);
            let names = names.filter(|n| n.len() == values.len());
            for (i, value) in values.iter().filter_map(Value::as_str).enumerate() {
                choices.push(Choice {
                    value: self.exact(&format!("{what} the choice"), value)?,
                    title: names.and_then(|n| n[i].as_str()).map(|n| self.text(n)),
                });
            }
            if schema.get("type").is_some() {
                shown.insert("type".into(), "string".into());
            }
            let values: Vec<&str> = choices.iter().map(|c| c.value.as_str()).collect();
            shown.insert("enum".into(), values.into());
            if names.is_some() {
                let names: Vec<&str> = choices
                    .iter()
                    .map(|c| c.title.as_deref().unwrap_or_default())
                    .collect();
                shown.insert("enumNames".into(), names.into());
            }
        } else if let Some((key, options)) = ["oneOf", "anyOf"]
            .into_iter()
            .find_map(|key| Some((key, schema.get(key)?.as_array()?)))
        {
            for option in options {
                let Some(value) = option["const"].as_str() else {
                    continue;
                };
                choices.push(Choice {
                    value: self.exact(&format!("{what} the choice"), value)?,
                    title: self.text_of(option, "title"),
                });
            }
            let options: Vec<Value> = choices
                .iter()
                .map(|c| match &c.title {
                    Some(title) => json!({"const": c.value, "title": title}),
                    None => json!({"const": c.value}),
                })
                .collect();
            shown.insert(key.into(), options.into());
        }
        let mut labels = Labels::new(&format!("{what} two choices"));
        for choice in &choices {
            labels.add(choice.title.as_deref().unwrap_or(&choice.value))?;
        }
        Ok(choices)
    }
}

/// Labels a person must be able to tell apart.
struct Labels {
    what: String,
    seen: HashSet<String>,
}

impl Labels {
    fn new(what: &str) -> Self {
        Self {
            what: what.to_owned(),
            seen: HashSet::new(),
        }
    }

    /// Add `label`, as a person sees it on one line (case and white space
    /// aside, two labels that look alike are alike).
    fn add(&mut self, label: &str) -> Result<(), String> {
        let seen = printable::one_line(label, usize::MAX).to_lowercase();
        if self.seen.insert(seen) {
            Ok(())
        } else {
            Err(format!(
                "{} would look the same to the person ({}); give each a title of its own",
                self.what,
                printable::json(&Value::String(printable::one_line(label, 80)))
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(schema: Value) -> Result<Value, String> {
        read(&schema.to_string(), &Secrets::new(["sk-live-0123456789"])).map(|(_, shown)| shown)
    }

    #[test]
    fn answer_schemas_are_flat_objects_of_primitives() {
        assert!(askable(r#"{"type":"object","properties":{"ok":{"type":"boolean"}}}"#).is_ok());
        assert!(
            askable(r#"{"type":"object","properties":{"c":{"type":"string","enum":["a","b"]}}}"#)
                .is_ok()
        );
        assert!(
            askable(r#"{"type":"string"}"#)
                .unwrap_err()
                .contains("object schema")
        );
        assert!(askable(r#"{"type":"object","properties":{"n":{"type":"object"}}}"#).is_err());
        assert!(askable(r#"{"type":"object","properties":{"m":{"type":"array","items":{"type":"string","enum":["a"]}}}}"#).is_ok());
        assert!(askable(r#"{"type":"object","properties":{"m":{"type":"array","items":{"anyOf":[{"const":"a","title":"A"}]}}}}"#).is_ok());
        assert!(
            askable(
                r#"{"type":"object","properties":{"m":{"type":"array","items":{"type":"number"}}}}"#
            )
            .is_err()
        );
        assert!(askable(r#"{"type":"object","properties":{"s":{"type":"string","oneOf":[{"const":"v","title":"V"}]}}}"#).is_ok());
        assert!(
            askable(r#"{"type":"object","properties":{"c":{"type":"string","enum":[1]}}}"#)
                .is_err()
        );
        assert!(askable("nope").is_err());
    }

    #[test]
    fn every_text_a_person_reads_is_masked_and_printable() {
        let schema = json!({
            "type": "object",
            "title": "Form \u{1b}[2J",
            "properties": {
                "key": {"type": "string", "title": "Key sk-live-0123456789",
                        "description": "Pick\u{202e}evil", "default": "sk-live-0123456789\u{200b}"},
                "mode": {"type": "string", "oneOf": [
                    {"const": "a", "title": "All\u{e0041}"},
                    {"const": "b", "title": "Both", "description": "dropped"}]},
                "legacy": {"type": "string", "enum": ["x", "y"], "enumNames": ["Ex\u{7}", "Why"]},
                "many": {"type": "array", "minItems": 1,
                         "items": {"anyOf": [{"const": "p", "title": "P\u{2066}"}, {"const": "q"}]},
                         "default": ["q"]},
                "n": {"type": "integer", "minimum": 1, "default": 3, "x-secret": "sk-live-0123456789"},
            },
            "required": ["key"],
            "$defs": {"hidden": "sk-live-0123456789"},
        });
        let shown = shown(schema).unwrap();
        assert_eq!(
            shown,
            json!({
                "type": "object",
                "title": "Form [2J",
                "properties": {
                    "key": {"type": "string", "title": "Key [redacted]",
                            "description": "Pickevil", "default": "[redacted]"},
                    "mode": {"type": "string", "oneOf": [
                        {"const": "a", "title": "All"}, {"const": "b", "title": "Both"}]},
                    "legacy": {"type": "string", "enum": ["x", "y"], "enumNames": ["Ex", "Why"]},
                    "many": {"type": "array", "minItems": 1,
                             "items": {"anyOf": [{"const": "p", "title": "P"}, {"const": "q"}]},
                             "default": ["q"]},
                    "n": {"type": "integer", "minimum": 1, "default": 3},
                },
                "required": ["key"],
            })
        );
        assert!(!shown.to_string().contains("0123456789"));
    }

    #[test]
    fn names_and_choices_that_cannot_be_shown_as_written_are_refused() {
        let refused = |schema: Value| shown(schema).unwrap_err();
        let with_property =
            |name: &str| json!({"type": "object", "properties": {name: {"type": "boolean"}}});
        let message = refused(with_property("confirm\u{200b}"));
        assert!(
            message.contains(r#"the property name "confirm\u200b" would not be shown as written"#),
            "{message}"
        );
        let message = refused(with_property("sk-live-0123456789"));
        assert!(message.contains("holds a secret"), "{message}");
        assert!(!message.contains("0123456789"), "{message}");
        for bad in ["a\nb", " lead", "two  spaces", "rtl\u{202e}", "tab\t"] {
            refused(with_property(bad));
        }
        let message = refused(json!({"type": "object", "properties": {
            "pick": {"type": "string", "enum": ["keep", "delete\u{200d}"]}}}));
        assert!(
            message.contains(r#"property "pick": the choice "delete\u200d""#),
            "{message}"
        );
        let message = refused(json!({"type": "object", "properties": {
            "pick": {"type": "string", "oneOf": [{"const": "ok", "title": "Fine"},
                                                 {"const": "sk-live-0123456789x"}]}}}));
        assert!(message.contains("holds a secret"), "{message}");
        refused(json!({"type": "object", "properties": {
            "pick": {"type": "array", "items": {"type": "string", "enum": ["a", "b\u{e0100}"]}}}}));
        refused(
            json!({"type": "object", "properties": {"ok": {"type": "boolean"}},
                       "required": ["ok\u{feff}"]}),
        );
    }

    #[test]
    fn fields_or_choices_a_person_could_not_tell_apart_are_refused() {
        let message = shown(json!({"type": "object", "properties": {
            "pick": {"type": "string", "oneOf": [
                {"const": "keep", "title": "Keep the files"},
                {"const": "delete", "title": "Keep the files\u{200b}"}]}}}))
        .unwrap_err();
        assert!(
            message.contains(r#"property "pick": two choices would look the same to the person ("Keep the files")"#),
            "{message}"
        );
        let message = shown(json!({"type": "object", "properties": {
            "confirm": {"type": "boolean", "title": "Go ahead?"},
            "wipe": {"type": "boolean", "title": "go  ahead?\u{200b}"}}}))
        .unwrap_err();
        assert!(
            message.contains("two fields would look the same"),
            "{message}"
        );
        // Descriptions alike are help text alike, not fields alike.
        shown(json!({"type": "object", "properties": {
            "min": {"type": "integer", "description": "A number"},
            "max": {"type": "integer", "description": "A number"}}}))
        .unwrap();
        shown(json!({"type": "object", "properties": {
            "a": {"type": "boolean"}, "b": {"type": "boolean", "title": "A"}}}))
        .unwrap_err();
    }

    #[test]
    fn defaults_that_are_not_a_choice_or_of_another_type_are_dropped() {
        let shown = shown(json!({"type": "object", "properties": {
            "pick": {"type": "string", "enum": ["a"], "default": "a\u{200b}x"},
            "ok": {"type": "boolean", "default": "yes"},
            "many": {"type": "array", "items": {"type": "string", "enum": ["a"]}, "default": ["b"]},
            "format": {"type": "string", "format": "uint64"}}}))
        .unwrap();
        assert_eq!(
            shown["properties"],
            json!({"pick": {"type": "string", "enum": ["a"]}, "ok": {"type": "boolean"},
                   "many": {"type": "array", "items": {"type": "string", "enum": ["a"]}},
                   "format": {"type": "string"}})
        );
    }

    #[test]
    fn the_conformance_suites_forms_pass_unchanged() {
        // tests/mcp-fixtures: `elicitation-sep1034-defaults` and
        // `elicitation-sep1330-enums`, as the suite checks them.
        let defaults = json!({"type": "object", "properties": {
            "name": {"type": "string", "description": "User name", "default": "John Doe"},
            "age": {"type": "integer", "description": "User age", "default": 30},
            "score": {"type": "number", "description": "User score", "default": 95.5},
            "status": {"type": "string", "description": "User status",
                       "enum": ["active", "inactive", "pending"], "default": "active"},
            "verified": {"type": "boolean", "description": "Verification status", "default": true}}});
        let enums = json!({"type": "object", "properties": {
            "untitledSingle": {"type": "string", "description": "Select an option",
                               "enum": ["option1", "option2", "option3"]},
            "titledSingle": {"type": "string", "description": "Select a titled option", "oneOf": [
                {"const": "value1", "title": "First Option"}, {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"}]},
            "legacyEnum": {"type": "string", "description": "Select a legacy option",
                           "enum": ["opt1", "opt2", "opt3"],
                           "enumNames": ["Option One", "Option Two", "Option Three"]},
            "untitledMulti": {"type": "array", "description": "Select multiple options",
                              "minItems": 1, "maxItems": 3,
                              "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
            "titledMulti": {"type": "array", "description": "Select multiple titled options",
                            "minItems": 1, "maxItems": 3,
                            "items": {"anyOf": [{"const": "value1", "title": "First Choice"},
                                                {"const": "value2", "title": "Second Choice"},
                                                {"const": "value3", "title": "Third Choice"}]}}}});
        let contact = json!({"type": "object", "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"}},
            "required": ["username", "email"]});
        for schema in [defaults, enums, contact] {
            assert_eq!(shown(schema.clone()).unwrap(), schema);
        }
    }
}
