//! The spec checks, field by field.

use super::*;

fn cluster(namespace: &str, query_role: &str, metadata_role: &str) -> LakeCluster {
    serde_yaml::from_str(&format!(
        r#"
apiVersion: lake.dev/v1alpha1
kind: LakeCluster
metadata: {{name: analytics, namespace: {namespace}}}
spec:
  storage: {{s3: {{bucket: acme-lake, prefix: wh, region: eu-west-1}}}}
  iam: {{queryRole: "{query_role}", metadataRole: "{metadata_role}"}}
  query: {{image: lake:1}}
  metadata: {{image: lake:1}}
"#
    ))
    .unwrap()
}

fn tables(c: &ValidatedCluster) -> (String, String) {
    match (c.authority.registry(), c.authority.manifests()) {
        (
            lake_common::plan::RegistryStore::DynamoDb { table: r },
            lake_common::plan::ManifestStore::DynamoDb { table: m },
        ) => (r.to_string(), m.to_string()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn same_name_in_two_namespaces_defaults_to_different_tables() {
    let a = validate(&cluster("team-a", "q", "m")).unwrap();
    let b = validate(&cluster("team-b", "q", "m")).unwrap();
    assert_eq!(
        tables(&a),
        (
            "team-a.analytics-registry".into(),
            "team-a.analytics-manifests".into()
        )
    );
    assert_ne!(tables(&a), tables(&b));
    // `-` may be in both parts, `.` in neither namespace: team/a-x and team-a/x differ.
    let mut c = cluster("team", "q", "m");
    c.metadata.name = Some("a-x".into());
    let mut d = cluster("team-a", "q", "m");
    d.metadata.name = Some("x".into());
    assert_ne!(
        tables(&validate(&c).unwrap()),
        tables(&validate(&d).unwrap())
    );
}

#[test]
fn one_role_by_name_arn_or_case_is_refused() {
    for (q, m) in [
        ("lake", "lake"),
        ("lake", "arn:aws:iam::123456789012:role/lake"),
        ("arn:aws:iam::123456789012:role/team/Lake", "LAKE"),
    ] {
        let errors = validate(&cluster("data", q, m)).unwrap_err();
        assert!(
            errors
                .iter()
                .any(|e| e.to_string().contains("spec.iam.queryRole")),
            "{q} / {m}: {errors:?}"
        );
    }
    assert!(validate(&cluster("data", "lake-query", "lake-metadata")).is_ok());
}

#[test]
fn role_arns_name_one_account_and_a_valid_role() {
    for bad in [
        "arn:aws:iam::*:role/lake-query",
        "arn:aws:iam::12345:role/lake-query",
        "arn:aws:iam::123456789012:user/lake-query",
        "arn:aws:iam::123456789012:role/",
        "arn:evil:iam::123456789012:role/lake-query",
        "lake/query",
        "lake query",
    ] {
        let errors = validate(&cluster("data", bad, "lake-metadata")).unwrap_err();
        assert!(
            errors
                .iter()
                .any(|e| e.to_string().contains("spec.iam.queryRole")),
            "{bad}: {errors:?}"
        );
    }
    let arn = "arn:aws:iam::123456789012:role/team/lake-query";
    assert!(validate(&cluster("data", arn, "lake-metadata")).is_ok());
}

fn local(extra_query: &str, local_extra: &str) -> LakeCluster {
    serde_yaml::from_str(&format!(
        r#"
apiVersion: lake.dev/v1alpha1
kind: LakeCluster
metadata: {{name: dev, namespace: data}}
spec:
  storage: {{local: {{path: /var/lib/lake{local_extra}}}}}
  query: {{image: lake:1{extra_query}}}
  metadata: {{image: lake:1}}
"#
    ))
    .unwrap()
}

fn fields(errors: &PlanErrors) -> Vec<String> {
    errors
        .iter()
        .map(|e| {
            e.to_string()
                .split(':')
                .next()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

#[test]
fn a_local_lake_is_one_pod_with_a_claim() {
    let ok = validate(&local("", "")).unwrap();
    assert_eq!(ok.query.replicas, 1, "one pod serves both roles");
    assert_eq!(
        ok.local_volume,
        Some(LocalVolume {
            size: "1Gi".into(),
            storage_class_name: None
        })
    );
    assert!(
        validate(&local(
            ", replicas: 1",
            ", size: 1.5Gi, storageClassName: fast"
        ))
        .is_ok()
    );
    let s3 = validate(&cluster("data", "q", "m")).unwrap();
    assert_eq!(s3.query.replicas, 2, "the default on S3");
    assert_eq!(s3.local_volume, None);
}

#[test]
fn what_one_local_pod_cannot_honour_is_refused_by_field() {
    for (query, storage, field) in [
        (", replicas: 2", "", "spec.query.replicas"),
        (", resources: {}", "", "spec.query.resources"),
        ("", ", size: 10", "ok"),
        ("", ", size: 0Gi", "spec.storage.local.size"),
        ("", ", size: 1GB", "spec.storage.local.size"),
        ("", ", size: '-1Gi'", "spec.storage.local.size"),
        ("", ", size: 1.Gi", "spec.storage.local.size"),
        (
            "",
            ", storageClassName: Fast_SSD",
            "spec.storage.local.storageClassName",
        ),
    ] {
        let result = validate(&local(query, storage));
        match field {
            "ok" => assert!(result.is_ok(), "{query}{storage}: {result:?}"),
            _ => {
                let errors = result.expect_err(field);
                assert!(
                    fields(&errors).iter().any(|f| f.contains(field)),
                    "{errors:?}"
                );
            }
        }
    }
    for path in ["/", "/tmp/lake", "/var/run/secrets/lake"] {
        let mut over = local("", "");
        over.spec.storage.local.as_mut().unwrap().path = path.into();
        let errors = validate(&over).unwrap_err();
        assert!(
            fields(&errors)
                .iter()
                .any(|f| f.contains("spec.storage.local.path")),
            "{path}: {errors:?}"
        );
    }
    let mut other_image = local("", "");
    other_image.spec.query.image = "lake:2".into();
    let errors = validate(&other_image).unwrap_err();
    assert!(
        fields(&errors)
            .iter()
            .any(|f| f.contains("spec.query.image")),
        "{errors:?}"
    );
}

/// `spec.maintenance` and `spec.iam.maintenanceRole` come together, the role is its own, the
/// grace outlasts the statement timeout, and a local lake is refused (it maintains itself).
#[test]
fn maintenance_needs_its_own_role_and_a_grace_above_the_timeout() {
    let with = |iam_extra: &str, spec_extra: &str| {
        let yaml = format!(
            r#"
apiVersion: lake.dev/v1alpha1
kind: LakeCluster
metadata: {{name: analytics, namespace: data}}
spec:
  storage: {{s3: {{bucket: acme-lake, prefix: wh, region: eu-west-1}}}}
  iam: {{queryRole: lake-query, metadataRole: lake-metadata{iam_extra}}}
  query: {{image: lake:1}}
  metadata: {{image: lake:1}}
{spec_extra}"#
        );
        validate(&serde_yaml::from_str(&yaml).unwrap())
    };
    let fields = |result: Result<ValidatedCluster, PlanErrors>| -> Vec<String> {
        match result {
            Ok(_) => Vec::new(),
            Err(e) => e.iter().map(|e| e.to_string()).collect(),
        }
    };
    let ok = with(", maintenanceRole: lake-maintenance", "  maintenance: {}\n").unwrap();
    let job = ok.maintenance.unwrap();
    assert_eq!(
        (job.schedule.as_str(), job.grace_seconds),
        ("0 * * * *", 900)
    );

    let missing = fields(with("", "  maintenance: {}\n"));
    assert!(
        missing.len() == 1 && missing[0].contains("spec.iam.maintenanceRole"),
        "{missing:?}"
    );
    let unused = fields(with(", maintenanceRole: lake-maintenance", ""));
    assert!(
        unused.len() == 1 && unused[0].contains("spec.maintenance is not set"),
        "{unused:?}"
    );
    let shared = fields(with(
        ", maintenanceRole: LAKE-METADATA",
        "  maintenance: {}\n",
    ));
    assert!(
        shared.len() == 1 && shared[0].contains("spec.iam.metadataRole"),
        "{shared:?}"
    );

    let role = ", maintenanceRole: lake-maintenance";
    let short = fields(with(role, "  maintenance: {graceSeconds: 60}\n"));
    assert!(
        short.len() == 1 && short[0].contains("spec.maintenance.graceSeconds"),
        "{short:?}"
    );
    // A shorter statement timeout admits a shorter grace.
    let timed = with(
        role,
        "  queryTimeoutSeconds: 30\n  maintenance: {graceSeconds: 60}\n",
    );
    assert_eq!(timed.unwrap().maintenance.unwrap().grace_seconds, 60);
    let bad = fields(with(
        role,
        "  maintenance: {schedule: \"every hour\", retentionSeconds: -1, targetRowsPerFragment: 0}\n",
    ));
    for field in ["schedule", "retentionSeconds", "targetRowsPerFragment"] {
        assert!(
            bad.iter()
                .any(|e| e.contains(&format!("spec.maintenance.{field}"))),
            "{bad:?}"
        );
    }

    let local: LakeCluster = serde_yaml::from_str(
        "apiVersion: lake.dev/v1alpha1\nkind: LakeCluster\nmetadata: {name: dev, namespace: data}\nspec:\n  storage: {local: {path: /var/lib/lake}}\n  query: {image: lake:1}\n  metadata: {image: lake:1}\n  maintenance: {}\n",
    )
    .unwrap();
    let refused = fields(validate(&local));
    assert!(
        refused
            .iter()
            .any(|e| e.contains("spec.maintenance") && e.contains("--maintain-every-minutes")),
        "{refused:?}"
    );
}

#[test]
fn distributed_query_needs_operator_tls_s3_and_sane_numbers() {
    let with = |d: crate::crd::DistributedSpec, tls: TlsMode, local: bool| {
        let mut c = cluster("data", "q", "m");
        c.spec.query.distributed = Some(d);
        c.spec.tls = tls;
        if local {
            c.spec.storage = serde_yaml::from_str("{local: {path: /var/lib/lake}}").unwrap();
            c.spec.iam = None;
        }
        validate(&c)
    };
    let spec = |yaml: &str| -> crate::crd::DistributedSpec { serde_yaml::from_str(yaml).unwrap() };
    // The block alone turns it on, with the defaults left to the runtime.
    let ok = with(spec("{}"), TlsMode::Operator, false).unwrap();
    let d = ok.query.distributed.unwrap();
    assert_eq!(d.discovery, crate::crd::Discovery::EndpointSlices);
    assert_eq!(
        (d.threshold_mb, d.max_workers, d.task_mb),
        (None, None, None)
    );
    // Turned off: as if absent.
    let off = with(spec("{enabled: false}"), TlsMode::Disabled, false).unwrap();
    assert_eq!(off.query.distributed, None);
    for (d, tls, local, field, says) in [
        (
            "{}",
            TlsMode::Disabled,
            false,
            "spec.query.distributed",
            "spec.tls: Operator",
        ),
        (
            "{}",
            TlsMode::Operator,
            true,
            "spec.query.distributed",
            "one pod",
        ),
        (
            "{thresholdMb: -1}",
            TlsMode::Operator,
            false,
            "spec.query.distributed.thresholdMb",
            "0 or more",
        ),
        (
            "{taskMb: -5}",
            TlsMode::Operator,
            false,
            "spec.query.distributed.taskMb",
            "0 or more",
        ),
        (
            "{maxWorkers: 0}",
            TlsMode::Operator,
            false,
            "spec.query.distributed.maxWorkers",
            "1 to 100",
        ),
    ] {
        let errs = with(spec(d), tls, local).unwrap_err();
        let fields: Vec<&str> = errs.iter().flat_map(|e| e.fields()).collect();
        assert!(fields.contains(&field), "{d}: {errs}");
        assert!(errs.to_string().contains(says), "{d}: {errs}");
    }
}

#[test]
fn reattach_from_must_be_a_uid_and_not_this_clusters_own() {
    let with = |from: &str, own: Option<&str>| {
        let mut c = cluster("data", "q", "m");
        c.spec.tables.reattach_from = Some(from.into());
        c.metadata.uid = own.map(Into::into);
        validate(&c)
    };
    let old = "0b3c5f3e-8a61-4c8e-9d2e-5f1b7a9c0d11";
    assert_eq!(with(old, None).unwrap().reattach_from.as_deref(), Some(old));
    // Its own uid: nothing to take over.
    assert_eq!(with(old, Some(old)).unwrap().reattach_from, None);
    for bad in [
        "",
        "lake",
        "0B3C5F3E-8A61-4C8E-9D2E-5F1B7A9C0D11",
        "0b3c5f3e8a614c8e9d2e5f1b7a9c0d11",
    ] {
        let errs = with(bad, None).unwrap_err();
        assert_eq!(
            errs.iter().flat_map(|e| e.fields()).collect::<Vec<_>>(),
            ["spec.tables.reattachFrom"],
            "{bad:?}: {errs}"
        );
    }
}
