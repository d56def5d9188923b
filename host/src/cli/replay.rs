//! `toolhost replay`: a saved transcript shown as the run showed it.

use anyhow::Context as _;

use super::args::UsageError;
use super::display::Display;

/// Print a saved transcript as `run` displayed it.
pub(crate) fn replay(file: &str) -> anyhow::Result<()> {
    use std::io::BufRead as _;
    let reader: Box<dyn std::io::BufRead> = if file == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::io::BufReader::new(
            std::fs::File::open(file).with_context(|| format!("opening the transcript {file}"))?,
        ))
    };
    let mut display = Display::default();
    for (i, line) in reader.lines().enumerate() {
        let line = line.with_context(|| format!("reading {file}"))?;
        if line.trim().is_empty() {
            continue;
        }
        let event: serde_json::Value = serde_json::from_str(&line)
            .ok()
            .filter(|event: &serde_json::Value| event["type"].is_string())
            .ok_or_else(|| {
                UsageError(format!(
                    "{file}:{}: not a transcript event; give a file written by `toolhost run --transcript FILE` or `--json`",
                    i + 1
                ))
            })?;
        display.show(&event);
    }
    Ok(())
}
