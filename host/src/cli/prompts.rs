//! The person at the terminal, asked: to approve a call, and a tool's
//! questions, field by field.
//!
//! Every prompt holds the terminal's turn, so nothing is printed into it,
//! and is one line the host writes: what a tool or a model wrote in it is
//! made one line and printable ([`toolhost::printable`]), the arguments of
//! a call as JSON with everything invisible escaped. A prompt whose call
//! stops waiting (cancelled, out of time) says it was withdrawn, and no
//! line typed after that is taken as its answer.

use futures::future::BoxFuture;
use serde_json::Value;
use toolhost::printable;
use toolhost::{Answer, Asker, Question};
use toolhost::{Approver, ToolCall, ToolSpec};

use super::terminal::{Terminal, Turn};

/// Asks the person at the terminal to approve each call that needs it.
pub(crate) struct TerminalApprover(pub(crate) &'static Terminal);

impl Approver for TerminalApprover {
    fn approve<'a>(
        &'a self,
        call: &'a ToolCall,
        spec: &'a ToolSpec,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let turn = self.0.turn().await;
            // Whole and exact: a person approves what will run. The
            // dispatcher checked the arguments before asking.
            let arguments = match call.arguments.parse() {
                Ok(value) => printable::json(&value),
                Err(problem) => printable::one_line(&problem.to_string(), 500),
            };
            let why = if spec.hints.destructive {
                " (it may delete or overwrite data)"
            } else {
                ""
            };
            let prompt = format!(
                "\n? run {}{why} with {arguments}? [y/N] ",
                printable::one_line(&spec.name, 64)
            );
            let pending = Withdrawn::new(&turn, "approval");
            let answer = turn.answer(&prompt).await;
            pending.answered();
            match answer.as_deref().map(str::trim) {
                Some("y" | "Y" | "yes") => Ok(()),
                _ => Err("the user refused it".to_owned()),
            }
        })
    }
}

/// Asks the person at the terminal a tool's question, field by field.
pub(crate) struct TerminalAsker(pub(crate) &'static Terminal);

impl Asker for TerminalAsker {
    fn ask<'a>(&'a self, question: &'a Question) -> BoxFuture<'a, Answer> {
        Box::pin(async move {
            let turn = self.0.turn().await;
            // The tool's words on a line of their own, after the host's.
            turn.say(&format!(
                "\n? the tool {} asks (answer each field, or press Enter at the first to decline):\n  {}\n",
                printable::one_line(&question.tool, 64),
                printable::one_line(&question.message, 2000)
            ));
            let pending = Withdrawn::new(&turn, "question");
            let answer = fill(&turn, &question.schema).await;
            pending.answered();
            answer
        })
    }
}

/// Says, when dropped before [`Withdrawn::answered`], that the prompt was
/// withdrawn: its call stopped waiting for the answer.
struct Withdrawn<'t, 'a> {
    turn: &'t Turn<'a>,
    what: &'static str,
    pending: bool,
}

impl<'t, 'a> Withdrawn<'t, 'a> {
    fn new(turn: &'t Turn<'a>, what: &'static str) -> Self {
        Self {
            turn,
            what,
            pending: true,
        }
    }

    fn answered(mut self) {
        self.pending = false;
    }
}

impl Drop for Withdrawn<'_, '_> {
    fn drop(&mut self) {
        if self.pending {
            self.turn.say(&format!(
                "\n  (this {} was withdrawn: its call no longer waits for an answer, and nothing typed now answers it)\n",
                self.what
            ));
        }
    }
}

/// The answer to a form, asked field by field.
async fn fill(turn: &Turn<'_>, schema: &Value) -> Answer {
    let empty = serde_json::Map::new();
    let properties = schema["properties"].as_object().unwrap_or(&empty);
    let fields: Vec<Field> = properties
        .iter()
        .map(|(name, property)| Field::of(name, property))
        .collect();
    let mut answer = serde_json::Map::new();
    for (i, field) in fields.iter().enumerate() {
        // Two fields labelled alike (by their descriptions) are told apart
        // by their names.
        let alike = fields.iter().filter(|f| f.label == field.label).count() > 1;
        let label = if alike && field.label != field.name {
            format!("{} ({})", field.label, field.name)
        } else {
            field.label.clone()
        };
        let prompt = format!("  {label} [{}]: ", field.hint);
        loop {
            let Some(line) = turn.answer(&prompt).await else {
                return Answer::Cancelled;
            };
            let line = line.trim();
            if line.is_empty() && i == 0 {
                return Answer::Declined;
            }
            match field.read(line) {
                Some(value) => {
                    answer.insert(field.name.clone(), value);
                    break;
                }
                None => turn.say(&format!("  (expected {})\n", field.hint)),
            }
        }
    }
    Answer::Accepted(Value::Object(answer))
}

/// One field of a form, as the terminal asks for it.
struct Field {
    name: String,
    kind: String,
    label: String,
    /// What to type, in brackets after the label.
    hint: String,
    /// The values to choose from, if it is a choice.
    options: Vec<String>,
}

impl Field {
    fn of(name: &str, property: &Value) -> Self {
        let kind = property["type"].as_str().unwrap_or("string").to_owned();
        let label = property["title"]
            .as_str()
            .or(property["description"].as_str())
            .unwrap_or(name);
        // A multi-select's choices are those of its items.
        let choices = if kind == "array" {
            choices(&property["items"])
        } else {
            choices(property)
        };
        let shown: Vec<String> = choices
            .iter()
            .map(|(value, title)| match title {
                Some(title) if title != value => format!("{value} = {title}"),
                _ => value.clone(),
            })
            .collect();
        let hint = match kind.as_str() {
            "boolean" => "y/n".to_owned(),
            "array" => format!("any of {}, separated by commas", shown.join(" | ")),
            _ if !shown.is_empty() => shown.join(" | "),
            other => other.to_owned(),
        };
        Self {
            name: name.to_owned(),
            kind,
            label: printable::one_line(label, 80),
            hint: printable::one_line(&hint, 500),
            options: choices.into_iter().map(|(value, _)| value).collect(),
        }
    }

    /// The value `line` gives the field, if it is one.
    fn read(&self, line: &str) -> Option<Value> {
        let is_option = |text: &str| self.options.iter().any(|o| o == text);
        match self.kind.as_str() {
            "boolean" => match line {
                "y" | "Y" | "yes" => Some(Value::Bool(true)),
                "n" | "N" | "no" => Some(Value::Bool(false)),
                _ => None,
            },
            "integer" => line.parse::<i64>().ok().map(Into::into),
            "number" => line
                .parse::<f64>()
                .ok()
                .and_then(serde_json::Number::from_f64)
                .map(Value::Number),
            "array" => {
                let picked: Vec<&str> = line
                    .split(',')
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .collect();
                picked.iter().all(|p| is_option(p)).then(|| picked.into())
            }
            _ if !self.options.is_empty() && !is_option(line) => None,
            _ => Some(Value::String(line.to_owned())),
        }
    }
}

/// The choices of `schema`: its `enum` (titled by `enumNames`), or the
/// `const`s of its `oneOf` or `anyOf`, each with its title if it has one.
fn choices(schema: &Value) -> Vec<(String, Option<String>)> {
    let title = |t: Option<&str>| t.map(str::to_owned);
    if let Some(values) = schema["enum"].as_array() {
        let names = schema["enumNames"].as_array();
        return values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| {
                let name = names.and_then(|n| n.get(i)).and_then(Value::as_str);
                Some((v.as_str()?.to_owned(), title(name)))
            })
            .collect();
    }
    schema["oneOf"]
        .as_array()
        .or(schema["anyOf"].as_array())
        .map(|options| {
            options
                .iter()
                .filter_map(|o| Some((o["const"].as_str()?.to_owned(), title(o["title"].as_str()))))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;
    use toolhost::Hints;

    use super::super::terminal::tests::{abandon, dropped, terminal, within};
    use super::*;

    fn spec(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            title: name.into(),
            description: String::new(),
            input_schema: json!({"type": "object"}),
            output_schema: None,
            hints: Hints {
                destructive: true,
                ..Hints::default()
            },
        }
    }

    fn question(message: &str, schema: Value) -> Question {
        Question {
            tool: "probe".into(),
            call_id: "call_1".into(),
            key: "q1".into(),
            message: message.into(),
            schema,
        }
    }

    #[tokio::test]
    async fn an_approval_shows_exactly_what_will_run_on_one_line() {
        let (terminal, keyboard, screen) = terminal();
        let approver = TerminalApprover(terminal);
        let call = ToolCall::new(
            "call_1",
            "wipe",
            json!({"path": "a\n? run calc with {}? [y/N] \u{202e}"}),
        );
        let spec = spec("wipe");
        let approval = approver.approve(&call, &spec);
        keyboard.send(b"yes\n".to_vec()).unwrap();
        assert_eq!(within(approval).await, Ok(()));
        assert_eq!(
            screen.text(),
            "\n? run wipe (it may delete or overwrite data) with \
             {\"path\":\"a\\n? run calc with {}? [y/N] \\u202e\"}? [y/N] "
        );
    }

    #[tokio::test]
    async fn anything_but_yes_refuses() {
        let (terminal, keyboard, _) = terminal();
        let approver = TerminalApprover(terminal);
        let call = ToolCall::new("call_1", "wipe", json!({}));
        let spec = spec("wipe");
        for answer in ["n\n", "\n", "yes please\n"] {
            let approval = approver.approve(&call, &spec);
            keyboard.send(answer.as_bytes().to_vec()).unwrap();
            assert!(within(approval).await.is_err(), "{answer:?}");
        }
    }

    #[tokio::test]
    async fn a_question_is_the_tools_one_line_and_asks_each_field() {
        let (terminal, keyboard, screen) = terminal();
        let asker = TerminalAsker(terminal);
        let question = question(
            "Pick\n? run wipe with {}? [y/N] ",
            // Named in the order asked whether JSON objects keep their
            // order or sort their keys.
            json!({"type": "object", "properties": {
                "a_mode": {"type": "string", "title": "Mode\nline",
                         "oneOf": [{"const": "a", "title": "All"}, {"const": "b"}]},
                "b_n": {"type": "integer", "description": "How many"},
                "b_o": {"type": "integer", "description": "How many"},
                "c_tags": {"type": "array", "items": {"type": "string", "enum": ["x", "y"]}},
                "d_ok": {"type": "boolean"}}}),
        );
        let asked = asker.ask(&question);
        // A line at a time, as typed at each prompt: what is typed ahead
        // of a prompt is discarded.
        for line in ["c", "a", "many", "3", "4", "x, y", "y"] {
            keyboard.send(format!("{line}\n").into_bytes()).unwrap();
        }
        let answer = within(asked).await;
        assert_eq!(
            answer,
            Answer::Accepted(
                json!({"a_mode": "a", "b_n": 3, "b_o": 4, "c_tags": ["x", "y"], "d_ok": true})
            )
        );
        let screen = screen.text();
        assert!(
            screen.contains("asks (answer each field, or press Enter at the first to decline):\n  Pick⏎? run wipe with {}? [y/N]\n"),
            "{screen}"
        );
        assert!(screen.contains("  Mode⏎line [a = All | b]: "), "{screen}");
        assert!(screen.contains("  (expected a = All | b)\n"), "{screen}");
        assert!(screen.contains("  How many (b_n) [integer]: "), "{screen}");
        assert!(screen.contains("  How many (b_o) [integer]: "), "{screen}");
        assert!(
            screen.contains("  c_tags [any of x | y, separated by commas]: "),
            "{screen}"
        );
        // Every line the tool's text is on starts with the host's indent.
        for line in screen.lines().filter(|l| l.contains("wipe")) {
            assert!(line.starts_with("  Pick"), "{line}");
        }
    }

    #[tokio::test]
    async fn enter_at_the_first_field_declines_and_the_end_of_input_cancels() {
        let (terminal, keyboard, _) = terminal();
        let asker = TerminalAsker(terminal);
        let question = question(
            "Go?",
            json!({"type": "object", "properties": {"ok": {"type": "boolean"}}}),
        );
        let asked = asker.ask(&question);
        keyboard.send(b"\n".to_vec()).unwrap();
        assert_eq!(within(asked).await, Answer::Declined);
        drop(keyboard);
        assert_eq!(within(asker.ask(&question)).await, Answer::Cancelled);
    }

    #[tokio::test]
    async fn a_withdrawn_question_says_so_and_its_answer_never_approves_the_next_call() {
        let (terminal, keyboard, screen) = terminal();
        let asker = TerminalAsker(terminal);
        let approver = Arc::new(TerminalApprover(terminal));
        let question = question(
            "Type y to continue",
            json!({"type": "object", "properties": {"ok": {"type": "boolean"}}}),
        );
        // The call's time to wait runs out while the person reads.
        abandon(terminal, asker.ask(&question)).await;
        assert!(
            screen.text().ends_with(
                "(this question was withdrawn: its call no longer waits for an answer, and nothing typed now answers it)\n"
            ),
            "{}",
            screen.text()
        );
        // The person answers the question that was on screen...
        keyboard.send(b"y\n".to_vec()).unwrap();
        dropped(terminal, 1).await;
        // ...and that answer does not approve the call asked about next.
        let call = ToolCall::new("call_2", "wipe", json!({}));
        let spec = spec("wipe");
        let approval = approver.approve(&call, &spec);
        keyboard.send(b"n\n".to_vec()).unwrap();
        assert!(within(approval).await.is_err());
    }
}
