//! Run the agent loop from your own program: a model endpoint, your tools,
//! and your own approver deciding which calls may run.
//!
//! ```sh
//! scripts/build-tools.sh --rust                  # builds target/tools/calc.wasm
//! scripts/local-model.sh start                   # or any OpenAI-compatible endpoint
//! TOOLHOST_BASE_URL=http://127.0.0.1:8080/v1 cargo run --release --example agent_loop -- "What is 1234 * 5678?"
//! ```
//!
//! `TOOLHOST_BASE_URL` is the endpoint (default `http://127.0.0.1:8080/v1`,
//! where `scripts/local-model.sh` serves), `TOOLHOST_MODEL` the model name.
//! The approver here lets `calc` run and asks for nothing else; every
//! decision is printed.

use std::sync::Arc;

use anyhow::Context as _;
use futures::future::BoxFuture;
use toolhost::agent::{Agent, AgentEvent, AgentPolicy, RunEnd};
use toolhost::model::config::ModelConfig;
use toolhost::model::{Message, client_for};
use toolhost::{Approval, ComponentConfig, SandboxOptions, ToolCall, ToolHost, ToolSpec};

/// Approves calls of the tools it was given, refuses every other.
struct OnlyThese(Vec<String>);

impl toolhost::Approver for OnlyThese {
    fn approve<'a>(
        &'a self,
        call: &'a ToolCall,
        spec: &'a ToolSpec,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let allowed = self.0.contains(&spec.name);
            println!(
                "approver: {} {}",
                if allowed { "allows" } else { "refuses" },
                call.name
            );
            if allowed {
                Ok(())
            } else {
                Err(format!("{} is not on this program's list", spec.name))
            }
        })
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let task = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "What is 1234 * 5678? Use the calc tool.".to_owned());
    let base_url = std::env::var("TOOLHOST_BASE_URL")
        .unwrap_or_else(|_| "http://127.0.0.1:8080/v1".to_owned());
    let model = std::env::var("TOOLHOST_MODEL").unwrap_or_else(|_| "local".to_owned());

    // Every call of calc must be approved, so the approver decides each.
    let calc = ComponentConfig::new("target/tools/calc.wasm").approval(Approval::Always);
    let host = ToolHost::load_components(vec![calc], SandboxOptions::default())
        .await
        .context("loading target/tools/calc.wasm (build it with scripts/build-tools.sh --rust)")?;

    let config = ModelConfig::openai(base_url.parse()?, model);
    let client = client_for(&config)?;
    let policy = AgentPolicy::from_config(&config);
    let approver = Arc::new(OnlyThese(vec!["calc".to_owned()]));
    let agent = Agent::new(Arc::from(client), host, approver, policy);

    let transcript = agent
        .run_with(vec![Message::user(task)], &|event| {
            if let AgentEvent::ToolResult { message, .. } = event {
                let content = serde_json::to_string(&message.content).unwrap_or_default();
                println!(
                    "tool {}: {content} (is_error: {})",
                    message.name, message.is_error
                );
            }
        })
        .await;
    println!("answer: {}", transcript.final_text);
    anyhow::ensure!(
        transcript.end == RunEnd::Answered,
        "the run ended {:?}",
        transcript.end
    );
    Ok(())
}
