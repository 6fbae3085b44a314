//! Distributed query on a LakeCluster: its query pods find each other through the API (the
//! node agent's pod IPs are loopback, which EndpointSlices refuse, so `discovery: Pods`) and
//! spread one statement over themselves, mutual TLS with the worker certificate the operator
//! issued.

use super::*;

/// A LakeCluster with three query pods answers a distributed statement, through query, with
/// the single-node answer; its scan ran as tasks on several pods, no fragment read twice.
#[tokio::test(flavor = "multi_thread")]
async fn e2e_distributed_query_equals_single_node() {
    let name = create_aws(moto().endpoint(), moto().port()).await;
    let lake = Lake::apply_with_query(
        &name,
        &Aws::shared(),
        "",
        "    replicas: 3\n    distributed:\n      discovery: Pods\n      thresholdMb: 0\n      taskMb: 0\n",
        "",
    );
    lake.wait_ready(240);
    let (_, query_ip) = lake.pod("query");
    let (_, metadata_ip) = lake.pod("metadata");
    let (ok, out, err) = lake.client(&[
        "e2e/tests/it/distributed_check.py",
        &Lake::url(&metadata_ip, "metadata"),
        &lake.token("metadata"),
        &Lake::url(&query_ip, "query"),
        &lake.token("query"),
    ]);
    assert!(
        ok,
        "{}",
        lake.diagnostics(&format!("the distributed check failed:\n{out}\n{err}"))
    );
    eprintln!("{out}");
    assert!(
        out.contains("ok the distributed answer is the single-node answer"),
        "{out}"
    );
    // What the query ServiceAccount may read: the namespace's Pods (its discovery), no more.
    let role = kubectl(&[
        "get",
        "role",
        &format!("{name}-query-workers"),
        "-n",
        &lake.namespace,
        "-o",
        "jsonpath={.rules}",
    ]);
    assert_eq!(
        role, r#"[{"apiGroups":[""],"resources":["pods"],"verbs":["list","watch"]}]"#,
        "{role}"
    );
}
