//! A running operator: owned objects put back, leader election, a restart mid-reconcile.

use super::*;

#[test]
fn user_changes_to_owned_objects_are_reconciled() {
    let (namespace, operator) = sample_ready();
    let ns = namespace.as_str();

    // Field ownership: a label a user adds is theirs and stays; the replicas are the operator's,
    // and a user's `kubectl scale` is reverted through the watch.
    let out = kubectl(
        &["label", "statefulset/dev-local", "-n", ns, "team=analytics"],
        None,
    );
    assert!(out.status.success(), "{}", text(&out));
    let out = kubectl(
        &["scale", "statefulset/dev-local", "-n", ns, "--replicas=3"],
        None,
    );
    assert!(out.status.success(), "{}", text(&out));
    eventually("the user's scale is not reverted", 20, || {
        jsonpath("statefulset/dev-local", ns, "{.spec.replicas}") == "1"
    });
    assert_eq!(
        jsonpath("statefulset/dev-local", ns, "{.metadata.labels.team}"),
        "analytics",
        "the operator removed a label it does not own"
    );

    // An owned object deleted is recreated through the watch.
    let before = jsonpath("service/dev-query", ns, "{.metadata.uid}");
    let out = kubectl(&["delete", "service/dev-query", "-n", ns], None);
    assert!(out.status.success(), "{}", text(&out));
    eventually("the deleted Service is not recreated", 20, || {
        let uid = jsonpath("service/dev-query", ns, "{.metadata.uid}");
        !uid.is_empty() && uid != before
    });
    wait_ready(ns);

    // A converged pass writes nothing: a pass forced by an annotation (not a spec change) sends
    // no create, patch, update or delete.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let settled = operator_writes(ns).len();
    let passes = operator.passes();
    let out = kubectl(
        &["annotate", "lakecluster/dev", "-n", ns, "lake.test/poke=1"],
        None,
    );
    assert!(out.status.success(), "{}", text(&out));
    eventually("the annotation started no reconcile pass", 20, || {
        operator.passes() > passes
    });
    std::thread::sleep(std::time::Duration::from_secs(1));
    let writes = operator_writes(ns);
    assert_eq!(
        writes.len(),
        settled,
        "a converged pass wrote: {:?}",
        &writes[settled..]
    );

    // Deleting the cluster: the finalizer's cleanup, then garbage collection of what it owned
    // (the garbage collector learns of a CRD installed after it started within its 30 s
    // discovery resync).
    let out = kubectl(
        &["delete", "lakecluster/dev", "-n", ns, "--timeout=30s"],
        None,
    );
    assert!(out.status.success(), "{}", text(&out));
    eventually("garbage collection left owned objects", 60, || {
        jsonpath(
            "statefulsets,configmaps,services,networkpolicies",
            ns,
            "{.items[*].metadata.name}",
        )
        .split_whitespace()
        .all(|name| name == "kube-root-ca.crt")
    });
}

/// Two replicas with leader election on one Lease: only the holder reconciles; when it is killed
/// (no hand-back), the other takes the Lease within its duration and reconciles.
#[test]
fn leader_election_fails_over() {
    installed();
    let namespace = new_namespace();
    let ns = namespace.as_str();
    let lease = unique("lease");
    let replica = |identity: &str| {
        start_operator_with(
            ns,
            &[
                "--leader-election-namespace",
                "lake-system",
                "--lease",
                &lease,
                "--lease-seconds",
                "4",
                "--identity",
                identity,
            ],
        )
    };
    let mut first = replica("replica-a");
    let holder = || {
        jsonpath(
            &format!("lease/{lease}"),
            "lake-system",
            "{.spec.holderIdentity}",
        )
    };
    eventually("replica-a did not take the Lease", 20, || {
        holder() == "replica-a"
    });
    let second = replica("replica-b");
    apply_sample(ns);
    wait_ready(ns);
    eventually("replica-b's metrics", 20, || {
        std::net::TcpStream::connect(("127.0.0.1", second.metrics)).is_ok()
    });
    eventually("the leader did not count a pass", 10, || first.passes() > 0);
    assert_eq!(second.passes(), 0, "the standby reconciled");
    assert_eq!(holder(), "replica-a");

    // The leader dies without handing the Lease back; the standby leads once it expires.
    let _ = first.child.kill();
    let _ = first.child.wait();
    let killed = std::time::Instant::now();
    eventually("replica-b did not take over", 20, || {
        holder() == "replica-b"
    });
    let took = killed.elapsed();
    assert!(
        // The spec, not a speed: within the Lease duration plus a renewal interval, with slack
        // for a loaded machine.
        took < std::time::Duration::from_secs(12),
        "fail-over took {took:?} for a 4 s Lease"
    );
    eprintln!("fail-over after {took:?} (4 s Lease)");
    let out = kubectl(
        &["scale", "statefulset/dev-local", "-n", ns, "--replicas=3"],
        None,
    );
    assert!(out.status.success(), "{}", text(&out));
    eventually("the new leader did not revert the scale", 20, || {
        jsonpath("statefulset/dev-local", ns, "{.spec.replicas}") == "1"
    });
    // The pass is counted when it ends, a moment after its patch reverted the scale.
    eventually("the new leader did not count a pass", 10, || {
        second.passes() > 0
    });
}

/// An operator killed in the middle of its first reconcile (objects half-created) and started
/// again converges: the cluster reaches Ready with one of each object.
#[test]
fn operator_restart_in_the_middle_of_a_reconcile_converges() {
    installed();
    let namespace = new_namespace();
    let ns = namespace.as_str();
    apply_sample(ns);
    let mut first = start_operator(ns);
    // Killed as soon as its first objects exist: the rest of the pass never ran.
    eventually("the first operator created nothing", 20, || {
        !jsonpath(
            "configmaps,serviceaccounts",
            ns,
            "{.items[*].metadata.name}",
        )
        .split_whitespace()
        .all(|n| n == "kube-root-ca.crt" || n == "default")
    });
    let _ = first.child.kill();
    let _ = first.child.wait();
    let partial = jsonpath(
        "statefulsets,services,networkpolicies",
        ns,
        "{.items[*].metadata.name}",
    );
    // Best effort: the kill lands wherever the pass is when the first objects show up.
    eprintln!("killed with these created: {partial:?}");
    let _second = start_operator(ns);
    wait_ready(ns);
    for (kind, expected) in [
        ("statefulsets", &["dev-local"][..]),
        ("services", &["dev-metadata", "dev-query"]),
        // The CA ConfigMap is created once, with the TLS Secret (a local lake has no LAKE_*
        // ConfigMaps: its one pod runs `lake local` with flags).
        ("configmaps", &["dev-lake-ca"]),
        (
            "secrets",
            &["dev-lake-tls", "dev-metadata-token", "dev-query-token"],
        ),
    ] {
        let names = jsonpath(kind, ns, "{.items[*].metadata.name}");
        let ours: Vec<&str> = names
            .split_whitespace()
            .filter(|n| n.starts_with("dev-"))
            .collect();
        assert_eq!(
            ours, expected,
            "{kind} after the restart (before: {partial:?})"
        );
    }
}
