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
/// is returned). Waits 20 ms, doubling up to 500 ms, between tries. Each
/// try gets the time left of the one deadline (`within` from now) as its
/// request timeout, so the whole call, tries and waits together, takes
/// about `within` at most (a try given the whole of `within` each time
/// could take twice that).
pub(crate) fn retry_transient_within<T>(
    within: Duration,
    mut op: impl FnMut(Duration) -> Result<T, KafkaError>,
) -> Result<T, KafkaError> {
    let deadline = Instant::now() + within;
    let mut wait = Duration::from_millis(20);
    loop {
        match op(deadline.saturating_duration_since(Instant::now())) {
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
        let got = retry_transient_within(Duration::from_secs(5), |_| {
            tries += 1;
            if tries < 3 {
                Err(coordinator_loading())
            } else {
                Ok(tries)
            }
        });
        assert_eq!(got.unwrap(), 3);

        let mut tries = 0;
        let got: Result<(), _> = retry_transient_within(Duration::from_secs(5), |_| {
            tries += 1;
            Err(KafkaError::MetadataFetch(
                RDKafkaErrorCode::TopicAuthorizationFailed,
            ))
        });
        assert!(got.is_err());
        assert_eq!(tries, 1, "a fatal error is not retried");

        let start = Instant::now();
        let got: Result<(), _> =
            retry_transient_within(Duration::from_millis(200), |_| Err(coordinator_loading()));
        assert!(
            got.is_err(),
            "a transient error still fails once the time is up"
        );
        assert!(start.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn each_try_gets_the_time_left_so_the_whole_call_keeps_to_its_window() {
        // A request that times out only after all the time it is given.
        let timed_out = || KafkaError::MetadataFetch(RDKafkaErrorCode::OperationTimedOut);
        let within = Duration::from_millis(400);
        let start = Instant::now();
        let mut given = Vec::new();
        let got: Result<(), _> = retry_transient_within(within, |left| {
            given.push(left);
            std::thread::sleep(left.min(Duration::from_millis(150)));
            Err(timed_out())
        });
        assert!(got.is_err());
        assert!(given.len() >= 2, "{given:?}");
        assert!(given[0] <= within, "{given:?}");
        assert!(
            given.windows(2).all(|w| w[1] < w[0]),
            "each try gets less: {given:?}"
        );
        assert!(
            start.elapsed() < within + Duration::from_millis(200),
            "{:?}",
            start.elapsed()
        );
    }
}
