//! The clients people use beside ADBC: the Arrow Flight SQL JDBC driver (DBeaver, BI tools, ETL)
//! and arrow-go's `database/sql` driver, each running its conformance suite
//! (`runtime/tests/clients/`) against `lake local` with per-role tokens and against a
//! `lake serve` pair on the AWS emulator.

use std::process::Command;

use lake_common::plan::Role;
use lake_testkit::{client_tool, python, workspace_root};

use crate::support::{CloudLake, LocalLake, Served};

/// The JDBC driver `scripts/bootstrap` fetches (Maven Central's newest).
const JDBC_DRIVER: &str = "flight-sql-jdbc-driver-18.3.0.jar";

/// Runs a suite and asserts every check passed; returns its output.
fn suite(name: &str, mut command: Command) -> String {
    let out = command.output().unwrap_or_else(|e| panic!("{name}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{name}:\n{stdout}");
    assert!(
        out.status.success() && stdout.contains(" passed, 0 failed"),
        "{name} failed:\n{stdout}\n{stderr}"
    );
    stdout
}

fn jdbc(args: &[&str]) -> Command {
    java("JdbcConformance.java", args)
}

/// The single-file Java program `source` (in `runtime/tests/clients/`) with the JDBC driver.
pub(crate) fn java(source: &str, args: &[&str]) -> Command {
    let mut command = Command::new("java");
    command
        // The driver's Arrow memory needs it on Java 17+.
        .arg("--add-opens=java.base/java.nio=ALL-UNNAMED")
        .arg("-cp")
        .arg(client_tool(JDBC_DRIVER))
        .arg(workspace_root().join("runtime/tests/clients").join(source))
        .args(args)
        .current_dir(workspace_root());
    command
}

pub(crate) fn go(args: &[&str]) -> Command {
    let mut command = Command::new(client_tool("gosql"));
    command.args(args);
    command
}

/// The CPU seconds process `pid` used so far (user + system).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    // SAFETY: sysconf only reads a constant of the running system.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// The suites end queries of 10^11 rows by cancelling or by a deadline: if the server kept
/// working on them it would stay busy for hours. It must be idle within a few seconds.
fn assert_idle(pid: u32, after: &str) {
    let started = std::time::Instant::now();
    loop {
        let before = cpu_seconds(pid);
        std::thread::sleep(std::time::Duration::from_millis(500));
        let used = cpu_seconds(pid) - before;
        if used < 0.05 {
            return;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(15),
            "the server still works after {after}: {used:.2} s of CPU in the last 0.5 s"
        );
    }
}

/// `lake local` requiring a token per endpoint: (lake, query token, metadata token).
fn local_with_tokens() -> (LocalLake, tempfile::TempDir) {
    let secrets = tempfile::tempdir().unwrap();
    let query = secrets.path().join("query-tokens");
    let metadata = secrets.path().join("metadata-tokens");
    std::fs::write(&query, format!("{QUERY_TOKEN}\n")).unwrap();
    std::fs::write(&metadata, format!("{METADATA_TOKEN}\n")).unwrap();
    let lake = LocalLake::start_with(&[
        "--query-token-file",
        query.to_str().unwrap(),
        "--metadata-token-file",
        metadata.to_str().unwrap(),
    ]);
    (lake, secrets)
}

const QUERY_TOKEN: &str = "r3ad-t0ken";
const METADATA_TOKEN: &str = "wr1te-t0ken";

/// The namespace a JDBC suite run worked in (its first line).
fn namespace(output: &str) -> &str {
    output
        .lines()
        .find_map(|l| l.strip_prefix("namespace "))
        .unwrap_or_else(|| panic!("the suite named no namespace:\n{output}"))
        .trim()
}

/// The table JDBC's `executeBatch` wrote, read through ADBC: every row, at one version.
fn read_batch_through_adbc(query: &str, token: Option<&str>, ns: &str) {
    let script = r#"
import sys
import adbc_driver_flightsql.dbapi as flightsql
query, ns, token = sys.argv[1], sys.argv[2], sys.argv[3]
kwargs = {"db_kwargs": {"adbc.flight.sql.authorization_header": f"Bearer {token}"}} if token else {}
with flightsql.connect(query, **kwargs) as conn, conn.cursor() as cur:
    cur.execute(f'SELECT count(*), count(DISTINCT id), min(name) FROM {ns}."batch@v2"')
    print(cur.fetchall())
    cur.execute(f'SELECT count(*) FROM {ns}.batch')
    print(cur.fetchall())
"#;
    let (ok, stdout, stderr) = python(&["-c", script, query, ns, token.unwrap_or("")]);
    assert!(ok, "ADBC could not read the batch:\n{stdout}\n{stderr}");
    assert_eq!(
        stdout.trim(),
        "[(10000, 10000, 'row-0')]\n[(10000,)]",
        "the 10,000-row executeBatch is one version, readable through ADBC"
    );
}

#[test]
fn jdbc_conformance() {
    let (lake, _secrets) = local_with_tokens();
    let out = suite(
        "JDBC against lake local",
        jdbc(&[&lake.query, &lake.metadata, QUERY_TOKEN, METADATA_TOKEN]),
    );
    read_batch_through_adbc(&lake.query, Some(QUERY_TOKEN), namespace(&out));
    assert_idle(lake.child.id(), "JDBC's Statement.cancel()");

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let cloud = runtime.block_on(CloudLake::new());
    let metadata = Served::start(&cloud, Role::Metadata, "testing", None);
    let query = Served::start(&cloud, Role::Query, "testing", Some(&metadata.endpoint));
    let out = suite(
        "JDBC against a lake serve pair",
        jdbc(&[&query.endpoint, &metadata.endpoint]),
    );
    read_batch_through_adbc(&query.endpoint, None, namespace(&out));
}

#[test]
fn go_database_sql_conformance() {
    let (lake, _secrets) = local_with_tokens();
    suite(
        "Go database/sql against lake local",
        go(&[&lake.query, &lake.metadata, QUERY_TOKEN, METADATA_TOKEN]),
    );
    assert_idle(lake.child.id(), "a QueryContext deadline");

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let cloud = runtime.block_on(CloudLake::new());
    let metadata = Served::start(&cloud, Role::Metadata, "testing", None);
    let query = Served::start(&cloud, Role::Query, "testing", Some(&metadata.endpoint));
    suite(
        "Go database/sql against a lake serve pair",
        go(&[&query.endpoint, &metadata.endpoint]),
    );
}
