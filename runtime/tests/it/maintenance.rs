//! Table maintenance (`lake_runtime::maintain`, `lake maintain`): a DELETE becomes erasure,
//! retention keeps what it promises, and neither a concurrent write nor a running query is
//! harmed by a pass.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{RecordBatch, StringArray};
use datafusion::prelude::{col, lit};
use futures::{StreamExt, TryStreamExt};
use lake_runtime::context::MetadataContext;
use lake_runtime::engine::{EngineError, TableRef};
use lake_runtime::maintain::{self, Options, Outcome, Retention};
use lake_runtime::store::{EmbeddedStore, SortKey, query_all};
use object_store::ObjectStoreExt;

use crate::support::{
    CloudLake, LocalLake, batch_named, lake_sql, local_plan, maintain_now, options, requests_of,
    schema, seed, table,
};

/// Everything old goes: no retention, no grace.
fn eager() -> Options {
    Options {
        retention: Retention {
            keep: Duration::ZERO,
            grace: Duration::ZERO,
        },
        ..Options::default()
    }
}

/// As [`eager`], with fragments of the test's size already "large": only fragments holding
/// deleted rows are rewritten.
fn erasing() -> Options {
    Options {
        target_rows_per_fragment: 10,
        ..eager()
    }
}

fn with_retention(keep: Duration, grace: Duration) -> Options {
    Options {
        retention: Retention { keep, grace },
        ..Options::default()
    }
}

/// Rows `ids`, each named `row-<id>`, except those in `marked`, named `marker`.
fn rows(ids: std::ops::Range<i64>, marker: &str, marked: &[i64]) -> RecordBatch {
    batch_named(ids, |i| {
        if marked.contains(&i) {
            marker.to_owned()
        } else {
            format!("row-{i}")
        }
    })
}

async fn local_metadata(dir: &Path) -> MetadataContext {
    MetadataContext::open(&local_plan(dir).metadata(), None, &options())
        .await
        .unwrap()
}

/// Every file under `dir`, with its bytes.
fn local_objects(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                found.push((path.display().to_string(), bytes));
            }
        }
    }
    found
}

/// Every object of the emulator's bucket, with its bytes.
async fn bucket_objects(lake: &CloudLake) -> Vec<(String, Vec<u8>)> {
    let store = lake.aws.s3_store(&lake.bucket).unwrap();
    let metas: Vec<_> = store.list(None).try_collect().await.unwrap();
    let mut found = Vec::new();
    for meta in metas {
        let bytes = store
            .get(&meta.location)
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        found.push((meta.location.to_string(), bytes.to_vec()));
    }
    found
}

/// The objects whose bytes contain `marker`.
fn holding(objects: &[(String, Vec<u8>)], marker: &str) -> Vec<String> {
    let needle = marker.as_bytes();
    objects
        .iter()
        .filter(|(_, bytes)| bytes.windows(needle.len()).any(|w| w == needle))
        .map(|(name, _)| name.clone())
        .collect()
}

/// Those of [`holding`] that are data files (`…/data/…`): the DELETE's own transaction file
/// names the marker in its predicate, so only data files show whether the rows were stored.
fn data_files_holding(objects: &[(String, Vec<u8>)], marker: &str) -> Vec<String> {
    holding(objects, marker)
        .into_iter()
        .filter(|name| name.contains("/data/"))
        .collect()
}

/// The names a version of `t` returns (`None`: the version is gone).
async fn names_at(metadata: &MetadataContext, t: &TableRef, version: u64) -> Option<Vec<String>> {
    let dataset = match metadata.engine().open(t, Some(version)).await {
        Ok(dataset) => dataset,
        Err(EngineError::NotFound(_)) => return None,
        Err(e) => panic!("version {version} is neither readable nor gone: {e}"),
    };
    let batch = dataset.scan().try_into_batch().await.unwrap();
    let names = batch
        .column_by_name("name")
        .unwrap()
        .as_any()
        .downcast_ref::<StringArray>()
        .unwrap()
        .iter()
        .flatten()
        .map(str::to_owned)
        .collect();
    Some(names)
}

/// Writes rows, some carrying `marker`, and deletes those: the marker is still in storage
/// (a DELETE alone is not erasure — the positive control). Returns the version of the delete.
async fn write_then_delete(metadata: &MetadataContext, t: &TableRef, marker: &str) -> u64 {
    seed(metadata, t, &[0..30, 30..50]).await;
    // The marked rows share their fragments with rows that stay: compaction must rewrite them.
    metadata
        .engine()
        .append(t, schema(), vec![rows(50..100, marker, &[60, 61, 70])])
        .await
        .unwrap();
    metadata
        .engine()
        .append(t, schema(), vec![rows(100..150, marker, &[120])])
        .await
        .unwrap();
    let deleted = metadata
        .engine()
        .delete(
            t,
            Some(col("name").eq(lit(marker))),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    assert_eq!(deleted.rows, 4);
    deleted.version
}

/// After a pass: no version returns the marker, every version is either readable or gone.
async fn assert_no_version_returns(
    metadata: &MetadataContext,
    t: &TableRef,
    marker: &str,
    latest: u64,
) -> Vec<u64> {
    let mut kept = Vec::new();
    for version in 1..=latest {
        if let Some(names) = names_at(metadata, t, version).await {
            assert!(
                !names.iter().any(|n| n == marker),
                "version {version} still returns the deleted rows"
            );
            kept.push(version);
        }
    }
    kept
}

#[tokio::test(flavor = "multi_thread")]
async fn maintenance_erases_deleted_rows() {
    // A local lake.
    let dir = tempfile::tempdir().unwrap();
    let marker = format!("erase-me-{}", lake_testkit::unique("m"));
    let t = table("people", "contacts");
    let metadata = local_metadata(dir.path()).await;
    let deleted_at = write_then_delete(&metadata, &t, &marker).await;
    assert!(
        !data_files_holding(&local_objects(dir.path()), &marker).is_empty(),
        "the marker is not in any data file even before maintenance: the check below would \
         prove nothing"
    );
    let summary = maintain::run(metadata.engine(), erasing()).await.unwrap();
    assert_eq!(summary.failed(), 0, "{summary:?}");
    let done = &summary.tables[0];
    assert_eq!(done.compaction.deleted_rows_erased, 4, "{done}");
    assert!(done.removal.versions_removed >= deleted_at, "{done}");
    assert_eq!(
        holding(&local_objects(dir.path()), &marker),
        Vec::<String>::new(),
        "files still holding the deleted rows"
    );
    let latest = metadata
        .engine()
        .open(&t, None)
        .await
        .unwrap()
        .version()
        .version;
    let kept = assert_no_version_returns(&metadata, &t, &marker, latest).await;
    assert_eq!(kept, vec![latest], "only the latest version is kept");
    let remaining = names_at(&metadata, &t, latest).await.unwrap();
    assert_eq!(remaining.len(), 146);
    // The manifest rows of the removed versions are gone (read with the lake closed).
    let base_uri = metadata.engine().warehouse().manifest_base_uri(&t);
    drop(metadata);
    let store = EmbeddedStore::open(&dir.path().join("_lake/manifests.redb"), false).unwrap();
    let versions: Vec<SortKey> = query_all(&store, &base_uri, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.key.sort)
        .collect();
    assert_eq!(versions, vec![SortKey::N(latest)]);

    // The same on the emulator: S3 objects and DynamoDB rows.
    let lake = CloudLake::new().await;
    let metadata = lake.metadata().await;
    let marker = format!("erase-me-{}", lake_testkit::unique("m"));
    write_then_delete(&metadata, &t, &marker).await;
    assert!(!data_files_holding(&bucket_objects(&lake).await, &marker).is_empty());
    let summary = maintain::run(metadata.engine(), erasing()).await.unwrap();
    assert_eq!(summary.failed(), 0, "{summary:?}");
    assert_eq!(
        holding(&bucket_objects(&lake).await, &marker),
        Vec::<String>::new(),
        "objects still holding the deleted rows"
    );
    let latest = metadata
        .engine()
        .open(&t, None)
        .await
        .unwrap()
        .version()
        .version;
    let kept = assert_no_version_returns(&metadata, &t, &marker, latest).await;
    assert_eq!(kept, vec![latest]);
    let rows: Vec<String> = lake
        .dump_manifest_table()
        .await
        .into_iter()
        // The table's rows, not its lease's (partition `__lake__/table-lease/<base URI>`).
        .filter(|row| row.contains("people/contacts.lance") && !row.contains("__lake__/"))
        .collect();
    assert_eq!(
        rows.len(),
        1,
        "manifest rows of removed versions remain: {rows:#?}"
    );
    assert!(rows[0].contains(&format!("N(\"{latest}\")")), "{rows:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn maintenance_keeps_what_retention_keeps() {
    let dir = tempfile::tempdir().unwrap();
    let metadata = local_metadata(dir.path()).await;
    let t = table("kept", "history");
    seed(&metadata, &t, &[0..10, 10..20, 20..30, 30..40]).await;
    let engine = metadata.engine();

    // Every version is younger than an hour: compaction runs, nothing is removed.
    let summary = maintain::run(
        engine,
        with_retention(Duration::from_secs(3600), Duration::ZERO),
    )
    .await
    .unwrap();
    let done = &summary.tables[0];
    assert_eq!(done.outcome, Outcome::Done, "{done}");
    assert_eq!(
        (
            done.compaction.fragments_before,
            done.compaction.fragments_after
        ),
        (4, 1),
        "{done}"
    );
    assert_eq!(done.removal.versions_removed, 0, "{done}");
    let latest = engine.open(&t, None).await.unwrap().version().version;
    assert!(latest > 4, "the compaction committed nothing");
    for version in 1..=4 {
        let names = names_at(&metadata, &t, version).await.expect("kept");
        assert_eq!(names.len() as u64, version * 10, "version {version}");
    }
    // Old enough, but replaced less than the grace ago: still kept.
    let summary = maintain::run(
        engine,
        with_retention(Duration::ZERO, Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    assert_eq!(
        summary.tables[0].removal.versions_removed, 0,
        "{}",
        summary.tables[0]
    );
    assert!(names_at(&metadata, &t, 1).await.is_some());

    // A tagged version is never removed silently: the pass fails for the table, naming it.
    let dataset = engine.open(&t, None).await.unwrap();
    dataset.tags().create("audit", 2).await.unwrap();
    drop(dataset);
    let summary = maintain::run(engine, eager()).await.unwrap();
    let Outcome::Failed(why) = &summary.tables[0].outcome else {
        panic!(
            "a tagged old version was removed or ignored: {}",
            summary.tables[0]
        );
    };
    assert!(why.contains("audit") || why.contains("tag"), "{why}");
    assert!(
        names_at(&metadata, &t, 2).await.is_some(),
        "the tagged version went"
    );
    engine
        .open(&t, None)
        .await
        .unwrap()
        .tags()
        .delete("audit")
        .await
        .unwrap();

    // Neither: everything but the latest goes, and the latest still has every row.
    let summary = maintain::run(engine, eager()).await.unwrap();
    let done = &summary.tables[0];
    assert_eq!(done.outcome, Outcome::Done, "{done}");
    assert_eq!(done.removal.versions_removed, latest - 1, "{done}");
    assert_eq!(done.removal.manifest_rows_removed, latest - 1, "{done}");
    for version in 1..latest {
        assert!(
            names_at(&metadata, &t, version).await.is_none(),
            "version {version} kept"
        );
    }
    assert_eq!(names_at(&metadata, &t, latest).await.unwrap().len(), 40);
}

#[tokio::test(flavor = "multi_thread")]
async fn maintenance_never_loses_a_concurrent_write() {
    let dir = tempfile::tempdir().unwrap();
    let metadata = Arc::new(local_metadata(dir.path()).await);
    let t = table("busy", "events");
    // Rows -1000..0 are deleted, a hundred at a time, while the writers append and the passes
    // compact (the deletes' fragments are exactly what compaction rewrites).
    seed(&metadata, &t, std::slice::from_ref(&(-1000..1))).await;
    const WRITERS: i64 = 8;
    const COMMITS: i64 = 16;
    // A grace of a few seconds: the version a write read as the latest may be removed once the
    // write has taken longer than the grace (in a lake the grace is minutes and covers the
    // longest write, docs/guides/maintenance.md).
    let options = with_retention(Duration::ZERO, Duration::from_secs(3));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let passes = {
        let (metadata, stop) = (metadata.clone(), stop.clone());
        tokio::spawn(async move {
            let mut passes = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let summary = maintain::run(metadata.engine(), options).await.unwrap();
                passes.push(summary);
            }
            passes
        })
    };
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (metadata, t) = (metadata.clone(), t.clone());
            tokio::spawn(async move {
                let mut acknowledged = Vec::new();
                for c in 0..COMMITS {
                    let first = 1 + (w * COMMITS + c) * 10;
                    metadata
                        .engine()
                        .append(&t, schema(), vec![crate::support::batch(first..first + 10)])
                        .await
                        .unwrap_or_else(|e| panic!("writer {w} commit {c}: {e}"));
                    acknowledged.extend(first..first + 10);
                    // Spread over seconds, so versions age past the grace while writes go on.
                    tokio::time::sleep(Duration::from_millis(400)).await;
                }
                acknowledged
            })
        })
        .collect();
    let deleter = {
        let (metadata, t) = (metadata.clone(), t.clone());
        tokio::spawn(async move {
            for k in 0..10i64 {
                let rows = col("id")
                    .gt_eq(lit(-(k + 1) * 100))
                    .and(col("id").lt(lit(-k * 100)));
                let deleted = metadata
                    .engine()
                    .delete(&t, Some(rows), Duration::from_secs(60))
                    .await
                    .unwrap_or_else(|e| panic!("delete {k}: {e}"));
                assert_eq!(deleted.rows, 100, "delete {k}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    // Every task's outcome first, then stop the passes: a failed write or delete must fail
    // the test, not leave the passes running forever.
    let mut written = Vec::new();
    for writer in writers {
        written.push(writer.await);
    }
    let deleted = deleter.await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let passes = passes.await.unwrap();
    deleted.unwrap();
    let mut acknowledged = vec![0];
    for rows in written {
        acknowledged.extend(rows.unwrap());
    }
    // One more pass with nothing racing it.
    let last = maintain::run(metadata.engine(), eager()).await.unwrap();
    assert_eq!(last.failed(), 0, "{last:?}");
    let compactions = passes
        .iter()
        .flat_map(|p| &p.tables)
        .filter(|t| t.compaction.version.is_some())
        .count();
    assert!(
        compactions > 0,
        "no compaction ran beside the writers: {passes:?}"
    );
    let removed: u64 = passes
        .iter()
        .flat_map(|p| &p.tables)
        .map(|t| t.removal.versions_removed)
        .sum();
    assert!(removed > 0, "no version was removed beside the writers");
    let failed: Vec<_> = passes
        .iter()
        .flat_map(|p| &p.tables)
        .filter(|t| matches!(t.outcome, Outcome::Failed(_)))
        .collect();
    assert!(failed.is_empty(), "passes failed: {failed:#?}");
    let latest = metadata.engine().open(&t, None).await.unwrap();
    let mut ids = crate::support::ids(&latest).await;
    acknowledged.sort_unstable();
    let total = ids.len();
    ids.dedup();
    assert_eq!(total, ids.len(), "rows written twice");
    assert_eq!(ids, acknowledged, "acknowledged rows lost");
    eprintln!(
        "{} passes ({compactions} compactions, {removed} versions removed) beside {WRITERS} \
         writers of {COMMITS} commits",
        passes.len()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn maintenance_waits_out_a_running_query() {
    let dir = tempfile::tempdir().unwrap();
    let metadata = local_metadata(dir.path()).await;
    let t = table("read", "while");
    // Eight fragments, read one at a time with little buffered: the query still has files to
    // open after the pass.
    let commits: Vec<_> = (0..8).map(|i| i * 20_000..(i + 1) * 20_000).collect();
    seed(&metadata, &t, &commits).await;
    // A query reads the latest version, a batch at a time; meanwhile it is replaced.
    let reading = metadata.engine().open(&t, None).await.unwrap();
    let slow_scan = |dataset: &lance::dataset::Dataset| {
        let mut scan = dataset.scan();
        scan.batch_size(1000)
            .fragment_readahead(1)
            .batch_readahead(1)
            .io_buffer_size(64 * 1024);
        scan
    };
    let mut stream = slow_scan(&reading).try_into_stream().await.unwrap();
    let mut read = stream.next().await.unwrap().unwrap().num_rows();
    metadata
        .engine()
        .append(&t, schema(), vec![crate::support::batch(160_000..160_100)])
        .await
        .unwrap();
    // The pass removes everything old except what the grace protects: the version the query
    // reads was replaced a moment ago.
    let summary = maintain::run(
        metadata.engine(),
        with_retention(Duration::ZERO, Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    assert_eq!(summary.failed(), 0, "{summary:?}");
    while let Some(batch) = stream.next().await {
        read += batch.expect("the running query broke").num_rows();
    }
    assert_eq!(read, 160_000, "the query read a wrong number of rows");

    // The control: without the grace, the same query loses its files.
    let reading = metadata.engine().open(&t, None).await.unwrap();
    metadata
        .engine()
        .append(&t, schema(), vec![crate::support::batch(160_100..160_200)])
        .await
        .unwrap();
    let summary = maintain::run(metadata.engine(), eager()).await.unwrap();
    assert!(
        summary.tables[0].removal.versions_removed > 0,
        "{}",
        summary.tables[0]
    );
    let broken = reading.scan().try_into_batch().await;
    assert!(
        broken.is_err(),
        "a version maintenance removed was still readable: the check above proves nothing"
    );
}

/// `lake maintain` on a stopped local lake; time travel to a removed version is NOT_FOUND,
/// naming the retention.
#[tokio::test(flavor = "multi_thread")]
async fn maintain_command_runs_a_pass_and_removed_versions_are_not_found() {
    let lake = LocalLake::start();
    for statement in [
        "CREATE SCHEMA s",
        "CREATE TABLE s.t (id BIGINT)",
        "INSERT INTO s.t VALUES (1)",
        "INSERT INTO s.t VALUES (2)",
        "INSERT INTO s.t VALUES (3)",
    ] {
        let (ok, out, err) = lake_sql(&lake.metadata, statement);
        assert!(ok, "{statement}: {out}{err}");
    }
    // Served: the command refuses, naming why.
    let refused = maintain_now(lake.dir.path());
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("being served"), "{err}");

    let dir = lake.stop();
    let ran = maintain_now(dir.path());
    let out = String::from_utf8_lossy(&ran.stdout);
    assert!(
        ran.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    assert!(out.contains("s.t: ok; fragments 3 -> 1"), "{out}");
    assert!(out.contains("1 tables, 0 failed"), "{out}");

    let lake = LocalLake::start_in(dir, &[]);
    let (ok, out, err) = lake_sql(&lake.query, "SELECT count(*) AS n FROM s.t");
    assert!(ok && out.contains('3'), "{out}{err}");
    let (ok, out, err) = lake_sql(&lake.query, "SELECT * FROM s.\"t@v2\"");
    assert!(!ok, "{out}");
    assert!(err.contains("NotFound:"), "not a NOT_FOUND status: {err}");
    assert!(err.contains("retention"), "{err}");
    let not_a_lake = tempfile::tempdir().unwrap();
    let refused = maintain_now(not_a_lake.path());
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("not a lake data directory"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

/// `lake maintain` with the maintenance role's environment only (as its CronJob runs it), no
/// retention and no grace, signing with the access key `key`.
fn maintain_in_role(
    config: &lake_common::config::MaintenanceConfig,
    key: &str,
) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_lake"));
    command
        .args([
            "maintain",
            "--retention-seconds",
            "0",
            "--grace-seconds",
            "0",
        ])
        .env_clear()
        .envs(config.to_vars())
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("AWS_ACCESS_KEY_ID", key)
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_EC2_METADATA_DISABLED", "true");
    command
}

/// `lake maintain` in the maintenance role (its LAKE_* environment, as its CronJob runs it) erases
/// a cloud lake's deleted rows through the warehouse and the manifest table only: the emulator's
/// log shows no registry request and no object outside the warehouse. A bad environment is
/// refused before anything is reached, naming the variable.
#[test]
fn maintain_command_in_the_maintenance_role_reaches_only_the_warehouse_and_manifests() {
    use lake_common::config::{LAKE_REGISTRY_DYNAMODB_TABLE, MaintenanceConfig};
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let lake = runtime.block_on(CloudLake::new());
    let t = table("people", "contacts");
    let marker = format!("erase-me-{}", lake_testkit::unique("m"));
    runtime.block_on(async {
        write_then_delete(&lake.metadata().await, &t, &marker).await;
    });
    assert!(!data_files_holding(&runtime.block_on(bucket_objects(&lake)), &marker).is_empty());
    let key = lake_testkit::unique("MAINTKEY").to_uppercase();
    let config = MaintenanceConfig::for_plan(&lake.plan, lake.cluster.clone()).unwrap();
    let maintain = |extra: &[(&str, &str)]| {
        maintain_in_role(&config, &key)
            .args(["--target-rows-per-fragment", "10"])
            .envs(extra.iter().copied())
            .output()
            .unwrap()
    };

    let recording = lake_testkit::moto().start_recording();
    let refused = maintain(&[(LAKE_REGISTRY_DYNAMODB_TABLE, &lake.registry_table())]);
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains(LAKE_REGISTRY_DYNAMODB_TABLE), "{err}");
    assert_eq!(
        requests_of(&recording.stop(), &key),
        Vec::<(String, String, String)>::new(),
        "a refused configuration reached AWS"
    );

    let recording = lake_testkit::moto().start_recording();
    let ran = maintain(&[]);
    let log = recording.stop();
    let out = String::from_utf8_lossy(&ran.stdout);
    assert!(
        ran.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    assert!(out.contains("people.contacts: ok"), "{out}");
    assert!(out.contains("1 tables, 0 failed"), "{out}");
    assert_eq!(
        holding(&runtime.block_on(bucket_objects(&lake)), &marker),
        Vec::<String>::new(),
        "objects still holding the deleted rows"
    );
    // Every request names the manifest table or an object (or listing) under the warehouse
    // prefix; a batch names them in its body (DynamoDB's BatchWriteItem, S3's DeleteObjects).
    let calls = lake_testkit::requests_signed_by(&log, &key);
    let warehouse = format!("/{}/wh/", lake.bucket);
    let mut deleted = 0;
    for call in &calls {
        let body = String::from_utf8_lossy(&call.body);
        match (call.service.as_str(), call.action.as_str()) {
            ("dynamodb", "BatchWriteItem") => {
                let request: serde_json::Value = serde_json::from_slice(&call.body).unwrap();
                let tables: Vec<&String> = request["RequestItems"]
                    .as_object()
                    .map(|items| items.keys().collect())
                    .unwrap_or_default();
                assert_eq!(tables, [&lake.manifest_table()], "{body}");
            }
            ("dynamodb", action) => assert_eq!(
                call.resource,
                lake.manifest_table(),
                "maintenance made a {action} call on {}",
                call.resource
            ),
            ("s3", "POST") if call.resource.ends_with("?delete") => {
                let keys: Vec<&str> = body
                    .split("<Key>")
                    .skip(1)
                    .filter_map(|k| k.split("</Key>").next())
                    .collect();
                assert!(
                    !keys.is_empty() && keys.iter().all(|k| k.starts_with("wh/")),
                    "maintenance deleted outside the warehouse: {keys:?}"
                );
                deleted += keys.len();
            }
            ("s3", action) => assert!(
                call.resource.contains(&warehouse) || call.resource.contains("prefix=wh%2F"),
                "maintenance reached outside the warehouse: {action} {}",
                call.resource
            ),
            (service, action) => panic!("maintenance called {service} {action} {}", call.resource),
        }
    }
    assert!(deleted > 0, "no object was deleted");
}

/// `lake local --maintain-every-minutes 1` maintains its own lake while serving it.
#[tokio::test(flavor = "multi_thread")]
async fn local_lake_maintains_itself_on_its_schedule() {
    // The grace must outlast the query timeout: a lower one is refused at start-up.
    let mut refusing = std::process::Command::new(env!("CARGO_BIN_EXE_lake"));
    refusing
        .args(["local", "--data"])
        .arg(tempfile::tempdir().unwrap().path())
        .args(["--maintain-every-minutes", "1", "--grace-seconds", "5"])
        .args([
            "--query-addr",
            "127.0.0.1:0",
            "--metadata-addr",
            "127.0.0.1:0",
        ]);
    let refused = crate::support::exited_within(refusing, Duration::from_secs(30))
        .expect("lake local started with a grace below its query timeout");
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("--grace-seconds 5 is below the query timeout (600 s)"),
        "{err}"
    );
    let lake = LocalLake::start_with(&[
        "--maintain-every-minutes",
        "1",
        "--retention-seconds",
        "0",
        "--grace-seconds",
        "2",
        "--query-timeout-seconds",
        "2",
    ]);
    for statement in [
        "CREATE SCHEMA s",
        "CREATE TABLE s.t (id BIGINT)",
        "INSERT INTO s.t VALUES (1)",
        "INSERT INTO s.t VALUES (2)",
    ] {
        let (ok, out, err) = lake_sql(&lake.metadata, statement);
        assert!(ok, "{statement}: {out}{err}");
    }
    let (ok, out, err) = lake_sql(&lake.query, "SELECT count(*) AS n FROM s.\"t@v1\"");
    assert!(ok, "version 1 is there before the first pass: {out}{err}");
    // The first pass runs a minute after start-up.
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    loop {
        let (ok, _, err) = lake_sql(&lake.query, "SELECT count(*) AS n FROM s.\"t@v1\"");
        if !ok {
            assert!(err.contains("retention"), "{err}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no maintenance pass removed version 1 within three minutes"
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    let (ok, out, err) = lake_sql(&lake.query, "SELECT count(*) AS n FROM s.t");
    assert!(ok && out.contains('2'), "{out}{err}");
}

/// An index that lags behind by the threshold is brought up to date; one that lags less is
/// left for a later pass.
#[tokio::test(flavor = "multi_thread")]
async fn maintenance_updates_indices_that_lag_behind() {
    use lance::index::DatasetIndexExt;
    let dir = tempfile::tempdir().unwrap();
    let metadata = local_metadata(dir.path()).await;
    let t = table("indexed", "ids");
    seed(&metadata, &t, std::slice::from_ref(&(0..100))).await;
    let mut dataset = metadata.engine().open(&t, None).await.unwrap();
    dataset
        .create_index(
            &["id"],
            lance_index::IndexType::BTree,
            Some("ids".into()),
            &lance_index::scalar::ScalarIndexParams::default(),
            false,
        )
        .await
        .unwrap();
    metadata
        .engine()
        .append(&t, schema(), vec![crate::support::batch(100..150)])
        .await
        .unwrap();
    let unindexed = |dataset: lance::dataset::Dataset| async move {
        let stats = dataset.index_statistics("ids").await.unwrap();
        serde_json::from_str::<serde_json::Value>(&stats).unwrap()["num_unindexed_rows"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(
        unindexed(metadata.engine().open(&t, None).await.unwrap()).await,
        50
    );
    // Fragments of 50 and 100 rows are "large" here: only the index is at stake.
    let options = |threshold| Options {
        target_rows_per_fragment: 10,
        index_unindexed_rows: threshold,
        ..Options::default()
    };
    let summary = maintain::run(metadata.engine(), options(51)).await.unwrap();
    assert!(
        summary.tables[0].indices_optimized.is_empty(),
        "{}",
        summary.tables[0]
    );
    assert_eq!(
        unindexed(metadata.engine().open(&t, None).await.unwrap()).await,
        50
    );
    let summary = maintain::run(metadata.engine(), options(50)).await.unwrap();
    assert_eq!(
        summary.tables[0].indices_optimized,
        ["ids"],
        "{}",
        summary.tables[0]
    );
    assert_eq!(
        unindexed(metadata.engine().open(&t, None).await.unwrap()).await,
        0
    );
    let latest = metadata.engine().open(&t, None).await.unwrap();
    assert_eq!(
        crate::support::ids(&latest).await,
        (0..150).collect::<Vec<_>>()
    );
}

/// Two passes never run at once, whichever processes run them: a pass holds the lease (a row of
/// the manifest table); `lake maintain` in another process skips its pass while it is held,
/// naming the holder (not a failure: the running pass does the work), and runs once it is
/// released.
#[test]
fn maintenance_passes_never_overlap() {
    use lake_common::config::MaintenanceConfig;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let lake = runtime.block_on(CloudLake::new());
    let t = table("people", "contacts");
    let metadata = runtime.block_on(lake.metadata());
    runtime.block_on(write_then_delete(&metadata, &t, "overlap"));
    let holder = lake_testkit::unique("another pass");
    let lease = runtime
        .block_on(
            metadata
                .engine()
                .maintenance_lease(holder.clone(), Duration::from_secs(120)),
        )
        .unwrap();
    // In this process too.
    let refused = runtime.block_on(maintain::run(metadata.engine(), eager()));
    assert!(
        matches!(&refused, Err(maintain::PassError::Lease(_))),
        "{refused:?}"
    );
    let config = MaintenanceConfig::for_plan(&lake.plan, lake.cluster.clone()).unwrap();
    let maintain = || maintain_in_role(&config, "testing").output().unwrap();
    let out = maintain();
    let said = lake_testkit::output_text(&out);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("maintenance: skipped: another maintenance pass (")
            && said.contains(") holds the maintenance lease for ")
            && said.contains(&holder)
            && !said.contains("people.contacts"),
        "{said}"
    );
    runtime.block_on(lease.release()).unwrap();
    let out = maintain();
    let said = lake_testkit::output_text(&out);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("people.contacts: ok"), "{said}");
    // The pass let the lease go: the next one runs at once.
    let again = runtime.block_on(maintain::run(metadata.engine(), eager()));
    assert!(again.is_ok(), "{again:?}");
}

/// A pass working on a table and a `DROP TABLE` of it take turns (the table's lease), so a pass
/// never removes files or manifest rows of a table created again under the same name (its
/// manifests have the same names): a DROP waits while a pass holds the table and goes ahead
/// once it is let go; a pass skips a table being dropped, naming the DROP, and maintains the
/// others.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn maintenance_and_a_drop_of_its_table_take_turns() {
    let dir = tempfile::tempdir().unwrap();
    let metadata = Arc::new(local_metadata(dir.path()).await);
    let (t, u) = (table("people", "contacts"), table("people", "others"));
    let latest = write_then_delete(&metadata, &t, "turns").await;
    write_then_delete(&metadata, &u, "turns").await;
    // A pass, stopped (by its observer) while it works on t.
    let (in_t, pass_in_t) = std::sync::mpsc::channel();
    let (go_on, go) = std::sync::mpsc::channel::<()>();
    let go = std::sync::Mutex::new(go);
    let pass = tokio::spawn({
        let (metadata, t) = (metadata.clone(), t.clone());
        async move {
            let on_table = move |table: &TableRef| {
                if table == &t {
                    in_t.send(()).unwrap();
                    go.lock().unwrap().recv().unwrap();
                }
            };
            maintain::run_observed(metadata.engine(), eager(), &on_table).await
        }
    });
    tokio::task::spawn_blocking(move || pass_in_t.recv().unwrap())
        .await
        .unwrap();
    let dropping = tokio::spawn({
        let (metadata, t) = (metadata.clone(), t.clone());
        async move {
            let dropped = metadata.drop_table(&t).await;
            (dropped, std::time::Instant::now())
        }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !dropping.is_finished(),
        "the DROP did not wait for the pass"
    );
    assert!(names_at(&metadata, &t, latest).await.is_some());
    let let_go = std::time::Instant::now();
    go_on.send(()).unwrap();
    let summary = pass.await.unwrap();
    let (dropped, drop_ended) = tokio::time::timeout(Duration::from_secs(20), dropping)
        .await
        .expect("the DROP went on waiting after the pass let the table go")
        .unwrap();
    dropped.unwrap();
    // Not against the pass's end: once it lets t go it maintains the other table, and the DROP
    // may finish meanwhile (it did, on a loaded machine). That the pass's work on t was not
    // cut short is its clean summary.
    assert!(drop_ended > let_go);
    let summary = summary.unwrap();
    assert_eq!(summary.failed(), 0);
    let of_t = summary.tables.iter().find(|s| s.table == t).unwrap();
    assert_eq!(of_t.outcome, Outcome::Done, "{summary:?}");
    assert!(metadata.engine().open(&t, None).await.is_err());

    // The other way round, on the table created again.
    seed(&metadata, &t, &[0..10, 10..20]).await;
    let ttl = Duration::from_secs(120);
    let drop = metadata
        .engine()
        .table_lease(
            &t,
            "DROP TABLE people.contacts (the test)".into(),
            ttl,
            Duration::ZERO,
        )
        .await
        .unwrap();
    let summary = maintain::run(metadata.engine(), eager()).await.unwrap();
    let outcome = |summary: &maintain::PassSummary, of: &TableRef| {
        summary
            .tables
            .iter()
            .find(|s| &s.table == of)
            .unwrap()
            .outcome
            .clone()
    };
    let Outcome::Busy(why) = outcome(&summary, &t) else {
        panic!("{summary:?}")
    };
    assert!(
        why.contains("DROP TABLE people.contacts (the test)"),
        "{why}"
    );
    assert_eq!(outcome(&summary, &u), Outcome::Done);
    assert_eq!(summary.failed(), 0);
    let fragments = || async {
        metadata
            .engine()
            .open(&t, None)
            .await
            .unwrap()
            .count_fragments()
    };
    assert_eq!(fragments().await, 2, "a table being dropped was compacted");
    drop.release().await.unwrap();
    let summary = maintain::run(metadata.engine(), eager()).await.unwrap();
    assert_eq!(outcome(&summary, &t), Outcome::Done);
    assert_eq!(fragments().await, 1);
}

/// A version's age comes from its manifest row (the time lake wrote it: one query for all of
/// them) and, for rows that do not say (Lance's own writers write none), from its manifest:
/// young versions whose rows say nothing stay under a retention of an hour and go under one of
/// two seconds once three have passed; versions whose rows say they are young stay under the
/// two seconds, though their manifests are older.
#[tokio::test(flavor = "multi_thread")]
async fn maintenance_ages_versions_by_their_rows_or_their_manifests() {
    use lake_runtime::store::{Condition, DynamoStore, MetaStore, Value};
    let lake = CloudLake::new().await;
    let metadata = lake.metadata().await;
    let t = table("people", "aged");
    seed(&metadata, &t, &[0..10, 10..20, 20..30, 30..40]).await;
    let kv = DynamoStore::new(
        lake.aws.dynamodb(),
        &lake.manifest_table(),
        lake_common::schema::Authority::Manifests.key_schema(),
    );
    let base_uri = metadata.engine().warehouse().manifest_base_uri(&t);
    // Every row's time: none, or `ms` plus its version (a millisecond apart, in commit order).
    let rewrite = |committed: Option<i64>| {
        let (kv, base_uri) = (&kv, &base_uri);
        async move {
            for mut row in query_all(kv, base_uri, 100).await.unwrap() {
                let SortKey::N(version) = row.key.sort else {
                    continue;
                };
                match committed {
                    Some(ms) => row
                        .attributes
                        .insert("committed_ms".into(), Value::N(ms + version as i64)),
                    None => row.attributes.remove("committed_ms"),
                };
                kv.put(&row, Condition::Always).await.unwrap();
            }
        }
    };
    let pass = |keep: Duration| {
        let metadata = &metadata;
        async move {
            let summary = maintain::run(metadata.engine(), with_retention(keep, Duration::ZERO))
                .await
                .unwrap();
            summary.tables[0].clone()
        }
    };
    let hour = Duration::from_secs(3600);
    rewrite(None).await;
    let done = pass(hour).await;
    assert_eq!(done.removal.versions_removed, 0, "{done}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    rewrite(None).await;
    let done = pass(Duration::from_secs(2)).await;
    assert!(done.versions_before > 1, "{done}");
    assert_eq!(
        done.removal.versions_removed as usize,
        done.versions_before - 1,
        "{done}"
    );
    for ids in [40..45, 45..50, 50..55] {
        metadata
            .engine()
            .append(&t, schema(), vec![crate::support::batch(ids)])
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    rewrite(Some(lake_runtime_now_ms())).await;
    let done = pass(Duration::from_secs(2)).await;
    assert!(done.versions_before > 1, "{done}");
    assert_eq!(done.removal.versions_removed, 0, "{done}");
    assert_eq!(
        crate::support::ids(&metadata.engine().open(&t, None).await.unwrap()).await,
        (0..55).collect::<Vec<_>>()
    );
}

fn lake_runtime_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The largest `name=<count>` metric of an `EXPLAIN ANALYZE`'s scan nodes (Lance reads a point
/// query in two: the filter's column of every fragment, then the other columns of the matches).
fn metric(explained: &str, name: &str) -> u64 {
    explained
        .split(&format!("{name}="))
        .skip(1)
        .map(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits
                .parse::<u64>()
                .unwrap_or_else(|_| panic!("{name}: {rest:.40}"))
        })
        .sum()
}

/// A point query's cost after many single-row commits, and what makes it independent of them
/// (issue 31 item 7; the times are `bench/run maintenance`'s). Opening the latest version is
/// one manifest-store lookup whatever the commit count; what grows is the scan: Lance reads each
/// commit's fragment (without column statistics it cannot skip one), so a point query reads as
/// many fragments as there were commits. One maintenance pass compacts them, after which the
/// query reads exactly what it reads of the same rows written in one commit.
#[test]
fn reads_do_not_slow_with_commit_count() {
    const COMMITS: i64 = 100;
    let lake = LocalLake::start();
    let ok = |endpoint: &str, sql: &str| {
        let (ok, out, err) = lake_sql(endpoint, sql);
        assert!(ok, "{sql}: {out}{err}");
        out
    };
    ok(&lake.metadata, "CREATE SCHEMA b");
    ok(
        &lake.metadata,
        "CREATE TABLE b.small (id BIGINT, name VARCHAR)",
    );
    ok(
        &lake.metadata,
        "CREATE TABLE b.bulk (id BIGINT, name VARCHAR)",
    );
    for id in 0..COMMITS {
        ok(
            &lake.metadata,
            &format!("INSERT INTO b.small VALUES ({id}, 'row {id}')"),
        );
    }
    let all: Vec<String> = (0..COMMITS)
        .map(|id| format!("({id}, 'row {id}')"))
        .collect();
    ok(
        &lake.metadata,
        &format!("INSERT INTO b.bulk VALUES {}", all.join(", ")),
    );
    let point = |lake: &LocalLake, table: &str| {
        let explained = ok(
            &lake.query,
            &format!("EXPLAIN ANALYZE SELECT * FROM b.{table} WHERE id = 42"),
        );
        (
            metric(&explained, "fragments_scanned"),
            metric(&explained, "iops"),
        )
    };
    // One statement's rows: a fragment per partition of its plan, one or two here.
    let (bulk_fragments, bulk_reads) = point(&lake, "bulk");
    assert!(
        bulk_fragments <= 2,
        "the rows written at once: {bulk_fragments} fragments"
    );
    let (fragments, reads) = point(&lake, "small");
    assert!(
        fragments >= COMMITS as u64,
        "a fragment per commit is read: {fragments}"
    );
    assert!(
        reads >= COMMITS as u64,
        "at least a read per fragment: {reads}"
    );

    let dir = lake.stop();
    let out = maintain_now(dir.path());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lake = LocalLake::start_in(dir, &[]);
    let (fragments, reads) = point(&lake, "small");
    assert!(
        fragments <= bulk_fragments && reads <= bulk_reads,
        "after one pass, the point query reads {fragments} fragments in {reads} reads; of one \
         statement's rows, {bulk_fragments} in {bulk_reads}"
    );
}
