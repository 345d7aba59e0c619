//! One query over many processes, coordinated by a Kafka consumer group (#14).
