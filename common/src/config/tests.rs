//! The runtime configuration: parsing, defaults and refusals.

use super::*;

#[test]
fn limits_round_trip_and_bad_numbers_are_named() {
    let base = [
        (LAKE_ROLE, "query"),
        (LAKE_WAREHOUSE, "/data/lake"),
        (LAKE_QUERY_TIMEOUT_SECONDS, "30"),
        (LAKE_MAX_CONCURRENT_QUERIES, "8"),
    ];
    let parsed = RuntimeConfig::from_vars(base).unwrap();
    assert_eq!(parsed.config.limits.query_timeout_seconds, Some(30));
    assert_eq!(parsed.config.limits.max_concurrent_queries, Some(8));
    assert_eq!(parsed.config.limits.memory_mb, None);
    assert!(parsed.unknown.is_empty());
    let vars = parsed.config.to_vars();
    assert_eq!(vars[LAKE_QUERY_TIMEOUT_SECONDS], "30");
    assert!(
        !vars.contains_key(LAKE_MEMORY_LIMIT_MB),
        "unset limits are not rendered"
    );
    for bad in ["0", "-1", "lots"] {
        let err = RuntimeConfig::from_vars([
            (LAKE_ROLE, "query"),
            (LAKE_WAREHOUSE, "/data/lake"),
            (LAKE_MEMORY_LIMIT_MB, bad),
        ])
        .unwrap_err();
        assert!(
            err.to_string().contains(LAKE_MEMORY_LIMIT_MB),
            "{bad}: {err}"
        );
    }
}
use crate::plan::{Access, AuthorityRequest, PlanFields, Provisioning};

fn cloud_plan() -> AuthorityPlan {
    AuthorityPlan::new(
        &AuthorityRequest {
            cluster_name: "analytics".into(),
            storage: StorageRequest::S3 {
                bucket: "acme-lake".into(),
                prefix: "analytics".into(),
                region: "eu-west-1".into(),
                endpoint: Some("http://127.0.0.1:5000".into()),
            },
            registry_table: None,
            manifest_table: None,
            legacy_table: None,
            dynamodb_endpoint: Some("http://127.0.0.1:5000".into()),
        },
        &PlanFields::SPEC,
    )
    .unwrap()
}

fn addr() -> SocketAddr {
    "0.0.0.0:8815".parse().unwrap()
}

#[test]
fn rendered_config_round_trips_for_both_roles() {
    let plan = cloud_plan();
    for role in [Role::Query, Role::Metadata] {
        let mut config = RuntimeConfig::for_role(
            &plan,
            role,
            Some("uid-1".into()),
            addr(),
            Some("grpc://metadata:8816".into()),
        );
        config.auth = Auth::Tokens("/var/run/secrets/lake/tokens".into());
        config.tls = Some(("/tls/tls.crt".into(), "/tls/tls.key".into()));
        config.spill_dir = Some("/tmp/spill".into());
        config.limits.spill_mb = Some(2048);
        let parsed = RuntimeConfig::from_vars(config.to_vars()).unwrap();
        assert_eq!(parsed.config, config);
        assert!(parsed.unknown.is_empty());
        config.auth = Auth::Disabled;
        let parsed = RuntimeConfig::from_vars(config.to_vars()).unwrap();
        assert_eq!(parsed.config, config);
    }
}

#[test]
fn authentication_is_tokens_or_explicitly_none() {
    let plan = cloud_plan();
    let vars = |extra: &[(&'static str, &str)]| {
        let mut vars =
            RuntimeConfig::for_role(&plan, Role::Query, Some("uid-1".into()), addr(), None)
                .to_vars();
        for (k, v) in extra {
            vars.insert(k, (*v).to_owned());
        }
        vars
    };
    let unconfigured = RuntimeConfig::from_vars(vars(&[])).unwrap();
    assert_eq!(unconfigured.config.auth, Auth::Unconfigured);
    let errors = RuntimeConfig::from_vars(vars(&[(LAKE_AUTH, "tokens")]))
        .unwrap_err()
        .to_string();
    assert!(
        errors.contains("LAKE_AUTH") && errors.contains("none"),
        "{errors}"
    );
    let errors = RuntimeConfig::from_vars(vars(&[(LAKE_AUTH, "none"), (LAKE_TOKEN_FILE, "/t")]))
        .unwrap_err()
        .to_string();
    assert!(errors.contains("LAKE_AUTH"), "{errors}");
}

#[test]
fn query_config_never_names_the_registry() {
    let plan = cloud_plan();
    let vars =
        RuntimeConfig::for_role(&plan, Role::Query, Some("uid-1".into()), addr(), None).to_vars();
    assert!(!vars.contains_key(LAKE_REGISTRY_DYNAMODB_TABLE));
    assert!(
        vars.values().all(|v| !v.contains("analytics-registry")),
        "{vars:?}"
    );
    assert_eq!(vars[LAKE_MANIFEST_DYNAMODB_TABLE], "analytics-manifests");

    // And a query process handed the registry refuses to start.
    let mut vars: Vec<(String, String)> =
        vars.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    vars.push((
        LAKE_REGISTRY_DYNAMODB_TABLE.into(),
        "analytics-registry".into(),
    ));
    let errs = RuntimeConfig::from_vars(vars).unwrap_err();
    assert_eq!(errs.0[0].fields(), [LAKE_REGISTRY_DYNAMODB_TABLE]);
}

#[test]
fn metadata_config_rejects_aliased_tables() {
    let errs = RuntimeConfig::from_vars([
        (LAKE_ROLE, "metadata"),
        (LAKE_WAREHOUSE, "s3://b-1/p"),
        (LAKE_AWS_REGION, "us-east-1"),
        (LAKE_CLUSTER_ID, "uid"),
        (LAKE_REGISTRY_DYNAMODB_TABLE, "same"),
        (LAKE_MANIFEST_DYNAMODB_TABLE, "same"),
    ])
    .unwrap_err();
    assert_eq!(
        errs.0[0].fields(),
        [LAKE_REGISTRY_DYNAMODB_TABLE, LAKE_MANIFEST_DYNAMODB_TABLE]
    );
}

#[test]
fn local_config_derives_embedded_stores() {
    let parsed = RuntimeConfig::from_vars([
        ("LAKE_ROLE", "query"),
        ("LAKE_WAREHOUSE", "/data/lake"),
        ("LAKE_TYPO", "x"),
        ("HOME", "/root"),
    ])
    .unwrap();
    assert_eq!(parsed.unknown, ["LAKE_TYPO"]);
    let RolePlan::Query(q) = &parsed.config.plan else {
        panic!("query plan expected")
    };
    assert_eq!(q.stage(), "/data/lake/_stage");
    assert_eq!(q.manifest_access(), Access::ReadOnly);
    assert_eq!(q.provisioning(), Provisioning::Never);
    assert_eq!(
        q.manifests(),
        &ManifestStore::Embedded {
            file: "/data/lake/_lake/manifests.redb".into()
        }
    );
    assert_eq!(parsed.config.flight_addr, "0.0.0.0:8815".parse().unwrap());
}

#[test]
fn tls_needs_both_files() {
    let errs = RuntimeConfig::from_vars([
        (LAKE_ROLE, "query"),
        (LAKE_WAREHOUSE, "/data"),
        (LAKE_TLS_CERT_FILE, "/tls/tls.crt"),
    ])
    .unwrap_err();
    assert_eq!(errs.0[0].fields(), [LAKE_TLS_KEY_FILE]);
}

#[test]
fn every_problem_is_reported_with_its_variable() {
    let errs = RuntimeConfig::from_vars([
        ("LAKE_ROLE", "writer"),
        ("LAKE_WAREHOUSE", "s3://Bad_Bucket/p"),
        ("LAKE_FLIGHT_ADDR", "nowhere"),
    ])
    .unwrap_err();
    let fields: Vec<&str> = errs.iter().flat_map(|e| e.fields()).collect();
    assert_eq!(
        fields,
        [
            LAKE_ROLE,
            LAKE_WAREHOUSE,
            LAKE_AWS_REGION,
            LAKE_MANIFEST_DYNAMODB_TABLE,
            LAKE_CLUSTER_ID,
            LAKE_FLIGHT_ADDR
        ]
    );
}

#[test]
fn maintenance_round_trips_without_registry_or_serving_variables() {
    let config = MaintenanceConfig::for_plan(&cloud_plan(), "uid-1".into()).unwrap();
    let vars = config.to_vars();
    assert_eq!(vars[LAKE_ROLE], MAINTENANCE_ROLE);
    assert!(
        !vars.contains_key(LAKE_REGISTRY_DYNAMODB_TABLE),
        "the maintenance role was given the registry: {vars:?}"
    );
    let (parsed, unknown) = MaintenanceConfig::from_vars(vars.clone()).unwrap();
    assert_eq!(parsed, config);
    assert!(unknown.is_empty());
    // A local lake has no maintenance role of its own.
    let local = AuthorityPlan::new(
        &AuthorityRequest {
            cluster_name: "analytics".into(),
            storage: StorageRequest::Local {
                path: "/data/lake".into(),
            },
            registry_table: None,
            manifest_table: None,
            legacy_table: None,
            dynamodb_endpoint: None,
        },
        &PlanFields::SPEC,
    )
    .unwrap();
    assert_eq!(MaintenanceConfig::for_plan(&local, "uid-1".into()), None);

    // Each refusal names its variable.
    for (name, value) in [
        (LAKE_REGISTRY_DYNAMODB_TABLE, "analytics-registry"),
        (LAKE_FLIGHT_ADDR, "0.0.0.0:8815"),
        (LAKE_TOKEN_FILE, "/tokens"),
        (LAKE_MEMORY_LIMIT_MB, "100"),
        (LAKE_ROLE, "metadata"),
        (LAKE_WAREHOUSE, "/data/lake"),
    ] {
        let mut bad = vars.clone();
        bad.insert(name, value.to_owned());
        let err = MaintenanceConfig::from_vars(bad).unwrap_err().to_string();
        assert!(err.contains(name), "{name}={value}: {err}");
    }
    for name in [LAKE_CLUSTER_ID, LAKE_MANIFEST_DYNAMODB_TABLE, LAKE_ROLE] {
        let mut bad = vars.clone();
        bad.remove(name);
        let err = MaintenanceConfig::from_vars(bad).unwrap_err().to_string();
        assert!(err.contains(name), "without {name}: {err}");
    }
}

#[test]
fn distributed_query_is_all_or_nothing_and_the_query_roles_only() {
    let plan = cloud_plan();
    let mut config =
        RuntimeConfig::for_role(&plan, Role::Query, Some("uid-1".into()), addr(), None);
    config.auth = Auth::Disabled;
    for peers in [
        WorkerPeers::Urls(vec![
            "https://10.0.0.1:8817".into(),
            "https://10.0.0.2:8817".into(),
        ]),
        WorkerPeers::Dns {
            name: "lake-a-workers.ns.svc".into(),
            port: 8817,
        },
        WorkerPeers::EndpointSlices {
            service: "lake-a-workers".into(),
            port: 8817,
        },
        WorkerPeers::Pods {
            selector: "app.kubernetes.io/instance=a,app.kubernetes.io/component=query".into(),
            port: 8817,
        },
    ] {
        let kubernetes_dir = peers
            .from_kubernetes()
            .then(|| "/var/run/secrets/lake-kubernetes".to_owned());
        config.distributed = Some(DistributedConfig {
            worker_addr: "0.0.0.0:8817".parse().unwrap(),
            cert_file: "/worker/tls.crt".into(),
            key_file: "/worker/tls.key".into(),
            ca_file: "/worker/ca.crt".into(),
            worker_name: "lake-a-workers".into(),
            peers,
            kubernetes_dir,
            threshold_mb: Some(128),
            max_workers: None,
            task_mb: Some(32),
        });
        let parsed = RuntimeConfig::from_vars(config.to_vars()).unwrap();
        assert_eq!(parsed.config, config);
        assert!(parsed.unknown.is_empty());
    }
    // One variable alone names every one missing.
    let errs = RuntimeConfig::from_vars([
        (LAKE_ROLE, "query"),
        (LAKE_WAREHOUSE, "/data"),
        (LAKE_WORKERS, "http://10.0.0.1:8817"),
    ])
    .unwrap_err();
    let fields: Vec<&str> = errs.iter().flat_map(|e| e.fields()).collect();
    assert_eq!(
        fields,
        [
            LAKE_WORKER_ADDR,
            LAKE_WORKER_CERT_FILE,
            LAKE_WORKER_KEY_FILE,
            LAKE_WORKER_CA_FILE,
            LAKE_WORKER_NAME,
            LAKE_WORKERS
        ],
        "{errs}"
    );
    assert!(errs.to_string().contains("https://"), "{errs}");
    // Peers from the Kubernetes API need its identity, and only they may have one.
    let base = [
        (LAKE_ROLE, "query"),
        (LAKE_WAREHOUSE, "/data"),
        (LAKE_WORKER_ADDR, "0.0.0.0:8817"),
        (LAKE_WORKER_CERT_FILE, "/w/tls.crt"),
        (LAKE_WORKER_KEY_FILE, "/w/tls.key"),
        (LAKE_WORKER_CA_FILE, "/w/ca.crt"),
        (LAKE_WORKER_NAME, "w"),
    ];
    for (peers, dir, field) in [
        ("endpointslices:w:8817", None, LAKE_KUBERNETES_DIR),
        ("https://10.0.0.1:8817", Some("/k"), LAKE_KUBERNETES_DIR),
        ("endpointslices:W_x:8817", Some("/k"), LAKE_WORKERS),
        ("pods:8817:", Some("/k"), LAKE_WORKERS),
        ("pods:x:a=b", Some("/k"), LAKE_WORKERS),
    ] {
        let vars = base
            .into_iter()
            .chain([(LAKE_WORKERS, peers)])
            .chain(dir.map(|d| (LAKE_KUBERNETES_DIR, d)));
        let errs = RuntimeConfig::from_vars(vars).unwrap_err();
        let fields: Vec<&str> = errs.iter().flat_map(|e| e.fields()).collect();
        assert_eq!(fields, [field], "{peers} {dir:?}: {errs}");
    }
    // Never on metadata.
    let errs = RuntimeConfig::from_vars([
        (LAKE_ROLE, "metadata"),
        (LAKE_WAREHOUSE, "/data"),
        (LAKE_WORKER_ADDR, "0.0.0.0:8817"),
    ])
    .unwrap_err();
    assert_eq!(errs.0[0].fields(), [LAKE_WORKER_ADDR]);
}
