//! Interoperability with Lance itself (pylance 14.0.2, `s3+ddb://`), both ways.

use lake_testkit::python;

use crate::support::{CloudLake, batch, ids, schema, seed, table};

fn pylance(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["runtime/tests/it/pylance_peer.py"];
    all.extend_from_slice(args);
    let (ok, stdout, stderr) = python(&all);
    assert!(ok, "pylance failed:\n{stdout}\n{stderr}");
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn pylance_reads_our_commits_and_we_read_pylances() {
    let lake = CloudLake::new().await;
    let metadata = lake.metadata().await;
    let t = table("shared", "points");
    seed(&metadata, &t, &[0..50, 50..80]).await;

    let uri = lake.pylance_uri(&t);
    let opts = lake.pylance_options().to_string();
    let seen = pylance(&["read", &uri, &opts]);
    assert_eq!(seen["version"], 2);
    assert_eq!(seen["rows"], 80);
    assert_eq!(seen["ids"], serde_json::json!((0..80).collect::<Vec<_>>()));

    // pylance appends through Lance's own DynamoDB store; our query side sees it.
    let after = pylance(&["append", &uri, &opts, "1000", "20"]);
    assert_eq!(after["version"], 3);
    let query = lake.query().await;
    let dataset = query.engine().open(&t, None).await.unwrap();
    assert_eq!(dataset.version().version, 3);
    let mut expected: Vec<i64> = (0..80).collect();
    expected.extend(1000..1020);
    assert_eq!(ids(&dataset).await, expected);

    // And our next commit follows pylance's.
    let next = metadata
        .engine()
        .append(&t, schema(), vec![batch(80..81)])
        .await
        .unwrap();
    assert_eq!(next.version, 4);
}
