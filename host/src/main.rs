//! The `toolhost` command: the only place that prints to the terminal or
//! decides the exit status.
//!
//! Exit status: 0 when every call produced a ToolMessage (even one with
//! `is_error`); 1 for a manifest or load error, for `run` a model endpoint
//! that failed for good, and for `call --batch` a batch that is not a JSON
//! array, call or assistant message (no call runs) or that stopped being
//! readable partway (the answers written stand); 2 for a usage error.

mod cli;

use std::process::ExitCode;

use clap::Parser as _;

use cli::args::{Cli, Command, UsageError};
use cli::log::init_logging;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Declared before the runtime so that it drops after it: lines the
    // runtime's tasks log while shutting down are flushed too.
    // `call --component --verbose` shows the tool's own log lines.
    let default_log = match &cli.command {
        Command::Call(flags) if flags.component.verbose => "warn,toolhost::guest=trace",
        _ => "warn",
    };
    let _logging = match init_logging(cli.log_format, default_log) {
        Ok(logging) => logging,
        Err(e) => {
            eprintln!("error: cannot start logging: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Tools' files and connections come from a pool sized by this limit,
    // with a reserve kept for the host: raise it as far as allowed first.
    toolhost::raise_descriptor_limit();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = match runtime.block_on(cli::run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            if e.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    };
    // A check of a tool's arguments that ran away past its call's deadline
    // cannot be stopped; exit without waiting for it.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    code
}
