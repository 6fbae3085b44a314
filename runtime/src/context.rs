//! The two runtime contexts, built from the per-role connection plans.
//!
//! `QueryContext` holds the engine (over a read-only manifest adapter) and the stage — no registry,
//! no write path. `MetadataContext` holds everything. Opening a context checks the authority
//! markers of the stores it connects to, and refuses to start on a mismatch.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use lake_common::plan::{
    ManifestStore as ManifestPlan, MetadataConnectionPlan, Provisioning, QueryConnectionPlan,
    RegistryStore as RegistryPlan,
};
use lake_common::schema::Authority;
use lake_common::stage::{StageDescriptor, StageDescriptorError, StagePath};

use crate::aws::{AwsConnection, AwsError, ConnectOptions};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use futures::StreamExt;

use crate::catalog::{CatalogError, Registry, TableEntry, new_entry};
use crate::engine::{Engine, EngineError, RowStream, TableRef, Warehouse, WriteEngine};
use crate::manifest::{
    AuthorityError, ManifestStore, ReadOnlyManifestStore, load_marker, verify_marker,
};
use crate::provision::{self, ProvisionError};
use crate::stage::{self, FileFormat, LoadError, Stage, StageError};
use crate::store::{DynamoStore, EmbeddedStore, MetaRead, MetaStore, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    #[error("{0}")]
    Config(String),
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
    #[error(transparent)]
    Load(#[from] LoadError),
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
                    let cluster = cluster_id.ok_or_else(|| {
                        ContextError::Config("a cloud query role needs the cluster id".into())
                    })?;
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
    let target = target
        .ok_or_else(|| ContextError::Config("a DynamoDB store needs an AWS region".into()))?;
    Ok(AwsConnection::new(target, options).await)
}

fn s3_warehouse(aws: &AwsConnection, warehouse: &str) -> Result<Warehouse, ContextError> {
    let rest = warehouse.strip_prefix("s3://").ok_or_else(|| {
        ContextError::Config(format!("warehouse {warehouse:?} is not an s3:// URL"))
    })?;
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
                    .ok_or_else(|| {
                        ContextError::Config("a cloud metadata role needs the cluster id".into())
                    })?
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
                return Err(ContextError::Config(
                    "registry and manifests must both be embedded or both be DynamoDB".into(),
                ));
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

    /// Creates a table: registers it (a conditional write, so a concurrent create of the same
    /// name loses cleanly), then commits its dataset. If the dataset cannot be created, the
    /// registration is withdrawn, so nothing half-done is left.
    pub async fn create_table(
        &self,
        table: &TableRef,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    ) -> Result<TableEntry, ContextError> {
        self.create_table_stream(table, crate::engine::rows_of(schema, batches))
            .await
            .map(|(entry, _)| entry)
    }

    /// [`MetadataContext::create_table`] with the schema and rows of `rows`, streamed into the
    /// first commit (a `CREATE TABLE … AS SELECT`, an ingest of any size). Returns the
    /// registration and the rows written.
    pub async fn create_table_stream(
        &self,
        table: &TableRef,
        rows: RowStream,
    ) -> Result<(TableEntry, u64), ContextError> {
        let location = self.engine.warehouse().uri(table);
        let entry = new_entry(
            table.namespace.clone(),
            table.table.clone(),
            location,
            rows.schema(),
        );
        self.registry.create_table(&entry).await?;
        match self.engine.create_stream(table, rows).await {
            Ok(committed) => Ok((entry, committed.rows)),
            Err(e) => {
                if let Err(undo) = self
                    .registry
                    .drop_table(&table.namespace, &table.table)
                    .await
                {
                    tracing::error!(%table, error = %undo, "could not withdraw the registration of a table whose dataset failed");
                }
                Err(e.into())
            }
        }
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

    /// Replaces a table's schema and rows (ADBC ingest `replace`) with those of `rows`, in one
    /// commit. The new data files are written first (under the table's lock), then the
    /// registration is updated, then the files are committed; if the commit fails, the previous
    /// registration is restored. A failure while the rows stream in changes nothing, and the
    /// registry and the dataset disagree at most for the commit itself. Returns the rows written.
    pub async fn replace_table(
        &self,
        table: &TableRef,
        rows: RowStream,
    ) -> Result<(TableEntry, u64), ContextError> {
        let previous = self
            .registry
            .get_table(&table.namespace, &table.table)
            .await?;
        let mut next = previous.clone();
        next.schema = rows.schema();
        let staged = self.engine.stage_overwrite(table, rows).await?;
        self.registry.update_table(&next).await?;
        match self.engine.commit(staged).await {
            Ok(committed) => Ok((next, committed.rows)),
            Err(e) => {
                if let Err(undo) = self.registry.update_table(&previous).await {
                    tracing::error!(%table, error = %undo, "could not restore the registration of a table whose overwrite failed");
                }
                Err(e.into())
            }
        }
    }

    /// `COPY INTO`: loads the stage file at `path` (or every file under it) into `table` as one
    /// append commit. Every file is decoded and checked against the table's schema before
    /// anything is written, so a bad file commits nothing. Returns the rows loaded.
    pub async fn copy_into(
        &self,
        table: &TableRef,
        path: &StagePath,
        format: Option<FileFormat>,
    ) -> Result<u64, ContextError> {
        let entry = self
            .registry
            .get_table(&table.namespace, &table.table)
            .await?;
        // Every file's schema is checked before a row is written, so a bad file commits
        // nothing; then the files are decoded as the write pulls them (off the async workers),
        // so memory holds a few batches, not the files' contents.
        let mut files = Vec::new();
        for file in self.stage.files(path).await? {
            let bytes = self.stage.read(&file).await?;
            files.push(stage::batches(&file, bytes, format, &entry.schema)?);
        }
        let rows = futures::stream::iter(files).map(decoded).flatten();
        let rows = crate::engine::row_stream(entry.schema.clone(), rows);
        let committed = self.engine.append_stream(table, rows).await?;
        Ok(committed.rows)
    }

    /// Drops a table: its files and manifest rows first (idempotent), then its registration, so
    /// a failure part-way leaves a table that can be dropped again.
    pub async fn drop_table(&self, table: &TableRef) -> Result<(), ContextError> {
        // Fail early, before deleting anything, if the table is not registered.
        self.registry
            .get_table(&table.namespace, &table.table)
            .await?;
        self.engine.drop_table(table).await?;
        self.registry
            .drop_table(&table.namespace, &table.table)
            .await?;
        Ok(())
    }
}

/// A file's batches decoded on a blocking thread, two at a time ahead of the writer.
fn decoded(
    batches: stage::Batches,
) -> impl futures::Stream<Item = datafusion::error::Result<RecordBatch>> {
    let (tx, rx) = tokio::sync::mpsc::channel(2);
    tokio::task::spawn_blocking(move || {
        let decode = std::panic::AssertUnwindSafe(|| {
            for batch in batches {
                let batch =
                    batch.map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)));
                // The writer stopped (an error, a drop): stop decoding.
                if tx.blocking_send(batch).is_err() {
                    return;
                }
            }
        });
        // A decoder that panics on a hostile file must fail the write, not end the stream
        // early (which would commit the rows decoded so far).
        if std::panic::catch_unwind(decode).is_err() {
            let _ = tx.blocking_send(Err(datafusion::error::DataFusionError::Execution(
                "the file could not be decoded (the decoder failed on its contents)".into(),
            )));
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}
