//! `lake`: the shared runtime of the query and metadata roles.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use lake_common::config::RuntimeConfig;

#[derive(Parser)]
#[command(
    name = "lake",
    version,
    about = "The lake runtime: Arrow Flight SQL over Lance"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Validate the LAKE_* configuration and print what this role would connect to, without
    /// connecting to anything.
    Plan,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Plan => plan(),
    }
}

fn plan() -> ExitCode {
    match RuntimeConfig::from_vars(std::env::vars()) {
        Ok(parsed) => {
            for name in &parsed.unknown {
                tracing::warn!(variable = %name, "unknown LAKE_* variable ignored");
            }
            match serde_json::to_string_pretty(&parsed.config) {
                Ok(json) => {
                    println!("{json}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: cannot print the plan: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Err(errors) => {
            eprintln!("error: invalid LAKE_* configuration:");
            for error in errors.iter() {
                eprintln!("  - {error}");
            }
            ExitCode::FAILURE
        }
    }
}
