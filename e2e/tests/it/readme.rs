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

/// The README's main job, as written: `lake local` on a data directory relative to where it
/// runs, serving the endpoints the README names; the banner's ADBC snippet and the README's
/// `lake sql` line work against it; writes on query are refused naming metadata; SIGTERM stops
/// it cleanly.
#[test]
fn readme_main_job_runs() {
    let text = readme();
    let section = text
        .split("## The main job")
        .nth(1)
        .expect("README.md has a \"## The main job\" section");
    let marker = "scripts/cargo run -p lake-runtime --bin lake -- ";
    let args: Vec<String> = section
        .lines()
        .find_map(|l| l.trim().strip_prefix(marker))
        .unwrap_or_else(|| panic!("the main job section has no `{marker}…` line"))
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert_eq!(args.first().map(String::as_str), Some("local"), "{args:?}");
    let cwd = tempfile::tempdir().unwrap();
    let mut child = Running(
        Command::new(binary("lake"))
            .args(&args)
            .current_dir(cwd.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let mut banner = Vec::new();
    {
        use std::io::BufRead;
        let mut lines = std::io::BufReader::new(child.0.stdout.take().unwrap()).lines();
        for line in lines.by_ref() {
            let line = line.unwrap();
            let last = line.contains("print(cur.fetchall())");
            banner.push(line);
            if last {
                break;
            }
        }
    }
    let banner = banner.join("\n");
    for endpoint in ["grpc://127.0.0.1:8815", "grpc://127.0.0.1:8816"] {
        assert!(section.contains(endpoint), "the README names {endpoint}");
        assert!(banner.contains(endpoint), "{banner}");
    }
    assert!(
        cwd.path().join("lake-data").is_dir(),
        "the data directory is relative to cwd"
    );
    // The banner's snippet, as a user pastes it.
    let snippet: String = banner
        .split("Python (ADBC):\n")
        .nth(1)
        .expect("the banner has an ADBC snippet")
        .lines()
        .map(|l| l.strip_prefix("  ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n");
    let (ok, stdout, stderr) = lake_testkit::python(&["-c", &snippet]);
    assert!(ok, "{snippet}\n{stderr}");
    assert_eq!(stdout.trim(), "[(1, 'tea'), (2, 'cake')]");
    // The README's one-off SQL line.
    assert!(text.contains("lake sql grpc://127.0.0.1:8815 \"SELECT …\""));
    let sql = |endpoint: &str, sql: &str| {
        Command::new(binary("lake"))
            .args(["sql", endpoint, sql, "--format", "csv"])
            .output()
            .unwrap()
    };
    let out = sql(
        "grpc://127.0.0.1:8815",
        "SELECT count(*) AS n FROM sales.orders",
    );
    assert!(out.status.success(), "{}", lake_testkit::output_text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "n\n2\n");
    let out = sql("grpc://127.0.0.1:8815", "DROP TABLE sales.orders");
    let said = lake_testkit::output_text(&out);
    assert!(
        !out.status.success() && said.contains("grpc://127.0.0.1:8816"),
        "{said}"
    );
    // SAFETY: signals a child this test owns.
    assert_eq!(unsafe { libc::kill(child.0.id() as i32, libc::SIGTERM) }, 0);
    let status = child.0.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

/// A `lake local` on the README's fixed ports: stopped however the test ends, so that a failed
/// assertion does not leave it holding them for the next run.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The README's offline dry run of the operator.
#[test]
fn readme_render_command_runs() {
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
