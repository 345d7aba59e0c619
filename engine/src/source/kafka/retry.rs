//! Which Kafka errors are worth retrying, and one bounded retry loop for
//! requests a broker may refuse for a moment (a group coordinator still
//! loading after a broker start, a leader moving).

use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

/// Errors worth retrying: metadata not settled yet, leaders or group
/// coordinators moving or loading, timeouts, and what the transactional
/// API itself marks retriable.
pub(crate) fn is_transient(e: &KafkaError) -> bool {
    if let KafkaError::Transaction(t) = e {
        return t.is_retriable();
    }
    matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::NotLeaderForPartition
                | RDKafkaErrorCode::LeaderNotAvailable
                | RDKafkaErrorCode::UnknownTopicOrPartition
                | RDKafkaErrorCode::UnknownLeaderEpoch
                | RDKafkaErrorCode::FencedLeaderEpoch
                | RDKafkaErrorCode::OperationTimedOut
                | RDKafkaErrorCode::RequestTimedOut
                | RDKafkaErrorCode::BrokerTransportFailure
                | RDKafkaErrorCode::AllBrokersDown
                | RDKafkaErrorCode::NotCoordinator
                | RDKafkaErrorCode::CoordinatorLoadInProgress
                | RDKafkaErrorCode::CoordinatorNotAvailable
                | RDKafkaErrorCode::OffsetNotAvailable
        )
    )
}

/// Runs `op` until it succeeds, fails with an error that is not
/// [transient](is_transient), or `within` has passed (then the last error
/// is returned). Waits 20 ms, doubling up to 500 ms, between tries.
pub(crate) fn retry_transient<T>(
    within: Duration,
    mut op: impl FnMut() -> Result<T, KafkaError>,
) -> Result<T, KafkaError> {
    let deadline = Instant::now() + within;
    let mut wait = Duration::from_millis(20);
    loop {
        match op() {
            Ok(v) => return Ok(v),
            Err(e) if is_transient(&e) && Instant::now() + wait < deadline => {
                tracing::debug!("Kafka request refused for now (retrying): {e}");
                std::thread::sleep(wait);
                wait = (wait * 2).min(Duration::from_millis(500));
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_errors_are_retried_until_success_and_others_are_not() {
        let coordinator_loading = || KafkaError::MetadataFetch(RDKafkaErrorCode::NotCoordinator);
        let mut tries = 0;
        let got = retry_transient(Duration::from_secs(5), || {
            tries += 1;
            if tries < 3 {
                Err(coordinator_loading())
            } else {
                Ok(tries)
            }
        });
        assert_eq!(got.unwrap(), 3);

        let mut tries = 0;
        let got: Result<(), _> = retry_transient(Duration::from_secs(5), || {
            tries += 1;
            Err(KafkaError::MetadataFetch(
                RDKafkaErrorCode::TopicAuthorizationFailed,
            ))
        });
        assert!(got.is_err());
        assert_eq!(tries, 1, "a fatal error is not retried");

        let start = Instant::now();
        let got: Result<(), _> =
            retry_transient(Duration::from_millis(200), || Err(coordinator_loading()));
        assert!(
            got.is_err(),
            "a transient error still fails once the time is up"
        );
        assert!(start.elapsed() < Duration::from_secs(2));
    }
}
