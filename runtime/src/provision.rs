//! Provisioning: creating the stores and writing their authority markers. In the cloud this is
//! the operator's job (and these functions serve tests and benches against the emulator); in a
//! local lake the metadata side does it before query starts. Nothing else writes markers.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};
use lake_common::plan::{
    LOCAL_MANIFEST_FILE, LOCAL_META_DIR, LOCAL_REGISTRY_FILE, ManifestTableName, RegistryTableName,
};
use lake_common::schema::{AttributeType, Authority, KeySchema};

use crate::manifest::marker_item;
use crate::store::{Condition, DynamoStore, EmbeddedStore, MetaStore, StoreError};

/// The file holding a local lake's cluster id, generated once.
pub const LOCAL_CLUSTER_ID_FILE: &str = "cluster-id";

#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    #[error("creating DynamoDB table {table:?}: {detail}")]
    CreateTable { table: String, detail: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Writes `authority`'s marker for `cluster`; an existing marker is left alone only if equal.
pub async fn write_marker(
    kv: &dyn MetaStore,
    authority: Authority,
    cluster: &str,
) -> Result<(), StoreError> {
    let item = marker_item(authority, cluster);
    match kv.put(&item, Condition::NotExists).await {
        Err(StoreError::ConditionFailed { .. }) => {
            let found = kv.get(&item.key).await?;
            if found.as_ref() == Some(&item) {
                Ok(())
            } else {
                Err(StoreError::ConditionFailed {
                    store: kv.describe().to_owned(),
                    key: item.key,
                })
            }
        }
        other => other,
    }
}

fn scalar(t: AttributeType) -> ScalarAttributeType {
    match t {
        AttributeType::S => ScalarAttributeType::S,
        AttributeType::N => ScalarAttributeType::N,
    }
}

/// Creates a DynamoDB table with `schema` (on-demand billing).
pub async fn create_dynamo_table(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    schema: KeySchema,
) -> Result<(), ProvisionError> {
    let err = |detail: String| ProvisionError::CreateTable {
        table: table.to_owned(),
        detail,
    };
    let key = |name: &str, kind| {
        KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(kind)
            .build()
            .map_err(|e| err(e.to_string()))
    };
    let attr = |name: &str, t| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(scalar(t))
            .build()
            .map_err(|e| err(e.to_string()))
    };
    client
        .create_table()
        .table_name(table)
        .key_schema(key(schema.hash.name, KeyType::Hash)?)
        .key_schema(key(schema.range.name, KeyType::Range)?)
        .attribute_definitions(attr(schema.hash.name, schema.hash.attribute_type)?)
        .attribute_definitions(attr(schema.range.name, schema.range.attribute_type)?)
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .map_err(|e| err(aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string()))?;
    Ok(())
}

/// Creates both DynamoDB tables of a cluster and writes their markers.
pub async fn dynamo_tables(
    client: &aws_sdk_dynamodb::Client,
    registry: &RegistryTableName,
    manifest: &ManifestTableName,
    cluster: &str,
) -> Result<(), ProvisionError> {
    for (table, authority) in [
        (registry.as_str(), Authority::Registry),
        (manifest.as_str(), Authority::Manifests),
    ] {
        create_dynamo_table(client, table, authority.key_schema()).await?;
        let kv = DynamoStore::new(client.clone(), table, authority.key_schema());
        write_marker(&kv, authority, cluster).await?;
    }
    Ok(())
}

/// The local lake's cluster id, if it has been provisioned. Reads only.
pub fn local_cluster_id(data_dir: &Path) -> Result<Option<String>, ProvisionError> {
    let path = data_dir.join(LOCAL_META_DIR).join(LOCAL_CLUSTER_ID_FILE);
    match std::fs::read_to_string(&path) {
        Ok(id) => Ok(Some(id.trim().to_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ProvisionError::Io { path, source }),
    }
}

/// Provisions a local lake in `data_dir` (idempotent): the cluster id, both embedded stores and
/// their markers. Returns the stores and the cluster id.
pub async fn local(
    data_dir: &Path,
) -> Result<(Arc<EmbeddedStore>, Arc<EmbeddedStore>, String), ProvisionError> {
    let meta = data_dir.join(LOCAL_META_DIR);
    std::fs::create_dir_all(&meta).map_err(|source| ProvisionError::Io {
        path: meta.clone(),
        source,
    })?;
    let cluster = match local_cluster_id(data_dir)? {
        Some(id) => id,
        None => {
            let id = uuid::Uuid::new_v4().to_string();
            let path = meta.join(LOCAL_CLUSTER_ID_FILE);
            // Write-then-rename so a crash never leaves a half-written id.
            let tmp = meta.join(format!(".{LOCAL_CLUSTER_ID_FILE}.tmp"));
            std::fs::write(&tmp, &id)
                .and_then(|()| std::fs::rename(&tmp, &path))
                .map_err(|source| ProvisionError::Io { path, source })?;
            id
        }
    };
    let registry = Arc::new(EmbeddedStore::open(&meta.join(LOCAL_REGISTRY_FILE), true)?);
    let manifests = Arc::new(EmbeddedStore::open(&meta.join(LOCAL_MANIFEST_FILE), true)?);
    write_marker(registry.as_ref(), Authority::Registry, &cluster).await?;
    write_marker(manifests.as_ref(), Authority::Manifests, &cluster).await?;
    Ok((registry, manifests, cluster))
}
