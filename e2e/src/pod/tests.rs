//! Pod volumes and processes, checked without a cluster.

use super::*;

fn settings() -> NodeSettings {
    NodeSettings {
        binaries: PathBuf::from("/build"),
        aws_endpoint: Some("http://127.0.0.1:5000".into()),
        aws_region: "eu-west-1".into(),
        api_server: Some("https://127.0.0.1:6443".into()),
    }
}

#[test]
fn images_map_to_the_workspace_binaries() {
    let s = settings();
    assert_eq!(
        image_binary(&s, "ghcr.io/acme/lake:1").unwrap(),
        PathBuf::from("/build/lake")
    );
    assert_eq!(
        image_binary(&s, "lake").unwrap(),
        PathBuf::from("/build/lake")
    );
    assert_eq!(
        image_binary(&s, "localhost:5000/lake-operator").unwrap(),
        PathBuf::from("/build/lake-operator")
    );
    assert!(image_binary(&s, "nginx:1").is_err());
}

#[test]
fn mount_paths_and_binds_are_rewritten_for_the_pod() {
    let mounts = vec![
        (
            "/var/run/secrets/lake".to_owned(),
            PathBuf::from("/tmp/p/volumes/tokens"),
        ),
        ("/tmp".to_owned(), PathBuf::from("/tmp/p/volumes/tmp")),
    ];
    assert_eq!(
        rewrite("/var/run/secrets/lake/tokens", &mounts, "127.0.0.9"),
        "/tmp/p/volumes/tokens/tokens",
        "rewritten once, though the host path starts with another mount"
    );
    assert_eq!(
        rewrite("file:///var/run/secrets/lake", &mounts, "127.0.0.9"),
        "file:///tmp/p/volumes/tokens"
    );
    assert_eq!(
        rewrite("/var/run/secrets/lakeX", &mounts, "ip"),
        "/var/run/secrets/lakeX"
    );
    assert_eq!(
        rewrite("0.0.0.0:8815", &mounts, "127.0.0.9"),
        "127.0.0.9:8815"
    );
}

#[test]
fn a_claim_is_its_bound_volumes_directory_and_waits_until_bound() {
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "dev-local-0", "namespace": "ns"},
        "spec": {
            "containers": [{"name": "lake", "image": "lake:1",
                "args": ["local", "--data", "/var/lib/lake/data"],
                "volumeMounts": [{"name": "data", "mountPath": "/var/lib/lake"}]}],
            "volumes": [{"name": "data",
                "persistentVolumeClaim": {"claimName": "data-dev-local-0"}}]
        }
    }))
    .unwrap();
    let pod_dir = Path::new("/pods/dev-local-0");
    let unbound = launches(
        &pod,
        &PodInputs::default(),
        &settings(),
        pod_dir,
        "127.0.0.9",
    );
    assert_eq!(
        unbound.unwrap_err(),
        LaunchError::Missing {
            kind: "bound PersistentVolumeClaim",
            name: "data-dev-local-0".into()
        }
    );
    let inputs = PodInputs {
        claims: BTreeMap::from([(
            "data-dev-local-0".to_owned(),
            PathBuf::from("/tmp/hostpath_pv/abc"),
        )]),
        ..Default::default()
    };
    let launch = &launches(&pod, &inputs, &settings(), pod_dir, "127.0.0.9").unwrap()[0];
    assert_eq!(
        launch.args,
        ["local", "--data", "/tmp/hostpath_pv/abc/data"]
    );
    assert!(
        launch.dirs.iter().all(|d| !d.ends_with("data")),
        "a claim's directory is not the pod's: {:?}",
        launch.dirs
    );
}

/// Containers run as their pods say, as a kubelet starts them: the container's user over the
/// pod's, the pod's fsGroup and supplemental groups as their groups; a non-root pod without a
/// non-root user is refused.
#[test]
fn containers_run_as_their_pods_users() {
    let pod = |security: serde_json::Value, container: serde_json::Value| -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "n"},
            "spec": {"securityContext": security, "containers": [
                {"name": "c", "image": "lake", "securityContext": container}
            ]},
        }))
        .unwrap()
    };
    let lake = pod(
        serde_json::json!({"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
                           "fsGroup": 65532, "supplementalGroups": [7]}),
        serde_json::json!({"runAsNonRoot": true}),
    );
    let c = &lake.spec.as_ref().unwrap().containers[0];
    assert_eq!(
        identity(&lake, c).unwrap(),
        Identity {
            uid: 65532,
            gid: 65532,
            groups: vec![65532, 7],
            fs_group: Some(65532),
        }
    );
    let own = pod(
        serde_json::json!({"runAsUser": 1000}),
        serde_json::json!({"runAsUser": 2000, "runAsGroup": 3000}),
    );
    let c = &own.spec.as_ref().unwrap().containers[0];
    let who = identity(&own, c).unwrap();
    assert_eq!((who.uid, who.gid, who.fs_group), (2000, 3000, None));
    let refused = pod(
        serde_json::json!({"runAsNonRoot": true}),
        serde_json::json!({}),
    );
    let c = &refused.spec.as_ref().unwrap().containers[0];
    assert!(
        identity(&refused, c).is_err(),
        "runAsNonRoot without a user"
    );
}
