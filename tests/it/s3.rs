//! Object storage (S3, through a real S3 API server on 127.0.0.1:
//! `scripts/s3.sh`): the storage layer and checkpoints on it.
