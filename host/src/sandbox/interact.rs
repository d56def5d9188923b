//! What a tool tells and asks the people behind a call: progress reports
//! (`host.progress`) and questions (`host.ask`), each with its per-call
//! budget.
//!
//! A question reaches the person through the call's [`Asker`]: the
//! terminal in `toolhost run`, the MCP client's elicitation, or an
//! embedder's own. The host checks the question before asking (a schema it
//! can render, a bounded text, at most [`MAX_ASKS`] per call), shows it as
//! the tool's words (masked, cut, control characters removed), stops the
//! call's clock while it waits (up to [`ASK_WAIT`]), and checks the answer
//! against the schema before the tool sees it. An answer is data for the
//! tool: nothing in this path touches the grants.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::bindings::v0_2::toolhost::tool::host::{AskRefusal, Refused};
use super::deadline::Deadline;
use super::secrets::Secrets;
use crate::observe::{Answer, Asker, CallObserver, Progress, Question};
use crate::outcome::clip;

/// The longest a call waits for a person's answer. The call's own timeout
/// stands still meanwhile.
pub const ASK_WAIT: Duration = Duration::from_secs(300);

/// Questions one call may ask.
pub(crate) const MAX_ASKS: u32 = 8;
/// The longest question, in characters.
const MAX_QUESTION_CHARS: usize = 2000;
/// The largest answer schema, as JSON text.
const MAX_ANSWER_SCHEMA: usize = 16 * 1024;
/// The largest answer, as JSON text.
const MAX_ANSWER: usize = 64 * 1024;
/// Progress reports one call may send; later ones are dropped.
pub(crate) const MAX_PROGRESS: u32 = 1000;
/// The longest progress message, in characters.
const MAX_PROGRESS_MESSAGE: usize = 500;

/// One call's progress and questions.
pub(crate) struct Interaction {
    tool: String,
    call_id: String,
    secrets: Arc<Secrets>,
    observer: Option<Arc<dyn CallObserver>>,
    asker: Arc<dyn Asker>,
    deadline: Option<Deadline>,
    asks: u32,
    reports: u32,
    last_done: Option<f64>,
}

fn refused(reason: AskRefusal, message: impl Into<String>) -> Refused {
    Refused {
        reason,
        message: message.into(),
    }
}

impl Interaction {
    pub(crate) fn new(
        tool: String,
        call_id: String,
        secrets: Arc<Secrets>,
        observer: Option<Arc<dyn CallObserver>>,
        asker: Arc<dyn Asker>,
        deadline: Option<Deadline>,
    ) -> Self {
        Self {
            tool,
            call_id,
            secrets,
            observer,
            asker,
            deadline,
            asks: 0,
            reports: 0,
            last_done: None,
        }
    }

    /// Pass a progress report on, if it is well-formed, grows, and fits
    /// the budget.
    pub(crate) fn progress(&mut self, done: f64, total: Option<f64>, message: Option<String>) {
        let Some(observer) = &self.observer else {
            return;
        };
        let finite =
            done.is_finite() && done >= 0.0 && total.is_none_or(|t| t.is_finite() && t >= 0.0);
        // MCP requires progress to grow with each notification.
        let grows = self.last_done.is_none_or(|last| done > last);
        if !finite || !grows || self.reports >= MAX_PROGRESS {
            return;
        }
        self.reports += 1;
        self.last_done = Some(done);
        let message = message.map(|m| clip(&plain(&self.secrets.mask(&m)), MAX_PROGRESS_MESSAGE));
        observer.progress(&Progress {
            tool: self.tool.clone(),
            call_id: self.call_id.clone(),
            done,
            total,
            message,
        });
    }

    /// How many questions the tool asked, answered or not.
    pub(crate) fn questions(&self) -> u32 {
        self.asks
    }

    /// Ask the person `question`; the answer as JSON text, or why none.
    pub(crate) async fn ask(
        &mut self,
        question: String,
        answer_schema: String,
    ) -> Result<String, Refused> {
        if self.asks >= MAX_ASKS {
            return Err(refused(
                AskRefusal::InvalidQuestion,
                format!("a call may ask at most {MAX_ASKS} questions"),
            ));
        }
        self.asks += 1;
        let schema = answer_schema_of(&answer_schema)
            .map_err(|e| refused(AskRefusal::InvalidQuestion, e))?;
        let validator = jsonschema::validator_for(&schema).map_err(|e| {
            refused(
                AskRefusal::InvalidQuestion,
                format!("the answer schema is not valid JSON Schema: {e}"),
            )
        })?;
        let message = plain(&self.secrets.mask(&question));
        if message.trim().is_empty() {
            return Err(refused(
                AskRefusal::InvalidQuestion,
                "the question is empty",
            ));
        }
        let question = Question {
            tool: self.tool.clone(),
            call_id: self.call_id.clone(),
            message: clip(&message, MAX_QUESTION_CHARS),
            schema,
        };
        let answer = {
            let _paused = self.deadline.as_ref().map(Deadline::pause);
            tokio::time::timeout(ASK_WAIT, self.asker.ask(&question)).await
        };
        let answer = match answer {
            Err(_) => {
                return Err(refused(
                    AskRefusal::Unavailable,
                    format!(
                        "nobody answered within {}",
                        humantime::format_duration(ASK_WAIT)
                    ),
                ));
            }
            Ok(Answer::Declined) => {
                return Err(refused(
                    AskRefusal::Declined,
                    "the person declined to answer",
                ));
            }
            Ok(Answer::Cancelled) => {
                return Err(refused(
                    AskRefusal::Cancelled,
                    "the person dismissed the question",
                ));
            }
            Ok(Answer::Unavailable(why)) => return Err(refused(AskRefusal::Unavailable, why)),
            Ok(Answer::Accepted(answer)) => answer,
        };
        if let Some(error) = validator.iter_errors(&answer).next() {
            tracing::warn!(tool = %self.tool, call_id = %self.call_id, error = %error, "an answer did not fit the tool's schema; the tool is told nobody answered");
            return Err(refused(
                AskRefusal::Unavailable,
                format!("the answer did not fit the schema ({error})"),
            ));
        }
        let text = answer.to_string();
        if text.len() > MAX_ANSWER {
            return Err(refused(AskRefusal::Unavailable, "the answer was too long"));
        }
        Ok(text)
    }
}

/// `text` without control characters (newlines and tabs kept): a question
/// cannot move the cursor, clear the screen or pose as the host's prompt.
fn plain(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_control() || *c == '\n' || *c == '\t')
        .collect()
}

/// The answer schema as JSON, if it is one every asker can render: MCP's
/// elicitation schema, an object whose properties are strings (with an
/// optional `enum`, `oneOf` of `{const, title}` or legacy `enumNames`),
/// numbers, integers, booleans, or arrays of such string choices. The
/// terminal asks for them one by one.
fn answer_schema_of(text: &str) -> Result<Value, String> {
    if text.len() > MAX_ANSWER_SCHEMA {
        return Err(format!(
            "the answer schema is over {MAX_ANSWER_SCHEMA} bytes"
        ));
    }
    let mut schema: Value =
        serde_json::from_str(text).map_err(|e| format!("the answer schema is not JSON: {e}"))?;
    // Shown to MCP clients as the elicitation's schema: no integer format
    // they do not know (see crate::schema).
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
        match property.get("type").and_then(Value::as_str) {
            Some("string") => {
                if let Some(options) = property.get("enum")
                    && !options
                        .as_array()
                        .is_some_and(|o| !o.is_empty() && o.iter().all(Value::is_string))
                {
                    return Err(format!("property {name:?}: `enum` must list strings"));
                }
                if let Some(options) = property.get("oneOf")
                    && !is_choice_list(options)
                {
                    return Err(format!(
                        "property {name:?}: `oneOf` must list {{\"const\": \"…\", \"title\": \"…\"}} choices"
                    ));
                }
            }
            Some("number" | "integer" | "boolean") => {}
            Some("array") => {
                let items = property.get("items");
                let plain = items
                    .and_then(|i| i.get("enum"))
                    .and_then(Value::as_array)
                    .is_some_and(|o| !o.is_empty() && o.iter().all(Value::is_string));
                let titled = items
                    .and_then(|i| i.get("anyOf"))
                    .is_some_and(is_choice_list);
                if !plain && !titled {
                    return Err(format!(
                        "property {name:?}: an array answer must be a multi-select: `items` with a string `enum` or an `anyOf` of {{\"const\", \"title\"}} choices"
                    ));
                }
            }
            _ => {
                return Err(format!(
                    "property {name:?} must be of type string, number, integer, boolean, or an array of string choices (MCP clients ask for nothing else)"
                ));
            }
        }
    }
    Ok(schema)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answer_schemas_are_flat_objects_of_primitives() {
        assert!(
            answer_schema_of(r#"{"type":"object","properties":{"ok":{"type":"boolean"}}}"#).is_ok()
        );
        assert!(
            answer_schema_of(
                r#"{"type":"object","properties":{"c":{"type":"string","enum":["a","b"]}}}"#
            )
            .is_ok()
        );
        assert!(
            answer_schema_of(r#"{"type":"string"}"#)
                .unwrap_err()
                .contains("object schema")
        );
        assert!(
            answer_schema_of(r#"{"type":"object","properties":{"n":{"type":"object"}}}"#).is_err()
        );
        assert!(answer_schema_of(r#"{"type":"object","properties":{"m":{"type":"array","items":{"type":"string","enum":["a"]}}}}"#).is_ok());
        assert!(answer_schema_of(r#"{"type":"object","properties":{"m":{"type":"array","items":{"anyOf":[{"const":"a","title":"A"}]}}}}"#).is_ok());
        assert!(
            answer_schema_of(
                r#"{"type":"object","properties":{"m":{"type":"array","items":{"type":"number"}}}}"#
            )
            .is_err()
        );
        assert!(answer_schema_of(r#"{"type":"object","properties":{"s":{"type":"string","oneOf":[{"const":"v","title":"V"}]}}}"#).is_ok());
        assert!(
            answer_schema_of(
                r#"{"type":"object","properties":{"c":{"type":"string","enum":[1]}}}"#
            )
            .is_err()
        );
        assert!(answer_schema_of("nope").is_err());
    }

    #[test]
    fn questions_lose_their_control_characters() {
        assert_eq!(plain("ok?\u{1b}[2J\rAPPROVE\n"), "ok?[2JAPPROVE\n");
    }
}
