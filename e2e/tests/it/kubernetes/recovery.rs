//! Getting a lake back (docs/guides/recovery.md): a LakeCluster deleted with `Retain` comes back
//! on its tables through `spec.tables.reattachFrom`, and never onto a live cluster's.

use super::*;

async fn ddb() -> aws_sdk_dynamodb::Client {
    aws_sdk_dynamodb::Client::new(
        &aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new(Moto::REGION))
            .endpoint_url(moto().endpoint())
            .credentials_provider(Credentials::new("admin", "testing", None, None, "e2e"))
            .load()
            .await,
    )
}

/// The cluster a table's marker names, and its `lake.dev/cluster-uid` tag.
async fn owner(ddb: &aws_sdk_dynamodb::Client, table: &str) -> (String, String) {
    let items = ddb.scan().table_name(table).send().await.unwrap();
    let marker = items
        .items()
        .iter()
        .find_map(|i| i.get("cluster").and_then(|c| c.as_s().ok()).cloned())
        .unwrap_or_else(|| panic!("{table} has no marker"));
    let arn = ddb
        .describe_table()
        .table_name(table)
        .send()
        .await
        .unwrap()
        .table
        .unwrap()
        .table_arn
        .unwrap();
    let tags = ddb
        .list_tags_of_resource()
        .resource_arn(arn)
        .send()
        .await
        .unwrap();
    let tag = tags
        .tags()
        .iter()
        .find(|t| t.key() == "lake.dev/cluster-uid")
        .map(|t| t.value().to_owned())
        .unwrap_or_default();
    (marker, tag)
}

fn uid(lake: &Lake) -> String {
    kubectl(&[
        "get",
        "lakecluster",
        &lake.name,
        "-n",
        &lake.namespace,
        "-o",
        "jsonpath={.metadata.uid}",
    ])
}

/// Deleted with `Retain`, re-created under its name: without the opt-in it stops at
/// MarkerConflict; with `spec.tables.reattachFrom` naming the old uid it goes Ready on the same
/// tables (markers and tags now its own) and serves the same rows through query. Naming a live
/// cluster's uid (with that cluster's tables named explicitly) is refused, touching nothing.
#[tokio::test(flavor = "multi_thread")]
async fn e2e_retained_lake_reattaches() {
    let lake = Lake::apply().await;
    lake.wait_ready(180);
    lake.load_orders();
    let ddb = ddb().await;
    let tables = [
        format!("{}.{}-registry", lake.namespace, lake.name),
        format!("{}.{}-manifests", lake.namespace, lake.name),
    ];
    let old = uid(&lake);
    for table in &tables {
        assert_eq!(owner(&ddb, table).await, (old.clone(), old.clone()));
    }
    lake.delete();

    // Re-created without the opt-in: the tables are another cluster's.
    lake.reapply("");
    eventually("TablesReady is not MarkerConflict", 60, || {
        lake.reason("TablesReady") == "MarkerConflict"
    });
    let new = uid(&lake);
    assert_ne!(new, old);
    for table in &tables {
        assert_eq!(
            owner(&ddb, table).await,
            (old.clone(), old.clone()),
            "{table}"
        );
    }

    // With it: the same tables, now this cluster's, and the same rows.
    lake.reapply(&format!("  tables:\n    reattachFrom: {old}\n"));
    lake.wait_ready(180);
    for table in &tables {
        assert_eq!(
            owner(&ddb, table).await,
            (new.clone(), new.clone()),
            "{table}"
        );
    }
    // The new cluster serves with certificates of its own CA: read it afresh.
    std::fs::remove_file(lake.operator.dir.path().join("ca.crt")).unwrap();
    let (_, query_ip) = lake.pod("query");
    let rows = lake_e2e_sql(
        &lake,
        &Lake::url(&query_ip, "query"),
        &lake.token("query"),
        "SELECT count(*) AS n, sum(amount) AS total FROM sales.orders",
    );
    assert!(rows.contains("1000") && rows.contains("250250"), "{rows}");

    // Another LakeCluster naming this live one's uid and its tables: refused, nothing touched.
    let thief = format!("{}-x", lake.name);
    let manifest = lake
        .manifest
        .replace(
            &format!("name: {}\n", lake.name),
            &format!("name: {thief}\n"),
        )
        .replace("prefix: warehouse", "prefix: thief");
    let manifest = format!(
        "{manifest}  tables:\n    registry: {}\n    manifest: {}\n    reattachFrom: {new}\n",
        tables[0], tables[1]
    );
    let out = control_plane().run(&["apply", "-f", "-"], Some(&manifest));
    assert!(out.status.success(), "{}", output_text(&out));
    let reason = || {
        kubectl(&[
            "get",
            "lakecluster",
            &thief,
            "-n",
            &lake.namespace,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"TablesReady\")]}",
        ])
    };
    eventually("the thief's TablesReady is not ReattachRefused", 60, || {
        reason().contains("ReattachRefused")
    });
    assert!(reason().contains("still exists"), "{}", reason());
    for table in &tables {
        assert_eq!(
            owner(&ddb, table).await,
            (new.clone(), new.clone()),
            "{table}"
        );
    }
    kubectl(&["delete", "namespace", &lake.namespace, "--wait=false"]);
}

/// One statement through `lake_e2e.sql`, its rows printed.
fn lake_e2e_sql(lake: &Lake, url: &str, token: &str, statement: &str) -> String {
    let script = format!(
        "import sys; sys.path.insert(0, 'e2e/tests/it'); from lake_e2e import sql; \
         print(sql({url:?}, {token:?}, {statement:?}))"
    );
    let out = lake_testkit::python_command()
        .args(["-c", &script])
        .envs(lake.client_env())
        .current_dir(workspace_root())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}
