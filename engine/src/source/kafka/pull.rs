//! Records pulled from a consumer many at a time: librdkafka's
//! `rd_kafka_consume_batch_queue` takes every record queued (up to a limit)
//! under one lock and one clock reading, where rdkafka's `poll` returns one
//! record per call, each with its own deadline, event and queue lock (in
//! the Kafka pipeline's profile ~15% of the process's CPU went to that
//! per-record polling).
//!
//! Records are pulled from the partition's own queue, taken off the
//! consumer's queue (as rdkafka's `split_partition_queue` does): it carries
//! only the partition's records and consumer errors, while librdkafka's
//! logs and global errors stay on the consumer's queue, served by rdkafka's
//! `poll` (`PartitionReader::serve_events`).

use std::time::Duration;

use rdkafka::bindings as rdsys;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{BorrowedHeaders, Message, OwnedMessage, Timestamp};
use rdkafka::types::RDKafkaErrorCode;

/// The most records one pull takes.
pub(super) const MAX_PULL: usize = 1024;

/// A partition's queue, taken off its consumer's queue (our own reference,
/// released on drop: drop it before the consumer).
pub(super) struct ConsumerQueue(*mut rdsys::rd_kafka_queue_t);

// SAFETY: librdkafka's queues are thread-safe; the reader that owns this
// one uses it from one thread at a time.
unsafe impl Send for ConsumerQueue {}

impl ConsumerQueue {
    /// The queue of `topic`'s `partition` on `consumer`, no longer
    /// forwarded to the consumer's queue (call before assigning it).
    pub(super) fn of(
        consumer: &BaseConsumer,
        topic: &str,
        partition: i32,
    ) -> Option<ConsumerQueue> {
        let topic = std::ffi::CString::new(topic).ok()?;
        // SAFETY: a live client and a NUL-terminated name; the queue
        // returned is a new reference.
        let q = unsafe {
            rdsys::rd_kafka_queue_get_partition(
                consumer.client().native_ptr(),
                topic.as_ptr(),
                partition,
            )
        };
        if q.is_null() {
            return None;
        }
        // SAFETY: a live queue; forwarding to null stops its forwarding.
        unsafe { rdsys::rd_kafka_queue_forward(q, std::ptr::null_mut()) };
        Some(ConsumerQueue(q))
    }

    /// Takes up to `max` queued records (and consumer errors), waiting up
    /// to `wait` for the first when none is queued: with `Duration::ZERO`
    /// it only takes what is there.
    pub(super) fn pull<'q>(
        &'q mut self,
        wait: Duration,
        max: usize,
        topic: &'q str,
    ) -> Vec<Pulled<'q>> {
        let max = max.clamp(1, MAX_PULL);
        let mut ptrs: Vec<*mut rdsys::rd_kafka_message_t> = vec![std::ptr::null_mut(); max];
        let wait_ms = wait.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: `ptrs` has room for `max` message pointers; librdkafka
        // fills the first `n` with messages the caller must destroy.
        let n =
            unsafe { rdsys::rd_kafka_consume_batch_queue(self.0, wait_ms, ptrs.as_mut_ptr(), max) };
        let n = usize::try_from(n).unwrap_or(0).min(max);
        ptrs.truncate(n);
        ptrs.into_iter()
            .filter(|p| !p.is_null())
            .map(|ptr| Pulled { ptr, topic })
            .collect()
    }
}

impl Drop for ConsumerQueue {
    fn drop(&mut self) {
        // SAFETY: our own reference, released once.
        unsafe { rdsys::rd_kafka_queue_destroy(self.0) }
    }
}

/// One record (or consumer error) pulled from the queue; released to
/// librdkafka on drop, and borrowing the queue meanwhile (so that it
/// cannot outlive its queue and consumer).
pub(super) struct Pulled<'q> {
    ptr: *mut rdsys::rd_kafka_message_t,
    /// The reader's topic (its only one).
    topic: &'q str,
}

impl Pulled<'_> {
    fn msg(&self) -> &rdsys::rd_kafka_message_t {
        // SAFETY: a message librdkafka handed over, live until dropped.
        unsafe { &*self.ptr }
    }

    /// The consumer error this stands for, if it is not a record.
    pub(super) fn error(&self) -> Option<RDKafkaErrorCode> {
        let err = self.msg().err;
        (err != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR).then(|| err.into())
    }

    /// The error's text (librdkafka's message, else the code's).
    pub(super) fn error_text(&self) -> String {
        match self.payload() {
            Some(p) if !p.is_empty() => String::from_utf8_lossy(p).into_owned(),
            _ => self.error().map(|e| e.to_string()).unwrap_or_default(),
        }
    }

    /// A copy that outlives the pull (a record past the range's end, kept
    /// for the next range).
    pub(super) fn detach(&self) -> OwnedMessage {
        OwnedMessage::new(
            self.payload().map(<[u8]>::to_vec),
            self.key().map(<[u8]>::to_vec),
            self.topic.to_string(),
            self.timestamp(),
            self.partition(),
            self.offset(),
            self.headers().map(BorrowedHeaders::detach),
        )
    }
}

/// `len` bytes at `p`, `None` for a null pointer.
///
/// # Safety
/// `p` is null or points to `len` bytes that outlive the slice.
unsafe fn bytes<'a>(p: *const std::ffi::c_void, len: usize) -> Option<&'a [u8]> {
    // SAFETY: as the caller promises.
    (!p.is_null()).then(|| unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

impl Message for Pulled<'_> {
    type Headers = BorrowedHeaders;

    fn key(&self) -> Option<&[u8]> {
        // SAFETY: the key lives as long as the message.
        unsafe { bytes(self.msg().key, self.msg().key_len) }
    }

    fn payload(&self) -> Option<&[u8]> {
        // SAFETY: the payload lives as long as the message.
        unsafe { bytes(self.msg().payload, self.msg().len) }
    }

    unsafe fn payload_mut(&mut self) -> Option<&mut [u8]> {
        let (p, len) = (self.msg().payload, self.msg().len);
        // SAFETY: the payload lives as long as the message, borrowed mutably with it.
        (!p.is_null()).then(|| unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) })
    }

    fn topic(&self) -> &str {
        self.topic
    }

    fn partition(&self) -> i32 {
        self.msg().partition
    }

    fn offset(&self) -> i64 {
        self.msg().offset
    }

    fn timestamp(&self) -> Timestamp {
        use rdsys::rd_kafka_timestamp_type_t as T;
        let mut kind = T::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
        // SAFETY: a live message.
        let ms = unsafe { rdsys::rd_kafka_message_timestamp(self.ptr, &mut kind) };
        match kind {
            _ if ms == -1 => Timestamp::NotAvailable,
            T::RD_KAFKA_TIMESTAMP_CREATE_TIME => Timestamp::CreateTime(ms),
            T::RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME => Timestamp::LogAppendTime(ms),
            T::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE => Timestamp::NotAvailable,
        }
    }

    fn headers(&self) -> Option<&BorrowedHeaders> {
        let mut h = std::ptr::null_mut();
        // SAFETY: a live message; the headers it returns live as long as it.
        let err = unsafe { rdsys::rd_kafka_message_headers(self.ptr, &mut h) };
        (err == rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && !h.is_null())
            // SAFETY: `BorrowedHeaders` is rdkafka's zero-sized view of a
            // native headers list, used by address (as rdkafka does).
            .then(|| unsafe { &*(h as *const BorrowedHeaders) })
    }
}

impl Drop for Pulled<'_> {
    fn drop(&mut self) {
        // SAFETY: messages from `rd_kafka_consume_batch_queue` are the
        // caller's to destroy, once.
        unsafe { rdsys::rd_kafka_message_destroy(self.ptr) }
    }
}
