//! The human view of a run, as it happens or replayed from a transcript.

use super::output::{out, out_inline};
use toolhost::printable::{self, one_line};

/// The human view of a run, as it happens or replayed. It reads events as
/// their JSON, so a saved transcript shows exactly as the run did.
#[derive(Default)]
pub(crate) struct Display {
    /// The model's text shown since its last tool call: streamed in, or
    /// (not streaming, or replaying a transcript, which keeps no deltas)
    /// from its message.
    shown: String,
}

impl Display {
    /// Show one event of a run: one function per kind of event.
    pub(crate) fn show(&mut self, event: &serde_json::Value) {
        use std::io::Write as _;
        match text(event, "type") {
            "text_delta" => self.print_text(text(event, "text")),
            "message" if event["message"]["role"] == "assistant" && self.shown.is_empty() => {
                self.print_text(event["message"]["content"].as_str().unwrap_or_default());
            }
            // A new turn (the loop sent an answer back to be fixed): what
            // comes next is new text.
            "message" if event["message"]["role"] == "user" => self.shown.clear(),
            "tool_call_started" => {
                self.shown.clear();
                show_tool_call(event);
            }
            "tool_result" => show_tool_result(event),
            "nested_tool_result" => show_nested_result(event),
            "tool_progress" => show_progress(event),
            "model_retry" => show_model_retry(event),
            "finished" => self.show_finished(event),
            // The asker prints the question itself, beside its prompt.
            _ => {}
        }
        let _ = std::io::stdout().flush();
    }

    /// Print the model's `text` and remember it was shown.
    pub(crate) fn print_text(&mut self, text: &str) {
        out_inline!("{}", printable::text(text));
        self.shown.push_str(text);
    }

    /// The end of a task: the answer if it was not shown as text yet, why
    /// the run ended if not with an answer, and what it cost.
    fn show_finished(&mut self, event: &serde_json::Value) {
        let final_text = text(event, "final_text");
        if event["answer"].is_object() && final_text.trim() != self.shown.trim() {
            // Given through the answer tool: not shown as text yet.
            out!("\n{}", printable::text(final_text));
        }
        // The next task of a chat shows its own text.
        self.shown.clear();
        out!();
        match event["end"]["kind"].as_str() {
            Some("answered") => {}
            Some("invalid_answer") => eprintln!(
                "The answer does not match the response schema: {}",
                printable::text(event["end"]["error"].as_str().unwrap_or_default())
            ),
            _ => eprintln!("{}", printable::text(final_text)),
        }
        show_usage(event);
    }
}

/// The string at `key` of `event`, empty when there is none.
fn text<'a>(event: &'a serde_json::Value, key: &str) -> &'a str {
    event[key].as_str().unwrap_or_default()
}

/// The number at `key` of `event`, 0 when there is none.
fn number(event: &serde_json::Value, key: &str) -> f64 {
    event[key].as_f64().unwrap_or_default()
}

/// `→ NAME ARGUMENTS`: a call the model made, its arguments on one line.
fn show_tool_call(event: &serde_json::Value) {
    let arguments = text(event, "arguments");
    let arguments = serde_json::from_str::<serde_json::Value>(arguments)
        .map_or_else(|_| arguments.to_owned(), |v| printable::json(&v));
    out!(
        "\n→ {} {}",
        one_line(text(event, "name"), 64),
        one_line(&arguments, 300)
    );
}

/// `← NAME ✓ …` or `← NAME ✗ KIND …`: a call's outcome, its time and the
/// first line of its text, then a line for each other block the model got.
fn show_tool_result(event: &serde_json::Value) {
    let message = &event["message"];
    let name = one_line(message["name"].as_str().unwrap_or_default(), 64);
    let duration_ms = number(event, "duration_ms");
    let (first_line, others) = result_content(&message["content"]);
    let first_line = one_line(first_line.lines().next().unwrap_or_default(), 300);
    match message["error"]["type"].as_str() {
        None => {
            let cached = if event["cached"] == true {
                " (cached)"
            } else {
                ""
            };
            out!("← {name} ✓{cached} {duration_ms:.1} ms: {first_line}");
        }
        Some(kind) => {
            out!(
                "← {name} ✗ {} {duration_ms:.1} ms: {first_line}",
                one_line(kind, 32)
            );
        }
    }
    for other in others {
        out!("  {}", one_line(&other, 200));
    }
}

/// A call a tool made (code mode): one indented line, under the call that
/// made it.
fn show_nested_result(event: &serde_json::Value) {
    let message = &event["message"];
    let name = one_line(message["name"].as_str().unwrap_or_default(), 64);
    let duration_ms = number(event, "duration_ms");
    let (first_line, _) = result_content(&message["content"]);
    let first_line = one_line(first_line.lines().next().unwrap_or_default(), 120);
    match message["error"]["type"].as_str() {
        None => out!("    ↳ {name} ✓ {duration_ms:.1} ms: {first_line}"),
        Some(kind) => out!(
            "    ↳ {name} ✗ {} {duration_ms:.1} ms: {first_line}",
            one_line(kind, 32)
        ),
    }
}

/// A result's text, and a description of each other block: the content is
/// text, or LangChain blocks (text first, then what else the model got,
/// images and files, a line each).
fn result_content(content: &serde_json::Value) -> (String, Vec<String>) {
    match content {
        serde_json::Value::Array(blocks) => {
            let text: String = blocks
                .iter()
                .filter_map(|b| b["text"].as_str().filter(|_| b["type"] == "text"))
                .collect();
            let others: Vec<String> = blocks
                .iter()
                .filter(|b| b["type"] != "text")
                .map(describe_block)
                .collect();
            (text, others)
        }
        content => (content.as_str().unwrap_or_default().to_owned(), Vec::new()),
    }
}

/// `  … NAME DONE/TOTAL MESSAGE`: progress a tool reported.
fn show_progress(event: &serde_json::Value) {
    let amount = match event["total"].as_f64() {
        Some(total) => format!("{}/{total}", number(event, "done")),
        None => format!("{}", number(event, "done")),
    };
    let message = event["message"]
        .as_str()
        .map_or_else(String::new, |m| format!(" {}", one_line(m, 200)));
    out!(
        "  … {} {amount}{message}",
        one_line(text(event, "name"), 64)
    );
}

/// A failed model call the loop retries, on stderr.
fn show_model_retry(event: &serde_json::Value) {
    eprintln!(
        "(model call failed: {}; retry {} in {:.1} s)",
        one_line(text(event, "error"), 500),
        number(event, "attempt"),
        number(event, "delay_ms") / 1e3
    );
}

/// What a task cost, on stderr: model calls, tokens, money and time.
fn show_usage(event: &serde_json::Value) {
    let usage = &event["usage"];
    let cost = event["cost_usd"]
        .as_f64()
        .map_or_else(String::new, |cost| format!(", about ${cost:.4}"));
    let steps = number(event, "steps");
    eprintln!(
        "({} model call{}, {} tokens in, {} out{cost}, {:.1} s)",
        steps,
        if steps == 1.0 { "" } else { "s" },
        usage["input_tokens"].as_u64().unwrap_or(0),
        usage["output_tokens"].as_u64().unwrap_or(0),
        number(event, "duration_ms") / 1e3
    );
}

/// A line for a content block other than text: its kind and what it is.
pub(crate) fn describe_block(block: &serde_json::Value) -> String {
    let field = |key: &str| block[key].as_str().unwrap_or_default();
    let what = [field("mime_type"), field("url"), field("name")]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    format!("[{} {what}]", field("type"))
}
