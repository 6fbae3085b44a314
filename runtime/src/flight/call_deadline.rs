//! The client's deadline for a call (its `grpc-timeout` header), answered as gRPC says: a call
//! that has not answered by then ends with DEADLINE_EXCEEDED. tonic's server keeps the same
//! timer but ends the call with CANCELLED ("Timeout expired"), which a client cannot tell from
//! its own cancel; lake's timer is set a millisecond inside tonic's, so lake answers first.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Sleep;
use tonic::Status;
use tonic::codegen::http;

/// How much earlier than tonic's timer lake's fires: one tick of tokio's timer wheel, so the
/// two never fire in the same tick with tonic's polled first.
const INSIDE: Duration = Duration::from_millis(1);

/// The deadline a request carries, if it carries a well-formed one (as tonic reads it: up to
/// eight digits and a unit; anything else is no deadline).
pub(super) fn requested(headers: &http::HeaderMap) -> Option<Duration> {
    let value = headers.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// A call's deadline, counting from its arrival (as tonic's).
pub(super) struct Timer {
    limit: Duration,
    sleep: Pin<Box<Sleep>>,
}

impl Timer {
    /// The timer for the deadline `headers` carry, if any.
    pub(super) fn start(headers: &http::HeaderMap) -> Option<Self> {
        requested(headers).map(|limit| Self {
            limit,
            sleep: Box::pin(tokio::time::sleep(limit.saturating_sub(INSIDE))),
        })
    }

    /// Ready once the deadline has passed.
    pub(super) fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.sleep.as_mut().poll(cx)
    }

    pub(super) fn exceeded(&self) -> Status {
        Status::deadline_exceeded(format!(
            "the call did not finish within its deadline ({:?}, the client's grpc-timeout)",
            self.limit
        ))
    }
}

/// `answer`, or DEADLINE_EXCEEDED once `timer` fires first.
pub(super) async fn within<T>(
    timer: Option<&mut Timer>,
    answer: impl Future<Output = Result<T, Status>>,
) -> Result<T, Status> {
    let Some(timer) = timer else {
        return answer.await;
    };
    tokio::select! {
        biased;
        answered = answer => answered,
        () = std::future::poll_fn(|cx| timer.poll_expired(cx)) => Err(timer.exceeded()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> http::HeaderMap {
        let mut headers = http::HeaderMap::new();
        headers.insert("grpc-timeout", value.parse().unwrap());
        headers
    }

    fn parse(value: &str) -> Option<Duration> {
        requested(&headers(value))
    }

    #[test]
    fn every_unit_is_read() {
        assert_eq!(parse("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(parse("3M"), Some(Duration::from_secs(180)));
        assert_eq!(parse("4S"), Some(Duration::from_secs(4)));
        assert_eq!(parse("300m"), Some(Duration::from_millis(300)));
        assert_eq!(parse("5u"), Some(Duration::from_micros(5)));
        assert_eq!(parse("99999999n"), Some(Duration::from_nanos(99_999_999)));
    }

    #[test]
    fn a_malformed_timeout_is_no_deadline() {
        for value in ["", "m", "300", "300x", "123456789S", "-1S", "1.5S", "S1"] {
            assert_eq!(parse(value), None, "{value:?}");
        }
        assert_eq!(requested(&http::HeaderMap::new()), None);
    }

    fn timer(value: &str) -> Timer {
        Timer::start(&headers(value)).unwrap()
    }

    #[tokio::test]
    async fn a_call_past_its_deadline_exceeds_it() {
        let slow = std::future::pending::<Result<(), Status>>();
        let status = within(Some(&mut timer("20m")), slow).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
        assert!(status.message().contains("20ms"), "{status:?}");
        // An answer that is ready first is the answer, even with its timer expired.
        let fast = async { Ok(7) };
        assert_eq!(within(Some(&mut timer("0n")), fast).await.unwrap(), 7);
        assert_eq!(within(None, async { Ok(8) }).await.unwrap(), 8);
    }
}
