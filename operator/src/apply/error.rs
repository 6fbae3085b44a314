//! What can go wrong while applying a plan, and whether waiting can fix it.

use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};

/// An error kept as the source of another.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// An existing table with another key schema: adopting it would corrupt it. Terminal. What
    /// it holds is logged for the administrator, not told to the tenant.
    #[error(
        "table {table:?} exists with another key schema; lake's {authority} table needs {expected}, so it cannot be adopted (choose another name in spec.tables)"
    )]
    KeySchemaMismatch {
        table: String,
        authority: String,
        expected: String,
    },
    /// An existing table another cluster created, adopted or marked, or that holds another
    /// authority. Terminal. Whose it is is logged, not told.
    #[error("table {table:?} cannot be adopted: {detail} (choose another name in spec.tables)")]
    MarkerConflict { table: String, detail: &'static str },
    /// `spec.tables.reattachFrom` that cannot be honoured: the cluster named is live, or the
    /// table does not carry exactly its marker and tags. Terminal; nothing was changed.
    #[error("table {table:?} is not re-attached: {reason} (spec.tables.reattachFrom)")]
    ReattachRefused { table: String, reason: String },
    /// An existing table this cluster did not create, without the administrator's consent to
    /// adopt tables. Terminal.
    #[error(
        "table {table:?} already exists and this cluster did not create it; adopting existing tables needs the administrator's consent (adopt: true for the namespace in the operator's allowlist), or choose another name in spec.tables"
    )]
    AdoptionRefused { table: String },
    /// A role that does not exist (yet): retried, someone may be creating it.
    #[error("IAM role {role:?} does not exist; create it, or fix spec.iam")]
    RoleNotFound { role: String },
    /// A table still being created or updated: retried.
    #[error("table {table:?} is {status}, not ACTIVE yet")]
    NotActive { table: String, status: String },
    /// An AWS call failed (after the SDK's own retries): retried with backoff.
    #[error("AWS {operation} on {resource}: {detail}")]
    Aws {
        operation: &'static str,
        resource: String,
        /// The service's code and message (or the SDK's whole error chain).
        detail: String,
        /// The SDK's error, when there was one.
        #[source]
        source: Option<BoxError>,
    },
    /// A planned object still holds a placeholder for something only AWS could tell (a role's
    /// account, the cluster uid): it is never applied. Retried.
    #[error(
        "{kind}/{name} would carry the placeholder {placeholder:?}; nothing was applied (the value it stands for could not be looked up)"
    )]
    Unresolved {
        kind: String,
        name: String,
        placeholder: &'static str,
    },
    /// The OS gave no randomness for a new token: retried.
    #[error("drawing a random token: {source}")]
    Random {
        #[source]
        source: getrandom::Error,
    },
    /// The TLS Secret exists but its CA is not published (a ConfigMap of another owner holds the
    /// name, or it was deleted after the Secret was created — the operator publishes the CA
    /// before it creates the Secret, so a stopped pass never leaves this): clients could not
    /// verify the endpoints. Terminal until the Secret is deleted (the next pass issues
    /// everything anew).
    #[error(
        "the CA of Secret {secret:?} is not published in ConfigMap {config_map:?} (missing, or not this cluster's): delete Secret {secret:?} (and a foreign {config_map:?}) so the next pass issues new certificates"
    )]
    CaNotPublished { config_map: String, secret: String },
    /// The cluster's certificates could not be generated: retried.
    #[error("issuing the TLS certificates: {source}")]
    Certificate {
        #[source]
        source: rcgen::Error,
    },
    #[error("Kubernetes {operation} {kind}/{name}: {source}")]
    Kube {
        operation: &'static str,
        kind: String,
        name: String,
        #[source]
        source: Box<kube::Error>,
    },
}

impl ApplyError {
    /// Terminal errors wait for the spec (or the conflicting table) to change; the rest retry.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            ApplyError::KeySchemaMismatch { .. }
                | ApplyError::MarkerConflict { .. }
                | ApplyError::ReattachRefused { .. }
                | ApplyError::AdoptionRefused { .. }
                | ApplyError::CaNotPublished { .. }
        )
    }

    /// The condition reason this error reports.
    pub fn reason(&self) -> &'static str {
        match self {
            ApplyError::KeySchemaMismatch { .. } => "KeySchemaMismatch",
            ApplyError::MarkerConflict { .. } => "MarkerConflict",
            ApplyError::ReattachRefused { .. } => "ReattachRefused",
            ApplyError::AdoptionRefused { .. } => "AdoptionRefused",
            ApplyError::RoleNotFound { .. } => "RoleNotFound",
            ApplyError::NotActive { .. } => "TableNotActive",
            ApplyError::Aws { .. } => "AwsError",
            ApplyError::Unresolved { .. } => "Unresolved",
            ApplyError::Random { .. } => "NoRandomness",
            ApplyError::Certificate { .. } => "CertificateError",
            ApplyError::CaNotPublished { .. } => "CaNotPublished",
            ApplyError::Kube { .. } => "KubernetesError",
        }
    }
}

/// An AWS SDK error as an [`ApplyError::Aws`], keeping the service's code and message.
pub fn aws<E, R>(operation: &'static str, resource: &str, e: SdkError<E, R>) -> ApplyError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let detail = match e.code() {
        Some(code) => format!("{code}: {}", e.message().unwrap_or_default()),
        None => DisplayErrorContext(&e).to_string(),
    };
    ApplyError::Aws {
        operation,
        resource: resource.to_owned(),
        detail,
        source: Some(Box::new(e)),
    }
}
