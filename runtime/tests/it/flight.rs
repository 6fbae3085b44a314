//! The Flight SQL endpoints through real clients: `lake local` as a process, driven by ADBC and
//! raw pyarrow.flight from Python.

use std::process::Command;

use lake_testkit::python;

use crate::support::{LocalLake, test_certificates};

#[test]
fn adbc_and_pyarrow_flight_against_lake_local() {
    let lake = LocalLake::start();
    let (ok, stdout, stderr) = python(&[
        "runtime/tests/it/adbc_suite.py",
        &lake.query,
        &lake.metadata,
    ]);
    assert!(ok, "client suite failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
}

#[test]
fn dropping_the_stream_stops_the_query() {
    let lake = LocalLake::start();
    let pid = lake.child.id().to_string();
    let (ok, stdout, stderr) = python(&[
        "runtime/tests/it/cancel_peer.py",
        &lake.query,
        &lake.metadata,
        &pid,
    ]);
    assert!(ok, "cancellation peer failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("ok"), "{stdout}");
    // The timings, for a run that passes slowly.
    eprintln!("{stdout}");
}

fn lake_sql(endpoint: &str, sql: &str, format: &str) -> (bool, String, String) {
    lake_sql_with(endpoint, sql, format, &[])
}

fn lake_sql_with(
    endpoint: &str,
    sql: &str,
    format: &str,
    extra: &[&str],
) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_lake"))
        .args(["sql", endpoint, sql, "--format", format])
        .args(extra)
        .env_remove("LAKE_TOKEN")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn lake_sql_prints_every_format_and_clear_errors() {
    let lake = LocalLake::start();
    for statement in [
        "CREATE SCHEMA shop",
        "CREATE TABLE shop.items (id BIGINT, name VARCHAR)",
        "INSERT INTO shop.items VALUES (1, 'tea'), (2, 'cake')",
    ] {
        let (ok, _, stderr) = lake_sql(&lake.metadata, statement, "table");
        assert!(ok, "{statement}: {stderr}");
    }
    let query = "SELECT id, name FROM shop.items ORDER BY id";

    let (ok, table, stderr) = lake_sql(&lake.query, query, "table");
    assert!(ok, "{stderr}");
    assert!(
        table.contains("| id | name |") && table.contains("| 2  | cake |"),
        "{table}"
    );

    let (ok, csv, _) = lake_sql(&lake.query, query, "csv");
    assert!(ok);
    assert_eq!(csv, "id,name\n1,tea\n2,cake\n");
    let (ok, csv, _) = lake_sql(&lake.query, "SELECT id FROM shop.items WHERE id > 9", "csv");
    assert!(ok);
    assert_eq!(csv, "id\n", "an empty result still has its header");

    let (ok, json, _) = lake_sql(&lake.query, query, "json");
    assert!(ok);
    assert_eq!(
        json,
        "{\"id\":1,\"name\":\"tea\"}\n{\"id\":2,\"name\":\"cake\"}\n"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_lake"))
        .args(["sql", &lake.query, query, "--format", "arrow"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let reader =
        arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(out.stdout), None).unwrap();
    let rows: usize = reader.map(|b| b.unwrap().num_rows()).sum();
    assert_eq!(rows, 2);

    let (ok, _, stderr) = lake_sql(&lake.query, "SELEC 1", "table");
    assert!(
        !ok && stderr.contains("InvalidArgument") && stderr.contains("SELEC"),
        "{stderr}"
    );
    // A function refusing its values is the client's error, naming the function, through the
    // result stream.
    let (ok, _, stderr) = lake_sql(
        &lake.query,
        "SELECT make_date(2024, 12 + id, 1) FROM shop.items",
        "table",
    );
    assert!(
        !ok && stderr.contains("InvalidArgument") && stderr.contains("make_date"),
        "{stderr}"
    );
    // So is a pattern that does not compile, whichever function compiles it.
    for (function, call) in [
        ("regexp_replace", "regexp_replace(name, '(' || id, 'x')"),
        // DataFusion simplifies regexp_like into the operator.
        ("~", "regexp_like(name, '(' || id)"),
        ("~", "name ~ ('(' || id)"),
    ] {
        let (ok, _, stderr) = lake_sql(
            &lake.query,
            &format!("SELECT {call} FROM shop.items"),
            "table",
        );
        assert!(
            !ok && stderr.contains("InvalidArgument") && stderr.contains(function),
            "{call}: {stderr}"
        );
    }
    let (ok, _, stderr) = lake_sql(&lake.query, "DROP TABLE shop.items", "table");
    assert!(
        !ok && stderr.contains("PermissionDenied") && stderr.contains(&lake.metadata),
        "{stderr}"
    );
    let (ok, _, stderr) = lake_sql("http://nowhere", "SELECT 1", "table");
    assert!(
        !ok && stderr.contains("is not a grpc:// or grpc+tls:// URL"),
        "{stderr}"
    );
}

#[test]
fn tokens_are_required_when_configured() {
    let secrets = tempfile::tempdir().unwrap();
    let (query_file, metadata_file) = (
        secrets.path().join("query-tokens"),
        secrets.path().join("metadata-tokens"),
    );
    let token = "t0k3n-for-tests";
    let writer = "wr1t3r-t0k3n";
    std::fs::write(&query_file, format!("# lake clients\n{token}\n")).unwrap();
    std::fs::write(&metadata_file, format!("{writer}\n")).unwrap();
    let lake = LocalLake::start_with(&[
        "--query-token-file",
        query_file.to_str().unwrap(),
        "--metadata-token-file",
        metadata_file.to_str().unwrap(),
    ]);

    let (ok, stdout, stderr) = python(&["runtime/tests/it/auth_suite.py", &lake.query, token]);
    assert!(ok, "auth suite failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");

    let (ok, _, stderr) = lake_sql(&lake.query, "SELECT 1", "csv");
    assert!(!ok && stderr.contains("Unauthenticated"), "{stderr}");
    assert!(
        !stderr.contains(token),
        "the token leaked into an error: {stderr}"
    );
    let (ok, stdout, stderr) =
        lake_sql_with(&lake.query, "SELECT 1 AS one", "csv", &["--token", token]);
    assert!(ok, "{stderr}");
    assert_eq!(stdout, "one\n1\n");

    // Each endpoint its own tokens: the read token is refused where writes happen.
    let create = "CREATE SCHEMA by_reader";
    let (ok, _, stderr) = lake_sql_with(&lake.metadata, create, "csv", &["--token", token]);
    assert!(!ok && stderr.contains("Unauthenticated"), "{stderr}");
    let (ok, _, stderr) = lake_sql_with(&lake.metadata, create, "csv", &["--token", writer]);
    assert!(ok, "{stderr}");
    let (ok, _, stderr) = lake_sql_with(&lake.query, "SELECT 1", "csv", &["--token", writer]);
    assert!(!ok && stderr.contains("Unauthenticated"), "{stderr}");

    // One token in both files is refused at start, and so is the old shared --token-file.
    for args in [
        vec![
            "--query-token-file",
            query_file.to_str().unwrap(),
            "--metadata-token-file",
            query_file.to_str().unwrap(),
        ],
        vec!["--token-file", query_file.to_str().unwrap()],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_lake"))
            .args(["local", "--data"])
            .arg(secrets.path().join("never"))
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} started");
        assert!(stderr.contains("--metadata-token-file"), "{stderr}");
    }
}

const READ_ALL: &str = r#"
import sys, adbc_driver_flightsql.dbapi as flightsql
with flightsql.connect(sys.argv[1], autocommit=True) as conn, conn.cursor() as cur:
    cur.execute(sys.argv[2])
    rows = batches = largest = 0
    for batch in cur.fetch_record_batch():
        rows += batch.num_rows
        batches += 1
        largest = max(largest, batch.num_rows)
print(rows, batches, largest)
"#;

#[test]
fn ten_million_rows_stream_without_holding_the_result() {
    const ROWS: u64 = 10_000_000;
    // Four Int64 columns: the result is 320 MB of Arrow data.
    const RESULT_BYTES: u64 = ROWS * 4 * 8;
    let lake = LocalLake::start();
    for statement in [
        "CREATE SCHEMA big".to_owned(),
        format!(
            "CREATE TABLE big.t AS SELECT value AS id, value * 2 AS a, value * 3 AS b, value * 5 AS c FROM generate_series(1, {ROWS})"
        ),
    ] {
        let (ok, _, stderr) = lake_sql(&lake.metadata, &statement, "csv");
        assert!(ok, "{statement}: {stderr}");
    }
    // A fresh server, so its peak memory reflects the read alone.
    let lake = LocalLake::start_in(lake.stop(), &[]);
    let before = lake.peak_rss();
    let read = |sql: &str| -> Vec<u64> {
        let (ok, stdout, stderr) = python(&["-c", READ_ALL, &lake.query, sql]);
        assert!(ok, "{sql}: {stdout}{stderr}");
        stdout
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect()
    };
    let counts = read("SELECT * FROM big.t");
    assert_eq!(counts[0], ROWS, "every row arrives");
    assert!(
        counts[1] > 100,
        "the result arrives in many batches, not one: {}",
        counts[1]
    );
    // 32-byte rows: about 65,536 of them fill a 2 MiB message (Lance's byte limit is an
    // estimate); Lance's own 8,192 cost a large read a fifth more time.
    assert!(
        (32 * 1024..=64 * 1024).contains(&counts[2]),
        "the largest batch has {} rows; a scan reads up to 64Ki rows or 2 MiB a batch",
        counts[2]
    );
    let growth = lake.peak_rss().saturating_sub(before);
    // A statement that may build more than it reads (here `repeat`, whose reservation is per
    // batch) reads Lance's batches of 8,192 rows, which its measures are sized for.
    let sql = "SELECT id, repeat(CAST(a AS VARCHAR), 2) FROM big.t WHERE id <= 200000";
    assert_eq!(read(sql)[2], 8192, "{sql}");
    // A scalar subquery's value is copied into every row of what holds it (here an IN list's
    // probe, which no counted call wraps): Lance's 8,192 too.
    let sql = "SELECT id FROM big.t WHERE id <= 200000 AND \
               (SELECT min(a) FROM big.t WHERE id < 3) NOT IN (a, b, c, 0)";
    assert_eq!(read(sql)[2], 8192, "{sql}");
    // Plain reads and lake's own `%`, as the server plans them: large batches.
    for sql in [
        "SELECT id FROM big.t WHERE id <= 200000",
        "SELECT id, abs(a) FROM big.t WHERE id % 3 = 0 AND id <= 600000",
    ] {
        assert!(read(sql)[2] > 8192, "{sql}");
    }
    eprintln!(
        "10M rows in {} batches; server peak RSS grew {} MB for a {} MB result",
        counts[1],
        growth >> 20,
        RESULT_BYTES >> 20
    );
    assert!(
        growth < RESULT_BYTES,
        "the server's peak memory grew {growth} bytes, more than the whole {RESULT_BYTES}-byte result"
    );
}

const TLS_CLIENT: &str = r#"
import sys, adbc_driver_flightsql.dbapi as flightsql
url, ca = sys.argv[1], open(sys.argv[2]).read()
with flightsql.connect(url, autocommit=True, db_kwargs={"adbc.flight.sql.client_option.tls_root_certs": ca}) as conn, conn.cursor() as cur:
    cur.execute("SELECT 6 * 7 AS answer")
    print(cur.fetchall())
"#;

#[test]
fn tls_endpoints_serve_adbc_and_lake_sql() {
    let certs = tempfile::tempdir().unwrap();
    test_certificates(certs.path());
    let file = |name: &str| certs.path().join(name).display().to_string();
    let lake = LocalLake::start_with(&[
        "--tls-cert",
        &file("server.pem"),
        "--tls-key",
        &file("server.key"),
    ]);
    assert!(lake.query.starts_with("grpc+tls://"), "{}", lake.query);

    let (ok, stdout, stderr) = python(&["-c", TLS_CLIENT, &lake.query, &file("ca.pem")]);
    assert!(ok, "{stdout}{stderr}");
    assert_eq!(stdout.trim(), "[(42,)]");

    let (ok, stdout, stderr) = lake_sql_with(
        &lake.query,
        "SELECT 1 AS one",
        "csv",
        &["--tls-ca", &file("ca.pem")],
    );
    assert!(ok, "{stderr}");
    assert_eq!(stdout, "one\n1\n");
    let (ok, _, stderr) = lake_sql(&lake.query, "SELECT 1", "csv");
    assert!(!ok && stderr.contains("--tls-ca"), "{stderr}");
    // Plaintext to a TLS port is refused.
    let plain = lake.query.replace("grpc+tls://", "grpc://");
    let (ok, _, _) = lake_sql(&plain, "SELECT 1", "csv");
    assert!(!ok, "plaintext reached a TLS endpoint");
}

/// The accepted socket's TCP_NODELAY, read from the server process itself: its socket is found
/// through /proc (the connection from `client_port` to `server_port`) and copied into this
/// process with pidfd_getfd.
fn server_socket_nodelay(pid: u32, server_port: u16, client_port: u16) -> bool {
    let wanted = format!(":{server_port:04X} 0100007F:{client_port:04X}");
    // The kernel lists the connection while it waits in the accept queue (inode 0, no
    // descriptor yet): look until the server has accepted it.
    let find = || {
        let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).ok()?;
        let inode = table
            .lines()
            .find(|l| l.contains(&wanted))?
            .split_whitespace()
            .nth(9)?
            .to_owned();
        let target = format!("socket:[{inode}]");
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .ok()?
            .filter_map(Result::ok)
            .find(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy() == target))
            .and_then(|e| e.file_name().to_str()?.parse::<i32>().ok())
    };
    let fd = (0..500)
        .find_map(|_| {
            let fd = find();
            if fd.is_none() {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            fd
        })
        .expect("the server never accepted the connection");
    // SAFETY: plain syscalls on descriptors this function owns and closes.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0) as libc::c_int;
        assert!(
            pidfd >= 0,
            "pidfd_open: {}",
            std::io::Error::last_os_error()
        );
        let copy = libc::syscall(libc::SYS_pidfd_getfd, pidfd, fd, 0) as libc::c_int;
        assert!(
            copy >= 0,
            "pidfd_getfd: {}",
            std::io::Error::last_os_error()
        );
        // The server sets the option just after it accepted the socket: under load the look
        // above may fall between the two, so the option is read until it is on (for up to two
        // seconds; a server that never sets it fails).
        let mut on = false;
        for _ in 0..200 {
            let mut value: libc::c_int = 0;
            let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            let rc = libc::getsockopt(
                copy,
                libc::IPPROTO_TCP,
                libc::TCP_NODELAY,
                (&mut value as *mut libc::c_int).cast(),
                &mut len,
            );
            assert_eq!(rc, 0, "getsockopt: {}", std::io::Error::last_os_error());
            on = value != 0;
            if on {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        libc::close(copy);
        libc::close(pidfd);
        on
    }
}

/// Without TCP_NODELAY on accepted sockets, Nagle's algorithm holds each response's last small
/// segment until the client's delayed ACK: every Flight call took ~44 ms on loopback.
#[test]
fn accepted_connections_disable_nagle() {
    let lake = LocalLake::start();
    for endpoint in [&lake.query, &lake.metadata] {
        let addr = endpoint.trim_start_matches("grpc://");
        let client = std::net::TcpStream::connect(addr).unwrap();
        let server_port = client.peer_addr().unwrap().port();
        let client_port = client.local_addr().unwrap().port();
        assert!(
            server_socket_nodelay(lake.child.id(), server_port, client_port),
            "{endpoint}: TCP_NODELAY is off on the accepted socket"
        );
    }
}

const TICKETS: &str = r#"
import sys, pyarrow.flight as flight, adbc_driver_flightsql.dbapi as flightsql
sys.path.insert(0, "runtime/tests/it")
from flightsql_commands import command, pb_string
query, meta = sys.argv[1], sys.argv[2]
def sql(q):
    with flightsql.connect(meta, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(q)
        return cur.fetchall()
sql("CREATE SCHEMA s"); sql("CREATE TABLE s.t (id BIGINT)"); sql("INSERT INTO s.t VALUES (1), (2)")
client = flight.FlightClient(query)
info = client.get_flight_info(flight.FlightDescriptor.for_command(
    command("CommandStatementQuery", pb_string(1, "SELECT id FROM s.t ORDER BY id"))))
ticket = info.endpoints[0].ticket
sql("INSERT INTO s.t VALUES (3)")
first = client.do_get(ticket).read_all().column("id").to_pylist()
assert first == [1, 2], f"the first DoGet did not read the table as planned: {first}"
print("ok the first DoGet reads the tables as its GetFlightInfo opened them")
again = client.do_get(ticket).read_all().column("id").to_pylist()
assert again == [1, 2, 3], f"a ticket redeemed again was not planned again: {again}"
print("ok a ticket redeemed again is planned again and sees the new row")
sql("DROP TABLE s.t"); sql("CREATE TABLE s.t (id BIGINT)"); sql("INSERT INTO s.t VALUES (7)")
info = client.get_flight_info(flight.FlightDescriptor.for_command(
    command("CommandStatementQuery", pb_string(1, "SELECT id FROM s.t"))))
rows = client.do_get(info.endpoints[0].ticket).read_all().column("id").to_pylist()
assert rows == [7], f"a dropped and recreated table read stale rows: {rows}"
print("ok a dropped and recreated table is read afresh")
print("3 passed, 0 failed")
"#;

/// DoGet runs the plan its GetFlightInfo kept, once; a ticket redeemed again is planned again.
#[test]
fn tickets_run_their_kept_plan_once_then_plan_again() {
    let lake = LocalLake::start();
    let (ok, stdout, stderr) = python(&["-c", TICKETS, &lake.query, &lake.metadata]);
    assert!(ok, "{stdout}{stderr}");
    assert!(stdout.contains("3 passed, 0 failed"), "{stdout}");
    eprint!("{stdout}");
}

/// `DROP SCHEMA`: refused while it holds tables (naming them, nothing dropped) unless
/// `CASCADE`, which drops each table with its data and then the schema; `IF EXISTS`; refused on
/// query; a schema created again under the name starts empty.
#[test]
fn drop_schema_is_atomic() {
    let lake = LocalLake::start();
    let (q, m) = (lake.query.clone(), lake.metadata.clone());
    let run = |endpoint: &str, sql: &str| crate::support::lake_sql(endpoint, sql);
    let ok = |endpoint: &str, sql: &str| {
        let (ok, out, err) = run(endpoint, sql);
        assert!(ok, "{sql}: {out}{err}");
        out
    };
    ok(&m, "CREATE SCHEMA d");
    ok(&m, "CREATE TABLE d.a (id BIGINT)");
    ok(&m, "CREATE TABLE d.b (id BIGINT)");
    ok(&m, "INSERT INTO d.a VALUES (1), (2)");

    let (dropped, _, err) = run(&m, "DROP SCHEMA d");
    assert!(!dropped);
    assert!(
        err.contains("FailedPrecondition:")
            && err.contains("holds tables (a, b)")
            && err.contains("CASCADE"),
        "{err}"
    );
    let (dropped, _, err) = run(&m, "DROP SCHEMA d RESTRICT");
    assert!(!dropped && err.contains("holds tables"), "{err}");
    assert!(ok(&q, "SELECT count(*) AS n FROM d.a").contains("| 2 "));

    let (dropped, _, err) = run(&q, "DROP SCHEMA d CASCADE");
    assert!(!dropped && err.contains("PermissionDenied:"), "{err}");
    assert!(ok(&q, "SELECT count(*) AS n FROM d.a").contains("| 2 "));

    ok(&m, "DROP SCHEMA d CASCADE");
    let (read, _, err) = run(&q, "SELECT * FROM d.a");
    assert!(!read && err.contains("NotFound:"), "{err}");
    assert!(!ok(&q, "SELECT schema_name FROM information_schema.schemata").contains("| d "));
    assert!(
        !lake.dir.path().join("d/a.lance").exists(),
        "the dropped table's data is still on disk"
    );
    let (dropped, _, err) = run(&m, "DROP SCHEMA d");
    assert!(
        !dropped && err.contains("NotFound:") && err.contains("schema d"),
        "{err}"
    );
    ok(&m, "DROP SCHEMA IF EXISTS d");

    ok(&m, "CREATE SCHEMA d");
    ok(&m, "CREATE TABLE d.a (id BIGINT)");
    assert!(ok(&q, "SELECT count(*) AS n FROM d.a").contains("| 0 "));
    ok(&m, "DROP SCHEMA lake.d CASCADE");
}

/// ADBC's current schema through session options, carried in a cookie: unqualified names
/// resolve in it for reads, writes, prepared statements and ingest; a second endpoint honours a
/// cookie it never set (no server state); refusals name the option.
#[test]
fn session_options_select_the_schema() {
    let lake = LocalLake::start();
    let (ok, stdout, stderr) = python(&[
        "runtime/tests/it/session_options.py",
        &lake.query,
        &lake.metadata,
    ]);
    assert!(ok, "session options suite failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
}

/// Context switches of every thread of `pid` that lives through both readings.
fn context_switches(pid: u32) -> std::collections::HashMap<String, u64> {
    let mut by_thread = std::collections::HashMap::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let task = task.unwrap();
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
            continue; // the thread ended meanwhile
        };
        let switches = status
            .lines()
            .filter(|l| l.contains("ctxt_switches:"))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .sum();
        by_thread.insert(task.file_name().to_string_lossy().into_owned(), switches);
    }
    by_thread
}

/// After a query has read a table, an idle lake sleeps: no thread of it polls. (Lance's io_uring
/// reader, tried and not adopted, woke it about 200 times a second: docs/performance.md.)
#[test]
fn an_idle_lake_sleeps() {
    let lake = LocalLake::start();
    for (endpoint, statement) in [
        (&lake.metadata, "CREATE SCHEMA s"),
        (
            &lake.metadata,
            "CREATE TABLE s.t AS SELECT value AS id FROM generate_series(1, 200000)",
        ),
        (&lake.query, "SELECT count(*) FROM s.t WHERE id > 10"),
    ] {
        let (ok, _, stderr) = lake_sql(endpoint, statement, "csv");
        assert!(ok, "{statement}: {stderr}");
    }
    std::thread::sleep(std::time::Duration::from_secs(1));
    let pid = lake.child.id();
    let before = context_switches(pid);
    std::thread::sleep(std::time::Duration::from_secs(3));
    let after = context_switches(pid);
    let woke: u64 = after
        .iter()
        .filter_map(|(thread, n)| Some(n - before.get(thread)?))
        .sum();
    assert!(
        woke < 60,
        "an idle lake switched context {woke} times in 3 s ({} threads)",
        after.len()
    );
}
