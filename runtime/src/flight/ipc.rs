//! A DoGet's batches as Arrow IPC messages whose bodies reference the batches' own buffers.
//!
//! arrow-flight's encoder copies every buffer of a batch into one message body, and tonic's
//! codec copies that body once more into its frame: together a quarter of the server's CPU on a
//! large read. Here a message keeps its body as the list of the batch's buffers (sliced, not
//! copied), and `do_get` frames it for gRPC around them, so the only copy left is the kernel's.
//! Columns of a plain type (fixed width, boolean, binary and text) are sent this way; a schema
//! with any other column is encoded by arrow-flight, as before.

use arrow::array::{Array, ArrayData, RecordBatch};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::error::ArrowError;
use arrow::ipc::writer::IpcWriteOptions;
use arrow_buffer::{BooleanBuffer, Buffer};
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::{FlightData, SchemaAsIpc};
use bytes::{BufMut, Bytes, BytesMut};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt, stream};
use tonic::Status;

/// The most bytes of one message's body; a larger batch is sent in row slices.
pub(super) const MAX_FLIGHT_DATA: usize = 2 * 1024 * 1024;

/// Arrow IPC's buffer alignment (arrow-rs writes 64, as the format recommends).
const ALIGNMENT: usize = 64;
static PADDING: [u8; ALIGNMENT] = [0; ALIGNMENT];

/// One Flight message: its IPC header and its body, in pieces.
pub(super) struct Message {
    /// The FlightData without its body (descriptor, IPC header, app metadata).
    head: FlightData,
    body: Vec<Bytes>,
    body_len: usize,
}

pub(super) type Messages = BoxStream<'static, Result<Message, Status>>;

impl Message {
    pub(super) fn whole(mut data: FlightData) -> Self {
        let body = std::mem::take(&mut data.data_body);
        let body_len = body.len();
        Self {
            head: data,
            body: vec![body],
            body_len,
        }
    }

    /// The message as one FlightData (its body copied together; for tonic's own encoder).
    pub(super) fn into_flight_data(self) -> FlightData {
        let mut data = self.head;
        data.data_body = match <[Bytes; 1]>::try_from(self.body) {
            Ok([one]) => one,
            Err(pieces) => {
                let mut body = BytesMut::with_capacity(self.body_len);
                pieces.iter().for_each(|piece| body.put_slice(piece));
                body.freeze()
            }
        };
        data
    }

    /// The message as a gRPC frame of an encoded FlightData, in pieces: small ones gathered
    /// together, the body's large ones as they are.
    pub(super) fn into_frame(self) -> Result<Vec<Bytes>, Status> {
        use prost::Message as _;
        // FlightData.data_body is field 1000, length-delimited: tag (1000 << 3) | 2 as a varint.
        const BODY_TAG: [u8; 2] = [0xC2, 0x3E];
        let head_len = self.head.encoded_len();
        let body_field = if self.body_len == 0 {
            0
        } else {
            BODY_TAG.len() + prost::encoding::encoded_len_varint(self.body_len as u64)
        };
        let message_len = head_len + body_field + self.body_len;
        let message_len = u32::try_from(message_len).map_err(|_| {
            Status::resource_exhausted(format!(
                "a result message of {message_len} bytes is past gRPC's 4 GiB frame"
            ))
        })?;
        let mut pieces = Pieces::new(5 + head_len + body_field);
        pieces.small.put_u8(0); // not compressed
        pieces.small.put_u32(message_len);
        self.head.encode_raw(&mut pieces.small);
        if self.body_len > 0 {
            pieces.small.put_slice(&BODY_TAG);
            prost::encoding::encode_varint(self.body_len as u64, &mut pieces.small);
        }
        self.body.into_iter().for_each(|piece| pieces.push(piece));
        Ok(pieces.finish())
    }
}

/// Frame pieces: anything under `SMALL` bytes is copied into the piece being gathered, so a
/// frame is a few large writes, not one per padding.
struct Pieces {
    small: BytesMut,
    out: Vec<Bytes>,
}

impl Pieces {
    const SMALL: usize = 4096;

    fn new(capacity: usize) -> Self {
        Self {
            small: BytesMut::with_capacity(capacity),
            out: Vec::new(),
        }
    }

    fn push(&mut self, piece: Bytes) {
        if piece.len() < Self::SMALL {
            self.small.put_slice(&piece);
        } else {
            if !self.small.is_empty() {
                self.out.push(self.small.split().freeze());
            }
            self.out.push(piece);
        }
    }

    fn finish(mut self) -> Vec<Bytes> {
        if !self.small.is_empty() {
            self.out.push(self.small.freeze());
        }
        self.out
    }
}

/// `batches` (each of `schema`) as Flight messages: the schema first, then each non-empty batch,
/// in row slices of at most `MAX_FLIGHT_DATA` bytes.
pub(super) fn encode(
    schema: SchemaRef,
    batches: BoxStream<'static, Result<RecordBatch, FlightError>>,
) -> Messages {
    if !schema.fields().iter().all(|f| by_reference(f.data_type())) {
        return FlightDataEncoderBuilder::new()
            .with_schema(schema)
            .with_max_flight_data_size(MAX_FLIGHT_DATA)
            .build(batches)
            .map_ok(Message::whole)
            .map_err(Status::from)
            .boxed();
    }
    let options = IpcWriteOptions::default();
    let head = Message::whole(FlightData::from(SchemaAsIpc::new(&schema, &options)));
    let declared = schema.clone();
    let messages = batches
        .map_err(Status::from)
        .map_ok(move |batch| {
            let messages = match announced(&batch, &declared) {
                Ok(()) => sliced(&batch),
                Err(e) => vec![Err(e)],
            };
            stream::iter(
                messages
                    .into_iter()
                    .map(|m| m.map_err(|e| Status::from(FlightError::Arrow(e)))),
            )
        })
        .try_flatten();
    stream::once(async { Ok(head) }).chain(messages).boxed()
}

/// Checks that `batch` has `schema`'s column types: each column is laid out by its own type, so
/// one of another type would be read by clients as the announced one.
fn announced(batch: &RecordBatch, schema: &SchemaRef) -> Result<(), ArrowError> {
    if batch.num_columns() != schema.fields().len() {
        return Err(ArrowError::SchemaError(format!(
            "a result batch of {} columns where the schema announced {}",
            batch.num_columns(),
            schema.fields().len()
        )));
    }
    match batch
        .columns()
        .iter()
        .zip(schema.fields())
        .find(|(column, field)| column.data_type() != field.data_type())
    {
        Some((column, field)) => Err(ArrowError::SchemaError(format!(
            "result column {} is of type {} where the schema announced {}",
            field.name(),
            column.data_type(),
            field.data_type()
        ))),
        None => Ok(()),
    }
}

/// Whether a column of type `t` is sent by reference: a flat layout, one node and two or three
/// buffers, as arrow-ipc would write it.
fn by_reference(t: &DataType) -> bool {
    (t.is_primitive() && t.primitive_width().is_some())
        || matches!(
            t,
            DataType::Boolean
                | DataType::Utf8
                | DataType::Binary
                | DataType::LargeUtf8
                | DataType::LargeBinary
                | DataType::FixedSizeBinary(_)
        )
}

/// `batch`'s messages: one, or one per row slice when its body would pass `MAX_FLIGHT_DATA`.
fn sliced(batch: &RecordBatch) -> Vec<Result<Message, ArrowError>> {
    if batch.num_rows() == 0 {
        return Vec::new();
    }
    let whole = match message(batch) {
        Ok(whole) => whole,
        Err(e) => return vec![Err(e)],
    };
    let rows = batch.num_rows();
    if whole.body_len <= MAX_FLIGHT_DATA || rows == 1 {
        return vec![Ok(whole)];
    }
    let parts = whole.body_len.div_ceil(MAX_FLIGHT_DATA).min(rows);
    let each = rows.div_ceil(parts);
    (0..rows)
        .step_by(each)
        .map(|start| message(&batch.slice(start, each.min(rows - start))))
        .collect()
}

/// A record batch message for `batch`, every column of a type `by_reference` accepts.
fn message(batch: &RecordBatch) -> Result<Message, ArrowError> {
    let mut body = Body::default();
    for column in batch.columns() {
        body.column(&column.to_data())?;
    }
    let mut fbb = flatbuffers::FlatBufferBuilder::new();
    let buffers = fbb.create_vector(&body.buffers);
    let nodes = fbb.create_vector(&body.nodes);
    let header = {
        let mut record = arrow::ipc::RecordBatchBuilder::new(&mut fbb);
        record.add_length(as_i64(batch.num_rows())?);
        record.add_nodes(nodes);
        record.add_buffers(buffers);
        record.finish().as_union_value()
    };
    let mut message = arrow::ipc::MessageBuilder::new(&mut fbb);
    message.add_version(arrow::ipc::MetadataVersion::V5);
    message.add_header_type(arrow::ipc::MessageHeader::RecordBatch);
    message.add_bodyLength(as_i64(body.len)?);
    message.add_header(header);
    let root = message.finish();
    fbb.finish(root, None);
    Ok(Message {
        head: FlightData {
            data_header: Bytes::copy_from_slice(fbb.finished_data()),
            ..FlightData::default()
        },
        body: body.pieces,
        body_len: body.len,
    })
}

fn as_i64(n: usize) -> Result<i64, ArrowError> {
    i64::try_from(n).map_err(|_| ArrowError::InvalidArgumentError(format!("{n} does not fit i64")))
}

/// A message body being laid out: its buffers' descriptors and the pieces they are sent from.
#[derive(Default)]
struct Body {
    nodes: Vec<arrow::ipc::FieldNode>,
    buffers: Vec<arrow::ipc::Buffer>,
    pieces: Vec<Bytes>,
    len: usize,
}

/// An Arrow buffer held by the `Bytes` that sends it.
struct Held(Buffer);

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        self.0.as_slice()
    }
}

impl Body {
    /// One column's node and buffers, laid out as arrow-ipc's writer does (an empty validity
    /// buffer when nothing is null; offsets rebased to start at zero).
    fn column(&mut self, data: &ArrayData) -> Result<(), ArrowError> {
        let (offset, len) = (data.offset(), data.len());
        self.nodes.push(arrow::ipc::FieldNode::new(
            as_i64(len)?,
            as_i64(data.null_count())?,
        ));
        let validity = match data.nulls() {
            Some(nulls) if nulls.null_count() > 0 => nulls.inner().sliced(),
            _ => Buffer::default(),
        };
        self.buffer(validity)?;
        let t = data.data_type();
        match t {
            DataType::Boolean => {
                self.buffer(BooleanBuffer::new(data.buffers()[0].clone(), offset, len).sliced())
            }
            DataType::Utf8 | DataType::Binary => self.bytes::<i32>(data),
            DataType::LargeUtf8 | DataType::LargeBinary => self.bytes::<i64>(data),
            _ => {
                let width = match t {
                    DataType::FixedSizeBinary(width) => usize::try_from(*width).ok(),
                    _ => t.primitive_width(),
                };
                let Some(width) = width else {
                    return Err(ArrowError::NotYetImplemented(format!(
                        "a column of type {t} sent by reference"
                    )));
                };
                self.buffer(data.buffers()[0].slice_with_length(offset * width, len * width))
            }
        }
    }

    /// A binary or text column's offsets (from zero) and the values they span.
    fn bytes<O: arrow::array::OffsetSizeTrait>(
        &mut self,
        data: &ArrayData,
    ) -> Result<(), ArrowError> {
        let width = size_of::<O>();
        if data.is_empty() {
            self.buffer(Buffer::from_vec(vec![O::zero()]))?;
            return self.buffer(Buffer::default());
        }
        let all: &[O] = data.buffers()[0].typed_data::<O>();
        let offsets = &all[data.offset()..=data.offset() + data.len()];
        let (first, last) = (offsets[0], offsets[offsets.len() - 1]);
        let rebased = if first == O::zero() {
            data.buffers()[0].slice_with_length(data.offset() * width, size_of_val(offsets))
        } else {
            Buffer::from_iter(offsets.iter().map(|o| *o - first))
        };
        self.buffer(rebased)?;
        let (start, end) = (first.as_usize(), last.as_usize());
        self.buffer(data.buffers()[1].slice_with_length(start, end - start))
    }

    fn buffer(&mut self, buffer: Buffer) -> Result<(), ArrowError> {
        let len = buffer.len();
        self.buffers
            .push(arrow::ipc::Buffer::new(as_i64(self.len)?, as_i64(len)?));
        if len > 0 {
            self.pieces.push(Bytes::from_owner(Held(buffer)));
        }
        let pad = len.next_multiple_of(ALIGNMENT) - len;
        if pad > 0 {
            self.pieces.push(Bytes::from_static(&PADDING[..pad]));
        }
        self.len += len + pad;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{
        ArrayRef, BooleanArray, FixedSizeBinaryArray, Float64Array, Int32Array, Int64Array,
        LargeStringArray, StringArray, TimestampMicrosecondArray,
    };
    use arrow_flight::decode::FlightRecordBatchStream;

    use super::*;

    fn columns() -> Vec<(&'static str, ArrayRef)> {
        let n = 1000;
        vec![
            (
                "i",
                Arc::new(Int64Array::from_iter(
                    (0..n).map(|i| (i % 7 != 0).then_some(i)),
                )),
            ),
            ("n", Arc::new(Int32Array::from_iter_values(0..n as i32))),
            (
                "f",
                Arc::new(Float64Array::from_iter_values(
                    (0..n).map(|i| i as f64 / 3.0),
                )),
            ),
            (
                "b",
                Arc::new(BooleanArray::from_iter(
                    (0..n).map(|i| (i % 5 != 0).then_some(i % 3 == 0)),
                )),
            ),
            (
                "s",
                Arc::new(StringArray::from_iter(
                    (0..n).map(|i| (i % 11 != 0).then(|| "x".repeat((i % 13) as usize))),
                )),
            ),
            (
                "l",
                Arc::new(LargeStringArray::from_iter_values(
                    (0..n).map(|i| format!("{i}")),
                )),
            ),
            (
                "fixed",
                Arc::new(
                    FixedSizeBinaryArray::try_from_iter((0..n).map(|i| (i as u32).to_le_bytes()))
                        .unwrap(),
                ),
            ),
            (
                "t",
                Arc::new(TimestampMicrosecondArray::from_iter_values(0..n)),
            ),
        ]
    }

    async fn decoded(schema: SchemaRef, batches: Vec<RecordBatch>) -> Vec<RecordBatch> {
        let messages = encode(schema, stream::iter(batches.into_iter().map(Ok)).boxed());
        let data = messages
            .map_ok(Message::into_flight_data)
            .map_err(FlightError::from);
        FlightRecordBatchStream::new_from_flight_data(data)
            .try_collect()
            .await
            .unwrap()
    }

    /// Every plain column, whole and sliced at offsets that are not byte-aligned for bitmaps or
    /// that leave text offsets not starting at zero, reads back equal through arrow-flight's
    /// decoder; empty slices send nothing.
    #[tokio::test]
    async fn batches_read_back_equal_from_their_referenced_buffers() {
        let batch = RecordBatch::try_from_iter(columns()).unwrap();
        let schema = batch.schema();
        assert!(schema.fields().iter().all(|f| by_reference(f.data_type())));
        let slices = vec![
            batch.clone(),
            batch.slice(3, 500),
            batch.slice(0, 0),
            batch.slice(999, 1),
            batch.slice(8, 17),
        ];
        let expected: Vec<RecordBatch> = slices
            .iter()
            .filter(|b| b.num_rows() > 0)
            .cloned()
            .collect();
        assert_eq!(decoded(schema, slices).await, expected);
    }

    /// A batch whose column is not of the announced type ends the stream with an error instead
    /// of being laid out as another type; a zero-width fixed binary column reads back.
    #[tokio::test]
    async fn a_batch_of_another_type_is_refused() {
        let micros: ArrayRef = Arc::new(TimestampMicrosecondArray::from_iter_values(0..10));
        let batch = RecordBatch::try_from_iter([("t", micros)]).unwrap();
        let nanos = Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new(
                "t",
                DataType::Timestamp(arrow::datatypes::TimeUnit::Nanosecond, None),
                true,
            ),
        ]));
        let messages: Vec<_> = encode(nanos, stream::iter([Ok(batch)]).boxed())
            .collect()
            .await;
        let error = messages.last().unwrap().as_ref().err().unwrap();
        assert!(error.message().contains("announced"), "{error}");

        let empty = arrow::array::new_null_array(&DataType::FixedSizeBinary(0), 3);
        let batch = RecordBatch::try_from_iter([("e", empty)]).unwrap();
        assert_eq!(
            decoded(batch.schema(), vec![batch.clone()]).await,
            vec![batch]
        );
    }

    /// A batch larger than one message goes out in row slices, each within the limit.
    #[tokio::test]
    async fn a_large_batch_is_sent_in_slices() {
        let rows = 3 * MAX_FLIGHT_DATA / 8;
        let column: ArrayRef = Arc::new(Int64Array::from_iter_values(0..rows as i64));
        let batch = RecordBatch::try_from_iter([("i", column)]).unwrap();
        let messages = sliced(&batch);
        assert_eq!(messages.len(), 3);
        for message in &messages {
            let message = message.as_ref().unwrap();
            assert!(message.body_len <= MAX_FLIGHT_DATA, "{}", message.body_len);
        }
        let back = decoded(batch.schema(), vec![batch.clone()]).await;
        assert_eq!(
            arrow::compute::concat_batches(&batch.schema(), &back).unwrap(),
            batch
        );
    }

    /// The gRPC frame is the length-prefixed protobuf encoding of the FlightData.
    #[test]
    fn a_frame_is_the_encoded_flight_data() {
        use prost::Message as _;
        let batch = RecordBatch::try_from_iter(columns()).unwrap();
        let message = message(&batch).unwrap();
        let expected = {
            let data = Message {
                head: message.head.clone(),
                body: message.body.clone(),
                body_len: message.body_len,
            }
            .into_flight_data();
            data.encode_to_vec()
        };
        let frame: Vec<u8> = message.into_frame().unwrap().concat();
        assert_eq!(frame[0], 0);
        let len = u32::from_be_bytes(frame[1..5].try_into().unwrap()) as usize;
        assert_eq!(len, frame.len() - 5);
        assert_eq!(&frame[5..], &expected[..]);
    }
}
