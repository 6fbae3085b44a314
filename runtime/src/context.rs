//! The two runtime contexts, built from the per-role connection plans.
//!
//! `QueryContext` holds the engine (over a read-only manifest adapter) and the stage — no registry,
//! no write path. `MetadataContext` holds everything. Opening a context checks the authority
//! markers of the stores it connects to, and refuses to start on a mismatch.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use lake_common::plan::{
    MaintenanceConnectionPlan, ManifestStore as ManifestPlan, MetadataConnectionPlan, Provisioning,
    QueryConnectionPlan, RegistryStore as RegistryPlan,
};
use lake_common::schema::Authority;
use lake_common::stage::{StageDescriptor, StageDescriptorError};

use crate::aws::{AwsConnection, AwsError, ConnectOptions};

use crate::catalog::{CatalogError, Registry};
use crate::engine::{Engine, EngineError, Warehouse, WriteEngine};
use crate::manifest::{
    AuthorityError, ManifestStore, ReadOnlyManifestStore, load_marker, verify_marker,
};
use crate::provision::{self, ProvisionError};
use crate::stage::{Stage, StageError};
use crate::store::{DynamoStore, EmbeddedStore, MetaRead, MetaStore, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    #[error("a cloud {role} role needs the cluster id")]
    NoClusterId { role: &'static str },
    #[error("a DynamoDB store needs an AWS region")]
    NoRegion,
    #[error("warehouse {0:?} is not an s3:// URL")]
    NotS3(String),
    #[error("registry and manifests must both be embedded or both be DynamoDB")]
    MixedStores,
    #[error(
        "the local lake in {} is not initialised (no {}); start the metadata role first",
        dir.display(), what
    )]
    LocalNotInitialised { dir: PathBuf, what: &'static str },
    #[error(transparent)]
    Aws(#[from] AwsError),
    #[error(transparent)]
    Authority(#[from] AuthorityError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error(transparent)]
    Provision(#[from] ProvisionError),
    #[error(transparent)]
    Engine(Box<EngineError>),
    #[error("stage: {0}")]
    StageDescriptor(#[from] StageDescriptorError),
    #[error("stage: {0}")]
    Stage(#[from] StageError),
}

impl From<EngineError> for ContextError {
    fn from(e: EngineError) -> Self {
        Self::Engine(Box::new(e))
    }
}

/// The read-only query role: engine and stage only.
#[derive(Debug, Clone)]
pub struct QueryContext {
    engine: Engine,
    /// Where the stage is, for SDKs; query never touches stage objects itself.
    stage: StageDescriptor,
}

/// The metadata role: registry, manifests, engine and stage.
#[derive(Debug, Clone)]
pub struct MetadataContext {
    registry: Registry,
    engine: WriteEngine,
    stage: Stage,
    cluster_id: String,
}

/// The maintenance role, in the cloud: the warehouse and the manifest table (its marker
/// checked), no registry and no stage.
#[derive(Debug, Clone)]
pub struct MaintenanceContext {
    engine: WriteEngine,
}

impl MaintenanceContext {
    pub async fn open(
        plan: &MaintenanceConnectionPlan,
        cluster_id: &str,
        options: &ConnectOptions,
    ) -> Result<Self, ContextError> {
        let aws = aws_for(Some(plan.aws()), options).await?;
        let client = aws.dynamodb();
        let manifests = DynamoStore::new(
            client.clone(),
            plan.manifests().as_str(),
            Authority::Manifests.key_schema(),
        );
        verify_dynamo(&client, &manifests, Authority::Manifests, cluster_id).await?;
        Ok(Self {
            engine: WriteEngine::new(
                s3_warehouse(&aws, plan.warehouse())?,
                ManifestStore::new(Arc::new(manifests)),
            ),
        })
    }

    pub fn engine(&self) -> &WriteEngine {
        &self.engine
    }
}

/// The data directory of a local lake, from its embedded manifest file `<dir>/_lake/<file>`.
fn local_dir(file: &Path) -> PathBuf {
    file.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Checks a DynamoDB table's marker; a table with another key schema is reported with the marker
/// it does hold (read with that schema), so "query pointed at the registry" says so.
async fn verify_dynamo(
    client: &aws_sdk_dynamodb::Client,
    kv: &DynamoStore,
    expected: Authority,
    cluster: &str,
) -> Result<(), AuthorityError> {
    match verify_marker(kv, expected, cluster).await {
        Err(AuthorityError::Store(StoreError::KeySchemaMismatch { store, detail })) => {
            let other = match expected {
                Authority::Manifests => Authority::Registry,
                Authority::Registry => Authority::Manifests,
            };
            let probe = DynamoStore::new(client.clone(), kv.table(), other.key_schema());
            let found = load_marker(&probe, other).await.ok().flatten();
            Err(AuthorityError::ForeignTable {
                store,
                expected,
                detail,
                found,
            })
        }
        other => other.map(|_| ()),
    }
}

impl QueryContext {
    /// Connects to what `plan` names and nothing else: the manifest store (read-only, after
    /// checking its marker) and the warehouse. Never creates or provisions anything.
    pub async fn open(
        plan: &QueryConnectionPlan,
        cluster_id: Option<&str>,
        options: &ConnectOptions,
    ) -> Result<Self, ContextError> {
        debug_assert_eq!(plan.provisioning(), Provisioning::Never);
        let (kv, warehouse, stage): (Arc<dyn MetaRead>, Warehouse, StageDescriptor) =
            match plan.manifests() {
                ManifestPlan::Embedded { file } => {
                    let dir = local_dir(file);
                    let cluster = provision::local_cluster_id(&dir)?.ok_or(
                        ContextError::LocalNotInitialised {
                            dir: dir.clone(),
                            what: "cluster id",
                        },
                    )?;
                    let kv = match EmbeddedStore::open(file, false) {
                        Err(StoreError::Missing { .. }) => {
                            return Err(ContextError::LocalNotInitialised {
                                dir,
                                what: "manifest store",
                            });
                        }
                        other => other?,
                    };
                    verify_marker(&kv, Authority::Manifests, &cluster).await?;
                    (
                        Arc::new(kv),
                        Warehouse::Local(plan.warehouse().into()),
                        StageDescriptor::for_stage(plan.stage(), None)?,
                    )
                }
                ManifestPlan::DynamoDb { table } => {
                    let cluster =
                        cluster_id.ok_or_else(|| ContextError::NoClusterId { role: "query" })?;
                    let aws = aws_for(plan.aws(), options).await?;
                    let client = aws.dynamodb();
                    let kv = DynamoStore::new(
                        client.clone(),
                        table.as_str(),
                        Authority::Manifests.key_schema(),
                    );
                    verify_dynamo(&client, &kv, Authority::Manifests, cluster).await?;
                    (
                        Arc::new(kv),
                        s3_warehouse(&aws, plan.warehouse())?,
                        StageDescriptor::for_stage(plan.stage(), Some(aws.target()))?,
                    )
                }
            };
        Ok(Self {
            engine: Engine::read_only(warehouse, ReadOnlyManifestStore::new(kv)),
            stage,
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn stage(&self) -> &StageDescriptor {
        &self.stage
    }
}

async fn aws_for(
    target: Option<&lake_common::plan::AwsTarget>,
    options: &ConnectOptions,
) -> Result<AwsConnection, ContextError> {
    let target = target.ok_or_else(|| ContextError::NoRegion)?;
    Ok(AwsConnection::new(target, options).await)
}

fn s3_warehouse(aws: &AwsConnection, warehouse: &str) -> Result<Warehouse, ContextError> {
    let rest = warehouse
        .strip_prefix("s3://")
        .ok_or_else(|| ContextError::NotS3(warehouse.to_owned()))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let location = lake_common::plan::S3Location {
        bucket: bucket.to_owned(),
        prefix: prefix.trim_matches('/').to_owned(),
        region: aws.target().region.clone(),
        endpoint: aws.target().s3_endpoint.clone(),
    };
    let store = aws.s3_store(bucket)?;
    Ok(Warehouse::S3 { location, store })
}

impl MetadataContext {
    /// Connects to both stores (provisioning them first for a local lake) and checks markers.
    pub async fn open(
        plan: &MetadataConnectionPlan,
        cluster_id: Option<&str>,
        options: &ConnectOptions,
    ) -> Result<Self, ContextError> {
        let (registry_kv, manifest_kv, warehouse, stage, cluster): (
            Arc<dyn MetaStore>,
            Arc<dyn MetaStore>,
            Warehouse,
            Stage,
            String,
        ) = match (plan.registry(), plan.manifests()) {
            (RegistryPlan::Embedded { .. }, ManifestPlan::Embedded { file }) => {
                let dir = local_dir(file);
                let (registry, manifests, cluster) = provision::local(&dir).await?;
                (
                    registry,
                    manifests,
                    Warehouse::Local(plan.warehouse().into()),
                    Stage::open(plan.stage(), None)?,
                    cluster,
                )
            }
            (
                RegistryPlan::DynamoDb { table: registry },
                ManifestPlan::DynamoDb { table: manifest },
            ) => {
                let cluster = cluster_id
                    .ok_or_else(|| ContextError::NoClusterId { role: "metadata" })?
                    .to_owned();
                let aws = aws_for(plan.aws(), options).await?;
                let client = aws.dynamodb();
                let registry = DynamoStore::new(
                    client.clone(),
                    registry.as_str(),
                    Authority::Registry.key_schema(),
                );
                let manifests = DynamoStore::new(
                    client.clone(),
                    manifest.as_str(),
                    Authority::Manifests.key_schema(),
                );
                verify_dynamo(&client, &registry, Authority::Registry, &cluster).await?;
                verify_dynamo(&client, &manifests, Authority::Manifests, &cluster).await?;
                (
                    Arc::new(registry),
                    Arc::new(manifests),
                    s3_warehouse(&aws, plan.warehouse())?,
                    Stage::open(plan.stage(), Some(&aws))?,
                    cluster,
                )
            }
            _ => {
                return Err(ContextError::MixedStores);
            }
        };
        // Both branches have checked the manifest marker (provisioned locally, verified in the
        // cloud); the registry checks its own marker when it opens.
        let registry = Registry::open(registry_kv, &cluster).await?;
        Ok(Self {
            registry,
            engine: WriteEngine::new(warehouse, ManifestStore::new(manifest_kv)),
            stage,
            cluster_id: cluster,
        })
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    pub fn engine(&self) -> &WriteEngine {
        &self.engine
    }

    pub fn stage(&self) -> &Stage {
        &self.stage
    }

    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// Finalises the commits writers left staged (a writer that died between recording its
    /// manifest and finalising it): opening each table's latest version through this role's
    /// read-write manifest handler finalises it, so the query role — which only reads the last
    /// finished version — sees it again. Run at start-up and periodically. Returns the tables
    /// looked at; a table that cannot be opened is logged and skipped.
    pub async fn finalise_staged(&self) -> Result<usize, ContextError> {
        let tables = self.engine.reader().list_tables().await?;
        for table in &tables {
            if let Err(e) = self.engine.reader().open(table, None).await {
                tracing::warn!(%table, error = %e, "could not open a table to finalise its commits");
            }
        }
        Ok(tables.len())
    }
}
