//! The NetworkPolicies of a cluster: who may reach each role's port.

use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use lake_common::config::default_port;
use lake_common::plan::Role;

use crate::validate::ValidatedCluster;

use super::workloads::{Component, meta, selector};

/// The pod-template annotation that changes whenever a role's configuration does, so a config
/// change rolls the pods.
/// Ingress to `port` only, from `from` (every source when `None`).
pub(crate) fn ingress_rule(
    port: u16,
    from: Option<Vec<NetworkPolicyPeer>>,
) -> NetworkPolicyIngressRule {
    NetworkPolicyIngressRule {
        from,
        ports: Some(vec![NetworkPolicyPort {
            port: Some(IntOrString::Int(i32::from(port))),
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
    }
}

/// The pods of the namespaces `spec.metadata.clientNamespaces` names, if it names any.
pub(crate) fn client_namespaces(cluster: &ValidatedCluster) -> Option<NetworkPolicyPeer> {
    (!cluster.metadata.client_namespaces.is_empty()).then(|| NetworkPolicyPeer {
        namespace_selector: Some(LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "kubernetes.io/metadata.name".into(),
                operator: "In".into(),
                values: Some(cluster.metadata.client_namespaces.clone()),
            }]),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// Ingress of `component`'s pods: only what `rules` allow, on no other port.
pub(crate) fn ingress_policy(
    cluster: &ValidatedCluster,
    metadata: ObjectMeta,
    component: Component,
    rules: Vec<NetworkPolicyIngressRule>,
) -> NetworkPolicy {
    NetworkPolicy {
        metadata,
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(selector(cluster, component)),
                ..Default::default()
            }),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(rules),
            ..Default::default()
        }),
    }
}

/// Who may connect to metadata (the writer): this cluster's query pods and the pods of the
/// namespaces `spec.metadata.clientNamespaces` names; nothing else, on any port.
pub(crate) fn metadata_ingress(cluster: &ValidatedCluster) -> NetworkPolicy {
    let query_pods = NetworkPolicyPeer {
        pod_selector: Some(LabelSelector {
            match_labels: Some(selector(cluster, Role::Query)),
            ..Default::default()
        }),
        ..Default::default()
    };
    let from = std::iter::once(query_pods)
        .chain(client_namespaces(cluster))
        .collect();
    ingress_policy(
        cluster,
        meta(cluster, Role::Metadata),
        Role::Metadata.into(),
        vec![ingress_rule(default_port(Role::Metadata), Some(from))],
    )
}

/// A local lake's one pod: its query port open to every client, its metadata port only to the
/// namespaces `spec.metadata.clientNamespaces` names (to none when it names none: the pod
/// itself is the only other writer's way in).
pub(crate) fn local_ingress(cluster: &ValidatedCluster, metadata: ObjectMeta) -> NetworkPolicy {
    let mut rules = vec![ingress_rule(default_port(Role::Query), None)];
    // A rule without peers would admit every source: none at all when no namespace is named.
    if let Some(clients) = client_namespaces(cluster) {
        rules.push(ingress_rule(
            default_port(Role::Metadata),
            Some(vec![clients]),
        ));
    }
    ingress_policy(cluster, metadata, Component::Local, rules)
}
