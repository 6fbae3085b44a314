//! What becomes of the data: deletion policies, retained tables a new cluster starts on, a
//! local lake on its claim.

use super::*;

async fn admin_sdk() -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new(Moto::REGION))
        .endpoint_url(moto().endpoint())
        .credentials_provider(Credentials::new("admin", "testing", None, None, "e2e"))
        .load()
        .await
}

/// Deleting a LakeCluster: its finalizer's cleanup per `deletionPolicy`, then garbage collection
/// of its objects, so its processes stop. `Retain` (the default) keeps both tables, protected;
/// `Delete` removes them; the warehouse's files stay either way (the operator never deletes data
/// in S3), and both remove the cluster's inline policies from its roles.
#[tokio::test(flavor = "multi_thread")]
async fn e2e_deletion_policies() {
    let started = Instant::now();
    let (retained, deleted) = tokio::join!(
        Lake::apply(),
        Lake::apply_with("  deletionPolicy: Delete\n")
    );
    let sdk = admin_sdk().await;
    let (ddb, iam) = (
        aws_sdk_dynamodb::Client::new(&sdk),
        aws_sdk_iam::Client::new(&sdk),
    );
    let tables = |lake: &Lake| {
        [
            format!("{}.{}-registry", lake.namespace, lake.name),
            format!("{}.{}-manifests", lake.namespace, lake.name),
        ]
    };
    let policy_name = |lake: &Lake| format!("lake.{}.{}", lake.namespace, lake.name);
    for lake in [&retained, &deleted] {
        lake.wait_ready(180);
        lake.load_orders();
        // Before: both tables exist, and each role holds exactly this cluster's grant (the
        // roles are this test's own), so what follows can only pass by removing them.
        for table in tables(lake) {
            ddb.describe_table()
                .table_name(&table)
                .send()
                .await
                .unwrap_or_else(|e| panic!("{table} was never created: {e:?}"));
        }
        for role in ["query", "metadata"] {
            let role_name = format!("{}-{role}-role", lake.name);
            let listed = iam
                .list_role_policies()
                .role_name(&role_name)
                .send()
                .await
                .unwrap();
            assert_eq!(listed.policy_names(), [policy_name(lake)], "{role_name}");
            iam.get_role_policy()
                .role_name(&role_name)
                .policy_name(policy_name(lake))
                .send()
                .await
                .unwrap_or_else(|e| panic!("{role_name} has no grant to read: {e:?}"));
        }
    }
    for lake in [&retained, &deleted] {
        lake.delete();
    }

    for table in tables(&retained) {
        let described = ddb.describe_table().table_name(&table).send().await;
        let described = described.unwrap_or_else(|e| panic!("Retain lost {table}: {e:?}"));
        assert_eq!(
            described.table.unwrap().deletion_protection_enabled(),
            Some(true),
            "{table}"
        );
    }
    for table in tables(&deleted) {
        match ddb.describe_table().table_name(&table).send().await {
            Ok(_) => panic!("Delete kept {table}"),
            Err(e) => assert!(
                e.as_service_error()
                    .is_some_and(|s| s.is_resource_not_found_exception()),
                "{table}: not gone, another failure: {e:?}"
            ),
        }
    }
    for lake in [&retained, &deleted] {
        // ListObjectsV2, unsigned (the shared emulator does not enforce IAM).
        let listing = lake_testkit::http(
            moto().port(),
            "GET",
            &format!(
                "/{}-bucket?list-type=2&prefix=warehouse/sales/orders.lance/",
                lake.name
            ),
        );
        assert!(
            listing.contains("<Key>warehouse/sales/orders.lance/"),
            "{}: the warehouse's files are gone: {listing}",
            lake.name
        );
        for role in ["query", "metadata"] {
            // The role is still there (the operator never deletes roles); its grant is not.
            let role_name = format!("{}-{role}-role", lake.name);
            iam.get_role()
                .role_name(&role_name)
                .send()
                .await
                .unwrap_or_else(|e| panic!("{role_name} is gone: {e:?}"));
            let listed = iam
                .list_role_policies()
                .role_name(&role_name)
                .send()
                .await
                .unwrap();
            assert!(
                listed.policy_names().is_empty(),
                "{}: the {role} role kept its grant: {:?}",
                lake.name,
                listed.policy_names()
            );
        }
        kubectl(&["delete", "namespace", &lake.namespace, "--wait=false"]);
    }
    eprintln!("e2e_deletion_policies: {:?}", started.elapsed());
}

/// `lake-operator render -o manifests` output applies and starts: a lake deleted with `Retain`
/// keeps its tables; rendered offline with its cluster id (and `tls: Disabled`, roles as ARNs),
/// with the token Secrets created by hand as docs/operator.md says, the manifests bring the
/// same data back — no LakeCluster, no operator.
#[tokio::test(flavor = "multi_thread")]
async fn e2e_offline_manifests_start_on_retained_tables() {
    let started = Instant::now();
    let lake = Lake::apply().await;
    lake.wait_ready(180);
    lake.load_orders();
    let (ns, name) = (lake.namespace.clone(), lake.name.clone());
    let uid = kubectl(&[
        "get",
        "lake",
        &name,
        "-n",
        &ns,
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    let (_, query_ip) = lake.pod("query");
    kubectl(&["delete", "lakecluster", &name, "-n", &ns, "--timeout=120s"]);
    eventually("the deleted lake still answers", 90, || {
        !port_open(&query_ip, 8815)
    });

    let dir = tempfile::tempdir().unwrap();
    let offline = dir.path().join("offline.yaml");
    std::fs::write(
        &offline,
        format!(
            r#"apiVersion: lake.dev/v1alpha1
kind: LakeCluster
metadata: {{name: {name}, namespace: {ns}}}
spec:
  storage: {{s3: {{bucket: {name}-bucket, prefix: warehouse, region: {region}, endpoint: "{endpoint}"}}}}
  iam:
    queryRole: arn:aws:iam::123456789012:role/{name}-query-role
    metadataRole: arn:aws:iam::123456789012:role/{name}-metadata-role
  query: {{replicas: 1, image: "ghcr.io/acme/lake:1"}}
  metadata: {{image: "ghcr.io/acme/lake:1"}}
  tls: Disabled
"#,
            region = Moto::REGION,
            endpoint = moto().endpoint(),
        ),
    )
    .unwrap();
    let out = Command::new(binary("lake-operator"))
        .args(["render", "-f"])
        .arg(&offline)
        .args(["-o", "manifests", "--cluster-id", &uid])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    let manifests = String::from_utf8_lossy(&out.stdout).into_owned();
    for role in ["query", "metadata"] {
        sh(&format!(
            "kubectl create secret generic {name}-{role}-token -n {ns} \
               --from-literal=tokens=\"$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n')\""
        ));
    }
    let out = control_plane().run(&["apply", "-f", "-"], Some(&manifests));
    assert!(out.status.success(), "{}", output_text(&out));
    for role in ["query", "metadata"] {
        lake.kubectl_ok(&[
            "rollout",
            "status",
            &format!("deployment/{name}-{role}"),
            "-n",
            &ns,
            "--timeout=120s",
        ]);
    }
    let (_, query_ip) = lake.pod("query");
    let token = |role: &str| {
        sh(&format!(
            "kubectl get secret {name}-{role}-token -n {ns} -o jsonpath='{{.data.tokens}}' | base64 -d"
        ))
    };
    // The retained rows are back; the metadata token is still no query token.
    let (ok, out, err) = lake.client(&[
        "e2e/tests/it/token_check.py",
        &format!("grpc://{query_ip}:8815"),
        &token("query"),
        &token("metadata"),
    ]);
    assert!(ok, "{}", lake.diagnostics(&format!("{out}\n{err}")));
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
    eventually("the offline lake's port is still open", 60, || {
        !port_open(&query_ip, 8815)
    });
    eprintln!(
        "e2e_offline_manifests_start_on_retained_tables: {:?}",
        started.elapsed()
    );
}

/// The development mode: a local lake is one StatefulSet pod running both roles (`lake local`)
/// on a PersistentVolumeClaim the control plane provisions. Rows written before the pod is
/// deleted are read from its replacement; deleting the lake (deletionPolicy Delete) deletes the
/// claim and its volume's directory.
#[tokio::test(flavor = "multi_thread")]
async fn e2e_local_dev_mode_survives_restart() {
    let started = Instant::now();
    let lake = Lake::apply_local("  deletionPolicy: Delete\n");
    lake.wait_ready(180);
    eprintln!("kubectl apply → Ready in {:?}", started.elapsed());
    let (ns, name) = (lake.namespace.clone(), lake.name.clone());
    let jsonpath = |kind: &str, object: &str, path: &str| {
        kubectl(&[
            "get",
            kind,
            object,
            "-n",
            &ns,
            "-o",
            &format!("jsonpath={path}"),
        ])
    };
    let pod = format!("{name}-local-0");
    let claim = format!("data-{pod}");
    assert_eq!(jsonpath("pvc", &claim, "{.status.phase}"), "Bound");
    let volume = jsonpath("pvc", &claim, "{.spec.volumeName}");
    let dir = kubectl(&["get", "pv", &volume, "-o", "jsonpath={.spec.hostPath.path}"]);
    assert!(dir.starts_with("/tmp/hostpath_pv/"), "{dir}");
    // One pod, no per-role Deployments, no selftest Jobs (the stores are its own files).
    let deployments = kubectl(&["get", "deploy,jobs", "-n", &ns, "-o", "name"]);
    assert!(deployments.trim().is_empty(), "{deployments}");
    let conditions = jsonpath("lake", &name, "{.status.conditions[*].type}");
    assert!(!conditions.contains("SelfTestPassed"), "{conditions}");

    let ip = || jsonpath("pod", &pod, "{.status.podIP}");
    let first_ip = ip();
    let (query, metadata) = (
        Lake::url(&first_ip, "query"),
        Lake::url(&first_ip, "metadata"),
    );
    // Each endpoint checks its own tokens: both Secrets, one process, one certificate
    // carrying both Services' names (the clients verify each port against its own name).
    let (ok, out, err) = lake.client(&[
        "e2e/tests/it/clients.py",
        &metadata,
        &lake.token("metadata"),
        &query,
        &lake.token("query"),
    ]);
    assert!(
        ok,
        "{}",
        lake.diagnostics(&format!("clients:\n{out}\n{err}"))
    );
    let (ok, out, err) = lake.client(&[
        "e2e/tests/it/token_check.py",
        &metadata,
        &lake.token("metadata"),
        &lake.token("query"),
    ]);
    assert!(
        ok,
        "a query token must not open metadata: {}",
        lake.diagnostics(&format!("{out}\n{err}"))
    );

    // Restart: the StatefulSet brings back a pod of the same name on the same claim.
    let old_uid = jsonpath("pod", &pod, "{.metadata.uid}");
    lake.kubectl_ok(&["delete", "pod", &pod, "-n", &ns, "--timeout=60s"]);
    eventually("the pod was not replaced", 90, || {
        let out = control_plane().run(
            &[
                "get",
                "pod",
                &pod,
                "-n",
                &ns,
                "-o",
                "jsonpath={.metadata.uid}",
            ],
            None,
        );
        out.status.success() && !String::from_utf8_lossy(&out.stdout).contains(&old_uid)
    });
    lake.kubectl_ok(&[
        "wait",
        "--for=condition=Ready",
        &format!("pod/{pod}"),
        "-n",
        &ns,
        "--timeout=90s",
    ]);
    lake.wait_ready(90);
    let (ok, out, err) = lake.client(&[
        "e2e/tests/it/token_check.py",
        &Lake::url(&ip(), "query"),
        &lake.token("query"),
        &lake.token("metadata"),
    ]);
    assert!(
        ok,
        "the rows written before the restart: {}",
        lake.diagnostics(&format!("{out}\n{err}"))
    );
    assert!(
        std::path::Path::new(&dir).join("_lake").is_dir(),
        "the stores live on the claim's volume ({dir})"
    );

    // deletionPolicy Delete: the claim goes with the lake, and the volume's directory with it.
    kubectl(&["delete", "lakecluster", &name, "-n", &ns, "--timeout=120s"]);
    eventually("the claim's directory is still there", 120, || {
        !std::path::Path::new(&dir).exists()
    });
    kubectl(&["delete", "namespace", &ns, "--wait=false"]);
    eprintln!(
        "e2e_local_dev_mode_survives_restart: {:?}",
        started.elapsed()
    );
}
