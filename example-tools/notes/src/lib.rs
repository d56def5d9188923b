//! `notes`: remember, recall and forget short notes in a key-value store
//! that outlives every call. Needs one grant: the store named `notes`
//! (`stores = ["notes"]`, with a `[store.notes]` table). With
//! `scope = "user"` each user (from the application's injected context) has
//! notes of their own.
//!
//! Build with `scripts/build-tools.sh` (or `cargo build -p notes --target wasm32-wasip2 --profile guest`).

use schemars::JsonSchema;
use serde::Deserialize;
use toolhost_guest::store::Store;
use toolhost_guest::{Output, Tool, ToolError};

/// The store this component opens.
const STORE: &str = "notes";

/// Arguments of `remember`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Remember {
    /// A short name for the note, e.g. "parking".
    #[schemars(length(min = 1, max = 100))]
    topic: String,
    /// What to remember.
    #[schemars(length(min = 1, max = 10000))]
    text: String,
}

/// Arguments of `recall` and `forget`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Topic {
    /// The note's name, as given to `remember`; leave it empty to list every note (recall only).
    #[schemars(length(max = 100))]
    topic: String,
}

fn key(topic: &str) -> String {
    format!("note:{}", topic.trim().to_lowercase())
}

fn remember(args: Remember) -> Result<Output, ToolError> {
    let notes = Store::open(STORE)?;
    let replaced = notes.exists(&key(&args.topic))?;
    notes.set(&key(&args.topic), args.text.as_bytes())?;
    let total = notes.increment("count:writes", 1)?;
    Ok(Output::text(format!(
        "{} the note \"{}\" ({total} notes written so far)",
        if replaced { "Replaced" } else { "Saved" },
        args.topic.trim()
    )))
}

fn recall(args: Topic) -> Result<Output, ToolError> {
    let notes = Store::open(STORE)?;
    if args.topic.trim().is_empty() {
        let mut topics: Vec<String> = notes
            .keys()?
            .into_iter()
            .filter_map(|k| k.strip_prefix("note:").map(str::to_owned))
            .collect();
        topics.sort();
        return Ok(Output::text(if topics.is_empty() {
            "No notes yet.".to_owned()
        } else {
            format!("Notes: {}", topics.join(", "))
        }));
    }
    match notes.get(&key(&args.topic))? {
        Some(text) => Ok(Output::text(String::from_utf8_lossy(&text).into_owned())),
        None => Err(ToolError::not_found(format!(
            "there is no note \"{}\"; call recall with an empty topic to list them",
            args.topic.trim()
        ))),
    }
}

fn forget(args: Topic) -> Result<Output, ToolError> {
    if args.topic.trim().is_empty() {
        return Err(ToolError::invalid_input("say which note to forget"));
    }
    let notes = Store::open(STORE)?;
    if !notes.exists(&key(&args.topic))? {
        return Err(ToolError::not_found(format!(
            "there is no note \"{}\"",
            args.topic.trim()
        )));
    }
    notes.delete(&key(&args.topic))?;
    Ok(Output::text(format!("Forgot \"{}\"", args.topic.trim())))
}

toolhost_guest::export_tools! {
    Tool::new("remember", "Save a short note under a topic, replacing any note with that topic", remember).idempotent(),
    Tool::new("recall", "Read the note saved under a topic, or list every topic when the topic is empty", recall).read_only().idempotent(),
    Tool::new("forget", "Delete the note saved under a topic", forget).destructive().idempotent(),
}
