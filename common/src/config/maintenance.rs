//! The maintenance role's `LAKE_*` configuration (`lake maintain` as a CronJob's Job): the
//! warehouse, the manifest table, and the cluster whose marker that table must carry. It serves
//! nothing, so the serving variables are refused rather than silently ignored.

use std::collections::BTreeMap;

use super::{
    LAKE_AUTH, LAKE_AWS_REGION, LAKE_CLUSTER_ID, LAKE_DYNAMODB_ENDPOINT, LAKE_FLIGHT_ADDR,
    LAKE_MANIFEST_DYNAMODB_TABLE, LAKE_METADATA_ENDPOINT, LAKE_REGISTRY_DYNAMODB_TABLE, LAKE_ROLE,
    LAKE_S3_ENDPOINT, LAKE_SPILL_DIR, LAKE_SPILL_LIMIT_MB, LAKE_STAGE, LAKE_TLS_CERT_FILE,
    LAKE_TLS_KEY_FILE, LAKE_TOKEN_FILE, LAKE_WAREHOUSE, Limits, WAREHOUSE_FIELDS, aws_target,
    known_vars, missing, table, warehouse_request,
};
use crate::plan::storage;
use crate::plan::{
    AuthorityPlan, MaintenanceConnectionPlan, ManifestTableName, PlanError, PlanErrors, Storage,
};

/// `LAKE_ROLE` of the maintenance role.
pub const MAINTENANCE_ROLE: &str = "maintenance";

/// The maintenance role's validated configuration.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MaintenanceConfig {
    pub plan: MaintenanceConnectionPlan,
    /// The LakeCluster uid the manifest table's marker must name.
    pub cluster_id: String,
}

impl MaintenanceConfig {
    /// The configuration the operator renders for `plan`'s maintenance Job; `None` for a local
    /// lake (maintained by the process that serves it).
    pub fn for_plan(plan: &AuthorityPlan, cluster_id: String) -> Option<Self> {
        Some(Self {
            plan: plan.maintenance()?,
            cluster_id,
        })
    }

    /// The environment variables of this configuration, sorted by name.
    pub fn to_vars(&self) -> BTreeMap<&'static str, String> {
        let aws = self.plan.aws();
        let mut vars = BTreeMap::from([
            (LAKE_ROLE, MAINTENANCE_ROLE.to_owned()),
            (LAKE_WAREHOUSE, self.plan.warehouse().to_owned()),
            (
                LAKE_MANIFEST_DYNAMODB_TABLE,
                self.plan.manifests().to_string(),
            ),
            (LAKE_AWS_REGION, aws.region.clone()),
            (LAKE_CLUSTER_ID, self.cluster_id.clone()),
        ]);
        if let Some(e) = &aws.dynamodb_endpoint {
            vars.insert(LAKE_DYNAMODB_ENDPOINT, e.clone());
        }
        if let Some(e) = &aws.s3_endpoint {
            vars.insert(LAKE_S3_ENDPOINT, e.clone());
        }
        vars
    }

    /// Reads the configuration from `(name, value)` pairs such as `std::env::vars()`, with the
    /// `LAKE_*` names it did not recognise; every problem is reported at once.
    pub fn from_vars<I, K, V>(vars: I) -> Result<(Self, Vec<String>), PlanErrors>
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let (env, unknown) = known_vars(vars);
        let get = |name: &str| env.get(name).map(String::as_str).filter(|v| !v.is_empty());
        let mut errors = Vec::new();
        match get(LAKE_ROLE) {
            Some(MAINTENANCE_ROLE) => {}
            Some(other) => errors.push(PlanError::InvalidField {
                field: LAKE_ROLE.to_owned(),
                value: other.to_owned(),
                reason: format!(
                    "`lake maintain` runs the {MAINTENANCE_ROLE} role (`lake serve` runs query and \
                     metadata)"
                ),
            }),
            None => errors.push(missing(
                LAKE_ROLE,
                "`lake maintain` maintains a local lake given --data DIR, or a cloud lake given \
                 LAKE_ROLE=maintenance and the maintenance role's environment",
            )),
        }
        let serving = [
            LAKE_STAGE,
            LAKE_FLIGHT_ADDR,
            LAKE_METADATA_ENDPOINT,
            LAKE_TOKEN_FILE,
            LAKE_AUTH,
            LAKE_TLS_CERT_FILE,
            LAKE_TLS_KEY_FILE,
            LAKE_SPILL_DIR,
            LAKE_SPILL_LIMIT_MB,
        ];
        for name in serving.into_iter().chain(Limits::VARS) {
            if get(name).is_some() {
                errors.push(PlanError::NotAllowed {
                    field: name.to_owned(),
                    reason: "the maintenance role serves nothing".to_owned(),
                });
            }
        }
        if get(LAKE_REGISTRY_DYNAMODB_TABLE).is_some() {
            errors.push(PlanError::NotAllowed {
                field: LAKE_REGISTRY_DYNAMODB_TABLE.to_owned(),
                reason: "the maintenance role never receives the registry table (it finds the \
                         tables by listing the warehouse)"
                    .to_owned(),
            });
        }
        let warehouse = match get(LAKE_WAREHOUSE) {
            None => {
                errors.push(missing(LAKE_WAREHOUSE, "an s3://bucket/prefix URL"));
                None
            }
            Some(w) if !w.starts_with("s3://") => {
                errors.push(PlanError::InvalidField {
                    field: LAKE_WAREHOUSE.to_owned(),
                    value: w.to_owned(),
                    reason: "must be an s3:// URL: a local lake is maintained by the process \
                             that holds it (`lake maintain --data DIR`, `lake local \
                             --maintain-every-minutes N`)"
                        .to_owned(),
                });
                None
            }
            Some(w) => storage::validate(
                &warehouse_request(w, get(LAKE_AWS_REGION), get(LAKE_S3_ENDPOINT)),
                &WAREHOUSE_FIELDS,
                &mut errors,
            ),
        };
        let manifests = table(
            get(LAKE_MANIFEST_DYNAMODB_TABLE),
            LAKE_MANIFEST_DYNAMODB_TABLE,
            ManifestTableName::parse,
            &mut errors,
        );
        let cluster_id = get(LAKE_CLUSTER_ID);
        if cluster_id.is_none() {
            errors.push(missing(
                LAKE_CLUSTER_ID,
                "the manifest table's marker must name this cluster",
            ));
        }
        match (warehouse, manifests, cluster_id) {
            (Some(Storage::S3(s3)), Some(manifests), Some(cluster_id)) if errors.is_empty() => {
                let aws = aws_target(&s3, get(LAKE_DYNAMODB_ENDPOINT));
                Ok((
                    Self {
                        plan: MaintenanceConnectionPlan::new(s3.url(""), manifests, aws),
                        cluster_id: cluster_id.to_owned(),
                    },
                    unknown,
                ))
            }
            _ => Err(PlanErrors(errors)),
        }
    }
}
