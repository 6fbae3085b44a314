//! Deploying the operator: `kubectl kustomize config/default` builds, every object passes
//! `kubernetes-validate --strict`, and the ClusterRole grants what the operator uses, no more.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use lake_operator::plan::{self, IamInputs};
use lake_operator::validate::validate;
use lake_testkit::{venv_tool, workspace_root};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn kustomize_builds_the_operator_and_every_object_is_valid() {
    let built = Command::new(venv_tool("kubectl"))
        .args(["kustomize", "config/default"])
        .current_dir(workspace_root())
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "kubectl kustomize failed: {}",
        text(&built.stderr)
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("operator.yaml");
    std::fs::write(&file, &built.stdout).unwrap();
    let check = Command::new(venv_tool("kubernetes-validate"))
        .arg("--strict")
        .arg(&file)
        .output()
        .unwrap();
    let report = text(&check.stdout);
    assert!(check.status.success(), "{report}{}", text(&check.stderr));
    for object in [
        "namespace/lake-system",
        "customresourcedefinition/lakeclusters.lake.dev",
        "serviceaccount/lake-operator",
        "clusterrole/lake-operator",
        "clusterrolebinding/lake-operator",
        "deployment/lake-operator",
    ] {
        assert!(
            report.contains(&format!("passed for resource {object}")),
            "{object}: {report}"
        );
    }
}

#[test]
fn rbac_grants_what_the_operator_uses_and_nothing_more() {
    let role: serde_json::Value = serde_yaml::from_str(
        &std::fs::read_to_string(workspace_root().join("config/rbac/role.yaml")).unwrap(),
    )
    .unwrap();
    let mut granted: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for rule in role["rules"].as_array().unwrap() {
        for group in rule["apiGroups"].as_array().unwrap() {
            for resource in rule["resources"].as_array().unwrap() {
                let verbs = rule["verbs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap().to_owned());
                granted
                    .entry((
                        group.as_str().unwrap().to_owned(),
                        resource.as_str().unwrap().to_owned(),
                    ))
                    .or_default()
                    .extend(verbs);
            }
        }
    }
    assert!(!role.to_string().contains("\"*\""), "no wildcards: {role}");

    // What reconcile writes: the planned objects of both samples, S3 and local (server-side
    // apply = create + patch; watched).
    let mut needed: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    let all = |verbs: &[&str]| verbs.iter().map(|v| v.to_string()).collect::<BTreeSet<_>>();
    let mut tokens = false;
    for sample in ["lakecluster-cloud", "lakecluster-local"] {
        let path = workspace_root().join(format!("config/samples/{sample}.yaml"));
        let cluster = serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let planned = plan::plan(&validate(&cluster).unwrap(), &IamInputs::default());
        tokens |= !planned.tokens.is_empty();
        for object in &planned.objects {
            let key = match object.kind() {
                "ConfigMap" => ("", "configmaps"),
                "ServiceAccount" => ("", "serviceaccounts"),
                "Service" => ("", "services"),
                "Deployment" => ("apps", "deployments"),
                "StatefulSet" => ("apps", "statefulsets"),
                "PodDisruptionBudget" => ("policy", "poddisruptionbudgets"),
                "NetworkPolicy" => ("networking.k8s.io", "networkpolicies"),
                "CronJob" => ("batch", "cronjobs"),
                "Role" => ("rbac.authorization.k8s.io", "roles"),
                "RoleBinding" => ("rbac.authorization.k8s.io", "rolebindings"),
                other => panic!("no RBAC mapping for {other}"),
            };
            // Roles are only read by name and applied: never listed or watched.
            let verbs: &[&str] = match key.0 {
                "rbac.authorization.k8s.io" => &["get", "create", "patch"],
                _ => &["get", "list", "watch", "create", "patch"],
            };
            needed
                .entry((key.0.into(), key.1.into()))
                .or_default()
                .extend(all(verbs));
        }
    }
    // What the query ServiceAccount's Role may grant (distributed query's discovery): the
    // operator must hold it to write the Role.
    needed.insert(
        ("discovery.k8s.io".into(), "endpointslices".into()),
        all(&["list", "watch"]),
    );
    needed.insert(("".into(), "pods".into()), all(&["list", "watch"]));
    // The maintenance CronJob, ServiceAccount and ConfigMap are deleted when spec.maintenance
    // goes (only the operator's own).
    for key in [
        ("batch", "cronjobs"),
        ("", "serviceaccounts"),
        ("", "configmaps"),
    ] {
        needed
            .get_mut(&(key.0.into(), key.1.into()))
            .expect("the cloud sample has spec.maintenance")
            .insert("delete".into());
    }
    // The post-rollout selftest Jobs: created once per configuration, watched for their outcome.
    needed.insert(
        ("batch".into(), "jobs".into()),
        all(&["get", "list", "watch", "create"]),
    );
    // Token Secrets are created once and never read (AlreadyExists says they are there).
    if tokens {
        needed.insert(("".into(), "secrets".into()), all(&["create"]));
    }
    needed.insert(
        ("lake.dev".into(), "lakeclusters".into()),
        all(&["get", "list", "watch", "patch"]),
    );
    needed.insert(
        ("lake.dev".into(), "lakeclusters/status".into()),
        all(&["get", "patch"]),
    );
    needed.insert(
        ("lake.dev".into(), "lakeclusters/finalizers".into()),
        all(&["update"]),
    );
    needed.insert(
        ("events.k8s.io".into(), "events".into()),
        all(&["create", "patch"]),
    );
    assert_eq!(
        granted, needed,
        "config/rbac/role.yaml must grant exactly what the operator uses"
    );
}

#[test]
fn the_shipped_allowlist_parses_and_the_operator_reads_it() {
    let root = workspace_root();
    let config: serde_json::Value = serde_yaml::from_str(
        &std::fs::read_to_string(root.join("config/manager/allowlist.yaml")).unwrap(),
    )
    .unwrap();
    let text = config["data"]["allowlist.yaml"].as_str().unwrap();
    let allowlist = lake_operator::allowlist::Allowlist::parse(text, "config/manager").unwrap();
    assert!(
        allowlist.namespaces.is_empty(),
        "the shipped allowlist grants nothing until an administrator edits it"
    );
    let manager = std::fs::read_to_string(root.join("config/manager/manager.yaml")).unwrap();
    assert!(
        manager.contains("/etc/lake-operator/allowlist.yaml")
            && manager.contains("name: lake-operator-allowlist"),
        "the Deployment mounts the allowlist and passes it: {manager}"
    );
}
