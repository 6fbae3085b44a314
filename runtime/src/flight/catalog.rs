//! The DataFusion view of a warehouse: catalog `lake`, one schema per namespace, one table per
//! Lance dataset, each opened at its latest version when a statement names it.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::{CatalogProvider, SchemaProvider, TableProvider};
use datafusion::error::DataFusionError;

use super::distributed::LakeTable;

use crate::catalog::{NamespaceName, TableName};
use crate::engine::{Engine, EngineError, TableRef};

/// The one catalog name lake serves.
pub(super) const CATALOG: &str = "lake";

/// The warehouse as DataFusion sees it. A table is opened (at its latest version, through the
/// manifest store) when a statement names it, whether or not it was listed, so a statement never
/// needs the warehouse listed: only `information_schema` (and the `SHOW` statements built on it)
/// enumerate, and only they pay for a listing ([`LakeCatalog::listed`]).
#[derive(Debug)]
pub(super) struct LakeCatalog {
    engine: Engine,
    /// Namespace → tables, when listed.
    schemas: BTreeMap<String, Arc<NamespaceSchema>>,
}

impl LakeCatalog {
    /// A catalog that resolves the tables a statement names, without listing the warehouse.
    pub(super) fn unlisted(engine: &Engine) -> Self {
        Self {
            engine: engine.clone(),
            schemas: BTreeMap::new(),
        }
    }

    /// A catalog with the warehouse listed now, for statements that enumerate it.
    pub(super) async fn listed(engine: &Engine) -> Result<Self, EngineError> {
        let mut schemas: BTreeMap<String, Vec<TableName>> = BTreeMap::new();
        for table in engine.list_tables().await? {
            schemas
                .entry(table.namespace.to_string())
                .or_default()
                .push(table.table);
        }
        Ok(Self {
            engine: engine.clone(),
            schemas: schemas
                .into_iter()
                .filter_map(|(ns, tables)| {
                    let namespace = NamespaceName::parse(&ns).ok()?;
                    Some((
                        ns,
                        Arc::new(NamespaceSchema {
                            engine: engine.clone(),
                            namespace,
                            tables,
                        }),
                    ))
                })
                .collect(),
        })
    }

    pub(super) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Namespace → tables, sorted (empty unless [`LakeCatalog::listed`]).
    pub(super) fn tables(&self) -> impl Iterator<Item = (&str, &[TableName])> {
        self.schemas
            .iter()
            .map(|(ns, s)| (ns.as_str(), s.tables.as_slice()))
    }
}

impl CatalogProvider for LakeCatalog {
    fn schema_names(&self) -> Vec<String> {
        self.schemas.keys().cloned().collect()
    }

    /// A listed namespace, or any valid namespace name: its tables resolve when named (a
    /// namespace created since the listing, or never listed, is no different).
    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        if let Some(schema) = self.schemas.get(name) {
            return Some(schema.clone() as Arc<dyn SchemaProvider>);
        }
        let namespace = NamespaceName::parse(name).ok()?;
        Some(Arc::new(NamespaceSchema {
            engine: self.engine.clone(),
            namespace,
            tables: Vec::new(),
        }))
    }
}

#[derive(Debug)]
pub(super) struct NamespaceSchema {
    engine: Engine,
    namespace: NamespaceName,
    tables: Vec<TableName>,
}

#[async_trait]
impl SchemaProvider for NamespaceSchema {
    fn table_names(&self) -> Vec<String> {
        self.tables.iter().map(ToString::to_string).collect()
    }

    /// `name` or `name@v<N>` (time travel: the table as of version N).
    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>, DataFusionError> {
        let (base, version) = match name.rsplit_once("@v") {
            Some((base, v)) => match v.parse::<u64>() {
                Ok(v) => (base, Some(v)),
                Err(_) => return Ok(None),
            },
            None => (name, None),
        };
        // Any valid name is looked up, listed or not: the manifest store says whether it exists
        // and which version is latest (a table created after the listing is found).
        let Ok(table) = TableName::parse(base) else {
            return Ok(None);
        };
        let table = TableRef::new(self.namespace.clone(), table);
        match self.engine.open(&table, version).await {
            Ok(dataset) => Ok(Some(Arc::new(LakeTable::new(
                &self.engine,
                table,
                version,
                dataset,
            )))),
            // A version the table does not have: said so, not "no such table"; one that
            // maintenance removed, naming the retention.
            Err(EngineError::NotFound(_))
                if version.is_some() && self.engine.open(&table, None).await.is_ok() =>
            {
                let version = version.unwrap_or_default();
                let oldest = self
                    .engine
                    .versions(&table)
                    .await
                    .ok()
                    .and_then(|v| v.first().copied());
                Err(DataFusionError::Plan(match oldest {
                    Some(oldest) if version < oldest => format!(
                        "version {version} of table {table} not found: maintenance removed the \
                         versions before {oldest} (older than the lake's retention; \
                         docs/guides/maintenance.md)"
                    ),
                    _ => format!("version {version} of table {table} not found (the table exists)"),
                }))
            }
            Err(EngineError::NotFound(_)) => Ok(None),
            // One unreadable dataset must not fail information_schema (which opens every
            // table) for all the others: it shows no columns, and reading it says why.
            Err(e) => {
                tracing::warn!(table = %table, error = %e, "a table cannot be opened");
                Ok(Some(Arc::new(Unreadable {
                    table: table.to_string(),
                    reason: e.to_string(),
                })))
            }
        }
    }

    fn table_exist(&self, name: &str) -> bool {
        self.tables.iter().any(|t| t.as_str() == name)
    }
}

/// A table whose dataset cannot be opened: listed, without columns; scanning it is the error.
#[derive(Debug)]
struct Unreadable {
    table: String,
    reason: String,
}

#[async_trait]
impl TableProvider for Unreadable {
    fn schema(&self) -> arrow::datatypes::SchemaRef {
        Arc::new(arrow::datatypes::Schema::empty())
    }

    fn table_type(&self) -> datafusion::logical_expr::TableType {
        datafusion::logical_expr::TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn datafusion::catalog::Session,
        _projection: Option<&Vec<usize>>,
        _filters: &[datafusion::logical_expr::Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn datafusion::physical_plan::ExecutionPlan>, DataFusionError> {
        Err(DataFusionError::Execution(format!(
            "table {} cannot be read: {}",
            self.table, self.reason
        )))
    }
}
