//! The human view of a run, as it happens or replayed from a transcript.

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
    pub(crate) fn show(&mut self, event: &serde_json::Value) {
        use std::io::Write as _;
        let text = |key: &str| event[key].as_str().unwrap_or_default();
        let number = |key: &str| event[key].as_f64().unwrap_or_default();
        match text("type") {
            "text_delta" => self.print_text(text("text")),
            "message" if event["message"]["role"] == "assistant" && self.shown.is_empty() => {
                self.print_text(event["message"]["content"].as_str().unwrap_or_default());
            }
            // A new turn (the loop sent an answer back to be fixed): what
            // comes next is new text.
            "message" if event["message"]["role"] == "user" => self.shown.clear(),
            "tool_call_started" => {
                self.shown.clear();
                let arguments = text("arguments");
                let arguments = serde_json::from_str::<serde_json::Value>(arguments)
                    .map_or_else(|_| arguments.to_owned(), |v| printable::json(&v));
                println!(
                    "\n→ {} {}",
                    one_line(text("name"), 64),
                    one_line(&arguments, 300)
                );
            }
            "tool_result" => {
                let message = &event["message"];
                let name = one_line(message["name"].as_str().unwrap_or_default(), 64);
                let duration_ms = number("duration_ms");
                // Text, or LangChain blocks: text first, then what else the
                // model got (images, files), a line each.
                let (first_line, others) = match &message["content"] {
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
                };
                let first_line = one_line(first_line.lines().next().unwrap_or_default(), 300);
                match message["error"]["type"].as_str() {
                    None => {
                        let cached = if event["cached"] == true {
                            " (cached)"
                        } else {
                            ""
                        };
                        println!("← {name} ✓{cached} {duration_ms:.1} ms: {first_line}");
                    }
                    Some(kind) => {
                        println!(
                            "← {name} ✗ {} {duration_ms:.1} ms: {first_line}",
                            one_line(kind, 32)
                        );
                    }
                }
                for other in others {
                    println!("  {}", one_line(&other, 200));
                }
            }
            "tool_progress" => {
                let amount = match event["total"].as_f64() {
                    Some(total) => format!("{}/{total}", number("done")),
                    None => format!("{}", number("done")),
                };
                let message = event["message"]
                    .as_str()
                    .map_or_else(String::new, |m| format!(" {}", one_line(m, 200)));
                println!("  … {} {amount}{message}", one_line(text("name"), 64));
            }
            "model_retry" => eprintln!(
                "(model call failed: {}; retry {} in {:.1} s)",
                one_line(text("error"), 500),
                number("attempt"),
                number("delay_ms") / 1e3
            ),
            "finished" => {
                if event["answer"].is_object() && text("final_text").trim() != self.shown.trim() {
                    // Given through the answer tool: not shown as text yet.
                    println!("\n{}", printable::text(text("final_text")));
                }
                // The next task of a chat shows its own text.
                self.shown.clear();
                println!();
                match event["end"]["kind"].as_str() {
                    Some("answered") => {}
                    Some("invalid_answer") => eprintln!(
                        "The answer does not match the response schema: {}",
                        printable::text(event["end"]["error"].as_str().unwrap_or_default())
                    ),
                    _ => eprintln!("{}", printable::text(text("final_text"))),
                }
                let usage = &event["usage"];
                let cost = event["cost_usd"]
                    .as_f64()
                    .map_or_else(String::new, |cost| format!(", about ${cost:.4}"));
                eprintln!(
                    "({} model call{}, {} tokens in, {} out{cost}, {:.1} s)",
                    number("steps"),
                    if number("steps") == 1.0 { "" } else { "s" },
                    usage["input_tokens"].as_u64().unwrap_or(0),
                    usage["output_tokens"].as_u64().unwrap_or(0),
                    number("duration_ms") / 1e3
                );
            }
            // The asker prints the question itself, beside its prompt.
            _ => {}
        }
        let _ = std::io::stdout().flush();
    }

    pub(crate) fn print_text(&mut self, text: &str) {
        print!("{}", printable::text(text));
        self.shown.push_str(text);
    }
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
