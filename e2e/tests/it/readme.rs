//! The README's commands are the product's front door: run them as written.

use lake_e2e::{binary, workspace_root};
use std::process::Command;

fn readme() -> String {
    std::fs::read_to_string(workspace_root().join("README.md")).unwrap()
}

/// The arguments after `cargo run -p <package> --` on the README line that runs `package`.
fn readme_args(package: &str) -> Vec<String> {
    let marker = format!("scripts/cargo run -p {package} -- ");
    let text = readme();
    let line = text
        .lines()
        .find_map(|l| l.trim().strip_prefix(marker.as_str()))
        .unwrap_or_else(|| panic!("README.md has no `{marker}…` line"));
    line.split_whitespace().map(str::to_owned).collect()
}

#[test]
fn readme_main_job_command_runs() {
    let args = readme_args("lake-operator");
    let out = Command::new(binary("lake-operator"))
        .args(&args)
        .current_dir(workspace_root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "README command `lake-operator {}` failed:\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("roles:") && stdout.contains("query:"),
        "{stdout}"
    );
}

#[test]
fn readme_names_the_test_command() {
    let text = readme();
    assert!(
        text.contains("\nscripts/test\n"),
        "README.md must show the test command scripts/test"
    );
    let ci = std::fs::read_to_string(workspace_root().join(".ci/run")).unwrap();
    assert!(
        ci.contains("scripts/test"),
        ".ci/run must call scripts/test"
    );
}
