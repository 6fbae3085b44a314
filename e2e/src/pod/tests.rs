//! Pod volumes and processes, checked without a cluster.

use super::*;

fn settings() -> NodeSettings {
    NodeSettings {
        binaries: PathBuf::from("/build"),
        aws_endpoint: Some("http://127.0.0.1:5000".into()),
        aws_region: "eu-west-1".into(),
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
