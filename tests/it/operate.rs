//! Operating a running query: Prometheus metrics, the stop endpoint,
//! and SIGTERM/SIGINT stopping a session's queries gracefully.
