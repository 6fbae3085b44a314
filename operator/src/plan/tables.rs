//! The DynamoDB tables a cluster needs: key schema, billing, recovery, protection, tags, marker.

use std::collections::BTreeMap;

use lake_common::plan::{ManifestStore, RegistryStore};
use lake_common::schema::{Authority, KeySchema, Marker};
use serde::Serialize;

use crate::validate::ValidatedCluster;

/// Marker `cluster` value before the API server has assigned the LakeCluster a uid (offline
/// render); reconcile always has the uid.
pub const UNKNOWN_UID: &str = "<uid assigned by the API server>";

/// One table as it must exist.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DesiredTable {
    pub name: String,
    pub authority: Authority,
    pub key_schema: KeySchema,
    /// Always on-demand: lake's load follows its users, not a provisioned guess.
    pub billing_mode: &'static str,
    pub point_in_time_recovery: bool,
    pub deletion_protection: bool,
    pub tags: BTreeMap<String, String>,
    /// The marker item the table must hold: which authority, which cluster.
    pub marker: Marker,
    /// `spec.tables.reattachFrom`: the deleted cluster whose marker and uid tags this table may
    /// carry, to be rewritten to this cluster's (reconcile checks first that no LakeCluster has
    /// that uid).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reattach_from: Option<String>,
}

/// Tag keys the operator sets on what it creates.
pub const TAG_CLUSTER: &str = "lake.dev/cluster";
/// Set at creation only: the uid of the cluster that created the table (deletion may delete it).
pub const TAG_CLUSTER_UID: &str = "lake.dev/cluster-uid";
/// Set when an existing table is adopted, instead of [`TAG_CLUSTER_UID`]: deletion leaves it
/// unless the spec opts in (`spec.tables.deleteAdopted`).
pub const TAG_ADOPTED_BY_UID: &str = "lake.dev/adopted-by-uid";
pub const TAG_AUTHORITY: &str = "lake.dev/authority";
/// Set when a table is re-attached: the uid of the deleted cluster it was taken over from.
pub const TAG_REATTACHED_FROM: &str = "lake.dev/reattached-from";
pub const TAG_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const MANAGER: &str = "lake-operator";

/// The cluster's DynamoDB tables (none for a local lake, whose stores are embedded files).
pub fn tables(cluster: &ValidatedCluster) -> Vec<DesiredTable> {
    let uid = cluster.uid.as_deref().unwrap_or(UNKNOWN_UID);
    let mut tables = Vec::new();
    let names = match (cluster.authority.registry(), cluster.authority.manifests()) {
        (RegistryStore::DynamoDb { table: r }, ManifestStore::DynamoDb { table: m }) => [
            (r.to_string(), Authority::Registry),
            (m.to_string(), Authority::Manifests),
        ],
        _ => return tables,
    };
    for (name, authority) in names {
        let tags = BTreeMap::from([
            (
                TAG_CLUSTER.to_owned(),
                format!("{}/{}", cluster.namespace, cluster.name),
            ),
            (TAG_CLUSTER_UID.to_owned(), uid.to_owned()),
            (TAG_AUTHORITY.to_owned(), authority.to_string()),
            (TAG_MANAGED_BY.to_owned(), MANAGER.to_owned()),
        ]);
        tables.push(DesiredTable {
            name,
            authority,
            key_schema: authority.key_schema(),
            billing_mode: "PAY_PER_REQUEST",
            point_in_time_recovery: true,
            deletion_protection: true,
            tags,
            marker: Marker::new(authority, uid),
            reattach_from: cluster.reattach_from.clone(),
        });
    }
    tables
}
