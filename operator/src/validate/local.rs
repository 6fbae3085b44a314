//! What a local (development) lake's one pod cannot honour.

use lake_common::plan::PlanError;

use super::names::{is_dns_subdomain, is_quantity};

/// What a local lake's one pod (both roles, `lake local`) cannot honour.
pub(super) fn check_local(spec: &crate::crd::LakeClusterSpec, errors: &mut Vec<PlanError>) {
    let Some(local) = &spec.storage.local else {
        return;
    };
    let one_pod = "local storage runs both roles in one pod (a development lake)";
    // The claim is mounted at the path: not over the root, the pod's /tmp or its Secrets.
    let path = std::path::Path::new(&local.path);
    let taken = ["/tmp", "/var/run/secrets"];
    if path == std::path::Path::new("/") || taken.iter().any(|t| path.starts_with(t)) {
        errors.push(PlanError::InvalidField {
            field: "spec.storage.local.path".into(),
            value: local.path.clone(),
            reason: "is where the pod keeps its root, its /tmp or its Secrets: choose a \
                     directory of its own, e.g. /var/lib/lake"
                .into(),
        });
    }
    if let Some(replicas) = spec.query.replicas.filter(|r| *r != 1) {
        errors.push(PlanError::InvalidField {
            field: "spec.query.replicas".into(),
            value: replicas.to_string(),
            reason: format!("{one_pod}: set 1 or leave it unset"),
        });
    }
    if spec.query.image != spec.metadata.image && !spec.query.image.trim().is_empty() {
        errors.push(PlanError::InvalidField {
            field: "spec.query.image".into(),
            value: spec.query.image.clone(),
            reason: format!(
                "{one_pod}, which runs spec.metadata.image ({:?}): set the same image",
                spec.metadata.image
            ),
        });
    }
    if spec.query.resources.is_some() {
        errors.push(PlanError::NotAllowed {
            field: "spec.query.resources".into(),
            reason: format!("{one_pod}: set its resources in spec.metadata.resources"),
        });
    }
    if !is_quantity(&local.size) {
        errors.push(PlanError::InvalidField {
            field: "spec.storage.local.size".into(),
            value: local.size.clone(),
            reason: "must be a Kubernetes quantity above zero, e.g. 10Gi or 500Mi".into(),
        });
    }
    if let Some(class) = local
        .storage_class_name
        .as_ref()
        .filter(|c| !is_dns_subdomain(c))
    {
        errors.push(PlanError::InvalidField {
            field: "spec.storage.local.storageClassName".into(),
            value: class.clone(),
            reason: "must be a StorageClass name: dot-separated parts of a-z, 0-9 and '-'".into(),
        });
    }
}
