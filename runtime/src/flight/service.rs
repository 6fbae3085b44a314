//! The Flight SQL service of both roles: what one endpoint holds, and who may write.
//!
//! Query serves reads only: every write (update, ingest, DDL) is refused with PERMISSION_DENIED
//! naming the metadata endpoint, before anything is planned against storage. Metadata serves the
//! same reads plus DDL and DML, each write one Lance commit.
//!
//! The RPCs are decoded in `protocol.rs` and answered by the module of their concern:
//! `statement.rs` (plans and prepared statements), `fetch.rs` (DoGet), `update.rs` (every
//! write, handed to `crate::write`), `commands.rs` (catalog commands), `actions.rs` (custom
//! actions).

use std::sync::Arc;

use arrow_flight::sql::metadata::XdbcTypeInfoData;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use tonic::Status;

use super::ServeError;
use super::auth::Tokens;
use super::catalog::LakeCatalog;
use super::distributed::Distribution;
use super::handle::HandleCodec;
use super::info::SqlInfoTable;
use super::limits::{Governor, Limits};
use super::options::SessionOptions;
use super::plans::PlanCache;
use super::prepared::PreparedPlans;
use super::redact::Redactor;
use super::sql::Sessions;
use crate::context::{MetadataContext, QueryContext};
use crate::engine::Engine;

/// What a service serves.
#[derive(Debug, Clone)]
pub enum Role {
    Query {
        context: Arc<QueryContext>,
        /// Where clients are sent for writes.
        metadata_endpoint: Option<String>,
        /// Workers to spread large statements over (flight/distributed).
        distribution: Option<Arc<Distribution>>,
    },
    Metadata(Arc<MetadataContext>),
}

#[derive(Clone)]
pub struct LakeFlightSql {
    pub(super) role: Role,
    pub(super) sql_info: Arc<SqlInfoTable>,
    pub(super) type_info: Arc<XdbcTypeInfoData>,
    pub(super) tokens: Option<Tokens>,
    /// Signs the handles this process gives out; refuses any other.
    pub(super) handles: HandleCodec,
    /// Hides the server's paths from what clients are told.
    redactor: Redactor,
    /// Memory, time and concurrency limits of this endpoint's queries.
    pub(super) governor: Governor,
    /// Plans GetFlightInfo made, for their DoGet.
    pub(super) plans: Arc<PlanCache>,
    /// Prepared reads' optimized plans, for their next executions.
    pub(super) prepared: Arc<PreparedPlans>,
    /// What each statement's session is a copy of (shared: the service is cloned per call).
    sessions: Arc<Sessions>,
}

impl std::fmt::Debug for LakeFlightSql {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LakeFlightSql")
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

impl LakeFlightSql {
    pub fn new(role: Role, tokens: Option<Tokens>, limits: Limits) -> Result<Self, ServeError> {
        let read_only = matches!(role, Role::Query { .. });
        let sql_info = Arc::new(SqlInfoTable::new(read_only));
        let governor = Governor::new(limits)?;
        let sessions = Arc::new(Sessions::new(governor.disk()).map_err(ServeError::Session)?);
        Ok(Self {
            role,
            sql_info,
            type_info: Arc::new(super::types::xdbc_type_info()),
            tokens,
            handles: HandleCodec::new(),
            redactor: Redactor::default(),
            governor,
            plans: Arc::default(),
            prepared: Arc::default(),
            sessions,
        }
        .with_redactor())
    }

    fn with_redactor(mut self) -> Self {
        if let crate::engine::Warehouse::Local(root) = self.engine().warehouse() {
            self.redactor = Redactor::for_data_dir(root);
        }
        self
    }

    pub(super) fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    pub(super) fn engine(&self) -> &Engine {
        match &self.role {
            Role::Query { context, .. } => context.engine(),
            Role::Metadata(context) => context.engine().reader(),
        }
    }

    /// The metadata context, or PERMISSION_DENIED naming where writes go.
    pub(super) fn writer(&self) -> Result<&MetadataContext, Status> {
        match &self.role {
            Role::Metadata(context) => Ok(context),
            Role::Query {
                metadata_endpoint, ..
            } => Err(Status::permission_denied(format!(
                "this is the read-only query endpoint; send writes to the metadata endpoint{}",
                metadata_endpoint
                    .as_deref()
                    .map(|e| format!(" {e}"))
                    .unwrap_or_default()
            ))),
        }
    }

    /// A DataFusion session for one statement of a call whose session options are `options`,
    /// under this endpoint's memory pool and disk.
    pub(super) async fn session(&self, options: &SessionOptions) -> Result<SessionContext, Status> {
        self.sessions.statement(
            self.engine(),
            self.governor.query_pool(),
            self.governor.disk(),
            self.governor.deadline().into_std(),
            self.governor.limits.query_timeout,
            options,
        )
    }

    /// `ctx` distributed over this endpoint's workers when `plan` is worth it (query only).
    pub(super) fn distribute(&self, ctx: SessionContext, plan: &LogicalPlan) -> SessionContext {
        match &self.role {
            Role::Query {
                distribution: Some(distribution),
                ..
            } if distribution.wants(plan) => distribution.session(&ctx, self.engine()),
            _ => ctx,
        }
    }

    /// The warehouse as it is now, listed (for the catalog commands).
    pub(super) async fn catalog(&self) -> Result<LakeCatalog, Status> {
        LakeCatalog::listed(self.engine())
            .await
            .map_err(super::status::engine)
    }
}
