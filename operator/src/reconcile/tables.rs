//! The tables step: create or adopt both DynamoDB tables (`apply::tables`), and what status says of them.

use super::*;

/// What the tables step observed.
pub(super) struct TablesOutcome {
    pub(super) check: Check,
    pub(super) applied: Vec<apply::tables::AppliedTable>,
    pub(super) failure: Option<ApplyError>,
    /// False for a local lake: no tables, so none in status.
    pub(super) has_tables: bool,
}

impl TablesOutcome {
    pub(super) fn status(&self) -> Option<TablesStatus> {
        let table = |authority| {
            self.applied
                .iter()
                .find(|t| t.authority == authority)
                .map(|t| TableStatus {
                    name: t.name.clone(),
                    arn: t.arn.clone(),
                    adopted: t.adopted,
                })
        };
        (self.has_tables && !self.applied.is_empty()).then(|| TablesStatus {
            registry: table(lake_common::schema::Authority::Registry),
            manifest: table(lake_common::schema::Authority::Manifests),
        })
    }
}

/// Who holds the tables `spec.tables.reattachFrom` names: the LakeCluster (`namespace/name`),
/// in any namespace, whose uid it is — re-attaching is only for a deleted cluster's tables.
pub(super) async fn reattach_holder(
    client: &kube::Client,
    from: &str,
) -> Result<Option<String>, ApplyError> {
    let clusters: kube::Api<LakeCluster> = kube::Api::all(client.clone());
    let listed = clusters
        .list(&kube::api::ListParams::default())
        .await
        .map_err(|source| ApplyError::Kube {
            operation: "list",
            kind: "LakeCluster".into(),
            name: String::new(),
            source: Box::new(source),
        })?;
    Ok(listed
        .items
        .iter()
        .find(|c| c.metadata.uid.as_deref() == Some(from))
        .map(|c| {
            format!(
                "{}/{}",
                c.metadata.namespace.as_deref().unwrap_or_default(),
                c.metadata.name.as_deref().unwrap_or_default()
            )
        }))
}

pub(super) async fn tables_step(
    clients: Option<&crate::aws::AwsClients>,
    tables: &[plan::DesiredTable],
    may_adopt: bool,
    holder: Result<Option<String>, ApplyError>,
) -> TablesOutcome {
    let Some(clients) = clients.filter(|_| !tables.is_empty()) else {
        return TablesOutcome {
            check: Check::ok(
                TABLES_READY,
                "Embedded",
                "a local lake keeps its stores on disk",
            ),
            applied: Vec::new(),
            failure: None,
            has_tables: false,
        };
    };
    let failed = |e: ApplyError| TablesOutcome {
        check: Check::failed(TABLES_READY, e.reason(), e.to_string()),
        applied: Vec::new(),
        failure: Some(e),
        has_tables: true,
    };
    // A live cluster's tables are never taken over: refused before any table is touched.
    match holder {
        Err(e) => return failed(e),
        Ok(Some(holder)) => {
            let from = tables[0].reattach_from.clone().unwrap_or_default();
            return failed(ApplyError::ReattachRefused {
                table: tables[0].name.clone(),
                reason: format!(
                    "LakeCluster {holder} has uid {from} and still exists: only the tables of a \
                     deleted cluster (deletionPolicy: Retain) can be taken over"
                ),
            });
        }
        Ok(None) => {}
    }
    let mut applied = Vec::new();
    for table in tables {
        match apply::tables::ensure(&clients.dynamodb, table, may_adopt).await {
            Ok(t) => applied.push(t),
            Err(e) => {
                return TablesOutcome {
                    check: Check::failed(TABLES_READY, e.reason(), e.to_string()),
                    applied,
                    failure: Some(e),
                    has_tables: true,
                };
            }
        }
    }
    let names: Vec<&str> = applied.iter().map(|t| t.name.as_str()).collect();
    TablesOutcome {
        check: Check::ok(
            TABLES_READY,
            "Ready",
            format!("{} ready", names.join(" and ")),
        ),
        applied,
        failure: None,
        has_tables: true,
    }
}
