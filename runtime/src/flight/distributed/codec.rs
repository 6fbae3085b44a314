//! How lake's own plan nodes cross the network between the process that plans a distributed
//! statement and its workers: a scan as table, version, fragments, columns and filter (never a
//! path or a credential); a guard as its kind. Decoding refuses anything else, so a worker runs
//! no node it does not know.

use std::sync::Arc;

use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::bytes::Serializeable;
use datafusion_proto::physical_plan::PhysicalExtensionCodec;
use prost::Message;

use super::scan::{FragmentRef, LakeScanExec, ScanSpec};
use crate::catalog::{NamespaceName, TableName};
use crate::engine::{Engine, TableRef};
use crate::flight::repeat::GuardNode;

#[derive(Clone, PartialEq, Message)]
struct NodeProto {
    #[prost(oneof = "Node", tags = "1, 2, 3")]
    node: Option<Node>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
enum Node {
    #[prost(message, tag = "1")]
    Scan(Box<ScanProto>),
    #[prost(message, tag = "2")]
    Guarded(GuardProto),
    #[prost(message, tag = "3")]
    Keeper(Empty),
}

#[derive(Clone, PartialEq, Message)]
struct Empty {}

/// A guard: lake's own description of it (flight/repeat/wire.rs), as JSON.
#[derive(Clone, PartialEq, Message)]
struct GuardProto {
    #[prost(bytes = "vec", tag = "1")]
    guard: Vec<u8>,
}

#[derive(Clone, PartialEq, Message)]
struct ScanProto {
    #[prost(string, tag = "1")]
    namespace: String,
    #[prost(string, tag = "2")]
    table: String,
    #[prost(uint64, tag = "3")]
    version: u64,
    #[prost(message, repeated, tag = "4")]
    partitions: Vec<PartitionProto>,
    #[prost(string, repeated, tag = "5")]
    projection: Vec<String>,
    #[prost(bytes = "vec", optional, tag = "6")]
    filter: Option<Vec<u8>>,
    #[prost(uint64, optional, tag = "7")]
    limit: Option<u64>,
    #[prost(message, optional, tag = "8")]
    schema: Option<datafusion_proto::protobuf::Schema>,
}

#[derive(Clone, PartialEq, Message)]
struct PartitionProto {
    #[prost(uint64, repeated, tag = "1")]
    ids: Vec<u64>,
    #[prost(uint64, repeated, tag = "2")]
    bytes: Vec<u64>,
}

/// The most partitions and fragments one decoded scan may name: a plan is client-shaped
/// input to a worker, and a count is a size it declares.
const MAX_SCAN_PARTITIONS: usize = 4096;
const MAX_SCAN_FRAGMENTS: usize = 1 << 20;

/// Encodes and decodes lake's nodes; decoded scans read through `engine` (a pinned reader).
#[derive(Debug, Clone)]
pub(super) struct LakeCodec {
    engine: Engine,
}

impl LakeCodec {
    pub(super) fn new(engine: Engine) -> Self {
        Self {
            engine: engine.pinned_reader(),
        }
    }
}

fn bad(what: impl std::fmt::Display) -> DataFusionError {
    DataFusionError::Plan(format!("a distributed plan lake cannot run: {what}"))
}

impl PhysicalExtensionCodec for LakeCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let node = NodeProto::decode(buf)
            .map_err(|e| bad(format!("undecodable node: {e}")))?
            .node
            .ok_or_else(|| bad("an empty node"))?;
        let batch_size = ctx.session_config().batch_size();
        match (node, inputs) {
            (Node::Scan(scan), []) => self.scan(*scan, ctx),
            (Node::Guarded(guard), [input]) => serde_json::from_slice::<GuardNode>(&guard.guard)
                .map_err(|e| bad(format!("an undecodable guard: {e}")))?
                .decode(Arc::clone(input), batch_size),
            (Node::Keeper(_), [input]) => GuardNode::Keeper.decode(Arc::clone(input), batch_size),
            (_, inputs) => Err(bad(format!("a lake node with {} inputs", inputs.len()))),
        }
    }

    fn try_encode(&self, node: Arc<dyn ExecutionPlan>, buf: &mut Vec<u8>) -> Result<()> {
        let node = if let Some(scan) = node.downcast_ref::<LakeScanExec>() {
            Node::Scan(Box::new(encode_scan(scan)?))
        } else {
            match GuardNode::of(node.as_ref()) {
                Some(GuardNode::Keeper) => Node::Keeper(Empty {}),
                Some(guard) => Node::Guarded(GuardProto {
                    guard: serde_json::to_vec(&guard)
                        .map_err(|e| DataFusionError::Internal(format!("encoding a guard: {e}")))?,
                }),
                None => {
                    return Err(DataFusionError::NotImplemented(format!(
                        "{} cannot run on a distributed query's workers",
                        node.name()
                    )));
                }
            }
        };
        NodeProto { node: Some(node) }
            .encode(buf)
            .map_err(|e| DataFusionError::Internal(format!("encoding a lake node: {e}")))
    }
}

fn encode_scan(scan: &LakeScanExec) -> Result<ScanProto> {
    let spec = scan.spec();
    Ok(ScanProto {
        namespace: spec.table.namespace.to_string(),
        table: spec.table.table.to_string(),
        version: spec.version,
        partitions: scan
            .partitions()
            .iter()
            .map(|p| PartitionProto {
                ids: p.iter().map(|f| f.id).collect(),
                bytes: p.iter().map(|f| f.bytes).collect(),
            })
            .collect(),
        projection: spec.projection.clone(),
        filter: spec
            .filter
            .as_ref()
            .map(|f| f.to_bytes().map(|b| b.to_vec()))
            .transpose()?,
        limit: spec.limit.map(|l| l as u64),
        schema: Some(
            spec.schema
                .as_ref()
                .try_into()
                .map_err(|e| DataFusionError::Internal(format!("encoding a scan's schema: {e}")))?,
        ),
    })
}

impl LakeCodec {
    fn scan(&self, scan: ScanProto, ctx: &TaskContext) -> Result<Arc<dyn ExecutionPlan>> {
        // Names as strict as SQL's: a plan cannot reach beyond the warehouse's tables.
        let namespace = NamespaceName::parse(&scan.namespace).map_err(bad)?;
        let table = TableName::parse(&scan.table).map_err(bad)?;
        if scan.partitions.len() > MAX_SCAN_PARTITIONS {
            return Err(bad(format!(
                "a scan of {} partitions",
                scan.partitions.len()
            )));
        }
        let fragments: usize = scan.partitions.iter().map(|p| p.ids.len()).sum();
        if fragments > MAX_SCAN_FRAGMENTS {
            return Err(bad(format!("a scan of {fragments} fragments")));
        }
        let partitions = scan
            .partitions
            .into_iter()
            .map(|p| {
                if p.ids.len() != p.bytes.len() {
                    return Err(bad("a partition's ids and sizes differ in number"));
                }
                Ok(p.ids
                    .into_iter()
                    .zip(p.bytes)
                    .map(|(id, bytes)| FragmentRef { id, bytes })
                    .collect())
            })
            .collect::<Result<Vec<Vec<FragmentRef>>>>()?;
        let schema = scan.schema.ok_or_else(|| bad("a scan without a schema"))?;
        let schema: arrow::datatypes::Schema = (&schema)
            .try_into()
            .map_err(|e| bad(format!("a scan's schema: {e}")))?;
        // The scan reads its columns by name into this schema: one field per column, in order.
        let named: Vec<&String> = schema.fields().iter().map(|f| f.name()).collect();
        if named.len() != scan.projection.len()
            || named.iter().zip(&scan.projection).any(|(a, b)| *a != b)
        {
            return Err(bad("a scan whose columns and schema differ"));
        }
        let filter = scan
            .filter
            .map(|bytes| Expr::from_bytes_with_ctx(&bytes, ctx))
            .transpose()?;
        let spec = ScanSpec {
            table: TableRef::new(namespace, table),
            version: scan.version,
            projection: scan.projection,
            filter,
            limit: scan.limit.map(|l| usize::try_from(l).unwrap_or(usize::MAX)),
            schema: Arc::new(schema),
        };
        Ok(Arc::new(LakeScanExec::new(
            self.engine.clone(),
            Arc::new(spec),
            partitions,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Warehouse;

    fn codec() -> LakeCodec {
        LakeCodec::new(Engine::pinned(Warehouse::Local(std::env::temp_dir())))
    }

    fn scan(namespace: &str, projection: &[&str]) -> Vec<u8> {
        let schema = arrow::datatypes::Schema::new(vec![arrow::datatypes::Field::new(
            "id",
            arrow::datatypes::DataType::Int64,
            true,
        )]);
        let node = NodeProto {
            node: Some(Node::Scan(Box::new(ScanProto {
                namespace: namespace.into(),
                table: "t".into(),
                version: 1,
                partitions: vec![PartitionProto {
                    ids: vec![0],
                    bytes: vec![1],
                }],
                projection: projection.iter().map(|c| (*c).to_owned()).collect(),
                filter: None,
                limit: None,
                schema: Some((&schema).try_into().unwrap()),
            }))),
        };
        node.encode_to_vec()
    }

    fn decode(bytes: &[u8]) -> Result<Arc<dyn ExecutionPlan>> {
        codec().try_decode(bytes, &[], &TaskContext::default())
    }

    #[test]
    fn a_scan_decodes_only_with_a_lake_name_and_its_own_columns() {
        assert!(decode(&scan("s", &["id"])).is_ok());
        for namespace in ["../etc", "", "a/b", "s.t"] {
            let e = decode(&scan(namespace, &["id"])).unwrap_err().to_string();
            assert!(e.contains("cannot run"), "{namespace:?}: {e}");
        }
        let e = decode(&scan("s", &["id", "secret"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("columns and schema differ"), "{e}");
        assert!(decode(b"\xff\xff garbage").is_err());
    }
}
