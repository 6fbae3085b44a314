//! Concurrent commits: every append lands, none is lost. The writers are independent contexts
//! (as separate processes would be), so they really conflict in the manifest table and Lance's
//! retry is what makes every commit land.

use std::sync::Arc;

use crate::support::{CloudLake, batch, ids, schema, table};

const WRITERS: i64 = 8;
const COMMITS: i64 = 20;
const ROWS: i64 = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_appenders_all_land() {
    let lake = CloudLake::new().await;
    let open = || async { lake.metadata().await };
    let metadata = open().await;
    let t = table("load", "events");
    metadata
        .registry()
        .create_namespace(&t.namespace)
        .await
        .unwrap();
    metadata
        .create_table(&t, schema(), vec![batch(-1..0)])
        .await
        .unwrap();

    let mut contexts = Vec::new();
    for _ in 0..WRITERS {
        contexts.push(Arc::new(open().await));
    }
    let started = std::time::Instant::now();
    let writers: Vec<_> = (0..WRITERS)
        .zip(contexts)
        .map(|(w, metadata)| {
            let t = t.clone();
            tokio::spawn(async move {
                let mut versions = Vec::new();
                for c in 0..COMMITS {
                    let start = (w * COMMITS + c) * ROWS;
                    let committed = metadata
                        .engine()
                        .append(&t, schema(), vec![batch(start..start + ROWS)])
                        .await
                        .unwrap_or_else(|e| panic!("writer {w} commit {c}: {e}"));
                    versions.push(committed.version);
                }
                versions
            })
        })
        .collect();
    // Each acknowledged commit is its own version: two writers told they committed the same
    // version means one of them was lost (an emulator whose conditional put was not atomic did
    // that under load).
    let mut acknowledged = Vec::new();
    for writer in writers {
        acknowledged.extend(writer.await.unwrap());
    }
    acknowledged.sort_unstable();
    let before = acknowledged.len();
    acknowledged.dedup();
    assert_eq!(
        acknowledged.len(),
        before,
        "two commits acknowledged as one version"
    );
    eprintln!(
        "{} commits by {WRITERS} independent writers in {:.1?}",
        WRITERS * COMMITS,
        started.elapsed()
    );

    let versions = metadata.engine().versions(&t).await.unwrap();
    let expected_versions = (1..=(1 + WRITERS * COMMITS) as u64).collect::<Vec<_>>();
    assert_eq!(
        versions, expected_versions,
        "exactly one version per commit"
    );
    let dataset = metadata.engine().open(&t, None).await.unwrap();
    let expected_ids: Vec<i64> = (-1..WRITERS * COMMITS * ROWS).collect();
    assert_eq!(
        ids(&dataset).await,
        expected_ids,
        "every row of every commit"
    );
}
