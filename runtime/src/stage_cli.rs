//! `lake stage put|get|ls|rm`: the managed stage from the command line, through the SDK. Only the
//! query endpoint is needed; file bytes go straight to and from object storage.

use std::path::{Path, PathBuf};

use indicatif::{ProgressBar, ProgressStyle};
use lake_client::{ClientError, ConnectOptions, LakeClient};

#[derive(Debug, clap::Subcommand)]
pub enum StageCommand {
    /// Upload a local file to the stage (multipart, streamed).
    Put {
        /// The local file.
        file: PathBuf,
        /// Where in the stage, e.g. in/orders.parquet.
        path: String,
    },
    /// Download a stage file (streamed); to its base name in the current directory by default.
    Get {
        path: String,
        /// The local file to write.
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// List the stage, or the files under a prefix.
    Ls {
        #[arg(default_value = "")]
        prefix: String,
    },
    /// Delete a stage file.
    Rm { path: String },
}

fn bar(total: u64, verb: &str, path: &str) -> ProgressBar {
    // Hidden automatically when stderr is not a terminal (scripts, CI).
    let bar = ProgressBar::new(total);
    if let Ok(style) =
        ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {eta}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(format!("{verb} {path}"));
    bar
}

/// Runs one stage command against the lake behind `endpoint`; prints what it did.
pub async fn run(
    endpoint: &str,
    options: ConnectOptions,
    command: StageCommand,
) -> Result<(), ClientError> {
    let lake = LakeClient::connect_with(endpoint, options).await?;
    let stage = lake.stage();
    match command {
        StageCommand::Put { file, path } => {
            let size = std::fs::metadata(&file)
                .map_err(|source| ClientError::LocalFile {
                    path: file.display().to_string(),
                    source,
                })?
                .len();
            let progress = bar(size, "put", &path);
            let sent = stage
                .put_file(&path, &file, |n| progress.set_position(n))
                .await;
            progress.finish_and_clear();
            println!("put {path} ({} bytes)", sent?);
        }
        StageCommand::Get { path, output } => {
            let output = output
                .unwrap_or_else(|| PathBuf::from(Path::new(&path).file_name().unwrap_or_default()));
            let progress = bar(0, "get", &path);
            let received = stage
                .get_file(&path, &output, |n, total| {
                    progress.set_length(total);
                    progress.set_position(n);
                })
                .await;
            progress.finish_and_clear();
            println!("got {path} → {} ({} bytes)", output.display(), received?);
        }
        StageCommand::Ls { prefix } => {
            for object in stage.list(&prefix).await? {
                println!(
                    "{:>12}  {}  {}",
                    object.size, object.last_modified, object.path
                );
            }
        }
        StageCommand::Rm { path } => {
            stage.delete(&path).await?;
            println!("removed {path}");
        }
    }
    Ok(())
}
