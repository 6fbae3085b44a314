//! Client IPC is checked before arrow decodes it. A compressed buffer starts with its declared
//! uncompressed length, and arrow allocates that much before decompressing: one forged message
//! declaring 2^45 bytes aborted the process (an allocation failure is not a recoverable error).

use arrow::ipc::{MessageHeader, root_as_message};
use arrow_flight::FlightData;
use tonic::Status;

/// The most one client message may declare once decompressed: the inbound message limit.
pub(super) const MAX_DECODED_BYTES: u64 = super::MAX_DECODING as u64;

/// Refuses a message whose compressed buffers declare more than [`MAX_DECODED_BYTES`] in all.
pub(super) fn check(data: &FlightData) -> Result<(), Status> {
    check_message(&data.data_header, &data.data_body)
}

/// [`check`] for one IPC message: its flatbuffer header and its body.
pub(crate) fn check_message(header: &[u8], body: &[u8]) -> Result<(), Status> {
    check_message_at(header, |start| {
        body.get(start..start.saturating_add(8))
            .and_then(|p| p.try_into().ok())
    })
    .map(|_| ())
}

/// [`check_message`] reading only the 8 bytes that start each compressed buffer, through
/// `prefix` (an offset within the body; `None` past its end): a file's body need not be read.
/// Returns what the compressed buffers declare once decompressed (0 for an uncompressed
/// message: its body is what it takes).
pub(crate) fn check_message_at(
    header: &[u8],
    prefix: impl Fn(usize) -> Option<[u8; 8]>,
) -> Result<u64, Status> {
    if header.is_empty() {
        return Ok(0);
    }
    let bad = |what: String| Status::invalid_argument(format!("bad Arrow IPC message: {what}"));
    let message = root_as_message(header).map_err(|e| bad(e.to_string()))?;
    let batch = match message.header_type() {
        MessageHeader::RecordBatch => message.header_as_record_batch(),
        MessageHeader::DictionaryBatch => {
            message.header_as_dictionary_batch().and_then(|d| d.data())
        }
        _ => None,
    };
    let Some(batch) = batch.filter(|b| b.compression().is_some()) else {
        return Ok(0);
    };
    let mut total: u64 = 0;
    for buffer in batch.buffers().into_iter().flatten() {
        if buffer.length() == 0 {
            continue;
        }
        let start = usize::try_from(buffer.offset()).map_err(|_| bad("negative offset".into()))?;
        let prefix: [u8; 8] =
            prefix(start).ok_or_else(|| bad("a buffer lies outside the message body".into()))?;
        let declared = match i64::from_le_bytes(prefix) {
            // Stored uncompressed: the rest of the buffer.
            -1 => buffer.length().saturating_sub(8) as u64,
            n if n < 0 => return Err(bad(format!("uncompressed length {n}"))),
            n => n as u64,
        };
        total = total.saturating_add(declared);
    }
    if total > MAX_DECODED_BYTES {
        return Err(Status::resource_exhausted(format!(
            "an Arrow IPC message declares {total} bytes once decompressed; at most \
             {MAX_DECODED_BYTES} are accepted per message (send smaller batches)"
        )));
    }
    Ok(total)
}

/// `stream` with every message checked.
pub(super) fn checked<S>(stream: S) -> impl futures::Stream<Item = Result<FlightData, Status>>
where
    S: futures::Stream<Item = Result<FlightData, Status>>,
{
    use futures::StreamExt;
    stream.map(|item| item.and_then(|data| check(&data).map(|()| data)))
}
